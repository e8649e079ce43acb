//! A run as the history (`cron_runs`) records it: what `history`, `explain` and the read-back
//! after an outage look at. Plain data; the store reads it.

/// One row of `cron_runs`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HistoryRow {
    pub job: String,
    pub slot: i64,
    pub attempt: i64,
    pub node: Option<String>,
    pub token: Option<i64>,
    pub started: Option<i64>,
    pub ended: Option<i64>,
    pub outcome: String,
    pub exit_code: Option<i64>,
    pub signal: Option<i64>,
    pub output: Option<String>,
    pub skipped_count: Option<i64>,
    pub skipped_last: Option<i64>,
    pub message: Option<String>,
}
