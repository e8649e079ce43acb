//! Keeping the database's credentials secret: reading the URL and the password from files (or
//! systemd credentials) instead of the TOML, and hiding them wherever a URL is printed. Which
//! variables of the daemon's environment no job ever sees is listed here too.
//!
//! Sources, in order: `$SQLCRON_DATABASE_URL`, else `[database] url_file`, else the systemd
//! credential `database-url`, else `[database] url`. The password, when the URL has none: from
//! `[database] password_file`, else the systemd credential `database-password`. A relative
//! `url_file` or `password_file` is read from `$CREDENTIALS_DIRECTORY` under systemd (the files
//! of `LoadCredential=`), else beside the configuration file.

use std::path::{Path, PathBuf};

use crate::config::{Environment, Problem, RawDatabase};

/// Name of the systemd credential holding the whole URL.
pub const CREDENTIAL_URL: &str = "database-url";
/// Name of the systemd credential holding the password.
pub const CREDENTIAL_PASSWORD: &str = "database-password";

/// Where the URL and the password come from, when not from the TOML.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DatabaseSecrets {
    pub url_file: Option<PathBuf>,
    pub password_file: Option<PathBuf>,
    /// The `url_file` the TOML names when `$SQLCRON_DATABASE_URL` wins: not read, still one of
    /// the node's own files (no job reads it).
    pub unread_url_file: Option<PathBuf>,
}

impl DatabaseSecrets {
    /// Decides the sources (no file is read yet); problems go to `push`.
    pub fn from_raw(
        raw: &RawDatabase,
        env: &Environment,
        config_path: &Path,
        push: &mut dyn FnMut(&str, String),
    ) -> DatabaseSecrets {
        let creds = env.credentials_directory.as_deref().map(Path::new);
        let place = |p: &str| -> PathBuf {
            let p = Path::new(p);
            if p.is_absolute() {
                p.to_path_buf()
            } else if let Some(dir) = creds {
                dir.join(p)
            } else {
                config_path.parent().unwrap_or(Path::new("/")).join(p)
            }
        };
        let credential = |name: &str| creds.map(|d| d.join(name)).filter(|p| p.exists());
        if raw.url.is_some() && raw.url_file.is_some() {
            push(
                "[database] url_file",
                "give either url or url_file, not both".into(),
            );
        }
        let unread_url_file = env
            .database_url
            .as_ref()
            .and(raw.url_file.as_deref())
            .map(place);
        let url_file = if env.database_url.is_some() {
            None
        } else {
            raw.url_file.as_deref().map(place).or_else(|| {
                raw.url
                    .is_none()
                    .then(|| credential(CREDENTIAL_URL))
                    .flatten()
            })
        };
        let password_file = raw
            .password_file
            .as_deref()
            .map(place)
            .or_else(|| credential(CREDENTIAL_PASSWORD));
        DatabaseSecrets {
            url_file,
            password_file,
            unread_url_file,
        }
    }

    /// Reads the files: the URL to use instead of `url`, or `None` to keep it.
    pub fn resolve(&self, url: &str) -> Result<Option<String>, Problem> {
        if self.url_file.is_none() && self.password_file.is_none() {
            return Ok(None);
        }
        let read = |key: &str, path: &Path| {
            refuse_open_file(path).map_err(|message| Problem {
                location: format!("[database] {key}"),
                message,
            })?;
            std::fs::read_to_string(path)
                .map(|t| t.trim_end_matches(['\n', '\r']).to_string())
                .map_err(|e| Problem {
                    location: format!("[database] {key}"),
                    message: format!("cannot read {}: {e}", path.display()),
                })
        };
        let mut url = match &self.url_file {
            Some(path) => read("url_file", path)?.trim().to_string(),
            None => url.to_string(),
        };
        if let Some(path) = &self.password_file {
            let password = read("password_file", path)?;
            url = with_password(&url, &password).map_err(|message| Problem {
                location: "[database] password_file".into(),
                message,
            })?;
        }
        Ok(Some(url))
    }
}

/// A file holding a secret must not be readable or writable by every user of the host (a group
/// may read it: `root:sqlcron 0640` is the packaged layout).
pub fn refuse_open_file(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(()); // reading it says why
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o006 != 0 {
        return Err(format!(
            "{} is mode {mode:04o}: every user of this host can {} it; chmod 0600 {0} (or 0640 \
             with the service's group)",
            path.display(),
            if mode & 0o002 != 0 { "change" } else { "read" }
        ));
    }
    Ok(())
}

/// `url` with `password` (percent-encoded) in its user information.
pub fn with_password(url: &str, password: &str) -> Result<String, String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("the database URL has no scheme://".into());
    };
    if scheme == "sqlite" {
        return Err("SQLite takes no password".into());
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let Some((user, host)) = authority.rsplit_once('@') else {
        return Err("the database URL names no user (postgres://USER@host/db)".into());
    };
    if user.contains(':') {
        return Err("the database URL has a password already".into());
    }
    Ok(format!(
        "{scheme}://{user}:{}@{host}{tail}",
        percent_encode(password)
    ))
}

/// Whether `url`'s user information carries a password.
pub fn has_password(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    authority
        .rsplit_once('@')
        .is_some_and(|(user, _)| user.contains(':'))
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_shows_in_a_redacted_url() {
        for pw in ["se@cret", "a:b", "x/y", "%40", "p@ss:w/rd?#&="] {
            let url = with_password("postgres://u@db/x?sslmode=require", pw).unwrap();
            let shown = crate::model::database_url::redact_url(&url);
            assert!(!shown.contains(pw), "{shown}");
            assert_eq!(shown, "postgres://u:***@db/x?sslmode=require");
        }
    }

    #[test]
    fn passwords_are_encoded_into_the_url() {
        assert_eq!(
            with_password("postgres://sqlcron@db:5432/sqlcron", "p@ss:w/rd%").unwrap(),
            "postgres://sqlcron:p%40ss%3Aw%2Frd%25@db:5432/sqlcron"
        );
        assert_eq!(
            with_password("postgres://u:x@db/d", "y").unwrap_err(),
            "the database URL has a password already"
        );
        assert!(with_password("postgres://db/d", "y").is_err());
    }

    #[test]
    fn a_password_in_the_url_is_seen() {
        assert!(has_password("postgres://u:x@db/d"));
        assert!(has_password(
            "postgres://u:p%40ss@db:5432/d?sslmode=require"
        ));
        assert!(!has_password("postgres://u@db/d"));
        assert!(!has_password("postgres://db/d?password_hint=x:y@z"));
        assert!(!has_password("sqlite:///var/lib/x.db"));
    }

    #[test]
    fn files_and_credentials_are_found() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("database-password"), "s3cr@t\n").unwrap();
        std::fs::write(dir.path().join("url"), "postgres://app@db/app\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        let private = std::fs::Permissions::from_mode(0o600);
        std::fs::set_permissions(dir.path().join("url"), private.clone()).unwrap();
        // Every user may read it: refused, naming the fix.
        std::fs::set_permissions(
            dir.path().join("database-password"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let open = DatabaseSecrets {
            url_file: None,
            password_file: Some(dir.path().join("database-password")),
            unread_url_file: None,
        };
        let p = open.resolve("postgres://u@h/d").unwrap_err();
        assert!(p.message.contains("is mode 0644"), "{}", p.message);
        std::fs::set_permissions(dir.path().join("database-password"), private).unwrap();
        let env = Environment {
            credentials_directory: Some(dir.path().to_string_lossy().into()),
            ..Environment::default()
        };
        let raw = RawDatabase {
            url_file: Some("url".into()),
            ..RawDatabase::default()
        };
        let mut problems = vec![];
        let s = DatabaseSecrets::from_raw(
            &raw,
            &env,
            Path::new("/etc/sqlcron/sqlcron.toml"),
            &mut |l, m| problems.push(format!("{l}: {m}")),
        );
        assert!(problems.is_empty());
        assert_eq!(s.url_file, Some(dir.path().join("url")));
        assert_eq!(s.password_file, Some(dir.path().join("database-password")));
        assert_eq!(
            s.resolve("ignored").unwrap().unwrap(),
            "postgres://app:s3cr%40t@db/app"
        );
        let missing = DatabaseSecrets {
            url_file: None,
            password_file: Some("/nonexistent/pw".into()),
            unread_url_file: None,
        };
        let p = missing.resolve("postgres://u@h/d").unwrap_err();
        assert_eq!(p.location, "[database] password_file");
        assert!(p.message.starts_with("cannot read /nonexistent/pw"));
    }
}
