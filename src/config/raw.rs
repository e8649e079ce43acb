//! The configuration file as written: serde mirrors of the TOML tables, every field optional.
//! Defaults and checks come in `validate.rs`.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::model::hooks::AlertSettings;
pub use crate::model::policy_keys::RawPolicy;

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
    #[serde(default, rename = "calendar")]
    pub calendars: Vec<super::calendars::RawCalendar>,
    #[serde(default)]
    pub security: super::security::RawSecurity,
    #[serde(default)]
    pub web: super::web::RawWeb,
    #[serde(default)]
    pub cluster: super::cluster::RawCluster,
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
    pub live_output: Option<String>,
    pub output_tail: Option<i64>,
    pub output_log_lines: Option<i64>,
    pub output_log_bytes: Option<i64>,
    pub default_user: Option<String>,
    pub allowed_users: Option<Vec<String>>,
    pub allowed_groups: Option<Vec<String>>,
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
    /// A file holding the bearer token `/metrics` requires.
    pub token_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHistory {
    pub keep: Option<String>,
    pub keep_runs: Option<i64>,
    pub keep_audit: Option<String>,
    pub prune_interval: Option<String>,
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
    /// Upstreams whose finished runs each run this job once: `["extract"]` or
    /// `[{ job = "extract", on = "success", within = "1h" }]`.
    pub after: Option<serde_json::Value>,
    #[serde(flatten)]
    pub policy: RawPolicy,
}
