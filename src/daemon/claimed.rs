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
use super::slot_gate::Gate;
use super::{Shared, fmt_ms};
use crate::config::Config;
use crate::exec::runner::{self, StopRequest};
use crate::model::job::{OnLeaseLost, Outcome, Policy};
use crate::model::lease::reaper_deadline;
use crate::model::policy::{
    ClaimAction, ClaimedState, Finished, Previous, account_previous, after_run, jitter_ms,
    plan_claim, replace_delay,
};
use crate::schedule::Schedule;
use crate::store::{Fenced, JobRow, PoolWait, Release, RunKey, RunResult};

/// Longest pause between two tries of a write that must land (start, release).
pub(super) const RETRY_MAX: Duration = Duration::from_secs(1);

/// One claim, as its task holds it.
pub(super) struct Claim {
    pub row: JobRow,
    /// Database clock at the claim.
    pub now: i64,
    /// When the claim was made (this node's monotonic clock): times of records are the
    /// database's `now` plus the monotonic time since.
    pub claimed_at: Instant,
    pub stop: watch::Receiver<StopRequest>,
    /// When the start rate gives the run its turn (`None`: at once).
    pub turn: Option<Instant>,
    /// How long (milliseconds) the start rate held the row before its claim, when it did: the
    /// run's start records this plus its wait after the claim.
    pub held_before: Option<i64>,
    /// What the slot waited for before it could run ("waited 14m for extract"), said in the
    /// run's record.
    pub waited: std::sync::OnceLock<String>,
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
        // A writer's number past u32 is held at its limit, not cut to its low bits.
        attempts: row.attempt.clamp(0, u32::MAX.into()) as u32,
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
    pub(super) fn interrupted(&self, key: (i64, i64)) -> Option<Interrupt> {
        self.supervision()
            .get(&key)
            .map(|r| r.interrupted)
            .unwrap_or(Some(Interrupt::LeaseLost))
    }

    pub(super) fn trusted(&self, key: (i64, i64)) -> bool {
        self.supervision()
            .get(&key)
            .is_some_and(|r| r.trusted_at(Instant::now()))
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
        // A row the start rate gave a later turn waits for it (unless the node stops).
        let stopping = !started
            && (!self.wait_for_turn(&claim).await
                || self.stopping.load(std::sync::atomic::Ordering::SeqCst));
        if stopping {
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
        let mut plan = plan_claim(&state, claim.now, policy, schedule);
        tracing::debug!(job = %row.name, token = row.token, ?plan, "claimed");
        // A slot held for its upstreams waits until the gate looks again.
        let mut hold = i64::MIN;
        match self.slot_gate(claim, &plan, policy, schedule).await {
            Gate::Open => {}
            Gate::Wait { slot, until } => {
                plan.action = ClaimAction::Wait { slot };
                hold = until;
            }
            Gate::Stop => return None,
        }
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
                    match self
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
                        // The place may have been freed while the deferral was written, when
                        // the freeing run found no waiter yet: then the wait ends now.
                        Ok(Fenced::Done) => {
                            if matches!(self.store.pool_has_room(pool).await, Ok(true)) {
                                self.pool_place_freed(pool).await;
                            }
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(job = %row.name, error = %e, "could not release a job waiting for its pool; its lease will expire");
                        }
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
        if !self.record_plan_lines(claim, &plan, policy).await {
            return None;
        }
        match plan.action {
            ClaimAction::Wait { slot } => {
                let release = Release {
                    slot,
                    attempts: 0,
                    next_exec: slot
                        .saturating_add(jitter_ms(&row.name, slot, policy.jitter))
                        .max(hold),
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
            // How long the run waited for the start rate, recorded with its start.
            let held = run.claim.held_before.map(|before| {
                Duration::from_millis(before as u64) + run.claim.claimed_at.elapsed()
            });
            match self
                .store
                .start_run_held(
                    row.id,
                    &self.node,
                    row.token,
                    &run.key,
                    held.map(|h| h.as_millis() as i64),
                )
                .await
            {
                Ok(Fenced::Done) => {
                    if held.is_some() {
                        // The wait after the claim (the time before it is in the record).
                        self.metrics.rate_held(run.claim.claimed_at.elapsed());
                    }
                    return true;
                }
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
            if !config.daemon.live_output.is_zero() && spec.output_tail > 0 {
                let tail = crate::exec::output_tail::OutputTail::shared(spec.output_tail);
                spec.live = Some(tail.clone());
                r.live = Some(super::live_output::LiveRun {
                    slot,
                    attempt,
                    tail,
                    stored: 0,
                    since: std::time::Instant::now(),
                });
            }
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
        let (interrupted, stop_asked) =
            self.supervision()
                .get_mut(&sup_key)
                .map_or((None, false), |r| {
                    r.running = false;
                    super::lease::lose_if_window_ended(
                        r,
                        sup_key.1,
                        Instant::now(),
                        "the run ended after its trust window had ended",
                        &self.metrics,
                    );
                    (r.interrupted, r.stop_asked)
                });
        let result = match result {
            Ok(out) => {
                let outcome = if stop_asked && out.stopped {
                    Outcome::Stopped
                } else if replaced && out.stopped {
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
                    message: if outcome == Outcome::Stopped {
                        Some("stopped on request (sqlcron stop or the dashboard)".into())
                    } else {
                        match (claim.waited.get(), out.note) {
                            (Some(w), Some(n)) => Some(format!("{w}; {n}")),
                            (Some(w), None) => Some(w.clone()),
                            (None, n) => n,
                        }
                    },
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
                let (outcome, slot) = (result.outcome.as_str(), fmt_ms(slot));
                // A run that did not end ok is a warning (`journalctl -p warning` lists it).
                let ok = result.outcome == crate::model::job::Outcome::Ok;
                macro_rules! finished {
                    ($($field:tt)*) => {
                        if ok {
                            tracing::info!($($field)*, "finished")
                        } else {
                            tracing::warn!($($field)*, "finished")
                        }
                    };
                }
                match (result.exit_code, result.signal) {
                    (Some(exit), _) => finished!(job = %row.name, %slot, attempt, outcome, exit),
                    (None, Some(signal)) => {
                        let signal = crate::model::signal::name(signal);
                        finished!(job = %row.name, %slot, attempt, outcome, %signal)
                    }
                    (None, None) => finished!(job = %row.name, %slot, attempt, outcome),
                }
                self.finish(claim, &key, manual, policy, schedule, result)
                    .await;
            }
        }
    }

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
}

/// The database clock now, as known from the claim: its `now` plus the monotonic time since.
/// No record carries the node's wall clock.
pub(super) fn db_time(claim: &Claim) -> i64 {
    claim
        .now
        .saturating_add(claim.claimed_at.elapsed().as_millis() as i64)
}
