//! `[security]`: whether this node runs jobs written with SQL as they are (`sql_jobs = "open"`)
//! or only when signed by a key it trusts (`"signed"`, docs/security.md "Signed jobs").

use std::path::Path;

use serde::Deserialize;

use crate::model::signing::{PublicKey, parse_key_lines};

use super::validate::Collector;
use super::{ConfigError, Problem};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSecurity {
    /// `open` (default) or `signed`.
    pub sql_jobs: Option<String>,
    /// Public keys (Base64, as `sqlcron keygen` prints them).
    pub trusted_keys: Option<Vec<String>>,
    /// A file of public keys, one per line.
    pub trusted_keys_file: Option<String>,
    /// Directories whose files a job written with SQL may name as its `env_file` or
    /// `headers_file`.
    pub file_dirs: Option<Vec<String>>,
}

/// What a row written with SQL needs before this node runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SqlJobs {
    /// Any row runs (within `allowed_users`).
    #[default]
    Open,
    /// A row not from this node's TOML runs only with a valid signature by a trusted key.
    Signed,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct SecurityConfig {
    pub sql_jobs: SqlJobs,
    /// The inline keys and, after [`read_keys_file`], those of the file.
    pub trusted_keys: Vec<PublicKey>,
    pub trusted_keys_file: Option<String>,
    /// Directories whose files any job may name as its `env_file` or `headers_file`; elsewhere
    /// only a file this node's own TOML names for that job.
    pub file_dirs: Vec<std::path::PathBuf>,
}

pub(super) fn validate(raw: &RawSecurity, c: &mut Collector) -> SecurityConfig {
    let sql_jobs = match raw.sql_jobs.as_deref() {
        None | Some("open") => SqlJobs::Open,
        Some("signed") => SqlJobs::Signed,
        Some(other) => {
            c.push(
                "[security] sql_jobs",
                format!("\"{other}\" must be \"open\" or \"signed\""),
            );
            SqlJobs::Open
        }
    };
    let mut trusted_keys = vec![];
    for (i, text) in raw.trusted_keys.iter().flatten().enumerate() {
        match PublicKey::parse(text) {
            Ok(k) => trusted_keys.push(k),
            Err(m) => c.push(format!("[security] trusted_keys[{i}]"), m),
        }
    }
    if sql_jobs == SqlJobs::Signed && trusted_keys.is_empty() && raw.trusted_keys_file.is_none() {
        c.push(
            "[security] sql_jobs",
            "\"signed\" needs the keys that sign jobs: set trusted_keys = [\"<public key>\"] or \
             trusted_keys_file (`sqlcron keygen` makes a key and prints its public half)",
        );
    }
    let mut file_dirs = vec![];
    for (i, dir) in raw.file_dirs.iter().flatten().enumerate() {
        let path = std::path::Path::new(dir);
        let plain = path.is_absolute()
            && path
                .components()
                .all(|c| !matches!(c, std::path::Component::ParentDir));
        if plain && path != std::path::Path::new("/") {
            file_dirs.push(path.to_path_buf());
        } else {
            c.push(
                format!("[security] file_dirs[{i}]"),
                format!("\"{dir}\" must be an absolute directory other than / without \"..\""),
            );
        }
    }
    SecurityConfig {
        sql_jobs,
        trusted_keys,
        trusted_keys_file: raw.trusted_keys_file.clone(),
        file_dirs,
    }
}

/// Reads `trusted_keys_file`: whoever can change it decides what runs, so a file (or a link)
/// that a group or every user may write is refused.
pub(super) fn read_keys_file(
    security: &mut SecurityConfig,
    path: &Path,
) -> Result<(), ConfigError> {
    let Some(file) = security.trusted_keys_file.clone() else {
        return Ok(());
    };
    let problem = |message: String| ConfigError {
        path: path.to_path_buf(),
        problems: vec![Problem {
            location: "[security] trusted_keys_file".into(),
            message,
        }],
    };
    let keys = read_trusted(Path::new(&file)).map_err(problem)?;
    security.trusted_keys.extend(keys);
    Ok(())
}

/// Every directory above the keys file must be owned by root or the daemon's user and
/// writable by its owner only (or sticky, as `/tmp`): otherwise its owner could replace the
/// file with one holding their key. The rule `exec::envfile` applies to a job's `env_file`;
/// written here again because `config` reads before anything runs and may not import `exec`.
fn keys_file_parents(file: &Path, me: u32) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if !file.is_absolute() {
        return Err(format!("{} must be an absolute path", file.display()));
    }
    for dir in file.ancestors().skip(1) {
        let meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let owner_ok = meta.uid() == 0 || meta.uid() == me;
        let sticky = meta.mode() & 0o1000 != 0;
        if !owner_ok || (meta.mode() & 0o022 != 0 && !sticky) {
            return Err(format!(
                "{}: its directory {} can be changed by another user (owner uid {}, mode {:o}): \
                 that user could replace the keys",
                file.display(),
                dir.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ));
        }
    }
    Ok(())
}

fn read_trusted(file: &Path) -> Result<Vec<PublicKey>, String> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(file)
        .map_err(|e| {
            format!(
                "cannot read {}: {e} (a link is not followed)",
                file.display()
            )
        })?;
    let meta = opened
        .metadata()
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let mode = meta.mode() & 0o777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "{} is mode {mode:04o}: another user could add a key; chmod 0644 {0} (owned by root)",
            file.display()
        ));
    }
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != 0 && meta.uid() != me {
        return Err(format!(
            "{} is owned by uid {}: that user could add a key; chown root {0}",
            file.display(),
            meta.uid()
        ));
    }
    keys_file_parents(file, me)?;
    let text = std::io::read_to_string(opened)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let keys = parse_key_lines(&text).map_err(|m| format!("{}: {m}", file.display()))?;
    if keys.is_empty() {
        return Err(format!("{} holds no key", file.display()));
    }
    Ok(keys)
}

/// The node's own files, which no job reads whatever `file_dirs` lists: its configuration,
/// the database's URL and password files, the dashboard's users, the metrics token, the signing
/// keys, and systemd's credentials directory. A row written with SQL naming one (a
/// `headers_file` sent to a server of the row's choosing) would hand the node's secrets out.
pub fn own_file(config: &super::Config, path: &Path) -> bool {
    let beside = |p: &str| {
        let p = Path::new(p);
        match p.is_absolute() {
            true => p.to_path_buf(),
            false => config.path.parent().unwrap_or(Path::new("/")).join(p),
        }
    };
    let mut own: Vec<std::path::PathBuf> = vec![config.path.clone()];
    own.extend(config.database_secrets.url_file.iter().cloned());
    own.extend(config.database_secrets.password_file.iter().cloned());
    own.extend(config.database_secrets.unread_url_file.iter().cloned());
    for file in [
        &config.web.users_file,
        &config.metrics_token_file,
        &config.security.trusted_keys_file,
    ]
    .into_iter()
    .flatten()
    {
        // A relative name is listed both beside the TOML file and as the daemon opens it
        // (from its working directory).
        own.push(beside(file));
        let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
        own.push(cwd.join(file));
    }
    // Compared as the files they are: a path through a directory link names the same file.
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let path = real(path);
    let credentials = std::env::var_os("CREDENTIALS_DIRECTORY").map(|d| real(Path::new(&d)));
    credentials.is_some_and(|d| path.starts_with(d)) || own.iter().any(|o| real(o) == path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::signing::SecretKey;

    /// A relative `users_file` or metrics `token_file` is the node's own both beside the TOML
    /// file and where the daemon opens it (its working directory); a `url_file` the TOML names
    /// stays the node's own when `$SQLCRON_DATABASE_URL` is used instead.
    #[test]
    fn the_node_s_own_files_are_known_however_they_are_named() {
        let text = "[database]\nurl_file = \"/etc/sqlcron/url\"\n[node]\nname = \"n\"\n\
                    [web]\nlisten = \"127.0.0.1:0\"\nusers_file = \"users\"\n\
                    [metrics]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"token\"\n";
        let env = crate::config::Environment {
            database_url: Some("sqlite:///tmp/x.db".into()),
            ..Default::default()
        };
        let path = Path::new("/etc/sqlcron/sqlcron.toml");
        let config = crate::config::parse(text, path, &env).unwrap();
        let cwd = std::env::current_dir().unwrap();
        for own in [
            "/etc/sqlcron/sqlcron.toml",
            "/etc/sqlcron/url",
            "/etc/sqlcron/users",
            "/etc/sqlcron/token",
        ] {
            assert!(own_file(&config, Path::new(own)), "{own}");
        }
        assert!(own_file(&config, &cwd.join("users")));
        assert!(own_file(&config, &cwd.join("token")));
        assert!(!own_file(&config, Path::new("/etc/sqlcron/jobs.env")));
    }

    #[test]
    fn a_keys_file_others_may_change_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("keys");
        let key = SecretKey::from_seed([5; 32]).public();
        std::fs::write(&file, format!("# ops team\n{}\n", key.to_text())).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(read_trusted(&file).unwrap(), vec![key]);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o664)).unwrap();
        assert!(
            read_trusted(&file)
                .unwrap_err()
                .contains("another user could add a key")
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(read_trusted(&link).unwrap_err().contains("link"));
    }
}
