//! The SQLite file a configuration names, looked at before a command opens it: a command that
//! only reads never creates it (SQLite would, empty, owned by whoever ran the command, and the
//! service could then not open it), and a file this process cannot open is named with its
//! owner, so that the message says what to change.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use crate::model::database_url::DatabaseUrl;

/// What stands between this process and the configuration's SQLite file, with the fix.
pub(super) struct Problem {
    pub message: String,
    pub fix: String,
}

/// The file does not exist yet: a read command says so instead of creating it.
pub(super) fn missing(url: &DatabaseUrl) -> Option<Problem> {
    let path = url.sqlite_path()?;
    (!path.exists()).then(|| Problem {
        message: format!("no database yet at {}", path.display()),
        fix: "run `sqlcron migrate` or start the service".into(),
    })
}

/// The file (or its directory, where SQLite writes its journal) exists but this process cannot
/// read and write it.
pub(super) fn unopenable(url: &DatabaseUrl) -> Option<Problem> {
    let path = url.sqlite_path()?;
    let me = crate::exec::account::current().map_or_else(|e| e, |a| a.name);
    let blocked = |p: &Path, what: &str| -> Option<Problem> {
        if can_write(p) {
            return None;
        }
        let meta = std::fs::metadata(p).ok()?;
        let owner = crate::exec::account::name_of(meta.uid());
        Some(Problem {
            message: format!(
                "cannot open the database: {what} {} is owned by {owner} (mode {:04o}) and this \
                 process runs as {me}",
                p.display(),
                meta.mode() & 0o7777
            ),
            fix: format!(
                "run the command as {owner}, or give the file and its directory to the service's \
                 user (`chown sqlcron: {}` for the packaged service)",
                p.display()
            ),
        })
    };
    if !path.exists() {
        return None;
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    blocked(path, "the file").or_else(|| blocked(dir, "its directory"))
}

fn can_write(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access reads a NUL-terminated path we own.
    unsafe { libc::access(c.as_ptr(), libc::R_OK | libc::W_OK) == 0 }
}
