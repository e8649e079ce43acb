//! One pass of the poll loop ([`Daemon::tick`]): a peek at the table (or, in a burst, the last
//! one: `placing.rs`), preparing new rows, a claim of up to the free capacity, and one task per
//! claimed row. Tests call it directly.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::claimed::{Claim, Route, claimed_state};
use super::decode::resolve_here;
use super::lease::{Supervised, SupervisionGuard};
use super::start_rate::{Allowance, Turn};
use super::{Daemon, Shared, TickReport, fmt_ms};
use crate::config::Config;
use crate::exec::runner::StopRequest;
use crate::model::job::{OnLeaseLost, Policy};
use crate::model::lease::trusted_until;
use crate::model::placement;
use crate::model::policy::{self, ClaimAction, jitter_ms, plan_claim};
use crate::schedule::Schedule;
use crate::store::{JobRow, PoolWait, RunKey, StoreError};

/// A claimed row on its way to its task: the claim, its schedule and policy (or why it cannot
/// run), how far the tick took it, and its place in `max_parallel`.
type Ready = (
    Claim,
    Result<(Schedule, Policy), String>,
    Route,
    tokio::sync::OwnedSemaphorePermit,
);

/// A claimed row whose placement excludes this node, which the claim's SQL did not take as
/// such: on MySQL/MariaDB a writer changed its placement between the claim and the read of the
/// claimed rows. It is handed over at once, not run; the nodes its placement names take it
/// (`placement_claim_race::*::a_job_placed_elsewhere_as_it_is_claimed_is_handed_over_unrun`).
async fn hand_back_misplaced(shared: &Shared, row: &JobRow) {
    tracing::warn!(
        job = %row.name,
        token = row.token,
        "a claimed row's placement excludes this node (changed as it was claimed); handed over, not run"
    );
    if let Err(e) = shared
        .store
        .release_for_takeover(row.id, &shared.node, row.token)
        .await
    {
        // Its lease runs out instead: nothing supervises it here.
        tracing::warn!(job = %row.name, error = %e, "could not hand the row over; its lease will run out");
        shared.metrics.database_error(e.kind());
    }
}

/// How many new or changed rows one tick prepares.
const PREPARE_BATCH: i64 = 500;

/// The run of a claimed row when it is the common case: no previous holder to account for, no
/// pool, nothing missed or abandoned, just a run of `(key, manual)`. `None` for everything else.
fn plain_run(
    row: &JobRow,
    now: i64,
    schedule: &Schedule,
    policy: &Policy,
) -> Option<(RunKey, bool)> {
    if row.prev_exec_by.is_some()
        || row.pool.is_some()
        || row.pool_wait != PoolWait::No
        || !policy.calendars.is_empty()
        || !policy.requires.is_empty()
    {
        return None;
    }
    let plan = plan_claim(&claimed_state(row), now, policy, schedule);
    if plan.lost.is_some() || plan.abandoned.is_some() || plan.skipped.is_some() {
        return None;
    }
    let ClaimAction::Run {
        slot,
        attempt,
        manual,
    } = plan.action
    else {
        return None;
    };
    tracing::debug!(job = %row.name, token = row.token, ?plan, "claimed");
    let key = RunKey {
        job: row.name.clone(),
        slot,
        attempt,
    };
    Some((key, manual))
}

impl Daemon {
    /// One claim-and-dispatch pass. Tests call it directly.
    pub async fn tick(&self, tasks: &mut JoinSet<()>) -> Result<TickReport, StoreError> {
        let shared = &self.shared;
        let config = self.config();
        let (peek, placement) = shared.peek_for_pass(&config).await?;
        let mut report = TickReport {
            now: peek.now,
            next_due: peek.next_due,
            next_job: peek.next_name.clone(),
            next_event: peek.next_event,
            ..TickReport::default()
        };
        if peek.pending_prepare {
            let (ok, bad) = shared.prepare(peek.now, &config).await?;
            report.prepared = ok;
            report.invalid = bad;
            // Newly prepared rows may be due sooner than what the peek saw, whichever node
            // prepared them (a preparation that makes a row due later than a second notifies
            // nobody): look again shortly.
            report.next_due = Some(peek.now);
        }
        if shared.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(report);
        }
        if peek.drain {
            report.drained = true;
            return Ok(report);
        }
        let free = shared.permits.available_permits();
        if free == 0 {
            report.saturated = true;
            return Ok(report);
        }
        if peek.next_due.is_none_or(|d| d > peek.now) {
            return Ok(report);
        }
        // The lease extension's connection is open before anything is claimed (a node long
        // quiet gave it back, `lease_connection.rs`); while it cannot be opened, nothing is
        // claimed and the pass looks again a second later (the node is otherwise well: its
        // heartbeat goes on). Before the horizon below, which the claim must follow at once.
        if !shared
            .lease_connection
            .ensure_open(shared.store.dialect(), config.daemon.lease, &shared.metrics)
            .await
        {
            report.next_due = Some(peek.now + 1_000);
            return Ok(report);
        }
        // Rows this node still supervises are never claimed again; only those whose lease could
        // have ended by the time this claim runs need naming (see `lease::may_be_due`).
        let horizon = Instant::now();
        let supervised: Vec<i64> = shared
            .supervision()
            .iter()
            .filter(|(_, r)| r.may_be_due(horizon, config.daemon.lease))
            .map(|((id, _), _)| *id)
            .collect();
        // The start rate may allow fewer (see `start_rate.rs`).
        let (limit, budgets) = match shared.allowance(peek.now, free).await? {
            Allowance::Unlimited => (free, None),
            Allowance::Limited(n, budgets) => (n, Some(budgets)),
            Allowance::Spent(until) => {
                report.next_due = Some(until.max(peek.now + 1));
                return Ok(report);
            }
        };
        // Another loop met a broken connection since this pass began: the runs recorded
        // before it are read back before anything is claimed (`daemon/recorded.rs`); the
        // loop comes round again within 50 ms.
        if shared.metrics.connection_lost_pending() {
            report.next_due = Some(peek.now);
            return Ok(report);
        }
        // The trust window starts when the claim is attempted, not when its reply arrives.
        let claim_started = Instant::now();
        let (now, mut rows) = shared
            .store
            .claim_excluding(
                &shared.node,
                limit,
                config.daemon.lease,
                &supervised,
                placement.matching(),
            )
            .await?;
        shared
            .metrics
            .claim_took(claim_started.elapsed(), rows.len());
        report.claimed = rows.len();
        report.saturated = rows.len() == limit;
        shared.claim_filled(report.saturated && budgets.is_none());
        let now = now.unwrap_or(peek.now);
        // Before the start rate charges them: rows this node may not run, handed over unrun.
        if rows.iter().any(|r| r.placement.is_some()) {
            let misplaced;
            (misplaced, rows) = rows.into_iter().partition(|r| {
                placement::excludes(r.placement.as_deref(), &shared.node, &config.node_tags)
            });
            for row in &misplaced {
                hand_back_misplaced(shared, row).await;
            }
        }
        // Each row's turn from the start rate (none without budgets).
        let mut turns = vec![None; rows.len()];
        if let Some(budgets) = budgets {
            // Oldest slot first, whatever order the claim returned the rows in.
            rows.sort_by_key(|r| (r.slot.unwrap_or(i64::MAX), r.id));
            let kept = shared.ration(rows, &budgets, now).await?;
            // Turns count from here, after the takes' round trips: a start may come a little
            // after its turn, never before.
            let cut = limit < free;
            (rows, turns) = kept
                .into_iter()
                .map(|(row, wait)| {
                    let turn = Turn::of(&row, now, wait, cut);
                    (row, turn)
                })
                .unzip();
            if limit < free && report.saturated {
                // More is due than the budget has room for: look again at its next room.
                report.saturated = false;
                report.next_due = Some(now + 1);
            }
        }
        // Rows that simply run their slot have their run starts recorded in one statement;
        // the others (takeovers, pools, missed slots, invalid rows) are planned in their task.
        let mut ready = Vec::new();
        let turns_from = Instant::now();
        for (row, turn) in rows.into_iter().zip(turns) {
            let Ok(permit) = shared.permits.clone().try_acquire_owned() else {
                // Cannot happen (we claimed at most the free permits); the lease will expire.
                tracing::error!(job = %row.name, "claimed beyond capacity; leaving it to expire");
                continue;
            };
            let template = shared.template_of(&row, &config).await?;
            let resolved = resolve_here(&row, &config, &shared.host.account, template.as_ref());
            let on_lease_lost = resolved
                .as_ref()
                .map(|(_, p)| p.on_lease_lost)
                .unwrap_or(OnLeaseLost::Kill);
            let route = resolved
                .as_ref()
                .ok()
                .and_then(|(schedule, policy)| plain_run(&row, now, schedule, policy))
                .map(|(key, manual)| Route::Plain { key, manual })
                .unwrap_or(Route::Full);
            let mut claim =
                shared.supervise_claim(row, now, claim_started, on_lease_lost, config.daemon.lease);
            if let Some(turn) = turn {
                claim.held_before = Some(turn.held_before);
                if turn.wait > 0 {
                    let wait = std::time::Duration::from_millis(turn.wait as u64);
                    claim.turn = Some(turns_from + wait);
                }
            }
            ready.push((claim, resolved, route, permit));
        }
        self.record_plain_starts(&mut ready).await;
        for (claim, resolved, route, permit) in ready {
            let shared = self.shared.clone();
            let config = config.clone();
            tasks.spawn(async move {
                shared.handle(claim, resolved, route, &config).await;
                drop(permit);
                shared.wake.notify_one();
            });
        }
        Ok(report)
    }

    /// Records the run starts of the plain rows of one claim in one statement; the rows whose
    /// start it recorded go on as [`Route::Started`]. On any doubt (an error, a start not
    /// recorded) a row stays [`Route::Plain`] and records its start itself, idempotently.
    async fn record_plain_starts(&self, ready: &mut [Ready]) {
        let starts: Vec<(i64, i64, &RunKey)> = ready
            .iter()
            .filter_map(|(c, _, route, _)| match route {
                // A row waiting for its turn from the start rate records its start when it
                // comes.
                Route::Plain { key, .. } if c.held_before.is_none() => {
                    Some((c.row.id, c.row.token, key))
                }
                _ => None,
            })
            .collect();
        if starts.len() < 2 {
            return;
        }
        let started = match self
            .shared
            .store
            .start_runs(&self.shared.node, &starts)
            .await
        {
            Ok(started) => started,
            Err(e) => {
                self.shared.metrics.failover_hint(e.kind());
                tracing::debug!(error = %e, "recording the run starts together failed; one by one");
                return;
            }
        };
        let mut started = started.into_iter();
        for (c, _, route, _) in ready.iter_mut() {
            if let Route::Plain { key, manual } = route
                && c.held_before.is_none()
                && started.next() == Some(true)
            {
                *route = Route::Started {
                    key: key.clone(),
                    manual: *manual,
                };
            }
        }
    }
}

impl Shared {
    /// Puts a claim under supervision (its lease extended from now on) and returns what its task
    /// holds.
    fn supervise_claim(
        self: &Arc<Self>,
        row: JobRow,
        now: i64,
        claimed_at: Instant,
        on_lease_lost: OnLeaseLost,
        lease: std::time::Duration,
    ) -> Claim {
        let key = (row.id, row.token);
        let (stop_tx, stop_rx) = watch::channel(StopRequest::None);
        self.supervised_total
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Busy again: no statement waits for a connection on its way back (`store/quiet.rs`).
        self.store.set_quiet(false);
        self.supervision().insert(
            key,
            Supervised {
                job: row.name.clone(),
                trusted_until: trusted_until(claimed_at, lease),
                stop: stop_tx,
                interrupted: None,
                on_lease_lost,
                running: false,
                pgid: Default::default(),
                stop_asked: false,
                live: None,
            },
        );
        Claim {
            row,
            now,
            claimed_at,
            turn: None,
            held_before: None,
            waited: Default::default(),
            stop: stop_rx,
            _guard: SupervisionGuard {
                shared: self.clone(),
                key,
            },
        }
    }

    /// The template of an every_node copy, by which a node in signed mode judges the copy (read
    /// only then).
    async fn template_of(
        &self,
        row: &JobRow,
        config: &Config,
    ) -> Result<Option<JobRow>, StoreError> {
        match &row.template {
            Some(name) if config.security.sql_jobs == crate::config::security::SqlJobs::Signed => {
                self.store.job(name).await
            }
            _ => Ok(None),
        }
    }

    /// "requires: a cycle: a → b → a" when the upstreams of the rows (`requires`, `after`)
    /// lead from `job` back to it.
    async fn upstream_cycle(&self, job: &str) -> Result<Option<String>, StoreError> {
        let json = |t: Option<String>| -> Option<serde_json::Value> {
            t.and_then(|t| serde_json::from_str(&t).ok())
        };
        let edges = self
            .store
            .upstream_edges()
            .await?
            .into_iter()
            .map(|(name, requires, after)| {
                let required = json(requires)
                    .and_then(|v| crate::model::requires::from_json(&v).ok())
                    .unwrap_or_default();
                let after = json(after)
                    .and_then(|v| crate::model::chains::from_json(&v).ok())
                    .unwrap_or_default();
                let ups = required.into_iter().map(|r| r.job);
                (name, ups.chain(after.into_iter().map(|a| a.job)).collect())
            })
            .collect();
        Ok(crate::model::requires::cycle_through(&edges, job)
            .map(|c| format!("requires/after: a cycle: {}", c.join(" → "))))
    }

    /// Computes the first slot of rows inserted or changed with SQL, and parks invalid ones.
    async fn prepare(&self, now: i64, config: &Config) -> Result<(usize, usize), StoreError> {
        let rows = self.store.rows_to_prepare(PREPARE_BATCH).await?;
        let (mut ok, mut bad) = (0, 0);
        for row in rows {
            let template = self.template_of(&row, config).await?;
            let mut resolved = resolve_here(&row, config, &self.host.account, template.as_ref());
            // A row whose upstreams lead back to it would wait for itself: parked.
            if let Ok((_, p)) = &resolved
                && (!p.requires.is_empty() || row.after.is_some())
                && let Some(cycle) = self.upstream_cycle(&row.name).await?
            {
                resolved = Err(cycle);
            }
            match resolved {
                Ok((schedule, policy)) => {
                    let slot = policy::first_slot(&schedule, now);
                    // A host-local job's template is never due: its copies run (every_node.rs).
                    let next_exec = if row.run_on.as_deref() == Some("every_node") {
                        i64::MAX
                    } else {
                        slot.saturating_add(jitter_ms(&row.name, slot, policy.jitter))
                    };
                    if self.store.set_prepared(row.id, slot, next_exec).await? {
                        ok += 1;
                        // A job with no time of its own (a chain's next link) has no slot to
                        // print: the largest instant stands for "when its upstream runs".
                        let next = if slot == i64::MAX {
                            "after its upstream".to_string()
                        } else {
                            fmt_ms(slot)
                        };
                        tracing::info!(job = %row.name, next = %next, "job scheduled");
                    }
                }
                Err(message) => {
                    // A value that could not be read parks the row whatever its signature.
                    let fence = row
                        .decode_error
                        .is_none()
                        .then_some(row.signature.as_deref());
                    if self.store.set_invalid(row.id, fence, &message).await? {
                        bad += 1;
                        tracing::error!(job = %row.name, error = %message, "job row is invalid; skipped until fixed");
                    }
                }
            }
        }
        Ok((ok, bad))
    }
}
