//! The runs this node recorded lately, checked again after an error that may mean a failover
//! (a broken connection, a server that took no writes), before the node claims again.
//!
//! A failover to an asynchronously replicated standby can lose the last commits the old primary
//! acknowledged: a run's record among them, and with it the claim's release, so the slot may run
//! again. sqlcron cannot prevent that (use synchronous replication, docs/databases.md), but it
//! does not let it pass silently: after such an error the node reads back the runs it recorded
//! from [`LOOK_BEFORE_OUTAGE`] before it on and reports each one the database no longer holds,
//! or holds from another claim or node.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::{HistoryRow, RunKey, StoreError};

/// How long a recorded run is remembered: longer than any outage a failover takes.
pub const KEEP: Duration = Duration::from_secs(600);
/// After an outage, the runs recorded this long before it began are read back (replication
/// lag of an asynchronous standby is normally far shorter).
pub const LOOK_BEFORE_OUTAGE: Duration = Duration::from_secs(60);
/// At most this many are remembered (the newest).
pub const MAX: usize = 2000;

/// One run this node recorded as ended, with its claim token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub key: RunKey,
    pub token: i64,
}

#[derive(Default)]
pub struct RecentRuns {
    /// When each was recorded, the run, and whether it was reported lost already.
    runs: Mutex<VecDeque<(Instant, Recorded, bool)>>,
}

impl RecentRuns {
    /// Remembers a run whose end was written (`now`: when).
    pub fn remember(&self, run: Recorded, now: Instant) {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.push_back((now, run, false));
        while runs.len() > MAX || runs.front().is_some_and(|(t, _, _)| now - *t > KEEP) {
            runs.pop_front();
        }
    }

    /// The runs remembered that were recorded at `since` or later and not yet reported lost,
    /// oldest first.
    pub fn recorded_since(&self, since: Instant) -> Vec<Recorded> {
        let runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.iter()
            .filter(|(t, _, reported)| *t >= since && !reported)
            .map(|(_, r, _)| r.clone())
            .collect()
    }

    /// Marks `run` as reported lost: later read-backs (another loop's error after the same
    /// failover) neither check nor report it again.
    pub fn reported(&self, run: &Recorded) {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        for (_, r, reported) in runs.iter_mut() {
            if r == run {
                *reported = true;
            }
        }
    }
}

/// What `records` (a job's history) hold of a run node `node` recorded: `None` when it is
/// intact (a record of this slot and attempt by this node and token, with an end), else what
/// is wrong. The node counts:
/// a server that lost commits also hands out their claim tokens again, so another node's rerun
/// of a lost slot may carry the same token.
pub fn lost(run: &Recorded, node: &str, records: &[HistoryRow]) -> Option<String> {
    let attempt = records
        .iter()
        .filter(|r| r.slot == run.key.slot && r.attempt == i64::from(run.key.attempt))
        .collect::<Vec<_>>();
    let ours = |r: &HistoryRow| r.token == Some(run.token) && r.node.as_deref() == Some(node);
    if attempt.iter().any(|r| ours(r) && r.ended.is_some()) {
        return None;
    }
    Some(match attempt.first() {
        None => "its record is missing".into(),
        Some(r) if ours(r) => "its record has lost its end".into(),
        Some(r) if r.token == Some(run.token) => format!(
            "the record is now another node's ({})",
            r.node.as_deref().unwrap_or("none")
        ),
        Some(r) => format!(
            "the record is now another claim's (token {})",
            r.token.map_or("none".into(), |t| t.to_string())
        ),
    })
}

/// The event that records a run the database lost (kind `lost_record`, no hook: the metric
/// `sqlcron_lost_run_records_total` is what alerts). Its key names the run and the token, so
/// read-backs that find it again make one event.
pub fn lost_event(run: &Recorded, node: &str, why: &str) -> crate::store::NewEvent {
    let slot = super::fmt_ms(run.key.slot);
    crate::store::NewEvent {
        // Hashed: a job's and a node's names may each be as long as MySQL's dedupe column.
        dedupe: {
            use sha2::Digest;
            let key = format!(
                "{}\n{}\n{}\n{}\n{node}",
                run.key.job, run.key.slot, run.key.attempt, run.token
            );
            let digest = sha2::Sha256::digest(key.as_bytes());
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            format!("lost_record:{hex}")
        },
        job: run.key.job.clone(),
        kind: "lost_record".into(),
        run_id: None,
        hook: String::new(),
        payload: serde_json::json!({
            "event": "lost_record",
            "job": run.key.job,
            "slot": slot,
            "attempt": run.key.attempt,
            "token": run.token,
            "node": node,
            "why": why,
        })
        .to_string(),
    }
}

impl super::Daemon {
    /// One pass of the poll loop ([`super::Daemon::tick`]), after the read-back an error that
    /// may mean a failover asks for. A broken connection or a server that took no writes, met
    /// by any loop (a pass, a run's release or a batch of them, the lease extension, the
    /// heartbeat), may have been a failover, even one so quick that no pass failed: the runs
    /// recorded before it are read back before this node claims again (a slot the new primary
    /// lost is then claimed anew, and its new record could pass for the lost one). A deadlock
    /// or a timed-out statement is no failover and asks for nothing. The time of that error is
    /// kept until a read-back and the pass after it both went through: a server that fails
    /// again (read-only still, or gone) may not be the one that serves in the end.
    pub(super) async fn pass_after_read_back(
        &self,
        tasks: &mut tokio::task::JoinSet<()>,
    ) -> Result<super::TickReport, StoreError> {
        let metrics = &self.shared.metrics;
        let lost_since = metrics.take_connection_lost();
        let read_back = match lost_since {
            Some(since) => self.shared.check_recorded_runs(since).await,
            None => Ok(()),
        };
        let passed = match read_back {
            Ok(()) => self.tick(tasks).await,
            Err(e) => Err(e),
        };
        if let (Some(since), Err(e)) = (lost_since, &passed)
            && matches!(e.kind(), "unreachable" | "read-only")
        {
            metrics.keep_connection_lost(since);
        }
        passed
    }
}

impl super::Shared {
    /// After an error that may have been a failover, met at `outage_began`: reads back the runs
    /// this node recorded shortly before it and since, and reports each the database lost.
    /// One read per job. A broken connection or a read-only answer is returned (the read-back
    /// is then due again); any other error leaves that job's runs unchecked.
    pub(super) async fn check_recorded_runs(
        &self,
        outage_began: Instant,
    ) -> Result<(), StoreError> {
        let since = outage_began
            .checked_sub(LOOK_BEFORE_OUTAGE)
            .unwrap_or(outage_began);
        let runs = self.recent_runs.recorded_since(since);
        // One read per job, over the slots of its runs (a job run every second in the minute
        // before the outage is one read, not sixty).
        let mut by_job: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
        for run in &runs {
            let span = by_job
                .entry(run.key.job.as_str())
                .or_insert((run.key.slot, run.key.slot));
            span.0 = span.0.min(run.key.slot);
            span.1 = span.1.max(run.key.slot);
        }
        let mut history: BTreeMap<&str, Vec<HistoryRow>> = BTreeMap::new();
        for (job, (from, to)) in by_job {
            match self.store.runs_between(job, from, to).await {
                Ok(records) => {
                    history.insert(job, records);
                }
                // The server is gone again, or still takes no writes: the read-back is due
                // again before the next claim.
                Err(e) if matches!(e.kind(), "unreachable" | "read-only") => {
                    tracing::warn!(error = %e, "could not read back the runs recorded before the outage; trying again");
                    return Err(e);
                }
                // Any other error would come back every time: this job's runs go unchecked,
                // and claims go on.
                Err(e) => {
                    tracing::error!(job, error = %e, kind = e.kind(), "could not read back this job's runs recorded before the outage; they are not checked");
                }
            }
        }
        let lost_runs: Vec<(&Recorded, String)> = runs
            .iter()
            .filter_map(|run| {
                let records = history.get(run.key.job.as_str())?;
                lost(run, &self.node, records).map(|why| (run, why))
            })
            .collect();
        // Each is recorded as an event (`sqlcron events`), logged and counted, then marked so
        // that a later read-back does not report it again. A write the server refuses again
        // makes the read-back due again, for the runs not yet reported.
        let lost_count = lost_runs.len() as u64;
        for (run, why) in &lost_runs {
            match self
                .store
                .event_create(&lost_event(run, &self.node, why))
                .await
            {
                Ok(_) => {}
                Err(e) if matches!(e.kind(), "unreachable" | "read-only") => return Err(e),
                Err(e) => {
                    tracing::error!(job = %run.key.job, error = %e, "could not record the lost run as an event");
                }
            }
            tracing::error!(
                job = %run.key.job,
                slot = %super::fmt_ms(run.key.slot),
                attempt = run.key.attempt,
                token = run.token,
                why = %why,
                "a run this node recorded is not in the database after the outage: its last \
                 commits were lost (a failover to an asynchronous standby?); the slot may run again"
            );
            self.metrics.lost_records(1);
            self.recent_runs.reported(run);
        }
        if lost_count > 0 {
            tracing::warn!(
                checked = runs.len(),
                lost = lost_count,
                "runs recorded before the outage read back: some were lost"
            );
        } else if !runs.is_empty() {
            tracing::debug!(
                checked = runs.len(),
                "the runs recorded before the outage are all in the database"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(attempt: u32, token: i64) -> Recorded {
        Recorded {
            key: RunKey {
                job: "j".into(),
                slot: 1000,
                attempt,
            },
            token,
        }
    }

    fn record(attempt: i64, token: i64, ended: bool) -> HistoryRow {
        HistoryRow {
            id: token,
            job: "j".into(),
            slot: 1000,
            attempt,
            node: Some("a".into()),
            token: Some(token),
            started: Some(900),
            ended: ended.then_some(1000),
            outcome: if ended { "ok" } else { "running" }.into(),
            exit_code: None,
            signal: None,
            output: None,
            skipped_count: None,
            skipped_last: None,
            message: None,
            held_ms: None,
        }
    }

    #[test]
    fn a_run_is_lost_when_its_record_or_its_end_is_missing_or_another_claims() {
        assert_eq!(lost(&run(1, 7), "a", &[record(1, 7, true)]), None);
        assert_eq!(
            lost(&run(1, 7), "a", &[]).as_deref(),
            Some("its record is missing")
        );
        assert_eq!(
            lost(&run(1, 7), "a", &[record(2, 7, true)]).as_deref(),
            Some("its record is missing")
        );
        assert_eq!(
            lost(&run(1, 7), "a", &[record(1, 7, false)]).as_deref(),
            Some("its record has lost its end")
        );
        assert!(
            lost(&run(1, 7), "a", &[record(1, 9, true)])
                .unwrap()
                .contains("token 9")
        );
        // Another node's rerun of the lost slot, under the token the server handed out again.
        assert_eq!(
            lost(&run(1, 7), "b", &[record(1, 7, true)]).as_deref(),
            Some("the record is now another node's (a)")
        );
    }

    #[test]
    fn runs_are_forgotten_after_keep_and_beyond_max() {
        let recent = RecentRuns::default();
        let t0 = Instant::now();
        recent.remember(run(1, 1), t0);
        recent.remember(run(1, 2), t0 + KEEP);
        assert_eq!(recent.recorded_since(t0).len(), 2);
        assert_eq!(recent.recorded_since(t0 + Duration::from_secs(1)).len(), 1);
        // Remembering a run forgets those older than KEEP.
        recent.remember(run(1, 3), t0 + KEEP + Duration::from_secs(1));
        assert_eq!(recent.recorded_since(t0).len(), 2);
        for t in 0..(MAX as i64 + 10) {
            recent.remember(run(1, t), t0 + KEEP * 2);
        }
        assert_eq!(recent.recorded_since(t0).len(), MAX);
    }

    #[test]
    fn a_run_reported_lost_is_not_read_back_again() {
        let recent = RecentRuns::default();
        let t0 = Instant::now();
        recent.remember(run(1, 1), t0);
        recent.remember(run(1, 2), t0);
        recent.reported(&run(1, 1));
        assert_eq!(recent.recorded_since(t0), vec![run(1, 2)]);
    }

    #[test]
    fn the_lost_event_is_keyed_by_the_run_and_short() {
        let long = "j".repeat(191);
        let a = lost_event(&run(1, 7), &long, "its record is missing");
        let b = lost_event(&run(1, 7), &format!("{long}x"), "its record is missing");
        assert_ne!(a.dedupe, b.dedupe, "another node's report is another event");
        assert_eq!(
            a.dedupe,
            lost_event(&run(1, 7), &long, "other words").dedupe
        );
        assert!(a.dedupe.len() < 100, "{}", a.dedupe);
        let payload: serde_json::Value = serde_json::from_str(&a.payload).unwrap();
        assert_eq!(payload["token"], 7);
        assert_eq!(payload["why"], "its record is missing");
    }
}
