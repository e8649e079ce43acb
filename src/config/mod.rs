//! Configuration: TOML text → [`RawConfig`] (serde, mirrors the file) → [`Config`] (typed and
//! validated). Pure: reading the file and the environment happens in [`load`], everything else
//! works on strings so it can be tested without touching the disk.
//!
//! Validation reports every problem at once, each naming the file, the job and the key at fault.
//! Nothing after validation re-checks configuration.

pub mod secrets;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::model::alerts::AlertSettings;
use crate::model::database_url::{DatabaseUrl, Dialect};
use crate::model::job::{JobSpec, Misfire, OnLeaseLost, Overlap, Policy, PolicyOverrides};
use crate::schedule::{Schedule, parse_zone};

/// Where the configuration is read from when neither `--config` nor `$SQLCRON_CONFIG` is given.
pub const CONFIG_PATH_DEFAULT: &str = "/etc/sqlcron/sqlcron.toml";
/// The state directory outside systemd; under systemd `$STATE_DIRECTORY` wins.
pub const STATE_DIR_DEFAULT: &str = "/var/lib/sqlcron";

pub const POLL_INTERVAL_DEFAULT: Duration = Duration::from_secs(1);
pub const LEASE_DEFAULT: Duration = Duration::from_secs(10);
pub const MAX_PARALLEL_DEFAULT: usize = 16;
pub const SHUTDOWN_GRACE_DEFAULT: Duration = Duration::from_secs(30);
pub const OUTPUT_TAIL_DEFAULT: usize = 64 * 1024;
/// Lines of one run's output written to the log (journald or stderr) before the rest is only
/// counted.
pub const OUTPUT_LOG_LINES_DEFAULT: usize = 1000;
/// Bytes of one run's output written to the log before the rest is only counted.
pub const OUTPUT_LOG_BYTES_DEFAULT: usize = 256 * 1024;

/// The file as written. Every field is optional; defaults are applied in [`validate`].
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub database: RawDatabase,
    #[serde(default)]
    pub node: RawNode,
    #[serde(default)]
    pub daemon: RawDaemon,
    #[serde(default)]
    pub defaults: RawPolicy,
    #[serde(default)]
    pub pools: BTreeMap<String, i64>,
    #[serde(default)]
    pub log: RawLog,
    #[serde(default)]
    pub metrics: RawMetrics,
    #[serde(default)]
    pub history: RawHistory,
    #[serde(default)]
    pub alerts: RawAlerts,
    #[serde(default, rename = "job")]
    pub jobs: Vec<RawJob>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDatabase {
    pub url: Option<String>,
    /// A file holding the URL (kept out of this file).
    pub url_file: Option<String>,
    /// A file holding the password, put into the URL's user information.
    pub password_file: Option<String>,
    /// A replica that `status`, `history` and `explain` read from (never the daemon).
    pub read_url: Option<String>,
    /// Connections the daemon's pool may hold (default: half of `max_parallel`, 4 to 16).
    pub pool_size: Option<u32>,
    /// The PostgreSQL server itself when `url` is a transaction-mode pooler (PgBouncer): for
    /// migrations and LISTEN.
    pub direct_url: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNode {
    pub name: Option<String>,
    /// What this node offers, for jobs' `on = { tags = [...] }`.
    #[serde(default)]
    pub tags: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDaemon {
    pub poll_interval: Option<String>,
    pub lease: Option<String>,
    pub max_parallel: Option<i64>,
    pub shutdown_grace: Option<String>,
    pub output_tail: Option<i64>,
    pub output_log_lines: Option<i64>,
    pub output_log_bytes: Option<i64>,
    pub default_user: Option<String>,
    pub inherit_env: Option<Vec<String>>,
    pub wakeups: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    pub level: Option<String>,
    pub target: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    pub listen: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHistory {
    pub keep: Option<String>,
    pub keep_runs: Option<i64>,
    pub keep_audit: Option<String>,
    pub prune_interval: Option<String>,
}

/// Policy keys, shared by `[defaults]` and `[[job]]`.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    pub timezone: Option<String>,
    pub misfire: Option<String>,
    pub starting_deadline: Option<String>,
    pub max_catch_up: Option<i64>,
    pub retries: Option<i64>,
    pub retry_backoff: Option<String>,
    pub retry_backoff_max: Option<String>,
    pub timeout: Option<String>,
    pub kill_grace: Option<String>,
    pub jitter: Option<String>,
    pub on_lease_lost: Option<String>,
    pub rerun_lost: Option<bool>,
    pub overlap: Option<String>,
    /// Alert keys (see `alerts.rs`): a hook is a command, a table with `command` or `url`, or
    /// `false`.
    pub on_failure: Option<serde_json::Value>,
    pub on_success: Option<serde_json::Value>,
    pub on_missed: Option<serde_json::Value>,
    pub on_recovery: Option<serde_json::Value>,
    pub alert_after: Option<String>,
    pub ping_url: Option<String>,
}

impl RawPolicy {
    /// The alert keys as [`AlertSettings`]; the first bad key is reported.
    pub fn alert_settings(&self) -> Result<AlertSettings, (String, String)> {
        let mut m = serde_json::Map::new();
        for (k, v) in [
            ("on_failure", &self.on_failure),
            ("on_success", &self.on_success),
            ("on_missed", &self.on_missed),
            ("on_recovery", &self.on_recovery),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), v.clone());
            }
        }
        for (k, v) in [
            ("alert_after", &self.alert_after),
            ("ping_url", &self.ping_url),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), v.clone().into());
            }
        }
        AlertSettings::from_json(&serde_json::Value::Object(m)).map_err(|e| {
            match e.split_once(": ") {
                Some((k, m)) if !k.contains(' ') => (k.to_string(), m.to_string()),
                _ => ("alerts".to_string(), e),
            }
        })
    }
}

/// `[alerts]`: how hooks are delivered.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAlerts {
    pub timeout: Option<String>,
    pub give_up_after: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJob {
    pub name: Option<String>,
    pub schedule: Option<String>,
    pub command: Option<String>,
    pub argv: Option<Vec<String>>,
    /// An HTTP request instead of a process: `http = { url = "...", ... }`.
    pub http: Option<serde_json::Value>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub workdir: Option<String>,
    pub enabled: Option<bool>,
    pub pool: Option<String>,
    pub user: Option<String>,
    pub group: Option<String>,
    pub env_file: Option<String>,
    #[serde(default)]
    pub inherit_env: Vec<String>,
    pub limits: Option<serde_json::Value>,
    /// Which nodes may run it: `on = { tags = [...], nodes = [...] }`.
    pub on: Option<crate::model::placement::Placement>,
    /// `any` (one node per slot, the default) or `every_node` (each matching node, each slot).
    pub run_on: Option<String>,
    #[serde(flatten)]
    pub policy: RawPolicy,
}

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
    /// `[history]`: how long runs and audit rows are kept.
    pub history: crate::model::retention::HistoryConfig,
    /// The alert keys of `[defaults]`: every job's unless it says otherwise.
    pub alert_defaults: AlertSettings,
    /// `[alerts]`: how hooks are delivered.
    pub delivery: crate::model::alerts::DeliveryConfig,
    /// `[[job]]` tables, in file order.
    pub jobs: Vec<JobSpec>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DaemonConfig {
    /// The longest a node sleeps between two looks at the table.
    pub poll_interval: Duration,
    /// Claim lease; extended every third of it while the job's process lives.
    pub lease: Duration,
    /// Jobs this node runs at once.
    pub max_parallel: usize,
    /// How long running jobs may finish after SIGTERM before they are stopped.
    pub shutdown_grace: Duration,
    /// Bytes of a run's output kept in the history.
    pub output_tail: usize,
    /// Lines of a run's output written to the log; then one line says how much was left out.
    pub output_log_lines: usize,
    /// Bytes of a run's output written to the log (same rule).
    pub output_log_bytes: usize,
    /// The account jobs run as when they name none (required for a daemon running as root).
    pub default_user: Option<String>,
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
            max_parallel: MAX_PARALLEL_DEFAULT,
            shutdown_grace: SHUTDOWN_GRACE_DEFAULT,
            output_tail: OUTPUT_TAIL_DEFAULT,
            output_log_lines: OUTPUT_LOG_LINES_DEFAULT,
            output_log_bytes: OUTPUT_LOG_BYTES_DEFAULT,
            default_user: None,
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
    Ok(config)
}

/// Parses and validates TOML text.
pub fn parse(text: &str, path: &Path, env: &Environment) -> Result<Config, ConfigError> {
    let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError {
        path: path.to_path_buf(),
        problems: vec![Problem {
            location: toml_location(text, &e),
            message: e.message().to_string(),
        }],
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

use crate::model::duration::parse_duration;

struct Collector {
    problems: Vec<Problem>,
}

impl Collector {
    fn push(&mut self, location: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            location: location.into(),
            message: message.into(),
        });
    }

    fn duration(&mut self, location: &str, value: &Option<String>, default: Duration) -> Duration {
        match value {
            None => default,
            Some(text) => parse_duration(text).unwrap_or_else(|m| {
                self.push(location, m);
                default
            }),
        }
    }
}

/// Turns the raw file into a validated [`Config`], reporting every problem.
pub fn validate(raw: RawConfig, path: &Path, env: &Environment) -> Result<Config, ConfigError> {
    let mut c = Collector { problems: vec![] };

    let database_secrets = crate::config::secrets::DatabaseSecrets::from_raw(
        &raw.database,
        env,
        path,
        &mut |location, message| c.push(location, message),
    );
    let url_from_file = env.database_url.is_none() && database_secrets.url_file.is_some();
    let database_url = env
        .database_url
        .clone()
        .or(raw.database.url.clone())
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

    let database_read_url = match raw.database.read_url.as_deref().map(DatabaseUrl::parse) {
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

    let database_direct_url = match raw.database.direct_url.as_deref().map(DatabaseUrl::parse) {
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

    let node_name = raw
        .node
        .name
        .clone()
        .or(env.hostname.clone())
        .unwrap_or_else(|| "localhost".into());
    let name_max = name_max_chars(database_url.dialect());
    if node_name.trim().is_empty() || node_name.chars().count() > name_max {
        c.push(
            "[node] name",
            format!(
                "\"{node_name}\" must be 1-{name_max} characters{}",
                name_limit_reason(name_max)
            ),
        );
    }

    let mut node_tags = raw.node.tags.clone();
    node_tags.sort();
    node_tags.dedup();
    if let Some(t) = node_tags
        .iter()
        .find(|t| t.trim().is_empty() || t.contains(char::is_whitespace))
    {
        c.push("[node] tags", format!("\"{t}\" must be a non-empty word"));
    }

    let d = &raw.daemon;
    let daemon = DaemonConfig {
        poll_interval: c.duration(
            "[daemon] poll_interval",
            &d.poll_interval,
            POLL_INTERVAL_DEFAULT,
        ),
        lease: c.duration("[daemon] lease", &d.lease, LEASE_DEFAULT),
        max_parallel: match d.max_parallel {
            None => MAX_PARALLEL_DEFAULT,
            Some(n) if (1..=10_000).contains(&n) => n as usize,
            Some(n) => {
                c.push("[daemon] max_parallel", format!("{n} must be 1-10000"));
                MAX_PARALLEL_DEFAULT
            }
        },
        shutdown_grace: c.duration(
            "[daemon] shutdown_grace",
            &d.shutdown_grace,
            SHUTDOWN_GRACE_DEFAULT,
        ),
        output_tail: match d.output_tail {
            None => OUTPUT_TAIL_DEFAULT,
            Some(n) if (0..=16 * 1024 * 1024).contains(&n) => n as usize,
            Some(n) => {
                c.push(
                    "[daemon] output_tail",
                    format!("{n} must be 0-16777216 bytes"),
                );
                OUTPUT_TAIL_DEFAULT
            }
        },
        output_log_lines: match d.output_log_lines {
            None => OUTPUT_LOG_LINES_DEFAULT,
            Some(n) if (0..=10_000_000).contains(&n) => n as usize,
            Some(n) => {
                c.push(
                    "[daemon] output_log_lines",
                    format!("{n} must be 0-10000000 lines"),
                );
                OUTPUT_LOG_LINES_DEFAULT
            }
        },
        output_log_bytes: match d.output_log_bytes {
            None => OUTPUT_LOG_BYTES_DEFAULT,
            Some(n) if (0..=1024 * 1024 * 1024).contains(&n) => n as usize,
            Some(n) => {
                c.push(
                    "[daemon] output_log_bytes",
                    format!("{n} must be 0-1073741824 bytes"),
                );
                OUTPUT_LOG_BYTES_DEFAULT
            }
        },
        default_user: d.default_user.clone(),
        inherit_env: d.inherit_env.clone().unwrap_or_default(),
        wakeups: d.wakeups.unwrap_or(true),
    };

    let database_pool_size = match raw.database.pool_size {
        Some(n) if !(1..=200).contains(&n) => {
            c.push("[database] pool_size", format!("{n} must be 1-200"));
            1
        }
        Some(n) => n,
        None => default_pool_size(daemon.max_parallel),
    };
    for name in &daemon.inherit_env {
        if let Err(m) = check_inherit_name(name) {
            c.push("[daemon] inherit_env", m);
        }
    }
    if daemon.poll_interval < Duration::from_millis(10) {
        c.push("[daemon] poll_interval", "must be at least 10ms");
    }
    if daemon.lease < Duration::from_secs(1) {
        c.push("[daemon] lease", "must be at least 1s");
    } else if daemon.lease <= daemon.poll_interval {
        c.push(
            "[daemon] lease",
            format!(
                "{} must be longer than poll_interval ({})",
                humantime::format_duration(daemon.lease),
                humantime::format_duration(daemon.poll_interval)
            ),
        );
    }

    let defaults = match PolicyOverrides::from_raw(&raw.defaults) {
        Ok(o) => o.apply_to(&Policy::default()),
        Err((key, message)) => {
            c.push(format!("[defaults] {key}"), message);
            Policy::default()
        }
    };

    let mut pools = BTreeMap::new();
    for (name, size) in &raw.pools {
        if (1..=100_000).contains(size) {
            pools.insert(name.clone(), *size as u32);
        } else {
            c.push(
                format!("[pools] {name}"),
                format!("{size} must be 1-100000"),
            );
        }
    }

    let level = raw.log.level.clone().unwrap_or_else(|| "info".into());
    if tracing_subscriber::EnvFilter::try_new(&level).is_err() {
        c.push(
            "[log] level",
            format!("\"{level}\" is not a level or filter (e.g. \"info\", \"sqlcron=debug\")"),
        );
    }
    let target = raw.log.target.clone().unwrap_or_else(|| "auto".into());
    if !["auto", "journald", "stderr"].contains(&target.as_str()) {
        c.push(
            "[log] target",
            format!("\"{target}\" must be auto, journald or stderr"),
        );
    }

    let metrics_listen = raw.metrics.listen.as_deref().and_then(|l| match l.parse() {
        Ok(addr) => Some(addr),
        Err(_) => {
            c.push(
                "[metrics] listen",
                format!("\"{l}\" is not an address and port (e.g. \"127.0.0.1:9464\")"),
            );
            None
        }
    });

    let history = history_config(&raw.history, &mut c);
    let alert_defaults = raw
        .defaults
        .alert_settings()
        .unwrap_or_else(|(key, message)| {
            c.push(format!("[defaults] {key}"), message);
            AlertSettings::default()
        });
    let delivery_default = crate::model::alerts::DeliveryConfig::default();
    let delivery = crate::model::alerts::DeliveryConfig {
        timeout: c.duration(
            "[alerts] timeout",
            &raw.alerts.timeout,
            delivery_default.timeout,
        ),
        give_up_after: c.duration(
            "[alerts] give_up_after",
            &raw.alerts.give_up_after,
            delivery_default.give_up_after,
        ),
    };

    let mut jobs = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, job) in raw.jobs.iter().enumerate() {
        let label = match &job.name {
            Some(n) => format!("job \"{n}\""),
            None => format!("job #{}", i + 1),
        };
        match job_spec(job, &pools) {
            Ok(spec) => {
                if !seen.insert(spec.name.clone()) {
                    c.push(format!("{label} name"), "is defined twice");
                }
                if spec.name.chars().count() > name_max {
                    c.push(
                        format!("{label} name"),
                        format!(
                            "\"{}\" must be 1-{name_max} characters{}",
                            spec.name,
                            name_limit_reason(name_max)
                        ),
                    );
                }
                jobs.push(spec);
            }
            Err(problems) => {
                for (key, message) in problems {
                    c.push(format!("{label} {key}"), message);
                }
            }
        }
    }

    if !c.problems.is_empty() {
        return Err(ConfigError {
            path: path.to_path_buf(),
            problems: c.problems,
        });
    }
    Ok(Config {
        path: path.to_path_buf(),
        database_url,
        database_secrets,
        database_read_url,
        database_pool_size,
        database_direct_url,
        node_name,
        node_tags,
        daemon,
        defaults,
        pools,
        log: LogConfig { level, target },
        metrics_listen,
        history,
        alert_defaults,
        delivery,
        jobs,
    })
}

fn history_config(raw: &RawHistory, c: &mut Collector) -> crate::model::retention::HistoryConfig {
    use crate::model::retention::{HistoryConfig, parse_keep};
    let defaults = HistoryConfig::default();
    let mut keep = |key: &str, value: &Option<String>, default| match value {
        None => default,
        Some(text) => parse_keep(text).unwrap_or_else(|m| {
            c.push(format!("[history] {key}"), m);
            default
        }),
    };
    let keep_runs_age = keep("keep", &raw.keep, defaults.keep);
    let keep_audit = keep("keep_audit", &raw.keep_audit, defaults.keep_audit);
    let keep_runs = match raw.keep_runs {
        None => defaults.keep_runs,
        Some(0) => None,
        Some(n) if n > 0 => Some(n as u64),
        Some(n) => {
            c.push(
                "[history] keep_runs",
                format!("{n} must be a positive number of runs, or 0 for no limit"),
            );
            defaults.keep_runs
        }
    };
    let prune_interval = c.duration(
        "[history] prune_interval",
        &raw.prune_interval,
        defaults.prune_interval,
    );
    if prune_interval < std::time::Duration::from_secs(1) {
        c.push("[history] prune_interval", "must be at least 1s");
    }
    HistoryConfig {
        keep: keep_runs_age,
        keep_runs,
        keep_audit,
        prune_interval,
    }
}

/// Longest job or node name the database in `url` stores: 191 characters on MySQL/MariaDB
/// (`VARCHAR(191)`, the most a utf8mb4 unique index allows), else 200.
fn name_max_chars(dialect: Dialect) -> usize {
    if dialect == Dialect::Mysql { 191 } else { 200 }
}

fn name_limit_reason(max: usize) -> &'static str {
    if max == 191 { " on MySQL/MariaDB" } else { "" }
}

/// Validates one `[[job]]` table; errors are (key, message) pairs.
fn job_spec(job: &RawJob, pools: &BTreeMap<String, u32>) -> Result<JobSpec, Vec<(String, String)>> {
    let mut problems = Vec::new();
    let name = match &job.name {
        Some(n) if !n.trim().is_empty() && n.chars().count() <= 200 => n.clone(),
        Some(n) => {
            problems.push(("name".into(), format!("\"{n}\" must be 1-200 characters")));
            String::new()
        }
        None => {
            problems.push(("name".into(), "is missing".into()));
            String::new()
        }
    };
    let schedule = match &job.schedule {
        Some(s) => {
            // The zone does not change whether a schedule parses; it is checked on its own.
            if let Err(e) = Schedule::parse_for(s, "UTC", Some(&name)) {
                problems.push(("schedule".into(), e.to_string()));
            }
            s.clone()
        }
        None => {
            problems.push(("schedule".into(), "is missing".into()));
            String::new()
        }
    };
    let http = match &job.http {
        None => None,
        Some(v) => match crate::model::http_target::HttpTarget::from_json(v) {
            Ok(t) => Some(t),
            Err(m) => {
                problems.push(("http".into(), m));
                None
            }
        },
    };
    match (&job.command, &job.argv) {
        (None, None) if job.http.is_some() => {}
        _ if job.http.is_some() => {
            problems.push(("http".into(), "give one of command, argv or http".into()))
        }
        (None, None) => {
            problems.push(("command".into(), "is missing (or give argv or http)".into()))
        }
        (Some(_), Some(_)) => problems.push((
            "command".into(),
            "give either command or argv, not both".into(),
        )),
        (Some(cmd), None) if cmd.trim().is_empty() => {
            problems.push(("command".into(), "is empty".into()))
        }
        (None, Some(argv)) if argv.is_empty() || argv[0].is_empty() => {
            problems.push(("argv".into(), "must name a program first".into()))
        }
        _ => {}
    }
    if let Some(pool) = &job.pool
        && !pools.contains_key(pool)
    {
        problems.push((
            "pool".into(),
            format!("\"{pool}\" is not defined under [pools]"),
        ));
    }
    let overrides = match PolicyOverrides::from_raw(&job.policy) {
        Ok(o) => o,
        Err((key, message)) => {
            problems.push((key, message));
            PolicyOverrides::default()
        }
    };
    let alerts = job
        .policy
        .alert_settings()
        .unwrap_or_else(|(key, message)| {
            problems.push((key, message));
            AlertSettings::default()
        });
    let limits = match &job.limits {
        None => crate::model::job::Limits::default(),
        Some(v) => crate::model::job::Limits::from_json(v).unwrap_or_else(|m| {
            problems.push(("limits".into(), m));
            crate::model::job::Limits::default()
        }),
    };
    for name in &job.inherit_env {
        if let Err(m) = check_inherit_name(name) {
            problems.push(("inherit_env".into(), m));
        }
    }
    for (key, value) in [("user", &job.user), ("group", &job.group)] {
        if value.as_ref().is_some_and(|v| v.trim().is_empty()) {
            problems.push((key.into(), "is empty".into()));
        }
    }
    if job.group.is_some() && job.user.is_none() {
        problems.push(("group".into(), "needs user".into()));
    }
    if let Some(f) = &job.env_file
        && !Path::new(f).is_absolute()
    {
        problems.push((
            "env_file".into(),
            format!("\"{f}\" must be an absolute path"),
        ));
    }
    if let Some(Err(m)) = job
        .on
        .as_ref()
        .map(crate::model::placement::Placement::validate)
    {
        problems.push(("on".into(), m));
    }
    let every_node = match job.run_on.as_deref() {
        None | Some("any") => false,
        Some("every_node") => true,
        Some(other) => {
            problems.push((
                "run_on".into(),
                format!("\"{other}\" must be any or every_node"),
            ));
            false
        }
    };
    if every_node && name.contains('@') {
        problems.push((
            "name".into(),
            "a job with run_on = \"every_node\" may not contain @ (its copies are named job@node)"
                .into(),
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(JobSpec {
        name,
        schedule,
        timezone: job.policy.timezone.clone(),
        command: job.command.clone(),
        argv: job.argv.clone(),
        http,
        env: job.env.clone(),
        workdir: job.workdir.clone(),
        enabled: job.enabled.unwrap_or(true),
        pool: job.pool.clone(),
        overrides,
        user: job.user.clone(),
        group: job.group.clone(),
        env_file: job.env_file.clone(),
        inherit_env: job.inherit_env.clone(),
        limits,
        alerts,
        placement: job.on.clone(),
        every_node,
    })
}

/// A name in `inherit_env`: never one of the variables a job must not see.
fn check_inherit_name(name: &str) -> Result<(), String> {
    if crate::model::job::SECRET_VARS.contains(&name) {
        Err(format!("\"{name}\" is never passed to jobs"))
    } else if name.is_empty() || name.contains('=') {
        Err(format!("\"{name}\" is not a variable name"))
    } else {
        Ok(())
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

impl PolicyOverrides {
    /// Parses the policy keys of `[defaults]` or a `[[job]]`; the first bad key is reported.
    pub fn from_raw(raw: &RawPolicy) -> Result<PolicyOverrides, (String, String)> {
        let dur = |key: &str, v: &Option<String>| -> Result<Option<Duration>, (String, String)> {
            v.as_ref()
                .map(|t| parse_duration(t).map_err(|m| (key.to_string(), m)))
                .transpose()
        };
        let count =
            |key: &str, v: Option<i64>, max: i64| -> Result<Option<u32>, (String, String)> {
                match v {
                    None => Ok(None),
                    Some(n) if (0..=max).contains(&n) => Ok(Some(n as u32)),
                    Some(n) => Err((key.to_string(), format!("{n} must be 0-{max}"))),
                }
            };
        if let Some(zone) = &raw.timezone {
            parse_zone(zone).map_err(|e| ("timezone".to_string(), e.to_string()))?;
        }
        Ok(PolicyOverrides {
            timezone: raw.timezone.clone(),
            misfire: raw
                .misfire
                .as_deref()
                .map(|m| Misfire::parse(m).map_err(|e| ("misfire".to_string(), e)))
                .transpose()?,
            starting_deadline: dur("starting_deadline", &raw.starting_deadline)?,
            max_catch_up: count("max_catch_up", raw.max_catch_up, 100_000)?,
            retries: count("retries", raw.retries, 1000)?,
            retry_backoff: dur("retry_backoff", &raw.retry_backoff)?,
            retry_backoff_max: dur("retry_backoff_max", &raw.retry_backoff_max)?,
            timeout: dur("timeout", &raw.timeout)?,
            kill_grace: dur("kill_grace", &raw.kill_grace)?,
            jitter: dur("jitter", &raw.jitter)?,
            on_lease_lost: raw
                .on_lease_lost
                .as_deref()
                .map(|m| OnLeaseLost::parse(m).map_err(|e| ("on_lease_lost".to_string(), e)))
                .transpose()?,
            rerun_lost: raw.rerun_lost,
            overlap: raw
                .overlap
                .as_deref()
                .map(|m| Overlap::parse(m).map_err(|e| ("overlap".to_string(), e)))
                .transpose()?,
        })
    }
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
        assert!(msg.contains("unknown field `poll_intervall`"), "{msg}");
    }

    #[test]
    fn lease_must_exceed_poll_interval_and_pools_must_exist() {
        let msg = parse_err("[daemon]\npoll_interval = \"5s\"\nlease = \"5s\"\n");
        assert!(
            msg.contains("[daemon] lease: 5s must be longer than poll_interval (5s)"),
            "{msg}"
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
