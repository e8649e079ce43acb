//! The highest generation of a signature this node has accepted for each job name, so that an
//! older signed version written back (a replay: the command of last month with last month's
//! signature) is refused. Kept in memory and in a file of the node's state directory, written
//! again (atomically, by rename) each time a generation rises, so that a restart forgets
//! nothing; the file is named for the database and the node, since one host may run daemons
//! of several clusters.
//!
//! A node learns a generation when it prepares or claims a row, and from every signed row in
//! the table ([`learn`]: at start, before it claims anything, and with each heartbeat), so that
//! a node that never ran a job refuses an older version of it too.
//!
//! What it cannot stop: a replay to a node that never saw the newer version in the table (one
//! that was down from the new signature until the replay, with an empty or lost state
//! directory, or a replay written within a heartbeat of the new signature). docs/security.md
//! says so.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// The floors and where they are kept.
struct Floors {
    seen: BTreeMap<String, u64>,
    file: Option<PathBuf>,
    /// The signature [`learn`] last verified for each row name: a row is verified again only
    /// when its signature changed (a row whose signature did not verify, each time).
    judged: BTreeMap<String, String>,
}

static FLOORS: OnceLock<Mutex<Floors>> = OnceLock::new();

fn floors() -> &'static Mutex<Floors> {
    FLOORS.get_or_init(|| {
        Mutex::new(Floors {
            seen: BTreeMap::new(),
            file: None,
            judged: BTreeMap::new(),
        })
    })
}

/// Where a node keeps its floors: `DIR/signed-generations/<hash>.json`, the hash of the
/// database (as the redacted URL names it) and the node's name.
pub fn file_for(state_dir: &str, database: &str, node: &str) -> PathBuf {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(format!("{database}\n{node}").as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    PathBuf::from(state_dir)
        .join("signed-generations")
        .join(format!("{hex}.json"))
}

/// Reads the floors kept in `file` (none yet: an empty set) and keeps them there from now
/// on. Called once when the daemon starts. A file that is there but cannot be read or parsed
/// is an error, and nothing is kept in it: a signed-mode node refuses to start on it (the
/// daemon's start), since it would no longer know which versions it already ran.
pub fn load(file: PathBuf) -> Result<(), String> {
    let mut f = floors().lock().unwrap_or_else(|e| e.into_inner());
    let fix = "it holds the newest signed generation this node has run of each job; restore it, \
               or move it aside to start from the generations now in the table (a replay written \
               while this node was down would then not be refused)";
    // A link is not followed, nor taken for a missing file (a dangling one read as none).
    if std::fs::symlink_metadata(&file).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(format!(
            "signed generations: {} is a symbolic link, not the node's own file; {fix}",
            file.display()
        ));
    }
    let seen = match std::fs::read_to_string(&file) {
        Ok(text) => serde_json::from_str::<BTreeMap<String, u64>>(&text).map_err(|e| {
            format!(
                "signed generations: cannot parse {}: {e}; {fix}",
                file.display()
            )
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
        Err(e) => {
            return Err(format!(
                "signed generations: cannot read {}: {e}; {fix}",
                file.display()
            ));
        }
    };
    for (name, g) in seen {
        let e = f.seen.entry(name).or_default();
        *e = (*e).max(g);
    }
    f.file = Some(file);
    Ok(())
}

/// Accepts `generation` of a signature for `name` unless a higher one was seen; raises the
/// floor (and writes the file) when it is higher.
pub fn admit(name: &str, generation: u64) -> Result<(), String> {
    let mut f = floors().lock().unwrap_or_else(|e| e.into_inner());
    let floor = f.seen.get(name).copied().unwrap_or(0);
    if generation < floor {
        return Err(format!(
            "signature: generation {generation} is older than generation {floor}, which this node \
             has already run for \"{name}\" (an old signed version written back?); sign the job again"
        ));
    }
    if generation > floor {
        f.seen.insert(name.to_string(), generation);
        if let Some(file) = f.file.clone()
            && let Err(e) = save(&file, &f.seen)
        {
            tracing::warn!(file = %file.display(), error = %e, "signed generations: cannot write the file; kept in memory until the daemon stops");
        }
    }
    Ok(())
}

/// Raises the floors to `generations` (name, generation), where higher, and writes the file
/// once.
fn raise(generations: &[(String, u64)]) {
    let mut f = floors().lock().unwrap_or_else(|e| e.into_inner());
    let mut raised = false;
    for (name, g) in generations {
        let e = f.seen.entry(name.clone()).or_default();
        if *g > *e {
            *e = *g;
            raised = true;
        }
    }
    if raised
        && let Some(file) = f.file.clone()
        && let Err(e) = save(&file, &f.seen)
    {
        tracing::warn!(file = %file.display(), error = %e, "signed generations: cannot write the file; kept in memory until the daemon stops");
    }
}

/// Learns the generation of every signed row of the table whose signature verifies with one
/// of `keys` (a row whose signature verified and did not change since is not read again).
/// Returns how many rows were verified. The signatures are checked on a blocking thread, not
/// on the run path's.
pub async fn learn(
    store: &crate::store::Store,
    keys: &[crate::model::signing::PublicKey],
) -> Result<usize, crate::store::StoreError> {
    if keys.is_empty() {
        return Ok(0);
    }
    let pairs = store.signatures().await?;
    let changed = {
        let mut f = floors().lock().unwrap_or_else(|e| e.into_inner());
        let present: std::collections::BTreeSet<&str> =
            pairs.iter().map(|(n, _)| n.as_str()).collect();
        f.judged.retain(|n, _| present.contains(n.as_str()));
        pairs
            .iter()
            .any(|(n, s)| f.judged.get(n).map(String::as_str) != Some(s.as_str()))
    };
    if !changed {
        return Ok(0);
    }
    let rows = store.signed_jobs().await?;
    let read = rows.len();
    let keys = keys.to_vec();
    let judged = tokio::task::spawn_blocking(move || {
        let mut found = vec![];
        let mut judged = vec![];
        let known = floors()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .judged
            .clone();
        let signatures: std::collections::HashMap<&str, &str> = rows
            .iter()
            .filter_map(|r| Some((r.name.as_str(), r.signature.as_deref()?)))
            .collect();
        // A copy (`T@NODE`) carries its template's signature, made for the template's name and
        // placement: the template's own row is judged for it (verified under the copy's name,
        // it never passed, and every signed row was read again at each heartbeat). Only a row
        // named as the template's copy and holding the template's very signature: a job's row
        // given a `template` for a heartbeat would otherwise be set aside unverified, and its
        // new generation never learnt.
        let copies: std::collections::HashSet<String> = rows
            .iter()
            .filter(|r| {
                r.template.as_deref().is_some_and(|t| {
                    r.name
                        .strip_prefix(t)
                        .is_some_and(|rest| rest.starts_with('@'))
                        && r.signature.is_some()
                        && signatures.get(t).copied() == r.signature.as_deref()
                })
            })
            .map(|r| r.name.clone())
            .collect();
        for row in rows {
            let Some(sig) = row.signature.clone() else {
                continue;
            };
            if known.get(&row.name) == Some(&sig) {
                continue;
            }
            if copies.contains(&row.name) {
                judged.push((row.name, sig));
                continue;
            }
            let name = crate::model::signing::signed_name(&row.name);
            // Only a signature that verifies is judged for good: one that does not may verify
            // later with the same text (a column changed and changed back), and is read again
            // with each heartbeat until it does or changes.
            if let Ok(g) =
                crate::model::signing::verify_row(&row.name, &row.definition(), Some(&sig), &keys)
            {
                found.push((name.to_string(), g));
                judged.push((row.name, sig));
            }
        }
        raise(&found);
        judged
    })
    .await
    .unwrap_or_default();
    let n = judged.len();
    tracing::debug!(read, verified = n, "signed generations read");
    let mut f = floors().lock().unwrap_or_else(|e| e.into_inner());
    f.judged.extend(judged);
    Ok(n)
}

/// The keys a signed-mode node trusts; `None` in open mode (no generation to learn).
fn signed_keys(config: &crate::config::Config) -> Option<&[crate::model::signing::PublicKey]> {
    (config.security.sql_jobs == crate::config::security::SqlJobs::Signed)
        .then_some(config.security.trusted_keys.as_slice())
}

impl super::Shared {
    /// [`learn`] now (at start, before the first claim); a failure is logged.
    pub(super) async fn learn_generations(&self, config: &crate::config::Config) {
        if let Some(keys) = signed_keys(config)
            && let Err(e) = learn(&self.store, keys).await
        {
            tracing::warn!(error = %e, "signed generations not read");
        }
    }

    /// [`learn`] on a task of its own, beside the loop (with each heartbeat), one at a time.
    pub(super) fn learn_generations_beside(
        self: std::sync::Arc<Self>,
        config: &crate::config::Config,
    ) {
        use std::sync::atomic::Ordering;
        let Some(keys) = signed_keys(config) else {
            return;
        };
        // A read of the signed generations is under way.
        static LEARNING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if LEARNING.swap(true, Ordering::AcqRel) {
            return;
        }
        let keys = keys.to_vec();
        tokio::spawn(async move {
            if let Err(e) = learn(&self.store, &keys).await {
                tracing::warn!(error = %e, "signed generations not read");
            }
            LEARNING.store(false, Ordering::Release);
        });
    }
}

fn save(file: &std::path::Path, seen: &BTreeMap<String, u64>) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::DirBuilderExt as _;
    if let Some(dir) = file.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let tmp = file.with_extension("json.tmp");
    // A new file of the daemon's own, 0600, never through a link another user left there: a
    // leftover temporary file (a crash between create and rename) is removed first.
    let _ = std::fs::remove_file(&tmp);
    let mut out = {
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?
    };
    out.write_all(serde_json::to_string(seen).unwrap_or_default().as_bytes())?;
    out.sync_all()?;
    std::fs::rename(&tmp, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_generation_is_refused_once_a_newer_one_ran() {
        let dir = tempfile::tempdir().unwrap();
        let file = file_for(dir.path().to_str().unwrap(), "postgres://db/x", "n1");
        load(file.clone()).unwrap();
        assert!(admit("gen-test-job", 10).is_ok());
        assert!(admit("gen-test-job", 10).is_ok());
        assert!(admit("gen-test-job", 12).is_ok());
        let e = admit("gen-test-job", 11).unwrap_err();
        assert!(e.contains("older than generation 12"), "{e}");
        // Kept across a restart: the file holds the floor.
        let kept: BTreeMap<String, u64> =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(kept.get("gen-test-job"), Some(&12));
        assert_ne!(
            file,
            file_for(dir.path().to_str().unwrap(), "postgres://db/x", "n2")
        );
    }

    #[test]
    fn a_file_that_cannot_be_read_is_an_error_that_names_it_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("g.json");
        std::fs::write(&file, "{\"a\": 1,").unwrap();
        let e = load(file.clone()).unwrap_err();
        assert!(e.contains("cannot parse") && e.contains("g.json"), "{e}");
        assert!(e.contains("move it aside"), "{e}");
        std::os::unix::fs::symlink(dir.path().join("nowhere.json"), dir.path().join("l.json"))
            .unwrap();
        let e = load(dir.path().join("l.json")).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        std::fs::create_dir(dir.path().join("d.json")).unwrap();
        let e = load(dir.path().join("d.json")).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
    }
}
