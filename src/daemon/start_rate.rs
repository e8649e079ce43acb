//! The cluster-wide start rate on this node: how many rows a tick may claim, each claimed row's
//! turn from the budgets (`cron_start_rate`, see `model/start_rate.rs`), and a claimed row's
//! wait for its turn before its start.
//!
//! A tick with due rows reads the budgets (unless the last look, at most [`LOOK_AGAIN`] ago,
//! found none) and claims no more than the cluster's budget has room for within the horizon.
//! After the claim, each pool's budget, then the cluster's, gives the claimed rows their turns
//! in claim order (oldest slot first); a row the budgets have no turn for yet is handed back
//! unrun at its slot, keeping its place among the oldest. A row with a turn ahead waits for it
//! under its lease, in its task, and records how long it waited with its start.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::claimed::Claim;
use super::{Shared, fmt_ms};
use crate::model::policy::MISFIRE_THRESHOLD_DEFAULT;
use crate::model::start_rate::{CLUSTER, pool_budget};
use crate::store::start_rate::Budget;
use crate::store::{JobRow, StoreError};

/// How long a look that found no budget is trusted: a budget written with SQL, or by another
/// node's file, is obeyed within this time.
const LOOK_AGAIN: Duration = Duration::from_secs(5);

/// What this node knows of the budgets.
#[derive(Default)]
pub(super) struct RateView {
    /// When the budgets were last read and found empty.
    none_seen: Option<Instant>,
    /// No start of the cluster's budget fits before this (this node's last take found it
    /// spent): the node does not claim before.
    spent_until: Option<Instant>,
}

/// What a tick may claim under the budgets.
pub(super) enum Allowance {
    /// No budget: claim up to the free capacity.
    Unlimited,
    /// Claim at most this many, then give the rows their turns from these budgets.
    Limited(usize, Vec<Budget>),
    /// The cluster's budget has no start within the horizon: claim nothing before this
    /// database time.
    Spent(i64),
}

/// A claimed row's turn from the start rate.
#[derive(Debug, Clone, Copy)]
pub(super) struct Turn {
    /// Milliseconds from the claim to the turn.
    pub wait: i64,
    /// Milliseconds the rate held the row before its claim (0 when it did not).
    pub held_before: i64,
}

impl Turn {
    /// The turn of `row`, claimed at database time `now` with `wait` to go. The rate held the
    /// row since its slot when the claim was cut short by the budget (`cut`), when the row had
    /// been handed back before, or when it waits now; a row taken over from another node owes
    /// its lateness to that node, not to the rate, and a retry its lateness to its backoff.
    pub(super) fn of(row: &JobRow, now: i64, wait: i64, cut: bool) -> Option<Turn> {
        let held = cut || wait > 0 || row.pool_wait != crate::store::PoolWait::No;
        let since_slot = match (row.prev_exec_by.is_none() && row.attempt == 0, row.slot) {
            (true, Some(slot)) => now.saturating_sub(slot).max(0),
            _ => 0,
        };
        held.then_some(Turn {
            wait,
            held_before: since_slot,
        })
    }
}

impl Shared {
    fn rate_view(&self) -> std::sync::MutexGuard<'_, RateView> {
        self.rates.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets what the node knew of the budgets (a reload may have written new ones).
    pub(super) fn budgets_changed(&self) {
        *self.rate_view() = RateView::default();
    }

    /// How many rows a tick at database time `now` may claim, at most `free`.
    pub(super) async fn allowance(&self, now: i64, free: usize) -> Result<Allowance, StoreError> {
        {
            let view = self.rate_view();
            if view.none_seen.is_some_and(|at| at.elapsed() < LOOK_AGAIN) {
                return Ok(Allowance::Unlimited);
            }
            if let Some(until) = view.spent_until
                && let Some(left) = until.checked_duration_since(Instant::now())
            {
                return Ok(Allowance::Spent(now + left.as_millis() as i64));
            }
        }
        let (db_now, budgets) = self.store.start_rates().await?;
        if budgets.is_empty() {
            self.rate_view().none_seen = Some(Instant::now());
            return Ok(Allowance::Unlimited);
        }
        // Claims come in batches of a quarter second's worth of the rate (or the free places,
        // when fewer), not one per start.
        let room = budgets.iter().find(|b| b.name == CLUSTER).map(|b| {
            let room = b.rate.room(b.tat, db_now);
            let batch = b.rate.batch().min(free);
            if room < batch {
                let at = b.rate.when_room(b.tat, db_now, batch);
                Err(now + (at - db_now))
            } else {
                Ok(room)
            }
        });
        match room {
            Some(Err(at)) => {
                let left = Duration::from_millis((at - now).max(0) as u64);
                self.rate_view().spent_until = Some(Instant::now() + left);
                Ok(Allowance::Spent(at))
            }
            Some(Ok(room)) => Ok(Allowance::Limited(free.min(room), budgets)),
            None => Ok(Allowance::Limited(free, budgets)),
        }
    }

    /// Gives each claimed row (in claim order) its turn from the budgets: the rows that keep
    /// their claim, each with its wait in milliseconds (0: start now); the others are handed
    /// back. A row taken over from another node is handed back as it was, claimed by that node
    /// without a lease (it may owe a rerun only the next takeover's look can tell): takeovers
    /// take their turns like every other start.
    pub(super) async fn ration(
        &self,
        rows: Vec<JobRow>,
        budgets: &[Budget],
        now: i64,
    ) -> Result<Vec<(JobRow, i64)>, StoreError> {
        match self.take_turns(&rows, budgets).await {
            Ok(waits) => Ok(self.hand_back_refused(rows, waits).await),
            Err(e) => {
                // No turn could be taken: every row goes back unrun, fenced, rather than wait
                // for its lease to end unsupervised.
                let waits = rows.iter().map(|r| Err(back_at_slot(r, now))).collect();
                self.hand_back_refused(rows, waits).await;
                Err(e)
            }
        }
    }

    /// Each row's turn: Ok(its wait), or Err(when it is due again, handed back).
    async fn take_turns(
        &self,
        rows: &[JobRow],
        budgets: &[Budget],
    ) -> Result<Vec<Result<i64, i64>>, StoreError> {
        let named: BTreeMap<&str, &Budget> = budgets.iter().map(|b| (b.name.as_str(), b)).collect();
        let mut waits: Vec<Result<i64, i64>> = vec![Ok(0); rows.len()];
        // Pools first: a row the cluster gives a turn to is then sure to have its pool's.
        let mut by_pool: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, row) in rows.iter().enumerate() {
            if let Some(pool) = &row.pool
                && named.contains_key(pool_budget(pool).as_str())
            {
                by_pool.entry(pool_budget(pool)).or_default().push(i);
            }
        }
        for (budget, members) in by_pool {
            self.give_turns(&budget, rows, &members, &mut waits).await?;
        }
        if named.contains_key(CLUSTER) {
            let members: Vec<usize> = (0..rows.len()).filter(|i| waits[*i].is_ok()).collect();
            self.give_turns(CLUSTER, rows, &members, &mut waits).await?;
        }
        Ok(waits)
    }

    /// Hands back the rows without a turn (fenced by their claims) and returns the others with
    /// their waits.
    async fn hand_back_refused(
        &self,
        rows: Vec<JobRow>,
        waits: Vec<Result<i64, i64>>,
    ) -> Vec<(JobRow, i64)> {
        let mut kept = Vec::with_capacity(rows.len());
        let mut given_back = 0;
        for (row, wait) in rows.into_iter().zip(waits) {
            match wait {
                Ok(wait) => kept.push((row, wait)),
                Err(back_at) => {
                    given_back += 1;
                    // The wait is the rate's (not counted as missed) for a slot that was not
                    // yet late enough to be missed when the rate first held it.
                    let late = row
                        .claimed_at
                        .zip(row.slot)
                        .map_or(0, |(at, slot)| at.saturating_sub(slot));
                    let on_time = late < MISFIRE_THRESHOLD_DEFAULT.as_millis() as i64;
                    let given = self
                        .store
                        .give_back(
                            row.id,
                            &self.node,
                            row.token,
                            back_at,
                            on_time,
                            row.prev_exec_by.is_some(),
                        )
                        .await;
                    match given {
                        Ok(_) => {
                            tracing::debug!(job = %row.name, due = %fmt_ms(back_at), "no start left in the start rate: handed back");
                        }
                        Err(e) => {
                            tracing::warn!(job = %row.name, error = %e, "could not hand back a row the start rate has no start for; its lease will expire");
                        }
                    }
                }
            }
        }
        if given_back > 0 {
            self.metrics.rate_given_back(given_back);
        }
        kept
    }

    /// Takes turns from `budget` for the rows `members` (indexes into `rows`, in claim order):
    /// each member's wait becomes the later of its wait so far and its turn. A member without a
    /// turn is handed back: due again at its slot (keeping its place among the oldest) for the
    /// cluster's budget, at the budget's next room for a pool's (the pool's rows would otherwise
    /// come back at the head of every claim). A row taken over goes back as a takeover.
    async fn give_turns(
        &self,
        budget: &str,
        rows: &[JobRow],
        members: &[usize],
        waits: &mut [Result<i64, i64>],
    ) -> Result<(), StoreError> {
        if members.is_empty() {
            return Ok(());
        }
        let Some((now, grant)) = self.store.take_starts(budget, members.len()).await? else {
            return Ok(());
        };
        let mut turns = grant.waits_ms.iter();
        let mut refused: i64 = 0;
        for &i in members {
            let turn = turns.next().copied();
            // A pool's refused rows come back one turn apart from the pool's next room: not
            // all at once, to be refused again together.
            let back_at = if budget == CLUSTER {
                back_at_slot(&rows[i], now)
            } else {
                refused += i64::from(turn.is_none());
                back_at_slot(&rows[i], now).max(
                    grant
                        .next_room_ms
                        .saturating_add(refused.saturating_mul(grant.interval_ms)),
                )
            };
            waits[i] = match (waits[i], turn) {
                (Ok(w), Some(t)) => Ok(w.max(t)),
                _ => Err(back_at),
            };
        }
        if budget == CLUSTER && grant.waits_ms.len() < members.len() {
            let left = Duration::from_millis((grant.next_room_ms - now).max(0) as u64);
            self.rate_view().spent_until = Some(Instant::now() + left);
        }
        Ok(())
    }

    /// Waits for a claimed row's turn from the start rate. False when the node began to stop
    /// meanwhile (the row is then handed over unrun, as any row not yet started).
    pub(super) async fn wait_for_turn(&self, claim: &Claim) -> bool {
        let Some(at) = claim.turn else { return true };
        let stopped = self.stop_holds.notified();
        tokio::pin!(stopped);
        stopped.as_mut().enable();
        if self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            return false;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(at.into()) => true,
            _ = stopped => false,
        }
    }
}

/// When a row handed back is due again by itself: its slot (keeping its place among the
/// oldest), or now for a slot still ahead (a manual run's).
fn back_at_slot(row: &JobRow, now: i64) -> i64 {
    row.slot.map_or(now, |s| s.min(now))
}

/// The node's view of the budgets, as [`Shared`] holds it.
pub(super) type Rates = Mutex<RateView>;
