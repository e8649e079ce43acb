//! How long history is kept (`[history]`), and the pure decisions of a pruning round: which
//! instant is too old, and which of the candidate rows may go.

use std::collections::HashMap;
use std::time::Duration;

/// Runs kept by age unless `[history] keep` says otherwise.
pub const KEEP_DEFAULT: Duration = Duration::from_secs(90 * 86_400);
/// Runs kept per job unless `[history] keep_runs` says otherwise.
pub const KEEP_RUNS_DEFAULT: u64 = 10_000;
/// Audit rows kept unless `[history] keep_audit` says otherwise.
pub const KEEP_AUDIT_DEFAULT: Duration = Duration::from_secs(365 * 86_400);
/// How often a node tries to take the pruning duty.
pub const PRUNE_INTERVAL_DEFAULT: Duration = Duration::from_secs(600);
/// Rows deleted per statement: small enough that no statement holds locks for long.
pub const BATCH: i64 = 500;

/// `[history]`: how much of `cron_runs` and `cron_audit` is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryConfig {
    /// Runs that ended longer ago than this go; `None`: no age limit (`keep = "forever"`).
    pub keep: Option<Duration>,
    /// Runs per job beyond the newest this many go; `None`: no count limit (`keep_runs = 0`).
    pub keep_runs: Option<u64>,
    /// Audit rows older than this go; `None`: kept forever.
    pub keep_audit: Option<Duration>,
    /// How often a node tries to take the pruning duty.
    pub prune_interval: Duration,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            keep: Some(KEEP_DEFAULT),
            keep_runs: Some(KEEP_RUNS_DEFAULT),
            keep_audit: Some(KEEP_AUDIT_DEFAULT),
            prune_interval: PRUNE_INTERVAL_DEFAULT,
        }
    }
}

/// Parses an age limit: a duration, or `"forever"` for none.
pub fn parse_keep(text: &str) -> Result<Option<Duration>, String> {
    if text.trim().eq_ignore_ascii_case("forever") {
        return Ok(None);
    }
    match crate::model::duration::parse_duration(text) {
        Ok(d) if d >= Duration::from_secs(60) => Ok(Some(d)),
        Ok(_) => Err(format!(
            "\"{text}\" is shorter than a minute; use e.g. \"90d\", or \"forever\""
        )),
        Err(e) => Err(format!("{e}, or \"forever\"")),
    }
}

/// The instant (database clock, ms) before which rows are too old at `now`.
pub fn cutoff(now: i64, keep: Option<Duration>) -> Option<i64> {
    keep.map(|k| now.saturating_sub(i64::try_from(k.as_millis()).unwrap_or(i64::MAX)))
}

/// A row that pruning may delete: its id, and for a run its job and slot.
pub type Candidate = (i64, Option<String>, Option<i64>);

/// The candidate rows that may be deleted: all but the runs of a claimed job's current slot
/// (`claimed`: each claimed job's slot). A node taking over an unreleased claim reads the
/// records of the slot the row serves; the job's runs of earlier slots are history like any
/// other, so a job claimed at every pruning round (a per-second job) still has them pruned.
pub fn deletable(candidates: &[Candidate], claimed: &HashMap<String, i64>) -> Vec<i64> {
    candidates
        .iter()
        .filter(|(_, job, slot)| match (job, slot) {
            (Some(j), Some(slot)) => claimed.get(j).is_none_or(|serving| slot < serving),
            (Some(j), None) => !claimed.contains_key(j),
            (None, _) => true,
        })
        .map(|(id, _, _)| *id)
        .collect()
}

/// What one pruning round removed, for the log and `cron_duties.last_result`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    pub runs_by_age: u64,
    pub runs_by_count: u64,
    pub audit: u64,
    pub events: u64,
    /// Done one-off jobs (`@at`) removed with their row.
    pub one_offs: u64,
    /// Placement values no row uses any more.
    pub placements: u64,
}

impl std::fmt::Display for Pruned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} runs by age, {} runs by count, {} audit rows, {} alert events, {} done one-off jobs, \
             {} unused placement values",
            self.runs_by_age,
            self.runs_by_count,
            self.audit,
            self.events,
            self.one_offs,
            self.placements
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_accepts_durations_and_forever_only() {
        assert_eq!(
            parse_keep("90d").unwrap(),
            Some(Duration::from_secs(90 * 86_400))
        );
        assert_eq!(parse_keep("Forever").unwrap(), None);
        assert!(
            parse_keep("10s")
                .unwrap_err()
                .contains("shorter than a minute")
        );
        assert!(parse_keep("soon").unwrap_err().contains("forever"));
    }

    #[test]
    fn cutoff_is_now_minus_keep() {
        assert_eq!(
            cutoff(1_000_000, Some(Duration::from_secs(60))),
            Some(940_000)
        );
        assert_eq!(cutoff(1_000_000, None), None);
        assert_eq!(
            cutoff(5, Some(Duration::from_secs(u64::MAX))),
            Some(5 - i64::MAX)
        );
    }

    #[test]
    fn the_runs_of_a_claimed_jobs_current_slot_stay() {
        let claimed: HashMap<String, i64> = [("busy".to_string(), 5_000)].into();
        let busy = Some("busy".to_string());
        let candidates = vec![
            (1, busy.clone(), Some(5_000)),
            (2, Some("idle".to_string()), Some(5_000)),
            (3, None, None),
            // An earlier slot of the claimed job: history like any other.
            (4, busy.clone(), Some(4_000)),
            // A run whose slot is not known: kept while its job is claimed.
            (5, busy, None),
        ];
        assert_eq!(deletable(&candidates, &claimed), vec![2, 3, 4]);
    }
}
