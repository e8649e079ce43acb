//! What may keep a claimed row's due slot from running: its calendars (read from
//! `cron_calendars` when the job names any; `model::calendars` decides) and its upstreams
//! (`requires`: their last successes read, `model::requires` decides), and the history line
//! that records a slot skipped or deferred.

use super::claimed::Claim;
use super::{Shared, fmt_ms};
use std::collections::BTreeMap;

use crate::model::calendars::{Calendars, Excluded, exclude};
use crate::model::history::Skipped;
use crate::model::job::{Outcome, Policy};
use crate::model::policy::{ClaimAction, ClaimPlan, MISFIRE_THRESHOLD_DEFAULT, next_slot};
use crate::model::requires::{Verdict, decide, waited_for};
use crate::schedule::Schedule;
use crate::schedule::calendar::Calendar;

/// What the calendars make of a claim's plan.
pub(super) enum Gate {
    /// Run as planned (no calendar, or the slot is allowed).
    Open,
    /// The slot was skipped or deferred (and recorded so), or waits for its upstreams: the row
    /// waits for `slot`, due again no sooner than `until`.
    Wait { slot: i64, until: i64 },
    /// The row was parked (a calendar is missing or unreadable) or the calendars could not be
    /// read: nothing more to do with this claim.
    Stop,
}

impl Shared {
    /// Judges the regular first attempt of `plan` against the job's calendars, then its
    /// upstreams, and records the slots skipped or deferred. Manual runs, retries and reruns of
    /// a slot already allowed are not judged again.
    pub(super) async fn slot_gate(
        &self,
        claim: &Claim,
        plan: &ClaimPlan,
        policy: &Policy,
        schedule: &Schedule,
    ) -> Gate {
        let ClaimAction::Run {
            slot,
            attempt: 1,
            manual: false,
        } = plan.action
        else {
            return Gate::Open;
        };
        // A rerun of a lost run serves a slot already judged; a takeover that moves on to a
        // new slot is judged like any claim.
        if plan.lost.is_some_and(|(lost, _)| lost == slot) {
            return Gate::Open;
        }
        match self.calendar_gate(claim, slot, policy, schedule).await {
            Gate::Open => self.upstream_gate(claim, slot, policy, schedule).await,
            closed => closed,
        }
    }

    /// The calendars' part of [`Shared::slot_gate`].
    async fn calendar_gate(
        &self,
        claim: &Claim,
        slot: i64,
        policy: &Policy,
        schedule: &Schedule,
    ) -> Gate {
        if policy.calendars.is_empty() {
            return Gate::Open;
        }
        let rows = match self.store.calendars_named(&policy.calendars.names()).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(job = %claim.row.name, error = %e, "could not read the job's calendars; leaving the claim to expire");
                return Gate::Stop;
            }
        };
        let mut calendars = Calendars::new();
        for r in rows {
            match Calendar::parse(&r.name, &r.entries) {
                Ok(c) => {
                    calendars.insert(r.name, c);
                }
                Err(message) => {
                    self.park_claimed(claim, &message).await;
                    return Gate::Stop;
                }
            }
        }
        if let Some(message) = policy.calendars.missing(&calendars) {
            self.park_claimed(claim, &message).await;
            return Gate::Stop;
        }
        match exclude(slot, &policy.calendars, &calendars, schedule) {
            None => Gate::Open,
            Some(e) if self.record_excluded(claim, &e).await => Gate::Wait {
                slot: e.resume,
                until: i64::MIN,
            },
            Some(_) => Gate::Stop,
        }
    }

    /// The upstreams' part of [`Shared::slot_gate`]: the slot waits (looking again every poll
    /// interval) until each upstream has succeeded within its `within` before the slot, at most
    /// until its start deadline (`starting_deadline`, else the misfire threshold); then it is
    /// skipped with the reason.
    async fn upstream_gate(
        &self,
        claim: &Claim,
        slot: i64,
        policy: &Policy,
        schedule: &Schedule,
    ) -> Gate {
        if policy.requires.is_empty() {
            return Gate::Open;
        }
        let mut last_ok = BTreeMap::new();
        for r in &policy.requires {
            match self.store.last_success(&r.job).await {
                Ok(t) => {
                    last_ok.insert(r.job.clone(), t);
                }
                Err(e) => {
                    tracing::warn!(job = %claim.row.name, error = %e, "could not read the job's upstreams; leaving the claim to expire");
                    return Gate::Stop;
                }
            }
        }
        let limit = policy
            .starting_deadline
            .unwrap_or(MISFIRE_THRESHOLD_DEFAULT);
        let recheck = self.config().daemon.poll_interval;
        match decide(slot, claim.now, &policy.requires, &last_ok, limit, recheck) {
            Verdict::Run => {
                // Said with the run's record: "waited 14m for extract".
                if let Some(note) = waited_for(slot, claim.now, &policy.requires, &last_ok, recheck)
                {
                    let _ = claim.waited.set(note);
                }
                Gate::Open
            }
            Verdict::Hold { until } => {
                tracing::debug!(job = %claim.row.name, slot = %fmt_ms(slot), "waiting for its upstreams");
                Gate::Wait { slot, until }
            }
            Verdict::Skip { message } => {
                tracing::warn!(job = %claim.row.name, slot = %fmt_ms(slot), "{message}");
                let kept = Skipped {
                    count: 1,
                    first: slot,
                    last: slot,
                };
                match self.record_kept(claim, kept, &message).await {
                    true => Gate::Wait {
                        slot: next_slot(schedule, slot),
                        until: i64::MIN,
                    },
                    false => Gate::Stop,
                }
            }
        }
    }

    /// Records a stretch of slots the calendars skipped or deferred (idempotent: one line per
    /// job and first slot). False if the claim was lost before it could be written.
    async fn record_excluded(&self, claim: &Claim, e: &Excluded) -> bool {
        let job = &claim.row.name;
        tracing::info!(job = %job, count = e.skipped.count, first = %fmt_ms(e.skipped.first), last = %fmt_ms(e.skipped.last), next = %fmt_ms(e.resume), "{}", e.message);
        self.metrics.calendar_skipped(job, e.skipped.count);
        self.record_kept(claim, e.skipped, &e.message).await
    }

    /// One history line for slots kept from running (idempotent: one line per job and first
    /// slot). False if the claim was lost before it could be written.
    async fn record_kept(&self, claim: &Claim, kept: Skipped, message: &str) -> bool {
        self.until_written(claim, "the slots kept from running", || {
            self.store.record_summary(
                &claim.row.name,
                kept.first,
                0,
                &self.node,
                Outcome::Skipped,
                Some(kept.count as i64),
                Some(kept.last),
                message,
            )
        })
        .await
    }
}
