//! The fenced writes of a claim besides its start: the row moved to the slot it runs, the run's
//! finish record and release, a parked row, an abandoned slot.
//! Each is one fenced store call, retried until it lands or the claim is no longer trusted; a
//! write that matched nothing means the claim was lost, and nothing more is written for it.

use super::claimed::{Claim, RETRY_MAX, db_time};
use super::delivery::Ping;
use super::lease::Interrupt;
use super::*;
use crate::model::job::{Outcome, Policy};
use crate::model::policy::{ClaimPlan, Finished, after_run};
use crate::schedule::Schedule;
use crate::store::{Fenced, Release, RunKey, RunResult, StoreError};

impl Shared {
    /// Moves the claimed row to `slot` with no attempt made yet, fenced by the claim; retried
    /// while the claim is trusted. False if the claim was lost.
    pub(super) async fn advance(&self, claim: &Claim, slot: i64) -> bool {
        let row = &claim.row;
        let lost = std::sync::atomic::AtomicBool::new(false);
        let written = self
            .until_written(claim, "the slot to run", || async {
                let fenced = self
                    .store
                    .advance_slot(row.id, &self.node, row.token, slot)
                    .await?;
                lost.store(fenced == Fenced::Lost, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            })
            .await;
        if lost.load(std::sync::atomic::Ordering::SeqCst) {
            tracing::warn!(job = %row.name, "claim lost before the run started; not running");
            return false;
        }
        written
    }

    pub(super) async fn finish(
        &self,
        claim: &Claim,
        key: &RunKey,
        manual: bool,
        policy: &Policy,
        schedule: &Schedule,
        result: RunResult,
    ) {
        let row = &claim.row;
        // A replaced run is not retried: the slot that replaced it runs now. Nor is a run
        // someone stopped.
        let failed = !matches!(
            result.outcome,
            Outcome::Ok | Outcome::Replaced | Outcome::Stopped
        );
        let waiting = row.slot.unwrap_or(key.slot);
        let next = after_run(
            &row.name,
            &Finished {
                slot: key.slot,
                attempt: key.attempt,
                manual,
                failed,
                now: db_time(claim),
                waiting_slot: waiting,
            },
            policy,
            schedule,
        );
        self.metrics
            .run_ended(&row.name, result.outcome.as_str(), db_time(claim));
        self.ping(
            row,
            if result.outcome == Outcome::Ok {
                Ping::Success
            } else {
                Ping::Failure
            },
        );
        if failed && next.slot == key.slot {
            self.metrics.retry(&row.name);
            tracing::warn!(job = %row.name, slot = %fmt_ms(key.slot), attempt = key.attempt, retry_at = %fmt_ms(next.next_exec), "will retry");
        }
        if let Some((slot, attempt)) = next.abandoned
            && !self
                .record_abandoned(
                    claim,
                    slot,
                    attempt,
                    "retry abandoned: it would pass the next regular slot",
                )
                .await
        {
            return;
        }
        let release = Release {
            slot: next.slot,
            attempts: next.attempts,
            next_exec: next.next_exec,
            clear_run_now: manual,
            outcome: Some(result),
        };
        self.release_with_retry(claim, &release, Some(key)).await;
        self.upstream_finished(&key.job);
        if let Some(pool) = &row.pool {
            self.pool_place_freed(pool).await;
        }
    }

    /// A run of `pool` ended: the job waiting longest for a place may start now rather than at
    /// the end of its wait. Best effort: should it fail, it starts when its wait ends.
    pub(super) async fn pool_place_freed(&self, pool: &str) {
        match self.store.pool_place_freed(pool).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::debug!(
                    pool,
                    waiting = n,
                    "pool place freed; the longest waiting job due now"
                );
                self.wake.notify_one();
            }
            Err(e) => {
                tracing::debug!(pool, error = %e, "waiting jobs not brought forward; they start when their wait ends")
            }
        }
    }

    /// An HTTP job's `Idempotency-Key` attempt (see `Store::key_attempt`). The history is read
    /// only for a later attempt; should the read fail, the attempt itself is used (a new key:
    /// the receiver may then see a lost delivery twice, never miss one).
    /// Releases a claimed row that cannot run and parks it with the reason in `error`, in one
    /// fenced write. A change to the row's definition or policy columns un-parks it.
    pub(super) async fn park_claimed(&self, claim: &Claim, message: &str) {
        let row = &claim.row;
        tracing::error!(job = %row.name, error = %message, "claimed job row is invalid; parked until fixed");
        match self
            .store
            .park(row.id, &self.node, row.token, message)
            .await
        {
            Ok(Fenced::Done) => {}
            Ok(_) => {
                tracing::warn!(job = %row.name, "the invalid row was taken over before it was parked")
            }
            Err(e) => {
                tracing::warn!(job = %row.name, error = %e, "could not park the invalid row; its lease will expire")
            }
        }
    }

    /// Writes the history lines a claim's plan holds besides its run: the previous holder's
    /// lost run, retries abandoned, missed slots skipped (each idempotent). False if the claim
    /// was lost before they were written.
    pub(super) async fn record_plan_lines(
        &self,
        claim: &Claim,
        plan: &ClaimPlan,
        policy: &Policy,
    ) -> bool {
        let row = &claim.row;
        if let Some((slot, attempt)) = plan.lost {
            let by = row.prev_exec_by.clone().unwrap_or_default();
            tracing::warn!(job = %row.name, slot = %fmt_ms(slot), attempt, previous_node = %by, "run lost: its node stopped renewing the lease");
            self.metrics.takeover(&row.name);
            let key = RunKey {
                job: row.name.clone(),
                slot,
                attempt,
            };
            let message = format!("lease of node {by} expired while the run was in progress");
            if !self
                .until_written(claim, "the lost run", || {
                    self.store.record_lost(&key, &message)
                })
                .await
            {
                return false;
            }
        }
        if let Some((slot, attempt)) = plan.abandoned
            && !self
                .record_abandoned(
                    claim,
                    slot,
                    attempt,
                    "pending retries abandoned: the next regular slot has come",
                )
                .await
        {
            return false;
        }
        if let Some(skipped) = plan.skipped {
            tracing::warn!(job = %row.name, count = skipped.count, first = %fmt_ms(skipped.first), last = %fmt_ms(skipped.last), misfire = policy.misfire.as_str(), "missed slots skipped");
            self.metrics.missed(&row.name, skipped.count);
            let message = format!(
                "{} missed slot(s) not run (misfire = {})",
                skipped.count,
                policy.misfire.as_str()
            );
            let written = self
                .until_written(claim, "the skipped slots", || {
                    self.store.record_summary(
                        &row.name,
                        skipped.first,
                        0,
                        &self.node,
                        Outcome::Skipped,
                        Some(skipped.count as i64),
                        Some(skipped.last),
                        &message,
                    )
                })
                .await;
            if !written {
                return false;
            }
        }
        true
    }

    /// Logs and records retries given up: the history line `abandoned` for `(slot, attempt)`.
    /// False if the claim was lost before it could be written.
    pub(super) async fn record_abandoned(
        &self,
        claim: &Claim,
        slot: i64,
        attempt: u32,
        why: &str,
    ) -> bool {
        let job = &claim.row.name;
        tracing::warn!(job = %job, slot = %fmt_ms(slot), attempt, "{why}");
        self.until_written(claim, "the abandoned retries", || {
            self.store.record_summary(
                job,
                slot,
                attempt,
                &self.node,
                Outcome::Abandoned,
                None,
                None,
                why,
            )
        })
        .await
    }

    /// Writes a history line a release depends on (lost, skipped, abandoned: each idempotent),
    /// retrying while the claim is trusted. False if the claim was lost first: then nothing more
    /// is written, the row is not released, and the next holder makes the same decision again.
    /// A release never moves a row past a slot whose fate is not on record.
    pub(super) async fn until_written<F, Fut>(
        &self,
        claim: &Claim,
        what: &str,
        mut write: F,
    ) -> bool
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), StoreError>>,
    {
        let row = &claim.row;
        let mut delay = Duration::from_millis(100);
        loop {
            match write().await {
                Ok(()) => return true,
                Err(e) => {
                    if self.interrupted((row.id, row.token)).is_some() {
                        tracing::error!(job = %row.name, error = %e, "claim lost before {what} was recorded; the next holder decides again");
                        return false;
                    }
                    tracing::warn!(job = %row.name, error = %e, kind = e.kind(), "recording {what} failed; retrying");
                    self.metrics.database_error(e.kind());
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(RETRY_MAX);
                }
            }
        }
    }

    /// Releases a row. The claim stays supervised meanwhile, so its lease is still extended:
    /// the release is retried until it lands or the claim is truly lost. A value the database
    /// refuses (not a connection problem) is retried once without the run's output, with the
    /// reason in its message, so a run is never repeated for what it printed.
    pub(super) async fn release_with_retry(
        &self,
        claim: &Claim,
        release: &Release,
        key: Option<&RunKey>,
    ) {
        let began = Instant::now();
        self.release_attempts(claim, release, key).await;
        self.metrics.release_took(began.elapsed());
    }

    pub(super) async fn release_attempts(
        &self,
        claim: &Claim,
        release: &Release,
        key: Option<&RunKey>,
    ) {
        let row = &claim.row;
        let sup_key = (row.id, row.token);
        let mut release = release.clone();
        let mut delay = Duration::from_millis(100);
        let mut first = true;
        loop {
            // Retries go in two statements, so that a wait for the history row never holds the
            // job's row (and with it the lease extensions).
            // The first try joins the releases being written together (`release_batch.rs`);
            // when its batch failed (nothing written), the next try goes alone at once.
            let written = if first {
                first = false;
                let going = self.supervision().len();
                match self
                    .releases
                    .submit(
                        &self.store,
                        &self.metrics,
                        &self.node,
                        row.id,
                        row.token,
                        &release,
                        key,
                        going,
                    )
                    .await
                {
                    Some(written) => written,
                    None => continue,
                }
            } else {
                self.store
                    .release_in_steps(row.id, &self.node, row.token, &release, key)
                    .await
            };
            match written {
                Ok(Fenced::Done) => {
                    if let Some(key) = key
                        && release.outcome.is_some()
                    {
                        self.recent_runs.remember(
                            super::recorded::Recorded {
                                key: key.clone(),
                                token: row.token,
                            },
                            Instant::now(),
                        );
                    }
                    return;
                }
                Ok(_) => {
                    tracing::warn!(job = %row.name, "release found the row taken over; nothing written");
                    return;
                }
                Err(e) => {
                    if self.interrupted(sup_key) == Some(Interrupt::LeaseLost) {
                        self.metrics.failover_hint(e.kind());
                        tracing::error!(job = %row.name, error = %e, "release not written before the claim was lost; the next holder accounts for the run");
                        return;
                    }
                    if e.is_refused()
                        && let Some(outcome) = release.outcome.as_mut()
                        && !outcome.output.is_empty()
                    {
                        tracing::error!(job = %row.name, error = %e, "the database refused the run's output; recording the run without it");
                        outcome.output.clear();
                        outcome.message = Some(format!("output not stored: {e}"));
                        continue;
                    }
                    tracing::warn!(job = %row.name, error = %e, kind = e.kind(), "release failed; retrying while the lease is kept");
                    self.metrics.database_error(e.kind());
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(RETRY_MAX);
                }
            }
        }
    }
}
