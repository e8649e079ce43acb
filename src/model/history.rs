//! A run as the history (`cron_runs`) records it: what `history`, `explain` and the read-back
//! after an outage look at. Plain data; the store reads it.

/// One row of `cron_runs`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HistoryRow {
    /// The record's id: later records have larger ids.
    pub id: i64,
    pub job: String,
    #[serde(serialize_with = "crate::model::json_time::instant")]
    pub slot: i64,
    pub attempt: i64,
    pub node: Option<String>,
    pub token: Option<i64>,
    #[serde(serialize_with = "crate::model::json_time::opt_instant")]
    pub started: Option<i64>,
    #[serde(serialize_with = "crate::model::json_time::opt_instant")]
    pub ended: Option<i64>,
    pub outcome: String,
    pub exit_code: Option<i64>,
    pub signal: Option<i64>,
    pub output: Option<String>,
    pub skipped_count: Option<i64>,
    #[serde(serialize_with = "crate::model::json_time::opt_instant")]
    pub skipped_last: Option<i64>,
    pub message: Option<String>,
    /// How long the run waited for the start rate after its claim (milliseconds).
    pub held_ms: Option<i64>,
}

/// A stretch of slots that were not run (missed, or kept out by a calendar), summarised in one
/// history row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skipped {
    pub count: u64,
    pub first: i64,
    pub last: i64,
}
