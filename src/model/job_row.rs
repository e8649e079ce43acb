//! A row of `cron_table` as a node reads it: plain data, every column as written (policy
//! columns as text), what a signature of it covers and what `explain` needs of it. The store
//! reads it (`store/rows.rs`); [`super::row_decode`] says what it means.

use std::collections::BTreeMap;

/// A row of `cron_table` as a node sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    pub id: i64,
    pub name: String,
    pub schedule: String,
    pub timezone: Option<String>,
    pub command: Option<String>,
    /// JSON array of strings.
    pub argv: Option<String>,
    /// JSON object of strings.
    pub env: Option<String>,
    pub workdir: Option<String>,
    pub enabled: bool,
    pub pool: Option<String>,
    /// The account the job runs as (`cron_table.run_user`, `run_group`).
    pub run_user: Option<String>,
    pub run_group: Option<String>,
    /// A file of `KEY=VALUE` lines read at each run.
    pub env_file: Option<String>,
    /// JSON array of the daemon's variables the job also gets.
    pub inherit_env: Option<String>,
    /// JSON object of resource limits.
    pub limits: Option<String>,
    /// JSON object of hooks, `alert_after` and `ping_url` (see `model/hooks.rs`).
    pub alerts: Option<String>,
    /// JSON object `{"tags": [...], "nodes": [...]}` (see `model/placement.rs`); `None`: any node.
    pub placement: Option<String>,
    /// `every_node` for a host-local job's template (never claimed itself).
    pub run_on: Option<String>,
    /// On a node's copy of a host-local job: the template's name.
    pub template: Option<String>,
    /// JSON object: an HTTP job's request (see `model/http_target.rs`), instead of a command.
    pub http: Option<String>,
    /// `ed25519v2:<generation>:<Base64>`: a signature of the row's name, generation and definition
    /// (see `model/signing.rs`).
    pub signature: Option<String>,
    /// `after`: a JSON array of upstreams (`model/chains.rs`).
    pub after: Option<String>,
    /// On a trigger row (`job#after-ID`): its upstream run, a JSON object (`model::chains::Upstream`).
    pub upstream: Option<String>,
    /// Policy columns as stored (NULL: the TOML default).
    pub policy: BTreeMap<&'static str, Option<String>>,
    pub source: String,
    pub next_exec: Option<i64>,
    pub slot: Option<i64>,
    pub attempt: i64,
    pub exec_by: Option<String>,
    pub prev_exec_by: Option<String>,
    pub lease_until: Option<i64>,
    pub token: i64,
    pub run_now: bool,
    pub dirty: bool,
    pub last_status: Option<String>,
    pub last_exit: Option<i64>,
    pub last_start: Option<i64>,
    pub last_end: Option<i64>,
    pub last_node: Option<String>,
    pub error: Option<String>,
    /// When the current claim was taken (database clock).
    pub claimed_at: Option<i64>,
    /// Whether the row waits for a place in its pool (`cron_table.pool_wait`). The wait does
    /// not make its slot missed.
    pub pool_wait: PoolWait,
    /// The first column whose value could not be read (`enabled = 'yes'`, a BLOB), with the
    /// value: such a row cannot run and is parked with this message.
    pub decode_error: Option<String>,
}

/// Policy columns of `cron_table`, in the order the TOML keys are documented.
pub const POLICY_COLUMNS: [&str; 14] = [
    "misfire",
    "starting_deadline",
    "max_catch_up",
    "retries",
    "retry_backoff",
    "retry_backoff_max",
    "timeout",
    "kill_grace",
    "jitter",
    "on_lease_lost",
    "rerun_lost",
    "overlap",
    "calendars",
    "requires",
];

/// Why a row waits for its pool, as stored in `cron_table.pool_wait` (0, 1, 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolWait {
    /// Not waiting.
    No,
    /// Waiting for a place to run its slot.
    Waiting,
    /// Waiting for a place to rerun the lost run of its `slot` / `attempt` (the rerun it owes
    /// survives the wait).
    OwesRerun,
}

impl PoolWait {
    pub fn from_column(v: i64) -> PoolWait {
        match v {
            0 => PoolWait::No,
            2 => PoolWait::OwesRerun,
            _ => PoolWait::Waiting,
        }
    }

    pub fn as_column(self) -> i64 {
        match self {
            PoolWait::No => 0,
            PoolWait::Waiting => 1,
            PoolWait::OwesRerun => 2,
        }
    }
}

impl JobRow {
    /// A row as a new job starts in the editor: named, enabled, every other column empty.
    pub fn blank(name: &str) -> JobRow {
        JobRow {
            id: 0,
            name: name.to_string(),
            schedule: String::new(),
            timezone: None,
            command: None,
            argv: None,
            env: None,
            workdir: None,
            enabled: true,
            pool: None,
            run_user: None,
            run_group: None,
            env_file: None,
            inherit_env: None,
            limits: None,
            alerts: None,
            placement: None,
            run_on: None,
            template: None,
            http: None,
            signature: None,
            after: None,
            upstream: None,
            policy: POLICY_COLUMNS.iter().map(|c| (*c, None)).collect(),
            source: "web".into(),
            next_exec: None,
            slot: None,
            attempt: 0,
            exec_by: None,
            prev_exec_by: None,
            lease_until: None,
            token: 0,
            run_now: false,
            dirty: false,
            last_status: None,
            last_exit: None,
            last_start: None,
            last_end: None,
            last_node: None,
            error: None,
            claimed_at: None,
            pool_wait: PoolWait::No,
            decode_error: None,
        }
    }

    /// What a signature of this row covers (see [`crate::model::signing`]).
    pub fn definition(&self) -> crate::model::signing::Definition {
        crate::model::signing::Definition::from_columns([
            ("alerts", self.alerts.clone()),
            ("argv", self.argv.clone()),
            ("command", self.command.clone()),
            ("env", self.env.clone()),
            ("env_file", self.env_file.clone()),
            ("http", self.http.clone()),
            ("inherit_env", self.inherit_env.clone()),
            ("limits", self.limits.clone()),
            ("placement", self.placement.clone()),
            ("run_group", self.run_group.clone()),
            ("run_on", self.run_on.clone()),
            ("run_user", self.run_user.clone()),
            ("workdir", self.workdir.clone()),
        ])
    }
}

impl JobRow {
    /// What `explain` needs of the row.
    pub fn explain_state(&self) -> crate::model::explain::RowState {
        crate::model::explain::RowState {
            enabled: self.enabled,
            slot: self.slot,
            next_exec: self.next_exec,
            exec_by: self.exec_by.clone(),
            error: self.error.clone().or(self.decode_error.clone()),
        }
    }
}
