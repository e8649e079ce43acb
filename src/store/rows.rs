//! The shapes of what the store reads and writes: a `cron_table` row as a node sees it, the
//! history and node rows, and the values a claim, a start and a release carry.

use std::collections::BTreeMap;

use sqlx::Row;
use sqlx::any::AnyRow;

pub use crate::model::history::HistoryRow;
pub use crate::model::job::{Outcome, PreviousRun};
pub use crate::model::job_row::{JobRow, POLICY_COLUMNS, PoolWait};

/// Reads the columns of one row, never failing on a value of the wrong type: the first bad
/// value is kept as a message naming the column and the value, and the field gets its empty
/// value. A row written with SQL can hold anything SQLite accepts (`enabled = 'yes'`, a BLOB),
/// and one such row must never stop the others.
struct Lenient<'r> {
    row: &'r AnyRow,
    error: Option<String>,
    /// The text columns were read as bytes ([`super::dialect::job_columns_as_bytes`]).
    bytes: bool,
}

impl Lenient<'_> {
    fn fail(&mut self, col: &str, what: String) {
        if self.error.is_none() {
            self.error = Some(format!("column {col}: {what}"));
        }
    }

    /// What a value that failed to decode is, for the message.
    fn describe(&self, col: &str) -> String {
        if let Ok(Some(v)) = self.row.try_get::<Option<String>, _>(col) {
            return format!("\"{}\"", v.chars().take(60).collect::<String>());
        }
        if let Ok(Some(v)) = self.row.try_get::<Option<f64>, _>(col) {
            return v.to_string();
        }
        if let Ok(Some(v)) = self.row.try_get::<Option<Vec<u8>>, _>(col) {
            return format!("a BLOB of {} bytes", v.len());
        }
        "a value of an unexpected type".to_string()
    }

    /// Text, or an integer written where text was expected (kept as its digits). Read as
    /// bytes, text that is not UTF-8 is a bad value like any other.
    fn text(&mut self, col: &str) -> Option<String> {
        if self.bytes
            && let Ok(v) = self.row.try_get::<Option<Vec<u8>>, _>(col)
        {
            return match v.map(String::from_utf8).transpose() {
                Ok(text) => text,
                Err(e) => {
                    let what = format!("{} bytes that are not UTF-8", e.as_bytes().len());
                    self.fail(col, what);
                    None
                }
            };
        }
        if let Ok(v) = self.row.try_get::<Option<String>, _>(col) {
            return v;
        }
        if let Ok(v) = self.row.try_get::<Option<i64>, _>(col) {
            return v.map(|n| n.to_string());
        }
        let what = format!("{} is not text", self.describe(col));
        self.fail(col, what);
        None
    }

    fn int(&mut self, col: &str) -> Option<i64> {
        match self.row.try_get::<Option<i64>, _>(col) {
            Ok(v) => v,
            Err(_) => {
                let what = format!("{} is not a whole number", self.describe(col));
                self.fail(col, what);
                None
            }
        }
    }

    fn flag(&mut self, col: &str, default: bool) -> bool {
        match self.int(col) {
            Some(0) => false,
            Some(1) => true,
            None => default,
            Some(n) => {
                self.fail(col, format!("{n} is not 0 or 1"));
                default
            }
        }
    }
}

/// The text of `col`, read as text or as bytes ([`super::dialect::as_bytes`]): `Ok(None)` for
/// NULL, `Err` for bytes that are not UTF-8 or a value that is neither.
pub(crate) fn text_column(row: &AnyRow, col: &str) -> std::result::Result<Option<String>, ()> {
    if let Ok(v) = row.try_get::<Option<String>, _>(col) {
        return Ok(v);
    }
    match row.try_get::<Option<Vec<u8>>, _>(col) {
        Ok(v) => v.map(String::from_utf8).transpose().map_err(|_| ()),
        Err(_) => Err(()),
    }
}

/// A label (a name in the peek) read as text or as bytes, bytes that are not UTF-8 replaced.
pub(crate) fn text_lossy(row: &AnyRow, col: &str) -> Result<Option<String>, sqlx::Error> {
    match row.try_get::<Option<String>, _>(col) {
        Ok(v) => Ok(v),
        Err(_) => Ok(row
            .try_get::<Option<Vec<u8>>, _>(col)?
            .map(|b| String::from_utf8_lossy(&b).into_owned())),
    }
}

/// A row whose identity (`id`) cannot be read at all: it can be neither claimed safely nor
/// parked, only reported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cron_table row {id:?}: {message}")]
pub struct UnreadableRow {
    pub id: Option<i64>,
    pub message: String,
}

impl JobRow {
    /// Decodes one row (`bytes`: its text columns read as bytes). A bad value in any column but
    /// the row's identity is kept in [`JobRow::decode_error`] (the row is then parked with that
    /// message); only a row whose `id` cannot be read is an error.
    pub(crate) fn from_row(
        row: &AnyRow,
        bytes: bool,
    ) -> std::result::Result<JobRow, UnreadableRow> {
        let id: i64 = row.try_get("id").map_err(|e| UnreadableRow {
            id: None,
            message: e.to_string(),
        })?;
        let mut r = Lenient {
            row,
            error: None,
            bytes,
        };
        // SQLite keeps text a writer puts in `token`: such a row is parked like any other bad
        // value (the park is fenced by the row's id, before any claim; a claim's `token % 2^62 + 1`
        // makes it a number). Left alone, it waited for preparation forever, and every node
        // looked for it again at each poll.
        let token = r.int("token").unwrap_or(0);
        let mut policy = BTreeMap::new();
        for col in POLICY_COLUMNS {
            let v = match col {
                "max_catch_up" | "retries" | "rerun_lost" => r.int(col).map(|n| n.to_string()),
                _ => r.text(col),
            };
            policy.insert(col, v);
        }
        let name = r.text("name").unwrap_or_else(|| format!("#{id}"));
        Ok(JobRow {
            id,
            schedule: r.text("schedule").unwrap_or_default(),
            timezone: r.text("timezone"),
            command: r.text("command"),
            argv: r.text("argv"),
            env: r.text("env"),
            workdir: r.text("workdir"),
            enabled: r.flag("enabled", false),
            pool: r.text("pool"),
            run_user: r.text("run_user"),
            run_group: r.text("run_group"),
            env_file: r.text("env_file"),
            inherit_env: r.text("inherit_env"),
            limits: r.text("limits"),
            alerts: r.text("alerts"),
            placement: r.text("placement"),
            run_on: r.text("run_on"),
            template: r.text("template"),
            http: r.text("http"),
            signature: r.text("signature"),
            after: r.text("after_jobs"),
            upstream: r.text("upstream_run"),
            policy,
            source: r.text("source").unwrap_or_default(),
            next_exec: r.int("next_exec"),
            slot: r.int("slot"),
            attempt: r.int("attempt").unwrap_or(0),
            exec_by: r.text("exec_by"),
            prev_exec_by: r.text("prev_exec_by"),
            lease_until: r.int("lease_until"),
            token,
            run_now: r.flag("run_now", false),
            dirty: r.flag("dirty", false),
            last_status: r.text("last_status"),
            last_exit: r.int("last_exit"),
            last_start: r.int("last_start"),
            last_end: r.int("last_end"),
            last_node: r.text("last_node"),
            error: r.text("error"),
            claimed_at: r.int("claimed_at"),
            pool_wait: PoolWait::from_column(r.int("pool_wait").unwrap_or(0)),
            name,
            decode_error: r.error,
        })
    }
}

/// What one cheap look at the table found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peek {
    /// The database clock.
    pub now: i64,
    /// The earliest `next_exec` of an enabled row (a due time or a lease end).
    pub next_due: Option<i64>,
    /// Some row has no `next_exec` yet (inserted or changed with SQL).
    pub pending_prepare: bool,
    /// The name of the row with the earliest `next_exec` (for the status line).
    pub next_name: Option<String>,
    /// How many placement values exist (`cron_placements`): when it changes, the node reads
    /// them again to learn which it matches.
    pub placements: i64,
    /// This node is drained.
    pub drain: bool,
    /// How many host-local job templates (`run_on = 'every_node'`) exist.
    pub templates: i64,
    /// The earliest `next_try` of an event waiting for delivery (or a delivery's lease end).
    pub next_event: Option<i64>,
    /// Nodes alive by their heartbeat (see [`NodeRow::alive`]), when the peek was asked for it.
    pub alive: Option<i64>,
    /// MySQL: the id of the audit trail's newest row, which the heartbeat cannot return there
    /// (see `Store::node_seen`). `None` elsewhere.
    pub audit_mark: Option<i64>,
}

/// The result of a write fenced by a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    Done,
    /// Another node holds the row now (or it was deleted): nothing was written.
    Lost,
    /// A run start only: the run's record exists and was written under another claim token.
    Conflict,
}

impl Fenced {
    pub(crate) fn from_rows(affected: u64) -> Fenced {
        if affected == 1 {
            Fenced::Done
        } else {
            Fenced::Lost
        }
    }
}

/// Longest `message` stored with a run, in bytes.
pub const MESSAGE_MAX: usize = 16 * 1024;

/// How a claimed row is released.
#[derive(Debug, Clone)]
pub struct Release {
    pub slot: i64,
    pub attempts: u32,
    pub next_exec: i64,
    /// Clear `run_now` (this was the manual run).
    pub clear_run_now: bool,
    /// `last_status` etc.; `None` when the release did not follow a run.
    pub outcome: Option<RunResult>,
}

/// The end of one run, for `cron_table.last_*` and `cron_runs`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    pub outcome: Outcome,
    pub exit_code: Option<i64>,
    pub signal: Option<i64>,
    pub started: i64,
    pub output: String,
    pub message: Option<String>,
}

/// The identity of one run in `cron_runs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunKey {
    pub job: String,
    pub slot: i64,
    pub attempt: u32,
}

/// One row of `cron_nodes`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NodeRow {
    pub name: String,
    pub host: Option<String>,
    pub pid: Option<i64>,
    pub version: Option<String>,
    #[serde(serialize_with = "crate::model::json_time::opt_instant")]
    pub started: Option<i64>,
    #[serde(serialize_with = "crate::model::json_time::opt_instant")]
    pub last_seen: Option<i64>,
    #[serde(serialize_with = "crate::model::json_time::opt_instant")]
    pub stopped: Option<i64>,
    pub toml_jobs: Option<String>,
    /// JSON array of the node's `[node] tags`.
    pub tags: Option<String>,
    /// Drained with `sqlcron drain` (or SIGUSR2): claims nothing new.
    pub drain: bool,
    /// This node's clock minus the database's at its last heartbeat (ms).
    pub clock_offset: Option<i64>,
}

/// A node counts as alive while its heartbeat (every 5 s) is younger than this.
pub const NODE_ALIVE_WINDOW_MS: i64 = 3 * 5_000;

impl NodeRow {
    /// Whether the node runs and its heartbeat is recent at `now` (database clock, ms).
    pub fn alive(&self, now: i64) -> bool {
        self.stopped.is_none()
            && self
                .last_seen
                .is_some_and(|s| now - s < NODE_ALIVE_WINDOW_MS)
    }
}

/// What a TOML apply changed (or would change, with `dry_run`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ApplyReport {
    pub created: Vec<String>,
    pub updated: Vec<String>,
    pub removed: Vec<String>,
    /// TOML jobs whose row was changed outside the file (with SQL) and was given the file's
    /// definition again, with the columns that had drifted.
    pub restored: Vec<(String, String)>,
    /// TOML jobs whose name belongs to a job created with SQL: left alone.
    pub conflicts: Vec<String>,
    /// TOML jobs whose name MySQL and MariaDB take for that of another row (they compare names
    /// without case), with that row's name: left alone.
    pub twins: Vec<(String, String)>,
}

/// What a lease extension found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extended {
    /// Rows whose claim is no longer this node's.
    pub lost: Vec<i64>,
    /// Rows still this node's whose run someone asked to stop (their leases were extended).
    pub stopping: Vec<i64>,
}
