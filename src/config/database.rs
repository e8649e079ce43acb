//! `[database]`: the URL (with `$SQLCRON_DATABASE_URL` and the SQLite default applied), the
//! replica and the direct URL, each parsed once into a [`DatabaseUrl`]; and, for
//! [`load`](super::load), the URL and password files read in.

use std::path::Path;

use super::raw::RawDatabase;
use super::validate::Collector;
use super::{Config, ConfigError, Environment, Problem, STATE_DIR_DEFAULT};
use crate::model::database_url::{DatabaseUrl, Dialect};

/// The validated `[database]` URLs.
pub(super) struct Database {
    pub url: DatabaseUrl,
    pub secrets: super::secrets::DatabaseSecrets,
    pub read_url: Option<DatabaseUrl>,
    pub direct_url: Option<DatabaseUrl>,
}

/// Checks the URLs of `[database]`, reporting every problem into `c`.
pub(super) fn validate(
    raw: &RawDatabase,
    env: &Environment,
    path: &Path,
    c: &mut Collector,
) -> Database {
    let database_secrets = crate::config::secrets::DatabaseSecrets::from_raw(
        raw,
        env,
        path,
        &mut |location, message| c.push(location, message),
    );
    let url_from_file = env.database_url.is_none() && database_secrets.url_file.is_some();
    let database_url = env
        .database_url
        .clone()
        .or(raw.url.clone())
        .unwrap_or_else(|| {
            let dir = env
                .state_directory
                .clone()
                .unwrap_or_else(|| STATE_DIR_DEFAULT.to_string());
            format!("sqlite://{}/sqlcron.db", dir.trim_end_matches('/'))
        });
    // A URL read from url_file is known only in `load`, which parses it then.
    let sqlite_default = DatabaseUrl::parse(&format!(
        "sqlite://{}/sqlcron.db",
        env.state_directory
            .as_deref()
            .unwrap_or(STATE_DIR_DEFAULT)
            .trim_end_matches('/')
    ));
    let database_url = match DatabaseUrl::parse(&database_url) {
        Ok(url) => url,
        Err(m) => {
            if !url_from_file {
                c.push("[database] url", m);
            }
            sqlite_default
                .clone()
                .expect("the default SQLite URL parses")
        }
    };

    let database_read_url = match raw.read_url.as_deref().map(DatabaseUrl::parse) {
        None => None,
        Some(Err(m)) => {
            c.push("[database] read_url", m);
            None
        }
        Some(Ok(read)) => {
            if !url_from_file && read.dialect() != database_url.dialect() {
                c.push(
                    "[database] read_url",
                    format!(
                        "\"{read}\" must be the same kind of database as [database] url (a replica of it)"
                    ),
                );
            }
            Some(read)
        }
    };

    let database_direct_url = match raw.direct_url.as_deref().map(DatabaseUrl::parse) {
        None => None,
        Some(Err(m)) => {
            c.push("[database] direct_url", m);
            None
        }
        Some(Ok(direct)) => {
            if direct.dialect() != Dialect::Postgres
                || (!url_from_file && database_url.dialect() != Dialect::Postgres)
            {
                c.push(
                    "[database] direct_url",
                    format!(
                        "\"{direct}\": direct_url is the PostgreSQL server behind a transaction-mode \
                         pooler, and [database] url must be a postgres:// URL too"
                    ),
                );
            }
            Some(direct)
        }
    };

    Database {
        url: database_url,
        secrets: database_secrets,
        read_url: database_read_url,
        direct_url: database_direct_url,
    }
}

/// Reads what `[database] url_file` and `password_file` (or the systemd credentials) hold into
/// the URLs, parsing the result.
pub(super) fn read_files(config: &mut Config, path: &Path) -> Result<(), ConfigError> {
    let refused = |location: &str, message: String| ConfigError {
        path: path.to_path_buf(),
        problems: vec![Problem {
            location: location.into(),
            message,
        }],
    };
    if let Some(url) = config
        .database_secrets
        .resolve(config.database_url.secret_text())
        .map_err(|p| ConfigError {
            path: path.to_path_buf(),
            problems: vec![p],
        })?
    {
        config.database_url = DatabaseUrl::parse(&url).map_err(|m| refused("[database] url", m))?;
        if config.database_direct_url.is_some()
            && config.database_url.dialect() != Dialect::Postgres
        {
            return Err(refused(
                "[database] direct_url",
                "direct_url is the PostgreSQL server behind a transaction-mode pooler, and \
                 [database] url must be a postgres:// URL too"
                    .into(),
            ));
        }
    }
    if let (Some(direct), Some(password_file)) = (
        &config.database_direct_url,
        &config.database_secrets.password_file,
    ) && !crate::config::secrets::has_password(direct.secret_text())
    {
        let with_password = std::fs::read_to_string(password_file)
            .map(|t| t.trim_end_matches(['\n', '\r']).to_string())
            .and_then(|p| {
                crate::config::secrets::with_password(direct.secret_text(), &p)
                    .map_err(std::io::Error::other)
            })
            .map_err(|e| ConfigError {
                path: password_file.to_path_buf(),
                problems: vec![Problem {
                    location: "[database] direct_url".into(),
                    message: format!("cannot apply password_file: {e}"),
                }],
            })?;
        config.database_direct_url = Some(
            DatabaseUrl::parse(&with_password).map_err(|m| refused("[database] direct_url", m))?,
        );
    }
    Ok(())
}
