//! Configuration: TOML text → [`RawConfig`] (serde, mirrors the file) → [`Config`] (typed and
//! validated). Pure: reading the file and the environment happens in [`load`], everything else
//! works on strings so it can be tested without touching the disk.
//!
//! Validation reports every problem at once, each naming the file, the job and the key at fault.
//! Nothing after validation re-checks configuration.

pub mod calendars;
pub mod cluster;
mod database;
mod jobs;
pub mod raw;
pub mod secrets;
pub mod security;
mod toml_errors;
mod validate;
pub mod web;

pub use raw::*;
pub use validate::validate;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::model::database_url::{DatabaseUrl, Dialect};
use crate::model::hooks::AlertSettings;
use crate::model::job::{JobSpec, Policy};

/// Where the configuration is read from when neither `--config` nor `$SQLCRON_CONFIG` is given.
pub const CONFIG_PATH_DEFAULT: &str = "/etc/sqlcron/sqlcron.toml";
/// The state directory outside systemd; under systemd `$STATE_DIRECTORY` wins.
pub const STATE_DIR_DEFAULT: &str = "/var/lib/sqlcron";

pub const POLL_INTERVAL_DEFAULT: Duration = Duration::from_secs(1);
pub const LEASE_DEFAULT: Duration = Duration::from_secs(10);
pub use crate::model::lease::LEASE_MAX;
pub const MAX_PARALLEL_DEFAULT: usize = 16;
pub const SHUTDOWN_GRACE_DEFAULT: Duration = Duration::from_secs(30);
/// How often a long run's output so far is stored, for the dashboard to follow it.
pub const LIVE_OUTPUT_DEFAULT: Duration = Duration::from_secs(5);
pub const OUTPUT_TAIL_DEFAULT: usize = 64 * 1024;
/// Lines of one run's output written to the log (journald or stderr) before the rest is only
/// counted.
pub const OUTPUT_LOG_LINES_DEFAULT: usize = 1000;
/// Bytes of one run's output written to the log before the rest is only counted.
pub const OUTPUT_LOG_BYTES_DEFAULT: usize = 256 * 1024;

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it was read from, for messages.
    pub path: PathBuf,
    /// Database URL, with `$SQLCRON_DATABASE_URL` and the SQLite default already applied, and
    /// (after [`load`]) the URL and password files read.
    pub database_url: DatabaseUrl,
    /// Where the URL and the password are read from by [`load`] (see [`crate::config::secrets`]).
    pub database_secrets: crate::config::secrets::DatabaseSecrets,
    /// `[database] read_url`: a replica for the reading commands (`status`, `history`,
    /// `explain`); the daemon and every writing command use `database_url`.
    pub database_read_url: Option<DatabaseUrl>,
    /// `[database] pool_size`: the most connections the daemon's pool holds.
    pub database_pool_size: u32,
    /// `[database] direct_url`: set when `database_url` is a transaction-mode pooler; the
    /// server itself, for migrations and LISTEN (with the password file applied by [`load`]).
    pub database_direct_url: Option<DatabaseUrl>,
    /// This daemon's name in `exec_by`, history and `cron_nodes`.
    pub node_name: String,
    /// `[node] tags`: what jobs' placement (`on = { tags = [...] }`) matches.
    pub node_tags: Vec<String>,
    pub daemon: DaemonConfig,
    /// Policy for every job unless a job (or its row) says otherwise.
    pub defaults: Policy,
    /// Pool name → cluster-wide limit.
    pub pools: BTreeMap<String, u32>,
    pub log: LogConfig,
    /// Where `/metrics` and `/healthz` are served (`[metrics] listen`); none by default.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// `[metrics] token_file`: the file, and (after [`load`]) the token `/metrics` requires as
    /// `Authorization: Bearer <token>`.
    pub metrics_token_file: Option<String>,
    pub metrics_token: Option<String>,
    /// `[web]`: the dashboard (off unless `listen` is set).
    pub web: web::WebConfig,
    /// `[history]`: how long runs and audit rows are kept.
    pub history: crate::model::retention::HistoryConfig,
    /// The alert keys of `[defaults]`: every job's unless it says otherwise.
    pub alert_defaults: AlertSettings,
    /// `[alerts]`: how hooks are delivered.
    pub delivery: crate::model::hooks::DeliveryConfig,
    /// `[[job]]` tables, in file order.
    pub jobs: Vec<JobSpec>,
    /// `[security]`: whether rows written with SQL must be signed.
    pub security: security::SecurityConfig,
    /// `[[calendar]]` tables, in file order (their `ics_file` read by [`load`]).
    pub calendars: Vec<calendars::CalendarDef>,
    /// `[cluster]`: the start-rate budgets this file sets.
    pub cluster: cluster::ClusterConfig,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DaemonConfig {
    /// The longest a node sleeps between two looks at the table.
    pub poll_interval: Duration,
    /// Claim lease; extended every third of it while the job's process lives. At most
    /// [`LEASE_MAX`]: a longer one in the file is used as that ([`long_lease_warning`]).
    pub lease: Duration,
    /// The lease the file asked for when it was longer than [`LEASE_MAX`].
    pub lease_asked: Option<Duration>,
    /// Jobs this node runs at once.
    pub max_parallel: usize,
    /// How long running jobs may finish after SIGTERM before they are stopped.
    pub shutdown_grace: Duration,
    /// Bytes of a run's output kept in the history.
    pub output_tail: usize,
    /// How often the output so far of a run that has run this long is stored in its
    /// `running` record (the dashboard follows it); zero: only at the end.
    pub live_output: Duration,
    /// Lines of a run's output written to the log; then one line says how much was left out.
    pub output_log_lines: usize,
    /// Bytes of a run's output written to the log (same rule).
    pub output_log_bytes: usize,
    /// The account jobs run as when they name none (required for a daemon running as root).
    pub default_user: Option<String>,
    /// `[daemon] allowed_users` and `allowed_groups`: the accounts jobs may switch to on this
    /// node, whatever wrote their row (default: `default_user` and the users the TOML's jobs
    /// name; root only when listed).
    pub allowed: crate::model::run_as::Allowed,
    /// Variables of the daemon's environment every job also gets.
    pub inherit_env: Vec<String>,
    /// Listen for changes (PostgreSQL LISTEN/NOTIFY, inotify on SQLite) instead of relying on
    /// polling alone (see `store/wake.rs`).
    pub wakeups: bool,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            poll_interval: POLL_INTERVAL_DEFAULT,
            lease: LEASE_DEFAULT,
            lease_asked: None,
            max_parallel: MAX_PARALLEL_DEFAULT,
            shutdown_grace: SHUTDOWN_GRACE_DEFAULT,
            output_tail: OUTPUT_TAIL_DEFAULT,
            live_output: LIVE_OUTPUT_DEFAULT,
            output_log_lines: OUTPUT_LOG_LINES_DEFAULT,
            output_log_bytes: OUTPUT_LOG_BYTES_DEFAULT,
            default_user: None,
            allowed: crate::model::run_as::Allowed::default(),
            inherit_env: Vec::new(),
            wakeups: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// A `RUST_LOG`-style filter; `$RUST_LOG` overrides it.
    pub level: String,
    /// `auto` (journald under systemd, else stderr), `journald` or `stderr`.
    pub target: String,
}

/// A configuration problem: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `[daemon] lease`, `job "backup" schedule`, ...
    pub location: String,
    pub message: String,
}

/// Every problem found in one file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub path: PathBuf,
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}: {}: {}", self.path.display(), p.location, p.message)?;
        }
        Ok(())
    }
}

/// The daemon's pool size when `[database] pool_size` is not set: half of `max_parallel`, at
/// least 4 and at most 16 (a run holds a connection only for its few statements).
pub fn default_pool_size(max_parallel: usize) -> u32 {
    (max_parallel as u32 / 2).clamp(4, 16)
}

/// Environment the configuration depends on, passed in so tests need not set variables.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    pub database_url: Option<String>,
    pub state_directory: Option<String>,
    pub hostname: Option<String>,
    /// `$CREDENTIALS_DIRECTORY`: systemd's `LoadCredential=` files.
    pub credentials_directory: Option<String>,
}

impl Environment {
    pub fn from_process() -> Environment {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        Environment {
            database_url: std::env::var("SQLCRON_DATABASE_URL")
                .ok()
                .filter(|s| !s.is_empty()),
            state_directory: std::env::var("STATE_DIRECTORY")
                .ok()
                .filter(|s| !s.is_empty()),
            hostname: host,
            credentials_directory: std::env::var("CREDENTIALS_DIRECTORY")
                .ok()
                .filter(|s| !s.is_empty()),
        }
    }
}

/// The configuration path: `--config`, else `$SQLCRON_CONFIG`, else the default.
pub fn config_path(flag: Option<&Path>) -> PathBuf {
    if let Some(p) = flag {
        return p.to_path_buf();
    }
    match std::env::var_os("SQLCRON_CONFIG") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(CONFIG_PATH_DEFAULT),
    }
}

/// Reads and validates a configuration file. A missing file at the default path is an empty
/// configuration (a node that only runs jobs defined with SQL); a missing file that was asked
/// for explicitly is an error.
pub fn load(path: &Path, explicit: bool, env: &Environment) -> Result<Config, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => String::new(),
        Err(e) => {
            return Err(ConfigError {
                path: path.to_path_buf(),
                problems: vec![Problem {
                    location: "file".into(),
                    message: format!("cannot read: {e}"),
                }],
            });
        }
    };
    let mut config = parse(&text, path, env)?;
    database::read_files(&mut config, path)?;
    security::read_keys_file(&mut config.security, path)?;
    read_metrics_token(&mut config, path)?;
    web::read_users(&mut config.web, path)?;
    calendars::read_files(&mut config, path)?;
    Ok(config)
}

/// Reads `[metrics] token_file` (a secret file: refused when every user may read it).
fn read_metrics_token(config: &mut Config, path: &Path) -> Result<(), ConfigError> {
    let Some(file) = config.metrics_token_file.clone() else {
        return Ok(());
    };
    let problem = |message: String| ConfigError {
        path: path.to_path_buf(),
        problems: vec![Problem {
            location: "[metrics] token_file".into(),
            message,
        }],
    };
    secrets::refuse_open_file(Path::new(&file)).map_err(problem)?;
    let token = std::fs::read_to_string(&file)
        .map_err(|e| problem(format!("cannot read {file}: {e}")))?
        .trim()
        .to_string();
    if token.len() < 16 || token.contains(char::is_whitespace) {
        return Err(problem(format!(
            "{file} must hold one token of at least 16 characters without spaces"
        )));
    }
    config.metrics_token = Some(token);
    Ok(())
}

/// A warning when `[daemon] lease` asked for more than [`LEASE_MAX`] (once accepted: a file
/// that worked before still starts its node, with the longest lease).
pub fn long_lease_warning(config: &Config) -> Option<String> {
    let asked = config.daemon.lease_asked?;
    Some(format!(
        "[daemon] lease = \"{}\" is longer than the longest lease, {}: {} is used; set it to \
         1h or less",
        humantime::format_duration(asked),
        humantime::format_duration(LEASE_MAX),
        humantime::format_duration(config.daemon.lease)
    ))
}

/// A warning when `/metrics` listens beyond this host without a token.
pub fn open_metrics_warning(config: &Config) -> Option<String> {
    let addr = config.metrics_listen?;
    (!addr.ip().is_loopback() && config.metrics_token_file.is_none()).then(|| {
        format!(
            "[metrics] listen = \"{addr}\" answers any host that reaches it and no token_file is set: \
             job names and failures are readable by anyone on the network; set [metrics] \
             token_file or listen on 127.0.0.1"
        )
    })
}

/// Parses and validates TOML text.
pub fn parse(text: &str, path: &Path, env: &Environment) -> Result<Config, ConfigError> {
    let raw: RawConfig = toml::from_str(text).map_err(|e| {
        // A key that does not fit is named with its line, table and fix (toml_errors.rs);
        // a syntax error is toml's own.
        let (location, message) = toml_errors::locate(text)
            .unwrap_or_else(|| (toml_location(text, &e), e.message().to_string()));
        ConfigError {
            path: path.to_path_buf(),
            problems: vec![Problem { location, message }],
        }
    })?;
    validate(raw, path, env)
}

fn toml_location(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}")
        }
        None => "file".into(),
    }
}

use crate::model::database_url::redact_url;

/// A warning when the configuration file holds a password (in `[database] url`) and other
/// users can read it.
pub fn readable_secret_warning(config: &Config) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let text = std::fs::read_to_string(&config.path).ok()?;
    let raw: RawConfig = toml::from_str(&text).ok()?;
    let url = raw.database.url?;
    if redact_url(&url) == url {
        return None;
    }
    let mode = std::fs::metadata(&config.path).ok()?.permissions().mode();
    (mode & 0o004 != 0).then(|| {
        format!(
            "{} holds the database password and is readable by every user (mode {:o}); \
             chmod 640 it, or move the password to [database] password_file or a systemd \
             credential",
            config.path.display(),
            mode & 0o777
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Environment {
        Environment {
            hostname: Some("host-a".into()),
            ..Environment::default()
        }
    }

    fn parse_ok(text: &str) -> Config {
        parse(text, Path::new("/etc/sqlcron/sqlcron.toml"), &env()).unwrap()
    }

    #[test]
    fn pool_size_and_read_url_are_checked() {
        assert_eq!(parse_ok("").database_pool_size, 8);
        assert_eq!(
            parse_ok("[daemon]\nmax_parallel = 64\n").database_pool_size,
            16
        );
        let c = parse_ok(
            "[database]\nurl = \"postgres://a@db1/x\"\npool_size = 3\nread_url = \"postgres://r@db2/x\"\n",
        );
        assert_eq!(c.database_pool_size, 3);
        assert_eq!(
            c.database_read_url.as_ref().map(|u| u.secret_text()),
            Some("postgres://r@db2/x")
        );
        assert!(parse_err("[database]\npool_size = 0\n").contains("pool_size"));
        assert!(
            parse_err("[database]\nurl = \"postgres://a@db1/x\"\nread_url = \"mysql://r@db2/x\"\n")
                .contains("same kind of database")
        );
    }

    #[test]
    fn the_public_path_defaults_to_the_base_path_and_is_checked_like_it() {
        let web = |t: &str| parse_ok(&format!("[web]\nlisten = \"127.0.0.1:8080\"\n{t}")).web;
        let w = web("base_path = \"/cron/\"\n");
        assert_eq!(
            (w.base_path.as_str(), w.public_path.as_str()),
            ("/cron", "/cron")
        );
        let w = web("public_path = \"/ops/cron\"\n");
        assert_eq!(
            (w.base_path.as_str(), w.public_path.as_str()),
            ("", "/ops/cron")
        );
        let e = parse_err("[web]\nlisten = \"127.0.0.1:8080\"\npublic_path = \"cron/../x\"\n");
        assert!(e.contains("[web] public_path"), "{e}");
    }

    #[test]
    fn direct_url_is_for_postgresql_behind_a_pooler() {
        let c = parse_ok(
            "[database]\nurl = \"postgres://a@bouncer:6432/x\"\ndirect_url = \"postgres://a@db1/x\"\n",
        );
        assert_eq!(
            c.database_direct_url.as_ref().map(|u| u.secret_text()),
            Some("postgres://a@db1/x")
        );
        assert_eq!(parse_ok("").database_direct_url, None);
        for bad in [
            "[database]\nurl = \"mysql://a@db/x\"\ndirect_url = \"postgres://a@db1/x\"\n",
            "[database]\nurl = \"postgres://a@bouncer/x\"\ndirect_url = \"mysql://a@db1/x\"\n",
        ] {
            assert!(parse_err(bad).contains("transaction-mode"), "{bad}");
        }
    }

    #[test]
    fn database_urls_are_parsed_once_and_refused_at_check() {
        let c = parse_ok("[database]\nurl = \"postgres://a:pw@db1:5433,db2/x\"\n");
        assert_eq!(c.database_url.dialect(), Dialect::Postgres);
        assert_eq!(c.database_url.hosts().urls.len(), 2);
        assert_eq!(
            c.database_url.to_string(),
            "postgres://a:***@db1:5433,db2/x"
        );
        let e = parse_err("[database]\nurl = \"mysql://a:pw@h1,h2/x\"\n");
        assert!(e.contains("[database] url"), "{e}");
        assert!(e.contains("several hosts are a PostgreSQL form"), "{e}");
        assert!(!e.contains("pw"), "{e}");
        let e =
            parse_err("[database]\nurl = \"postgres://a@db/x\"\nread_url = \"oracle://r@db2/x\"\n");
        assert!(
            e.contains("[database] read_url") && e.contains("is not a sqlite://"),
            "{e}"
        );
    }

    fn parse_err(text: &str) -> String {
        parse(text, Path::new("/etc/sqlcron/sqlcron.toml"), &env())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn empty_file_gives_defaults() {
        let c = parse_ok("");
        assert_eq!(
            c.database_url.secret_text(),
            "sqlite:///var/lib/sqlcron/sqlcron.db"
        );
        assert_eq!(c.node_name, "host-a");
        assert_eq!(c.daemon, DaemonConfig::default());
        assert_eq!(c.defaults, Policy::default());
        assert!(c.jobs.is_empty());
    }

    #[test]
    fn state_directory_and_env_url() {
        let mut e = env();
        e.state_directory = Some("/var/lib/sqlcron-x/".into());
        let c = parse("", Path::new("x.toml"), &e).unwrap();
        assert_eq!(
            c.database_url.secret_text(),
            "sqlite:///var/lib/sqlcron-x/sqlcron.db"
        );
        e.database_url = Some("postgres://db/x".into());
        let c = parse("[database]\nurl = \"mysql://y\"", Path::new("x.toml"), &e).unwrap();
        assert_eq!(c.database_url.secret_text(), "postgres://db/x");
    }

    #[test]
    fn the_documented_example_parses() {
        let c = parse_ok(include_str!("../../config/sqlcron.example.toml"));
        assert_eq!(c.node_name, "web-1");
        // MySQL/MariaDB store at most 191 characters of a name: refused at check, not at run.
        let long = "j".repeat(195);
        let text = format!(
            "[database]\nurl = \"mysql://db/x\"\n[node]\nname = \"{long}\"\n\
             [[job]]\nname = \"{long}\"\nschedule = \"@daily\"\ncommand = \"true\"\n"
        );
        let e = parse(&text, Path::new("m.toml"), &Environment::default()).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("[node] name") && msg.contains("1-191 characters on MySQL"),
            "{msg}"
        );
        assert!(msg.contains("name: \"jjj"), "{msg}");
        let text = text.replace("mysql://db/x", "postgres://db/x");
        parse(&text, Path::new("p.toml"), &Environment::default()).unwrap();
        assert_eq!(c.pools.get("heavy"), Some(&2));
        let backup = c.jobs.iter().find(|j| j.name == "nightly-backup").unwrap();
        assert_eq!(backup.timezone.as_deref(), Some("Asia/Tokyo"));
        assert_eq!(backup.overrides.retries, Some(3));
    }

    #[test]
    fn an_http_job_has_a_request_and_no_command() {
        let c = parse_ok(
            r#"
[[job]]
name = "hook"
schedule = "@hourly"
http = { url = "https://svc.test/run", method = "get", headers = { Authorization = "Bearer t" } }
"#,
        );
        let http = c.jobs[0].http.as_ref().unwrap();
        assert_eq!(http.method, "GET");
        assert_eq!(http.headers["Authorization"], "Bearer t");
        let msg = parse_err(
            "[[job]]\nname = \"x\"\nschedule = \"@hourly\"\ncommand = \"true\"\n\
             http = { url = \"http://h/x\" }\n",
        );
        assert!(msg.contains("give one of command, argv or http"), "{msg}");
        let msg =
            parse_err("[[job]]\nname = \"x\"\nschedule = \"@hourly\"\nhttp = { url = \"h/x\" }\n");
        assert!(msg.contains("http: url:"), "{msg}");
    }

    #[test]
    fn every_problem_is_reported_with_file_job_and_key() {
        let msg = parse_err(
            r#"
[daemon]
lease = "soon"
[[job]]
name = "a"
schedule = "60 * * * *"
command = "true"
[[job]]
name = "b"
schedule = "* * * * *"
timezone = "Mars/Base"
"#,
        );
        let lines: Vec<_> = msg.lines().collect();
        assert_eq!(lines.len(), 4, "{msg}");
        assert!(
            lines[0].starts_with(
                "/etc/sqlcron/sqlcron.toml: [daemon] lease: \"soon\" is not a duration"
            )
        );
        assert_eq!(
            lines[1],
            "/etc/sqlcron/sqlcron.toml: job \"a\" schedule: minute field: 60 is out of range 0-59 in \"60 * * * *\""
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("job \"b\" command: is missing"))
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("job \"b\" timezone: unknown time zone \"Mars/Base\""))
        );
    }

    #[test]
    fn broken_toml_names_the_line() {
        let msg = parse_err("[daemon]\npoll_interval = \n");
        assert!(
            msg.starts_with("/etc/sqlcron/sqlcron.toml: line 2:"),
            "{msg}"
        );
        let msg = parse_err("[daemon]\npoll_intervall = \"1s\"\n");
        assert!(
            msg.contains(
                "line 2: [daemon]: unknown key `poll_intervall`; did you mean `poll_interval`?"
            ),
            "{msg}"
        );
    }

    #[test]
    fn lease_must_exceed_poll_interval_and_pools_must_exist() {
        let msg = parse_err("[daemon]\npoll_interval = \"5s\"\nlease = \"5s\"\n");
        assert!(
            msg.contains("[daemon] lease: 5s must be longer than poll_interval (5s)"),
            "{msg}"
        );
        // A longer lease, accepted before the bound, still loads: as the longest, with a warning.
        let long = parse_ok("[daemon]\nlease = \"2h\"\n");
        assert_eq!(long.daemon.lease, LEASE_MAX);
        assert_eq!(
            long_lease_warning(&long).as_deref(),
            Some(
                "[daemon] lease = \"2h\" is longer than the longest lease, 1h: 1h is used; set it to 1h or less"
            )
        );
        let short = parse_ok("[daemon]\nlease = \"1h\"\n");
        assert_eq!(
            (short.daemon.lease, long_lease_warning(&short)),
            (LEASE_MAX, None)
        );
        let msg = parse_err(
            "[[job]]\nname=\"x\"\nschedule=\"@daily\"\ncommand=\"true\"\npool=\"nope\"\n",
        );
        assert!(
            msg.contains("job \"x\" pool: \"nope\" is not defined under [pools]"),
            "{msg}"
        );
    }

    #[test]
    fn duplicate_job_names_are_rejected() {
        let msg = parse_err(
            "[[job]]\nname=\"x\"\nschedule=\"@daily\"\ncommand=\"true\"\n[[job]]\nname=\"x\"\nschedule=\"@daily\"\ncommand=\"true\"\n",
        );
        assert!(msg.contains("job \"x\" name: is defined twice"), "{msg}");
    }

    #[test]
    fn upstreams_must_be_jobs_of_the_file_without_a_cycle() {
        let job = |name: &str, requires: &str| {
            format!(
                "[[job]]\nname=\"{name}\"\nschedule=\"@daily\"\ncommand=\"true\"\nrequires={requires}\n"
            )
        };
        let ok = parse_ok(&format!(
            "{}{}",
            job("load", "{ job = \"extract\", within = \"6h\" }"),
            "[[job]]\nname=\"extract\"\nschedule=\"@daily\"\ncommand=\"true\"\n"
        ));
        assert_eq!(
            ok.jobs[0].overrides.requires.as_ref().unwrap()[0].job,
            "extract"
        );
        let msg = parse_err(&format!(
            "{}{}{}[defaults]\nrequires = {{ job = \"a\", within = \"1h\" }}\n",
            job("a", "[{ job = \"b\", within = \"1h\" }]"),
            job("b", "{ job = \"a\", within = \"1h\" }"),
            job("c", "{ job = \"nope\", within = \"1h\" }"),
        ));
        assert!(
            msg.contains("job \"a\" requires/after: a cycle: a → b → a"),
            "{msg}"
        );
        assert!(
            msg.contains("job \"c\" requires: \"nope\" is not a job of this file"),
            "{msg}"
        );
        assert!(
            msg.contains("[defaults] requires: names a job's own upstreams"),
            "{msg}"
        );
    }

    #[test]
    fn policy_values_are_checked() {
        let msg = parse_err("[defaults]\nmisfire = \"sometimes\"\n");
        assert!(
            msg.contains("[defaults] misfire: \"sometimes\" must be skip, run_once or run_all"),
            "{msg}"
        );
        let msg = parse_err("[defaults]\nretries = -1\n");
        assert!(
            msg.contains("[defaults] retries: -1 must be 0-1000"),
            "{msg}"
        );
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact_url("postgres://u:secret@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(redact_url("sqlite:///x.db"), "sqlite:///x.db");
    }
}
