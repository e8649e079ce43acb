//! A database URL, parsed once (in `config`) into a [`DatabaseUrl`] that the store takes: its
//! [`Dialect`], its hosts (a PostgreSQL URL may name several, as libpq accepts), their ports,
//! the SQLite file, and a form fit for messages. The URL's text holds the password, so neither
//! `Display` nor `Debug` shows it: only [`DatabaseUrl::secret_text`] does, for the driver.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Which database a store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
    Mysql,
}

impl Dialect {
    /// The dialect of a URL's scheme; `None` for any other scheme.
    pub fn from_url(url: &str) -> Option<Dialect> {
        let scheme = url.split(':').next()?;
        match scheme {
            "sqlite" => Some(Dialect::Sqlite),
            "postgres" | "postgresql" => Some(Dialect::Postgres),
            "mysql" | "mariadb" => Some(Dialect::Mysql),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dialect::Sqlite => "sqlite",
            Dialect::Postgres => "postgres",
            Dialect::Mysql => "mysql",
        }
    }
}

/// A database URL, checked: a known scheme, and for PostgreSQL a host list that splits.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl {
    /// The URL as given, password included.
    text: String,
    dialect: Dialect,
    /// PostgreSQL: one URL per host, in order, and the `target_session_attrs`. Others: the
    /// URL as given (one host).
    hosts: Hosts,
    /// The server ports, for TCP keepalive; none for SQLite.
    ports: Vec<u16>,
    /// SQLite: the database file; `None` in memory and for the other dialects.
    sqlite_path: Option<PathBuf>,
}

impl DatabaseUrl {
    /// Parses and checks a URL. Errors name what is wrong and show the URL redacted.
    pub fn parse(text: &str) -> Result<DatabaseUrl, String> {
        let dialect = Dialect::from_url(text).ok_or_else(|| {
            format!(
                "\"{}\" is not a sqlite://, postgres:// or mysql:// URL",
                redact_url(text)
            )
        })?;
        if dialect == Dialect::Postgres {
            known_postgres_params(text)?;
        }
        let hosts = match dialect {
            Dialect::Postgres => {
                split_hosts(text).map_err(|why| format!("\"{}\": {why}", redact_url(text)))?
            }
            Dialect::Mysql if split_hosts(text).is_ok_and(|h| h.urls.len() > 1) => {
                return Err(format!(
                    "\"{}\": several hosts are a PostgreSQL form; for MySQL/MariaDB point sqlcron \
                     at one address (a proxy, a virtual IP or a Galera node; see \
                     docs/databases.md)",
                    redact_url(text)
                ));
            }
            _ => Hosts {
                urls: vec![text.to_string()],
                names: vec![],
                target: None,
            },
        };
        Ok(DatabaseUrl {
            text: text.to_string(),
            dialect,
            hosts,
            ports: server_ports(text),
            sqlite_path: if dialect == Dialect::Sqlite {
                sqlite_path(text)
            } else {
                None
            },
        })
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The URL with its password: for the database driver only, never for a message.
    pub fn secret_text(&self) -> &str {
        &self.text
    }

    /// The URL fit for messages and logs (see [`redact_url`]).
    pub fn redacted(&self) -> String {
        redact_url(&self.text)
    }

    /// PostgreSQL: the hosts, one URL each; others: the URL itself.
    pub fn hosts(&self) -> &Hosts {
        &self.hosts
    }

    /// The server ports (each host's, or the dialect's default); none for SQLite.
    pub fn server_ports(&self) -> &[u16] {
        &self.ports
    }

    /// The servers the URL names, as (host, port), in order; none for SQLite and Unix sockets.
    pub fn servers(&self) -> Vec<(String, u16)> {
        servers(&self.text)
    }

    /// SQLite: the database file; `None` in memory and for the other dialects.
    pub fn sqlite_path(&self) -> Option<&Path> {
        self.sqlite_path.as_deref()
    }
}

impl FromStr for DatabaseUrl {
    type Err = String;

    fn from_str(text: &str) -> Result<DatabaseUrl, String> {
        DatabaseUrl::parse(text)
    }
}

/// Redacted, as every message shows a URL.
impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// Redacted too: a `{:?}` of a configuration must not print the password.
impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({})", self.redacted())
    }
}

/// What a connection's server must be (libpq's `target_session_attrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Any server that answers (`any`).
    Any,
    /// A server that accepts writes: not in recovery, `transaction_read_only` off
    /// (`read-write`, `primary`). The daemon's default.
    ReadWrite,
}

/// A URL's hosts as single-host URLs, in the order given, and the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hosts {
    /// One URL per host, otherwise the URL as given (without `target_session_attrs`).
    pub urls: Vec<String>,
    /// `host:port` of each, for logs.
    pub names: Vec<String>,
    /// `None` when the URL does not say (the caller decides).
    pub target: Option<Target>,
}

/// Splits a PostgreSQL URL into one URL per host. A URL with one host comes back as given
/// (less `target_session_attrs`). Errors name what is wrong.
fn split_hosts(url: &str) -> Result<Hosts, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| "not a URL (scheme://...)".to_string())?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hostlist) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let (tail, target) = take_target(tail)?;
    let mut urls = Vec::new();
    let mut names = Vec::new();
    for host in hostlist.split(',') {
        if host.is_empty() {
            return Err(format!("an empty host in \"{hostlist}\""));
        }
        let name = if has_port(host) {
            host.to_string()
        } else {
            format!("{host}:5432")
        };
        urls.push(format!("{scheme}://{userinfo}{host}{tail}"));
        names.push(name);
    }
    Ok(Hosts {
        urls,
        names,
        target,
    })
}

/// Whether `host` ends with `:port` (an IPv6 address is bracketed: `[::1]:5432`).
fn has_port(host: &str) -> bool {
    match host.rfind(':') {
        Some(i) => !host.starts_with('[') || host[..i].ends_with(']'),
        None => false,
    }
}

/// The query parameters a PostgreSQL URL may carry: those the driver reads, and
/// `target_session_attrs`, which sqlcron reads itself.
const POSTGRES_PARAMS: [&str; 19] = [
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
    "target_session_attrs",
];

/// Refuses a PostgreSQL URL with a parameter the driver does not know: it would ignore it and
/// log it with its value (a secret put in the wrong place would reach the journal). The error
/// names the parameter only.
fn known_postgres_params(url: &str) -> Result<(), String> {
    let Some((_, query)) = url.split_once('?') else {
        return Ok(());
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let key = pair.split_once('=').map_or(pair, |(k, _)| k);
        if !POSTGRES_PARAMS.contains(&key) {
            let shown: String = key.chars().take(40).flat_map(char::escape_debug).collect();
            return Err(format!(
                "the PostgreSQL URL has a parameter \"{shown}\" that is not one of {} (its value is not shown)",
                POSTGRES_PARAMS.join(", ")
            ));
        }
    }
    Ok(())
}

/// Takes `target_session_attrs` out of the path-and-query part of a URL.
fn take_target(tail: &str) -> Result<(String, Option<Target>), String> {
    let Some((path, query)) = tail.split_once('?') else {
        return Ok((tail.to_string(), None));
    };
    let mut target = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("target_session_attrs", value)) => {
                target = Some(match value {
                    "any" => Target::Any,
                    "read-write" | "primary" => Target::ReadWrite,
                    other => {
                        return Err(format!(
                            "target_session_attrs={other} is not supported (any, read-write, primary)"
                        ));
                    }
                });
            }
            _ => kept.push(pair),
        }
    }
    let tail = if kept.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", kept.join("&"))
    };
    Ok((tail, target))
}

/// The server ports of a database URL (each host of a PostgreSQL host list), with the
/// dialect's default port where none is given; none for SQLite.
fn server_ports(url: &str) -> Vec<u16> {
    let mut ports: Vec<u16> = servers(url).into_iter().map(|(_, port)| port).collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// The servers a URL names, as (host, port) in the order given: the dialect's default port where
/// none is written, an IPv6 address without its brackets. None for SQLite, nor for a URL whose
/// host is empty (a Unix socket).
fn servers(url: &str) -> Vec<(String, u16)> {
    let default = if url.starts_with("postgres") {
        5432
    } else if url.starts_with("mysql") || url.starts_with("mariadb") {
        3306
    } else {
        return vec![];
    };
    let Some((_, rest)) = url.split_once("://") else {
        return vec![];
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let hosts = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|h| {
            let (host, port) = match h.rsplit_once(':') {
                // `[::1]` alone: the colon is the address's.
                Some((host, p)) if !p.ends_with(']') => (host, p.parse().unwrap_or(default)),
                _ => (h, default),
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            (host.to_string(), port)
        })
        .collect()
}

/// The database file of a `sqlite://PATH?options` URL; `None` for in-memory databases.
fn sqlite_path(url: &str) -> Option<std::path::PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next()?;
    if path.is_empty() || path.contains(":memory:") {
        return None;
    }
    Some(std::path::PathBuf::from(path))
}

/// Query parameters whose value is a secret.
fn secret_param(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("password")
        || k.contains("passwd")
        || k == "pwd"
        || k.contains("secret")
        || k.contains("token")
}

/// A URL fit for messages and logs: the user information loses everything after the user name
/// (whatever characters the password holds, even unencoded `@`, `:` or `/`), and every
/// password-like query parameter its value. When in doubt it hides more, never less.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (userinfo, rest) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let mut out = format!("{scheme}://");
    if let Some(info) = userinfo {
        match info.find(':') {
            Some(colon) => {
                out.push_str(&info[..colon]);
                out.push_str(":***");
            }
            // A '/' or '?' before the '@' means the '@' was not the user information's end
            // (or the password held it unencoded): hide it all.
            None if info.contains(['/', '?', '#']) => out.push_str("***"),
            None => out.push_str(info),
        }
        out.push('@');
    }
    match rest.split_once('?') {
        None => out.push_str(rest),
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let params: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if secret_param(k) => format!("{k}=***"),
                    _ => kv.to_string(),
                })
                .collect();
            out.push_str(&params.join("&"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_parsed_once_into_what_the_store_needs() {
        let u = DatabaseUrl::parse("postgres://u:secret@h1:5433,h2/x?target_session_attrs=any")
            .unwrap();
        assert_eq!(u.dialect(), Dialect::Postgres);
        assert_eq!(u.hosts().urls.len(), 2);
        assert_eq!(u.hosts().target, Some(Target::Any));
        assert_eq!(u.server_ports(), &[5432, 5433]);
        assert_eq!(
            u.to_string(),
            "postgres://u:***@h1:5433,h2/x?target_session_attrs=any"
        );
        assert!(!format!("{u:?}").contains("secret"));
        let s = DatabaseUrl::parse("sqlite:///var/lib/sqlcron/sqlcron.db?mode=rwc").unwrap();
        assert_eq!(
            s.sqlite_path(),
            Some(Path::new("/var/lib/sqlcron/sqlcron.db"))
        );
        assert_eq!(
            DatabaseUrl::parse("sqlite::memory:").unwrap().sqlite_path(),
            None
        );
        assert_eq!(
            DatabaseUrl::parse("mariadb://root@db/x").unwrap().dialect(),
            Dialect::Mysql
        );
    }

    #[test]
    fn unknown_postgres_parameters_are_refused_without_their_value() {
        let e = DatabaseUrl::parse("postgres://u@db/x?sslmode=require&apikey=s3cr3t").unwrap_err();
        assert!(e.contains("\"apikey\"") && !e.contains("s3cr3t"), "{e}");
        assert!(
            DatabaseUrl::parse("postgres://u@db/x?sslmode=verify-full&sslrootcert=/ca.pem&application_name=a&target_session_attrs=read-write")
                .is_ok()
        );
        // MySQL's driver ignores unknown parameters without logging them.
        assert!(DatabaseUrl::parse("mysql://u@db/x?apikey=s3cr3t").is_ok());
    }

    #[test]
    fn bad_urls_are_refused_with_the_reason_and_without_the_password() {
        let e = DatabaseUrl::parse("redis://u:secret@h/x").unwrap_err();
        assert!(e.contains("is not a sqlite://"), "{e}");
        assert!(!e.contains("secret"), "{e}");
        let e = DatabaseUrl::parse("mysql://u:secret@h1,h2/x").unwrap_err();
        assert!(e.contains("several hosts are a PostgreSQL form"), "{e}");
        assert!(!e.contains("secret"), "{e}");
        let e = DatabaseUrl::parse("postgres://h1,,h2/x").unwrap_err();
        assert!(e.contains("empty host"), "{e}");
    }

    #[test]
    fn a_host_list_becomes_one_url_per_host_in_order() {
        let h = split_hosts(
            "postgres://u:p%40ss@db1:5432,db2:6432,db3/jobs?sslmode=require&target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(
            h.urls,
            vec![
                "postgres://u:p%40ss@db1:5432/jobs?sslmode=require",
                "postgres://u:p%40ss@db2:6432/jobs?sslmode=require",
                "postgres://u:p%40ss@db3/jobs?sslmode=require",
            ]
        );
        assert_eq!(h.names, vec!["db1:5432", "db2:6432", "db3:5432"]);
        assert_eq!(h.target, Some(Target::ReadWrite));
    }

    #[test]
    fn one_host_comes_back_as_given() {
        let h = split_hosts("postgres://postgres@127.0.0.1:5432/db").unwrap();
        assert_eq!(h.urls, vec!["postgres://postgres@127.0.0.1:5432/db"]);
        assert_eq!(h.target, None);
        let h = split_hosts("postgresql://[::1]:5433,[::1]/db?target_session_attrs=any").unwrap();
        assert_eq!(h.names, vec!["[::1]:5433", "[::1]:5432"]);
        assert_eq!(h.urls[1], "postgresql://[::1]/db");
        assert_eq!(h.target, Some(Target::Any));
    }

    #[test]
    fn unsupported_targets_and_empty_hosts_are_refused() {
        assert!(
            split_hosts("postgres://h1,h2/db?target_session_attrs=standby")
                .unwrap_err()
                .contains("standby")
        );
        assert!(split_hosts("postgres://h1,,h2/db").is_err());
        assert!(split_hosts("h1,h2").is_err());
    }

    #[test]
    fn the_server_ports_of_a_url() {
        assert_eq!(server_ports("postgres://u:p@db1/x"), vec![5432]);
        assert_eq!(
            server_ports("postgres://u@h1:5433,h2,[::1]:6432/x?target_session_attrs=read-write"),
            vec![5432, 5433, 6432]
        );
        assert_eq!(server_ports("postgres://u@[::1]/x"), vec![5432]);
        assert_eq!(server_ports("mysql://root@127.0.0.1:3307/db"), vec![3307]);
        assert_eq!(server_ports("sqlite:///var/lib/x.db"), Vec::<u16>::new());
        let s = |h: &str, p| (h.to_string(), p);
        assert_eq!(
            servers("postgres://u@h1:5433,h2,[::1]:6432/x"),
            vec![s("h1", 5433), s("h2", 5432), s("::1", 6432)]
        );
        assert_eq!(servers("mysql://root:p@db/x"), vec![s("db", 3306)]);
        assert_eq!(servers("postgres:///x?host=/run/postgresql"), vec![]);
    }

    #[test]
    fn redaction_hides_nasty_passwords() {
        let cases = [
            ("postgres://u:secret@db/x", "postgres://u:***@db/x"),
            ("postgres://u:p@ss@db:5432/x", "postgres://u:***@db:5432/x"),
            ("postgres://u:p:a:ss@db/x", "postgres://u:***@db/x"),
            ("postgres://u:pa/ss@db/x", "postgres://u:***@db/x"),
            ("postgres://u:p%40ss@db/x", "postgres://u:***@db/x"),
            (
                "mysql://root@127.0.0.1:3306/t",
                "mysql://root@127.0.0.1:3306/t",
            ),
            (
                "postgres://u@db/x?sslmode=require&password=hunter2&sslpassword=k",
                "postgres://u@db/x?sslmode=require&password=***&sslpassword=***",
            ),
            ("postgres://db/x?user=u&PASSWORD=a@b", "postgres://***@b"),
            (
                "sqlite:///var/lib/sqlcron/sqlcron.db",
                "sqlite:///var/lib/sqlcron/sqlcron.db",
            ),
        ];
        for (url, want) in cases {
            assert_eq!(redact_url(url), want, "{url}");
        }
    }
}
