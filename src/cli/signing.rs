//! `sqlcron keygen` and `sqlcron sign`: the keys and signatures of signed jobs
//! (docs/security.md "Signed jobs").

use std::io::Write as _;
use std::path::Path;

use crate::model::signing::SecretKey;
use crate::store::Store;

use super::Failure;

/// Writes a new signing key to `out` (created, mode 0600; an existing file is kept) and prints
/// its public half, for the nodes' `[security] trusted_keys`.
pub fn keygen(out: &Path) -> Result<u8, Failure> {
    use std::os::unix::fs::OpenOptionsExt;
    let key = SecretKey::from_seed(rand::random::<[u8; 32]>());
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .map_err(|e| Failure::usage(format!("cannot create {}: {e}", out.display())))?;
    writeln!(file, "{}", key.to_text())
        .and_then(|()| file.sync_all())
        .map_err(|e| Failure::runtime(format!("cannot write {}: {e}", out.display())))?;
    eprintln!(
        "wrote the signing key to {} (keep it off the nodes); its public key, for \
         [security] trusted_keys:",
        out.display()
    );
    println!("{}", key.public().to_text());
    Ok(0)
}

/// Reads a signing key file: one that other users may read is refused.
pub fn read_key(path: &Path) -> Result<SecretKey, Failure> {
    crate::config::secrets::refuse_open_file(path).map_err(Failure::usage)?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())))?;
    SecretKey::parse(&text).map_err(|m| Failure::usage(format!("{}: {m}", path.display())))
}

/// The digest of a definition as `sign --dry-run` prints it and `--expect` takes it: the
/// SHA-256 of its canonical text, in hex.
fn digest(definition: &crate::model::signing::Definition) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(definition.canonical().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn stored(store: &Store, name: &str) -> Result<crate::store::JobRow, Failure> {
    store
        .job(name)
        .await
        .map_err(Failure::runtime)?
        .ok_or_else(|| Failure::usage(format!("no job named \"{name}\"")))
}

/// `sign --dry-run`: each job's definition as it is stored now, and its digest; nothing signed.
pub async fn review(store: &Store, jobs: &[String]) -> Result<u8, Failure> {
    for name in jobs {
        let definition = stored(store, name).await?.definition();
        println!(
            "{}: digest {}: {}",
            super::terminal::shown(name),
            digest(&definition),
            reviewable(&definition.canonical())
        );
    }
    Ok(0)
}

/// A definition's JSON as a reviewer reads it (`sign --dry-run`, and what `sign` signed): every character that would not show itself (a
/// C1 control, a bidirectional override that shows a command reversed, a zero-width space) as
/// JSON's own `\uXXXX` escape, so the text stays the same JSON and shows what is signed.
fn reviewable(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if super::terminal::hidden(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Signs each job's definition as it is stored now, and prints what was signed. With `expect`
/// (one digest per job), a job whose definition is no longer the one reviewed is not signed:
/// a writer of the table may change it between the review and the signature.
pub async fn sign(
    store: &Store,
    key: &Path,
    jobs: &[String],
    expect: &[String],
) -> Result<u8, Failure> {
    let key = read_key(key)?;
    if !expect.is_empty() && expect.len() != jobs.len() {
        return Err(Failure::usage(format!(
            "--expect is given {} times for {} jobs: give one digest per job, in their order",
            expect.len(),
            jobs.len()
        )));
    }
    let actor = crate::exec::account::this_process(None);
    for (i, name) in jobs.iter().enumerate() {
        let row = stored(store, name).await?;
        let definition = row.definition();
        if let Some(want) = expect.get(i)
            && !want.trim().eq_ignore_ascii_case(&digest(&definition))
        {
            return Err(Failure::usage(format!(
                "{name}: its definition is not the one reviewed (digest {}, expected {}); \
                 nothing signed from here: review it again with --dry-run",
                digest(&definition),
                want.trim()
            )));
        }
        // Higher than the row's own and than any before it: the database's clock in
        // milliseconds, or one more than the generation the row holds if that is later.
        // The row's generation counts only when its signature is this key's for this row: a
        // writer could otherwise set a huge one and make every later signature look old.
        let now = store.now().await.map_err(Failure::runtime)?.max(1) as u64;
        let own = crate::model::signing::verify(
            &row.name,
            &definition,
            row.signature.as_deref(),
            &[key.public()],
        )
        .ok();
        let generation = own.map_or(now, |g| now.max(g.saturating_add(1)));
        let signature = key.sign(&row.name, generation, &definition);
        if !store
            .set_signature(name, &signature, &actor)
            .await
            .map_err(Failure::runtime)?
        {
            return Err(Failure::usage(format!("no job named \"{name}\"")));
        }
        println!(
            "{}: signed generation {generation}: {}",
            super::terminal::shown(name),
            reviewable(&definition.canonical())
        );
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `sign --dry-run` prints is the same JSON with nothing hidden in it: a bidirectional
    /// override (a command shown reversed), a C1 control or a zero-width space is an escape.
    #[test]
    fn a_reviewed_definition_hides_nothing() {
        let json = serde_json::json!({"command": "echo ok \u{202e}fr- mr\u{2066}\u{85}\u{200b}"})
            .to_string();
        let shown = reviewable(&json);
        assert!(
            !shown.chars().any(super::super::terminal::hidden),
            "{shown}"
        );
        assert!(
            shown.contains("\\u202e") && shown.contains("\\u0085"),
            "{shown}"
        );
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(
            back,
            serde_json::from_str::<serde_json::Value>(&json).unwrap()
        );
    }
}
