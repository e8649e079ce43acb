//! What a claimed row becomes: decide (pure, in `policy`), write (one fenced store call per
//! transition), act (run the process). Every claimed row goes through [`Shared::handle`].
//!
//! The life of one run, identified by (job, slot, attempt, token):
//! ```text
//!   claimed ──(plan: run)──► start recorded ──► process ──► finished ──► released
//!      │            │               │                                     │
//!      │            └─(conflict: another token recorded it)──► handed back for takeover
//!      ├─(plan: wait / skip)──► released to the next slot
//!      ├─(row cannot run)──► parked (fenced), until its definition changes
//!      └─(trust window passed, or the row is no longer ours)──► lost: nothing more is written
//! ```
//! `docs/daemon.md` has the same lifecycle with the table of faults and what the node does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::decode::{Resolved, run_spec};
use super::delivery::Ping;
use super::lease::{Interrupt, SupervisionGuard};
use super::{Shared, fmt_ms};
use crate::config::Config;
use crate::exec::runner::{self, StopRequest};
use crate::model::job::{OnLeaseLost, Outcome, Overlap, Policy};
use crate::model::lease::reaper_deadline;
use crate::model::policy::{
    ClaimAction, ClaimedState, Finished, Previous, account_previous, after_run, jitter_ms,
    plan_claim,
};
use crate::schedule::Schedule;
use crate::store::{Fenced, JobRow, PoolWait, Release, RunKey, RunResult, StoreError};

/// Longest pause between two tries of a write that must land (start, release).
const RETRY_MAX: Duration = Duration::from_secs(1);

/// One claim, as its task holds it.
pub(super) struct Claim {
    pub row: JobRow,
    /// Database clock at the claim.
    pub now: i64,
    /// When the claim was made (this node's monotonic clock): times of records are the
    /// database's `now` plus the monotonic time since.
    pub claimed_at: Instant,
    pub stop: watch::Receiver<StopRequest>,
    /// Removes the claim from the supervision map when the task ends.
    pub _guard: SupervisionGuard,
}

/// How the tick already dealt with a claimed row.
pub(super) enum Route {
    /// Resolved and planned as a plain run; its start was recorded with others in one statement.
    Started { key: RunKey, manual: bool },
    /// Resolved and planned as a plain run; the start is still to be recorded.
    Plain { key: RunKey, manual: bool },
    /// Anything else: previous holder, pool, missed slots, invalid definition.
    Full,
}

/// What a claimed row's history says before planning: its slot, attempts and how it came.
pub(super) fn claimed_state(row: &JobRow) -> ClaimedState {
    ClaimedState {
        slot: row.slot,
        attempts: row.attempt.max(0) as u32,
        // Deferred for its pool while owing a rerun of a lost run (see `defer_for_pool`).
        taken_over: row.pool_wait == PoolWait::OwesRerun,
        run_now: row.run_now,
        pool_wait: row.pool_wait != PoolWait::No,
    }
}

/// A run about to start, with what it needs.
struct Run<'a> {
    claim: &'a Claim,
    key: RunKey,
    manual: bool,
    policy: &'a Policy,
    schedule: &'a Schedule,
    config: &'a Config,
}

impl Shared {
    fn interrupted(&self, key: (i64, i64)) -> Option<Interrupt> {
        self.supervision()
            .get(&key)
            .map(|r| r.interrupted)
            .unwrap_or(Some(Interrupt::LeaseLost))
    }

    fn trusted(&self, key: (i64, i64)) -> bool {
        self.supervision()
            .get(&key)
            .is_some_and(|r| r.interrupted.is_none() && r.trusted_until > Instant::now())
    }

    /// The single dispatch path of a claimed row.
    pub(super) async fn handle(
        self: &Arc<Self>,
        claim: Claim,
        resolved: Result<(Schedule, Policy), String>,
        route: Route,
        config: &Config,
    ) {
        let (schedule, policy) = match resolved {
            Ok(v) => v,
            Err(message) => {
                self.park_claimed(&claim, &message).await;
                return;
            }
        };
        let (key, manual, started) = match route {
            Route::Started { key, manual } => (key, manual, true),
            Route::Plain { key, manual } => (key, manual, false),
            Route::Full => match self.plan(&claim, &schedule, &policy, config).await {
                Some((key, manual)) => (key, manual, false),
                None => return,
            },
        };
        if !started && self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            // Claimed but not started when the node began to stop: hand the row over at once;
            // nothing ran, so the next holder runs the slot as still owed.
            tracing::info!(job = %claim.row.name, "stopping: not starting the run; handed over");
            let row = &claim.row;
            let _ = self
                .store
                .release_for_takeover(row.id, &self.node, row.token)
                .await;
            return;
        }
        let run = Run {
            claim: &claim,
            key,
            manual,
            policy: &policy,
            schedule: &schedule,
            config,
        };
        if started || self.start(&run).await {
            self.supervise(run).await;
        }
    }

    /// Accounts for the previous holder, the pool and missed slots; records what the plan
    /// says; returns the run to start, if any.
    async fn plan(
        self: &Arc<Self>,
        claim: &Claim,
        schedule: &Schedule,
        policy: &Policy,
        config: &Config,
    ) -> Option<(RunKey, bool)> {
        let row = &claim.row;
        let mut state = claimed_state(row);
        if row.prev_exec_by.is_some() {
            // The previous claim was never released: find what it (or a chain of holders
            // before it) started, by the row's slot and attempts.
            let previous = match self.store.previous_run(&row.name, row.token).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(job = %row.name, error = %e, "could not look up the previous holder's run; leaving the claim to expire");
                    return None;
                }
            };
            match account_previous(row.slot, state.attempts, previous.as_ref()) {
                Previous::Nothing => {}
                Previous::Lost { slot, attempt } => {
                    state.slot = Some(slot);
                    state.attempts = attempt;
                    state.taken_over = true;
                }
                Previous::Finished {
                    slot,
                    attempt,
                    failed,
                } => {
                    tracing::info!(job = %row.name, slot = %fmt_ms(slot), attempt, failed, "taking over a finished but unreleased run");
                    self.metrics.takeover(&row.name);
                    let next = after_run(
                        &row.name,
                        &Finished {
                            slot,
                            attempt,
                            manual: false,
                            failed,
                            now: claim.now,
                            waiting_slot: slot,
                        },
                        policy,
                        schedule,
                    );
                    let release = Release {
                        slot: next.slot,
                        attempts: next.attempts,
                        next_exec: next.next_exec,
                        clear_run_now: false,
                        outcome: None,
                    };
                    self.release_with_retry(claim, &release, None).await;
                    return None;
                }
            }
        }
        let plan = plan_claim(&state, claim.now, policy, schedule);
        tracing::debug!(job = %row.name, token = row.token, ?plan, "claimed");
        if let (ClaimAction::Run { .. }, Some(pool)) = (&plan.action, &row.pool) {
            match self
                .store
                .pool_admit(row.id, pool, row.claimed_at.unwrap_or(claim.now))
                .await
            {
                Ok(Some(true)) => {}
                Ok(Some(false)) => {
                    // The pool is full cluster-wide: wait without spinning, keep the slot.
                    tracing::debug!(job = %row.name, pool = %pool, "pool full; waiting");
                    if let Some((slot, attempt)) = plan.lost {
                        // Owed a rerun: record the loss now, keep the debt in the row.
                        let key = RunKey {
                            job: row.name.clone(),
                            slot,
                            attempt,
                        };
                        let why = "its node stopped renewing the lease";
                        if !self
                            .until_written(claim, "the lost run", || {
                                self.store.record_lost(&key, why)
                            })
                            .await
                        {
                            return None;
                        }
                    }
                    if let Err(e) = self
                        .store
                        .defer_for_pool(
                            row.id,
                            &self.node,
                            row.token,
                            config.daemon.poll_interval,
                            plan.lost,
                        )
                        .await
                    {
                        tracing::warn!(job = %row.name, error = %e, "could not release a job waiting for its pool; its lease will expire");
                    }
                    return None;
                }
                Ok(None) => {
                    let message = format!(
                        "pool: \"{pool}\" is not defined (add it under [pools] or to cron_pools)"
                    );
                    self.park_claimed(claim, &message).await;
                    return None;
                }
                Err(e) => {
                    tracing::warn!(job = %row.name, error = %e, "could not check the pool; leaving the claim to expire");
                    return None;
                }
            }
        }
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
                return None;
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
            return None;
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
                return None;
            }
        }
        match plan.action {
            ClaimAction::Wait { slot } => {
                let release = Release {
                    slot,
                    attempts: 0,
                    next_exec: slot.saturating_add(jitter_ms(&row.name, slot, policy.jitter)),
                    clear_run_now: false,
                    outcome: None,
                };
                self.release_with_retry(claim, &release, None).await;
                None
            }
            ClaimAction::Run {
                slot,
                attempt,
                manual,
            } => {
                // A run of another slot than the row's (after a takeover, abandoned retries or
                // missed slots): the row moves to it before it starts, so that a node taking
                // over from this one finds the run by the row's slot.
                if !manual && row.slot != Some(slot) && !self.advance(claim, slot).await {
                    return None;
                }
                Some((
                    RunKey {
                        job: row.name.clone(),
                        slot,
                        attempt,
                    },
                    manual,
                ))
            }
        }
    }

    /// Moves the claimed row to `slot` with no attempt made yet, fenced by the claim; retried
    /// while the claim is trusted. False if the claim was lost.
    async fn advance(&self, claim: &Claim, slot: i64) -> bool {
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

    /// Records the run's start, fenced by the claim and idempotent: retried until it lands,
    /// the claim is lost, or its trust window passes. True if the run may start.
    async fn start(&self, run: &Run<'_>) -> bool {
        let row = &run.claim.row;
        let key = (row.id, row.token);
        let mut delay = Duration::from_millis(100);
        loop {
            if self.interrupted(key).is_some() {
                tracing::warn!(job = %row.name, "claim no longer trusted before the run started; not running");
                return false;
            }
            match self
                .store
                .start_run(row.id, &self.node, row.token, &run.key)
                .await
            {
                Ok(Fenced::Done) => return true,
                Ok(Fenced::Lost) => {
                    tracing::warn!(job = %row.name, "claim lost before the run started; not running");
                    return false;
                }
                Ok(Fenced::Conflict) => {
                    tracing::error!(job = %row.name, slot = %fmt_ms(run.key.slot), attempt = run.key.attempt, token = row.token, "this run was recorded under another claim; not running it, handing the row over so the next claim accounts for that run");
                    let _ = self
                        .store
                        .release_for_takeover(row.id, &self.node, row.token)
                        .await;
                    return false;
                }
                Err(e) => {
                    tracing::warn!(job = %row.name, error = %e, kind = e.kind(), "recording the run start failed; retrying");
                    self.metrics.database_error(e.kind());
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(RETRY_MAX);
                }
            }
        }
    }

    /// Runs a started run's process and releases the row by policy. The claim stays supervised
    /// (its lease extended) until the release is written.
    async fn supervise(&self, run: Run<'_>) {
        let Run {
            claim,
            key,
            manual,
            policy,
            schedule,
            config,
        } = run;
        let row = &claim.row;
        let sup_key = (row.id, row.token);
        let (slot, attempt) = (key.slot, key.attempt);
        let key_attempt = self.key_attempt(row, slot, attempt).await;
        let mut spec = match self.resolve_process(row, config).and_then(|resolved| {
            let resolved = Resolved {
                key_attempt,
                ..resolved
            };
            run_spec(row, slot, attempt, &self.node, policy, config, resolved)
        }) {
            Ok(s) => s,
            Err(message) => {
                let result = RunResult {
                    outcome: Outcome::Failed,
                    exit_code: None,
                    signal: None,
                    started: db_time(claim),
                    output: String::new(),
                    message: Some(message),
                };
                self.finish(claim, &key, manual, policy, schedule, result)
                    .await;
                return;
            }
        };
        // The last check before the process exists: never spawn on a claim no longer trusted.
        if !self.trusted(sup_key) {
            tracing::warn!(job = %row.name, slot = %fmt_ms(slot), attempt, "claim no longer trusted at spawn; not running (the next holder reruns the slot)");
            return;
        }
        if let Some(r) = self.supervision().get_mut(&sup_key) {
            r.running = true;
            spec.pgid = r.pgid.clone();
            if policy.on_lease_lost == OnLeaseLost::Kill {
                spec.reaper_deadline = Some(reaper_deadline(r.trusted_until, config.daemon.lease));
            }
        }
        tracing::info!(job = %row.name, slot = %fmt_ms(slot), attempt, token = row.token, node = %self.node, "started");
        let started = db_time(claim);
        self.metrics.run_started(started - slot);
        self.ping(row, Ping::Start);
        let replace_in = replace_delay(policy, schedule, &row.name, slot, manual, db_time(claim));
        let run = runner::run(&spec, claim.stop.clone());
        tokio::pin!(run);
        let mut replaced = false;
        let result = match replace_in {
            None => run.await,
            Some(after) => tokio::select! {
                r = &mut run => r,
                _ = tokio::time::sleep(after) => {
                    replaced = true;
                    tracing::warn!(job = %row.name, slot = %fmt_ms(slot), attempt, "the next slot came while this run runs (overlap = replace): stopping it");
                    if let Some(r) = self.supervision().get(&sup_key) {
                        let _ = r.stop.send(StopRequest::Kill);
                    }
                    run.await
                }
            },
        };
        let interrupted = self.supervision().get_mut(&sup_key).and_then(|r| {
            r.running = false;
            r.interrupted
        });
        let result = match result {
            Ok(out) => {
                let outcome = if replaced && out.stopped {
                    Outcome::Replaced
                } else if out.timed_out {
                    Outcome::Timeout
                } else if out.success() {
                    Outcome::Ok
                } else {
                    Outcome::Failed
                };
                RunResult {
                    outcome,
                    exit_code: out.exit_code.map(i64::from),
                    signal: out.signal.map(i64::from),
                    started,
                    output: out.output,
                    message: out.note,
                }
            }
            Err(e) => RunResult {
                outcome: Outcome::Failed,
                exit_code: None,
                signal: None,
                started,
                output: String::new(),
                message: Some(e.to_string()),
            },
        };
        match interrupted {
            Some(Interrupt::LeaseLost) => {
                tracing::warn!(job = %row.name, slot = %fmt_ms(slot), attempt, outcome = result.outcome.as_str(), "run ended after its lease was lost; nothing written");
            }
            Some(Interrupt::Shutdown) => {
                tracing::warn!(job = %row.name, slot = %fmt_ms(slot), attempt, "run stopped by shutdown; released for takeover");
                let _ = tokio::time::timeout(Duration::from_secs(5), async {
                    let _ = self
                        .store
                        .record_lost(
                            &key,
                            &format!("stopped by the shutdown of node {}", self.node),
                        )
                        .await;
                    let _ = self
                        .store
                        .release_for_takeover(row.id, &self.node, row.token)
                        .await;
                })
                .await;
            }
            None => {
                tracing::info!(job = %row.name, slot = %fmt_ms(slot), attempt, outcome = result.outcome.as_str(), exit_code = ?result.exit_code, signal = ?result.signal, "finished");
                self.finish(claim, &key, manual, policy, schedule, result)
                    .await;
            }
        }
    }

    async fn finish(
        &self,
        claim: &Claim,
        key: &RunKey,
        manual: bool,
        policy: &Policy,
        schedule: &Schedule,
        result: RunResult,
    ) {
        let row = &claim.row;
        // A replaced run is not retried: the slot that replaced it runs now.
        let failed = !matches!(result.outcome, Outcome::Ok | Outcome::Replaced);
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
        if let Some(pool) = &row.pool {
            self.pool_place_freed(pool).await;
        }
    }

    /// A run of `pool` ended: the job waiting longest for a place may start now rather than at
    /// the end of its wait. Best effort: should it fail, it starts when its wait ends.
    async fn pool_place_freed(&self, pool: &str) {
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
    async fn key_attempt(&self, row: &JobRow, slot: i64, attempt: u32) -> u32 {
        if row.http.is_none() || attempt <= 1 {
            return attempt;
        }
        match self.store.key_attempt(&row.name, slot, attempt).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(job = %row.name, error = %e, "earlier attempts not counted; the request gets a key of its own");
                attempt
            }
        }
    }

    /// The account a run switches to and its `env_file`, looked up now (users and files change
    /// between runs).
    pub(super) fn resolve_process<'a>(
        &'a self,
        row: &JobRow,
        config: &Config,
    ) -> Result<Resolved<'a>, String> {
        if row.http.is_some() {
            // No process: no account to switch to, no environment.
            return Ok(Resolved {
                host: &self.host,
                account: None,
                file_env: vec![],
                key_attempt: 1,
            });
        }
        let account = match super::decode::run_as(row, config, &self.host.account)? {
            Some((user, group)) => Some(
                crate::exec::account::lookup(&user, group.as_deref())
                    .map_err(|e| format!("user: {e}"))?,
            ),
            None => None,
        }
        // A job running as the daemon's own identity (root's jobs under a root daemon) switches
        // nothing: no `pre_exec` hook, so it is started with posix_spawn, not a fork.
        .filter(|a| !a.same_identity(&self.host.account));
        let file_env = match &row.env_file {
            Some(path) => crate::exec::envfile::read(std::path::Path::new(path))?,
            None => vec![],
        };
        Ok(Resolved {
            host: &self.host,
            account,
            file_env,
            key_attempt: 1,
        })
    }

    /// Releases a claimed row that cannot run and parks it with the reason in `error`, in one
    /// fenced write. A change to the row's definition or policy columns un-parks it.
    async fn park_claimed(&self, claim: &Claim, message: &str) {
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

    /// Logs and records retries given up: the history line `abandoned` for `(slot, attempt)`.
    /// False if the claim was lost before it could be written.
    async fn record_abandoned(&self, claim: &Claim, slot: i64, attempt: u32, why: &str) -> bool {
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
    async fn until_written<F, Fut>(&self, claim: &Claim, what: &str, mut write: F) -> bool
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
    async fn release_with_retry(&self, claim: &Claim, release: &Release, key: Option<&RunKey>) {
        let began = Instant::now();
        self.release_attempts(claim, release, key).await;
        self.metrics.release_took(began.elapsed());
    }

    async fn release_attempts(&self, claim: &Claim, release: &Release, key: Option<&RunKey>) {
        let row = &claim.row;
        let sup_key = (row.id, row.token);
        let mut release = release.clone();
        let mut delay = Duration::from_millis(100);
        let mut first = true;
        loop {
            // Retries go in two statements, so that a wait for the history row never holds the
            // job's row (and with it the lease extensions).
            let written = if first {
                self.store
                    .release(row.id, &self.node, row.token, &release, key)
                    .await
            } else {
                self.store
                    .release_in_steps(row.id, &self.node, row.token, &release, key)
                    .await
            };
            first = false;
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

/// The database clock now, as known from the claim: its `now` plus the monotonic time since.
/// No record carries the node's wall clock.
/// With `overlap = "replace"`, how long a run may go on: until its next regular slot is due
/// (database clock, `now`). `None` for other policies, manual runs and a schedule with no next
/// slot.
fn replace_delay(
    policy: &Policy,
    schedule: &Schedule,
    job: &str,
    slot: i64,
    manual: bool,
    now: i64,
) -> Option<Duration> {
    if policy.overlap != Overlap::Replace || manual {
        return None;
    }
    let next = crate::model::policy::next_slot(schedule, slot);
    if next == i64::MAX {
        return None;
    }
    let due = next.saturating_add(crate::model::policy::jitter_ms(job, next, policy.jitter));
    Some(Duration::from_millis(due.saturating_sub(now).max(0) as u64))
}

fn db_time(claim: &Claim) -> i64 {
    claim
        .now
        .saturating_add(claim.claimed_at.elapsed().as_millis() as i64)
}
