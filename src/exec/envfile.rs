//! Environment files (`env_file` of a job): `KEY=VALUE` lines as systemd's `EnvironmentFile=`
//! reads them. The daemon reads the file at each run, so a job's secret can live in a file only
//! root (or the daemon's user) can read, outside the TOML and the database.
//!
//! Syntax: blank lines and lines starting with `#` or `;` are ignored; an optional `export `
//! prefix; `KEY` is letters, digits and `_`, not starting with a digit; `VALUE` is taken as is
//! (surrounding spaces trimmed), or quoted: `'...'` literally, `"..."` with `\"`, `\\`, `\n`
//! and `\t` escapes.

use std::path::Path;

/// Parses the text of an environment file; errors name the line.
pub fn parse(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut vars = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let at = |m: &str| format!("line {}: {m}", i + 1);
        let (key, value) = line.split_once('=').ok_or_else(|| at("not KEY=VALUE"))?;
        let key = key.trim();
        let valid_key = !key.is_empty()
            && !key.starts_with(|c: char| c.is_ascii_digit())
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_key {
            // The text is not quoted back: a mistyped line may hold a secret.
            return Err(at("the name before = is not a variable name"));
        }
        let value = value.trim();
        let value = if let Some(inner) = value.strip_prefix('\'') {
            inner
                .strip_suffix('\'')
                .ok_or_else(|| at("unterminated '"))?
                .to_string()
        } else if let Some(inner) = value.strip_prefix('"') {
            let inner = inner
                .strip_suffix('"')
                .filter(|s| !s.ends_with('\\') || s.ends_with("\\\\"))
                .ok_or_else(|| at("unterminated \""))?;
            unescape(inner)
        } else {
            value.to_string()
        };
        vars.push((key.to_string(), value));
    }
    Ok(vars)
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// Reads and parses an environment file. Errors name the file (never a value from it).
///
/// The daemon (often root) reads it for a job that may run as another user, so the file must be
/// one that only root or the daemon's own user could have written: it is opened without
/// following a symbolic link, it must be a regular file owned by root or the daemon's user and
/// writable by its owner only, and so must every directory above it be (a world-writable
/// directory with the sticky bit, such as `/tmp`, is accepted: nobody else can replace a file
/// in it). A job's user who controls the path can therefore not point it at a root-only file.
pub fn read(path: &Path) -> Result<Vec<(String, String)>, String> {
    let err = |m: String| format!("env_file {}: {m}", path.display());
    let text = read_trusted(path).map_err(err)?;
    parse(&text).map_err(err)
}

/// The largest file [`read_trusted`] reads: an environment, headers, keys or a CA bundle (a
/// system's whole bundle is about 200 KiB). A row written with SQL names such files, and a
/// large one under `[security] file_dirs` (a log) would otherwise be read whole into memory.
pub const READ_MAX: u64 = 4 << 20;

/// The text of a file only root or the daemon's user could have written (the checks above), of
/// at most [`READ_MAX`] bytes: what the daemon reads for a job, an `env_file`, a `headers_file`
/// or a `ca_file`.
pub fn read_trusted(path: &Path) -> Result<String, String> {
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    check_parents(path, me)?;
    open_trusted(path, me)
}

/// Who may have written a file or directory the daemon trusts: root or the daemon's user.
fn trusted_owner(uid: u32, me: u32) -> bool {
    uid == 0 || uid == me
}

/// Opens `path` without following a symbolic link and reads it, if it is a regular file that
/// only root or `me` could have written.
fn open_trusted(path: &Path, me: u32) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => "is a symbolic link; name the file itself".to_string(),
            _ => format!("cannot read: {e}"),
        })?;
    let meta = file.metadata().map_err(|e| format!("cannot read: {e}"))?;
    if !meta.file_type().is_file() {
        return Err("is not a regular file".into());
    }
    if !trusted_owner(meta.uid(), me) {
        return Err(format!(
            "is owned by uid {}; it must belong to root or to the daemon's user",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "is writable by other users (mode {:o}); chmod go-w it",
            meta.mode() & 0o777
        ));
    }
    let too_large = || format!("is larger than {} MiB", READ_MAX >> 20);
    if meta.len() > READ_MAX {
        return Err(too_large());
    }
    // Bounded as it is read too: a file that grows after the look above.
    let mut text = String::new();
    file.take(READ_MAX + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read: {e}"))?;
    if text.len() as u64 > READ_MAX {
        return Err(too_large());
    }
    Ok(text)
}

/// Every directory above `path` must be owned by root or `me` and writable by its owner only
/// (or sticky), and a symbolic link among them must belong to root or `me`.
fn check_parents(path: &Path, me: u32) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if !path.is_absolute() {
        return Err("must be an absolute path".into());
    }
    for dir in path.ancestors().skip(1) {
        let link = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if link.file_type().is_symlink() && !trusted_owner(link.uid(), me) {
            return Err(format!(
                "{} is a symbolic link of uid {}",
                dir.display(),
                link.uid()
            ));
        }
        let meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let sticky = meta.mode() & 0o1000 != 0;
        if !trusted_owner(meta.uid(), me) || (meta.mode() & 0o022 != 0 && !sticky) {
            return Err(format!(
                "its directory {} can be changed by another user (owner uid {}, mode {:o})",
                dir.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_systemd_style_lines() {
        let text = "# comment\n\nexport TOKEN=abc=def\n  PLAIN = spaced value \nQ='it''s'\n\
                    D=\"a \\\"b\\\"\\nc\"\n; also a comment\nEMPTY=\n";
        let v = parse(text).unwrap();
        assert_eq!(
            v,
            vec![
                ("TOKEN".into(), "abc=def".into()),
                ("PLAIN".into(), "spaced value".into()),
                ("Q".into(), "it''s".into()),
                ("D".into(), "a \"b\"\nc".into()),
                ("EMPTY".into(), "".into()),
            ]
        );
    }

    #[test]
    fn errors_name_the_line_not_the_value() {
        assert_eq!(
            parse("A=1\nnonsense\n").unwrap_err(),
            "line 2: not KEY=VALUE"
        );
        assert_eq!(
            parse("hunter2 secret=x").unwrap_err(),
            "line 1: the name before = is not a variable name"
        );
        assert_eq!(parse("A=\"open").unwrap_err(), "line 1: unterminated \"");
        let e = read(Path::new("/nonexistent/env")).unwrap_err();
        assert!(e.starts_with("env_file /nonexistent/env: "), "{e}");
    }

    #[test]
    fn only_files_no_other_user_could_have_written_are_read() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let me = unsafe { libc::geteuid() };
        let good = dir.path().join("good.env");
        std::fs::write(&good, "A=1\n").unwrap();
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read(&good).unwrap(), vec![("A".into(), "1".into())]);
        // A symbolic link, even to a good file, is refused: its target is not checked.
        let link = dir.path().join("link.env");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        let e = read(&link).unwrap_err();
        assert!(
            e.ends_with("is a symbolic link; name the file itself"),
            "{e}"
        );
        // Writable by others.
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(read(&good).unwrap_err().contains("writable by other users"));
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o600)).unwrap();
        // A directory others may write (not sticky).
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(
            read(&good)
                .unwrap_err()
                .contains("can be changed by another user")
        );
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(read(&good).is_ok(), "a sticky directory is fine");
        assert!(check_parents(Path::new("relative.env"), me).is_err());
        // A directory is not an env file.
        assert!(read(dir.path()).unwrap_err().contains("not a regular file"));
        // Nor is a file larger than READ_MAX (a sparse one: its length is what is looked at).
        let large = dir.path().join("large.env");
        let f = std::fs::File::create(&large).unwrap();
        f.set_len(READ_MAX + 1).unwrap();
        std::fs::set_permissions(&large, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(read(&large).unwrap_err().ends_with("is larger than 4 MiB"));
        f.set_len(READ_MAX).unwrap();
        assert!(read_trusted(&large).is_ok_and(|t| t.len() as u64 == READ_MAX));
    }
}
