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

/// Signs each job's definition as it is stored now, and prints what was signed.
pub async fn sign(store: &Store, key: &Path, jobs: &[String]) -> Result<u8, Failure> {
    let key = read_key(key)?;
    let actor = crate::exec::account::this_process(None);
    for name in jobs {
        let row = store
            .job(name)
            .await
            .map_err(Failure::runtime)?
            .ok_or_else(|| Failure::usage(format!("no job named \"{name}\"")))?;
        let definition = row.definition();
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
            "{name}: signed generation {generation}: {}",
            definition.canonical()
        );
    }
    Ok(0)
}
