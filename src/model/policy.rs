//! Pure policy decisions, taken in Rust on claim and on release: which slot a claimed row serves
//! (misfire, lost runs, abandoned retries) and where it goes next (success, retry, give up).
//!
//! All instants are milliseconds since the Unix epoch, UTC, as stored in the database; `now` is
//! the database clock at claim or release time, always a parameter.
//!
//! # Missed slots
//! A due slot is *missed* when it is claimed more than its threshold after its time: the job's
//! `starting_deadline` if set, else [`MISFIRE_THRESHOLD_DEFAULT`]. Slots within the threshold are
//! *fresh* and always run. For the missed ones:
//!
//! | misfire | no `starting_deadline` | with `starting_deadline` |
//! |---|---|---|
//! | `skip` | dropped | dropped |
//! | `run_once` | one run, serving the latest due slot | dropped (the deadline is a hard limit) |
//! | `run_all` | each run, oldest first, at most `max_catch_up` (the newest) | dropped |
//!
//! Dropped slots are summarised in one history row (count, first, last).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::model::job::{Misfire, Outcome, Overlap, Policy, PreviousRun};
use crate::schedule::{Kind, Schedule};

/// Lateness after which a slot counts as missed when the job sets no `starting_deadline`.
pub const MISFIRE_THRESHOLD_DEFAULT: Duration = Duration::from_secs(60);
/// Safety cap when walking missed slots (a per-second job down for 11 days).
const MAX_WALK: u32 = 1_000_000;

/// What a node found in a row it just claimed.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedState {
    /// The slot the row was waiting to serve (ms). `None`: not computed yet.
    pub slot: Option<i64>,
    /// Attempts already started for `slot` (0: none yet).
    pub attempts: u32,
    /// The previous claim was never released: its holder died or lost the lease.
    pub taken_over: bool,
    /// `sqlcron run JOB` asked for one extra run.
    pub run_now: bool,
    /// The row waited for a free place in its pool: that wait does not make `slot` missed
    /// (only `starting_deadline` does).
    pub pool_wait: bool,
}

pub use crate::model::history::Skipped;

/// The decision taken on claim.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimPlan {
    /// The previous holder's attempt `(slot, attempt)` to record as lost.
    pub lost: Option<(i64, u32)>,
    /// Pending retries given up because the next regular slot came: `(slot, next attempt)`.
    pub abandoned: Option<(i64, u32)>,
    pub skipped: Option<Skipped>,
    pub action: ClaimAction,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ClaimAction {
    /// Run now, serving `slot` as attempt `attempt` (1 for the first try).
    Run {
        slot: i64,
        attempt: u32,
        manual: bool,
    },
    /// Nothing to run now: release with the row waiting for `slot`.
    Wait { slot: i64 },
}

/// Where a row goes after a run or a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextState {
    /// The slot the row now waits for.
    pub slot: i64,
    /// Attempts already started for it.
    pub attempts: u32,
    /// When the row becomes due (slot + jitter, or the retry time).
    pub next_exec: i64,
    /// Retries of `(slot, attempt)` abandoned because the next regular slot is closer.
    pub abandoned: Option<(i64, u32)>,
}

fn to_dt(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms)
}

/// The next regular slot after `slot`, in ms; `i64::MAX` when the schedule ends.
pub fn next_slot(schedule: &Schedule, slot: i64) -> i64 {
    schedule.next_after_ms(slot)
}

/// The first slot of a row just created or changed, in ms: the next regular slot after `now`,
/// except for a one-off (`@at`), whose only slot is its instant even when that has passed (the
/// misfire policy then decides whether it runs late). A one-off that already ran is not
/// prepared again: its row keeps its slot (see `docs/schedule.md`, "One-off jobs").
pub fn first_slot(schedule: &Schedule, now: i64) -> i64 {
    match schedule.kind() {
        Kind::At(at) => at.saturating_mul(1000),
        _ => next_slot(schedule, now),
    }
}

/// A delay in `[0, jitter)` fixed for one (job, slot): spreads jobs due at the same second, and
/// every node computes the same value.
pub fn jitter_ms(job: &str, slot: i64, jitter: Duration) -> i64 {
    let bound = jitter.as_millis() as u64;
    if bound == 0 {
        return 0;
    }
    // FNV-1a over the name, mixed with the slot (splitmix64 finaliser).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in job.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut z = h ^ (slot as u64);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z % bound) as i64
}

/// Decides what a claimed row does now.
pub fn plan_claim(
    state: &ClaimedState,
    now: i64,
    policy: &Policy,
    schedule: &Schedule,
) -> ClaimPlan {
    let mut plan = ClaimPlan {
        lost: None,
        abandoned: None,
        skipped: None,
        action: ClaimAction::Wait { slot: now },
    };
    let Some(slot) = state.slot else {
        // Never computed (a fresh SQL row claimed by a race with preparation): the first slot.
        plan.action = ClaimAction::Wait {
            slot: first_slot(schedule, now),
        };
        return plan;
    };
    // A lost run is accounted for before a manual run: the manual run waits (its request stays
    // in the row and is served right after this claim's release).
    if state.run_now && !(state.taken_over && state.attempts > 0) {
        plan.action = ClaimAction::Run {
            slot: now,
            attempt: 1,
            manual: true,
        };
        return plan;
    }
    // Saturating: a row's attempts come from the database, where a writer may set the largest.
    let attempt = state.attempts.saturating_add(1);
    let retry_allowed = if state.taken_over && state.attempts > 0 {
        plan.lost = Some((slot, state.attempts));
        // A lost run is rerun once even with retries = 0; further reruns count as retries.
        policy.rerun_lost && state.attempts < policy.retries.max(1) + 1
    } else {
        attempt <= policy.retries + 1
    };
    let mut first = slot;
    if attempt > 1 {
        let next = next_slot(schedule, slot);
        if retry_allowed && next > now {
            plan.action = ClaimAction::Run {
                slot,
                attempt,
                manual: false,
            };
            return plan;
        }
        if retry_allowed {
            plan.abandoned = Some((slot, attempt));
        }
        first = next;
    }
    if state.pool_wait && first == slot && slot <= now {
        let within_deadline = policy
            .starting_deadline
            .is_none_or(|d| now - slot <= d.as_millis() as i64);
        if within_deadline {
            plan.action = ClaimAction::Run {
                slot,
                attempt,
                manual: false,
            };
            return plan;
        }
    }
    let (skipped, action) = catch_up(first, now, policy, schedule);
    plan.skipped = skipped;
    plan.action = action;
    plan
}

/// Misfire handling from `first` (attempt 1) at `now`; see the module documentation.
fn catch_up(
    first: i64,
    now: i64,
    policy: &Policy,
    schedule: &Schedule,
) -> (Option<Skipped>, ClaimAction) {
    if first > now {
        return (None, ClaimAction::Wait { slot: first });
    }
    let threshold = policy
        .starting_deadline
        .unwrap_or(MISFIRE_THRESHOLD_DEFAULT)
        .as_millis() as i64;
    let hard_deadline = policy.starting_deadline.is_some();
    // Walk the due slots: missed ones (older than the threshold) then fresh ones.
    let mut missed: Option<Skipped> = None;
    let mut latest = first;
    let mut slot = first;
    let mut first_fresh = None;
    let mut walked = 0;
    while slot <= now {
        latest = slot;
        if now - slot > threshold {
            let m = missed.get_or_insert(Skipped {
                count: 0,
                first: slot,
                last: slot,
            });
            m.count += 1;
            m.last = slot;
        } else {
            first_fresh = Some(slot);
            break;
        }
        walked += 1;
        if walked >= MAX_WALK {
            // Jump: the rest of the missed run is counted as one more.
            let resume = to_dt(now - threshold)
                .and_then(|t| schedule.next_after(t))
                .map(|t| t.timestamp_millis())
                .unwrap_or(i64::MAX);
            if let Some(m) = missed.as_mut() {
                m.count += 1;
            }
            slot = resume;
            continue;
        }
        slot = next_slot(schedule, slot);
    }
    let Some(missed_run) = missed else {
        // Nothing missed: run the oldest fresh slot (or wait for the next one).
        return match first_fresh {
            Some(s) => (
                None,
                ClaimAction::Run {
                    slot: s,
                    attempt: 1,
                    manual: false,
                },
            ),
            None => (None, ClaimAction::Wait { slot }),
        };
    };
    let after_missed = first_fresh.unwrap_or(slot);
    let fresh_action = || match first_fresh {
        Some(s) => ClaimAction::Run {
            slot: s,
            attempt: 1,
            manual: false,
        },
        None => ClaimAction::Wait { slot: after_missed },
    };
    if hard_deadline {
        return (Some(missed_run), fresh_action());
    }
    match policy.misfire {
        Misfire::Skip => (Some(missed_run), fresh_action()),
        Misfire::RunOnce => {
            if first_fresh.is_some() {
                // A fresh slot is due: it is the one run for all of them.
                (Some(missed_run), fresh_action())
            } else {
                let skipped = (missed_run.count > 1).then(|| Skipped {
                    count: missed_run.count - 1,
                    first: missed_run.first,
                    last: previous_of(schedule, missed_run.first, latest),
                });
                (
                    skipped,
                    ClaimAction::Run {
                        slot: latest,
                        attempt: 1,
                        manual: false,
                    },
                )
            }
        }
        Misfire::RunAll => {
            let keep = u64::from(policy.max_catch_up);
            if missed_run.count <= keep {
                (
                    None,
                    ClaimAction::Run {
                        slot: missed_run.first,
                        attempt: 1,
                        manual: false,
                    },
                )
            } else if keep == 0 {
                (Some(missed_run), fresh_action())
            } else {
                // Drop the oldest, keep the newest `keep` missed slots.
                let drop = missed_run.count - keep;
                let mut s = missed_run.first;
                let mut last_dropped = s;
                for _ in 0..drop {
                    last_dropped = s;
                    s = next_slot(schedule, s);
                }
                (
                    Some(Skipped {
                        count: drop,
                        first: missed_run.first,
                        last: last_dropped,
                    }),
                    ClaimAction::Run {
                        slot: s,
                        attempt: 1,
                        manual: false,
                    },
                )
            }
        }
    }
}

/// The slot before `latest`, walking from `first` (only used for a history summary).
fn previous_of(schedule: &Schedule, first: i64, latest: i64) -> i64 {
    let mut prev = first;
    let mut s = first;
    let mut n = 0;
    while s < latest && n < MAX_WALK {
        prev = s;
        s = next_slot(schedule, s);
        n += 1;
    }
    prev
}

/// What the previous, never released claim of a row left behind, as its taker accounts for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Previous {
    /// Nothing the row does not know already: plan from the row's own slot and attempts.
    Nothing,
    /// The run `(slot, attempt)` started and never ended on its node: it is lost.
    Lost { slot: i64, attempt: u32 },
    /// The run `(slot, attempt)` ended and was recorded, but the row was never released:
    /// continue as that release would have.
    Finished {
        slot: i64,
        attempt: u32,
        failed: bool,
    },
}

/// Decides what the newest run record under an older claim token means for a row waiting for
/// `row_slot` with `row_attempts` attempts started.
///
/// A record is *unaccounted* when it serves the row's slot with a higher attempt than the row
/// counts: it was started, and no release has moved the row past it since. A manual run (its
/// own slot) or a record the row has moved past is accounted for. A slot that was claimed but
/// never started has no record: it is still owed and follows the misfire policy.
pub fn account_previous(
    row_slot: Option<i64>,
    row_attempts: u32,
    previous: Option<&PreviousRun>,
) -> Previous {
    let Some(p) = previous else {
        return Previous::Nothing;
    };
    if row_slot != Some(p.slot) || p.attempt <= row_attempts {
        return Previous::Nothing;
    }
    match p.outcome {
        Ok(Outcome::Running | Outcome::Lost) => Previous::Lost {
            slot: p.slot,
            attempt: p.attempt,
        },
        Ok(o) if o.is_finished() => Previous::Finished {
            slot: p.slot,
            attempt: p.attempt,
            failed: o != Outcome::Ok,
        },
        _ => Previous::Nothing,
    }
}

/// A run that just ended, as [`after_run`] needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Finished {
    /// The slot it served and its attempt number.
    pub slot: i64,
    pub attempt: u32,
    /// An extra run asked for with `sqlcron run`.
    pub manual: bool,
    pub failed: bool,
    /// The database clock at the end (approximately).
    pub now: i64,
    /// The slot the row was waiting for before a manual run.
    pub waiting_slot: i64,
}

/// Where a row goes after a run ended.
pub fn after_run(job: &str, run: &Finished, policy: &Policy, schedule: &Schedule) -> NextState {
    let Finished {
        slot,
        attempt,
        manual,
        failed,
        now,
        waiting_slot,
    } = *run;
    if manual {
        // An extra run leaves the schedule as it was.
        return NextState {
            slot: waiting_slot,
            attempts: 0,
            next_exec: waiting_slot.saturating_add(jitter_ms(job, waiting_slot, policy.jitter)),
            abandoned: None,
        };
    }
    let next = next_slot(schedule, slot);
    let regular = NextState {
        slot: next,
        attempts: 0,
        next_exec: next.saturating_add(jitter_ms(job, next, policy.jitter)),
        abandoned: None,
    };
    if !failed || attempt > policy.retries {
        return regular;
    }
    let retry_at = now.saturating_add(backoff(policy, attempt).as_millis() as i64);
    if retry_at < next {
        NextState {
            slot,
            attempts: attempt,
            next_exec: retry_at,
            abandoned: None,
        }
    } else {
        NextState {
            abandoned: Some((slot, attempt.saturating_add(1))),
            ..regular
        }
    }
}

/// Exponential backoff before attempt `attempt + 1`: `retry_backoff * 2^(attempt-1)`, capped.
pub fn backoff(policy: &Policy, attempt: u32) -> Duration {
    let factor = 1u32
        .checked_shl(attempt.saturating_sub(1))
        .unwrap_or(u32::MAX);
    policy
        .retry_backoff
        .checked_mul(factor)
        .unwrap_or(policy.retry_backoff_max)
        .min(policy.retry_backoff_max)
}

/// With `overlap = "replace"`, how long a run may go on: until its next regular slot is due
/// (database clock, `now`). `None` for other policies, manual runs and a schedule with no next
/// slot.
pub fn replace_delay(
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
    let next = next_slot(schedule, slot);
    if next == i64::MAX {
        return None;
    }
    let due = next.saturating_add(jitter_ms(job, next, policy.jitter));
    Some(Duration::from_millis(due.saturating_sub(now).max(0) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_offs_slot_stays_its_instant_when_it_has_passed() {
        let s = Schedule::parse("@at 2026-12-24T18:00:00+01:00", "UTC").unwrap();
        let at = |t: &str| DateTime::parse_from_rfc3339(t).unwrap().timestamp_millis();
        assert_eq!(
            first_slot(&s, at("2027-01-01T00:00:00Z")),
            at("2026-12-24T17:00:00Z")
        );
    }

    const MIN: i64 = 60_000;
    const T0: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

    fn every_minute() -> Schedule {
        Schedule::parse("* * * * *", "UTC").unwrap()
    }

    fn hourly() -> Schedule {
        Schedule::parse("0 * * * *", "UTC").unwrap()
    }

    fn fresh(slot: i64) -> ClaimedState {
        ClaimedState {
            slot: Some(slot),
            attempts: 0,
            taken_over: false,
            run_now: false,
            pool_wait: false,
        }
    }

    fn policy(misfire: Misfire) -> Policy {
        Policy {
            misfire,
            ..Policy::default()
        }
    }

    fn run(slot: i64, attempt: u32) -> ClaimAction {
        ClaimAction::Run {
            slot,
            attempt,
            manual: false,
        }
    }

    #[test]
    fn on_time_slot_runs_under_every_policy() {
        for m in [Misfire::Skip, Misfire::RunOnce, Misfire::RunAll] {
            let p = plan_claim(&fresh(T0), T0 + 300, &policy(m), &every_minute());
            assert_eq!(p.action, run(T0, 1));
            assert_eq!(p.skipped, None);
        }
    }

    #[test]
    fn skip_drops_missed_and_waits_for_the_next_future_slot() {
        // Hourly job, cluster down for 3.5 hours.
        let now = T0 + 210 * MIN;
        let p = plan_claim(&fresh(T0), now, &policy(Misfire::Skip), &hourly());
        assert_eq!(
            p.action,
            ClaimAction::Wait {
                slot: T0 + 240 * MIN
            }
        );
        assert_eq!(
            p.skipped,
            Some(Skipped {
                count: 4,
                first: T0,
                last: T0 + 180 * MIN
            })
        );
    }

    #[test]
    fn run_once_serves_the_latest_missed_slot_once() {
        let now = T0 + 210 * MIN;
        let p = plan_claim(&fresh(T0), now, &policy(Misfire::RunOnce), &hourly());
        assert_eq!(p.action, run(T0 + 180 * MIN, 1));
        assert_eq!(
            p.skipped,
            Some(Skipped {
                count: 3,
                first: T0,
                last: T0 + 120 * MIN
            })
        );
    }

    #[test]
    fn run_all_replays_oldest_first_up_to_max_catch_up() {
        let now = T0 + 210 * MIN;
        let p = plan_claim(&fresh(T0), now, &policy(Misfire::RunAll), &hourly());
        assert_eq!(p.action, run(T0, 1));
        assert_eq!(p.skipped, None);
        let mut limited = policy(Misfire::RunAll);
        limited.max_catch_up = 2;
        let p = plan_claim(&fresh(T0), now, &limited, &hourly());
        assert_eq!(p.action, run(T0 + 120 * MIN, 1));
        assert_eq!(
            p.skipped,
            Some(Skipped {
                count: 2,
                first: T0,
                last: T0 + 60 * MIN
            })
        );
    }

    #[test]
    fn starting_deadline_is_a_hard_limit() {
        let mut p = policy(Misfire::RunOnce);
        p.starting_deadline = Some(Duration::from_secs(5));
        let plan = plan_claim(&fresh(T0), T0 + 10_000, &p, &hourly());
        assert_eq!(
            plan.action,
            ClaimAction::Wait {
                slot: T0 + 60 * MIN
            }
        );
        assert_eq!(plan.skipped.unwrap().count, 1);
        let plan = plan_claim(&fresh(T0), T0 + 4_000, &p, &hourly());
        assert_eq!(plan.action, run(T0, 1));
    }

    #[test]
    fn fresh_slot_after_missed_ones_runs() {
        // Every minute, down 10 minutes: skip runs the slot that is due now.
        let now = T0 + 10 * MIN + 500;
        let p = plan_claim(&fresh(T0), now, &policy(Misfire::Skip), &every_minute());
        assert_eq!(p.action, run(T0 + 10 * MIN, 1));
        assert_eq!(p.skipped.unwrap().count, 10);
    }

    #[test]
    fn lost_run_is_rerun_once_then_moves_on() {
        let lost = ClaimedState {
            slot: Some(T0),
            attempts: 1,
            taken_over: true,
            run_now: false,
            pool_wait: false,
        };
        let p = plan_claim(&lost, T0 + 15_000, &Policy::default(), &hourly());
        assert_eq!(p.lost, Some((T0, 1)));
        assert_eq!(p.action, run(T0, 2));
        // The rerun died too: record it, move to the next slot.
        let again = ClaimedState {
            attempts: 2,
            ..lost.clone()
        };
        let p = plan_claim(&again, T0 + 30_000, &Policy::default(), &hourly());
        assert_eq!(p.lost, Some((T0, 2)));
        assert_eq!(
            p.action,
            ClaimAction::Wait {
                slot: T0 + 60 * MIN
            }
        );
        // At-most-once: never rerun.
        let at_most_once = Policy {
            rerun_lost: false,
            ..Policy::default()
        };
        let p = plan_claim(&lost, T0 + 15_000, &at_most_once, &hourly());
        assert_eq!(p.lost, Some((T0, 1)));
        assert_eq!(
            p.action,
            ClaimAction::Wait {
                slot: T0 + 60 * MIN
            }
        );
    }

    fn prev(slot: i64, attempt: u32, outcome: Outcome) -> PreviousRun {
        PreviousRun {
            slot,
            attempt,
            outcome: Ok(outcome),
            token: 7,
        }
    }

    #[test]
    fn previous_run_is_accounted_by_the_rows_slot_and_attempts() {
        // Started and never ended: lost, whatever token wrote it (a takeover chain).
        let running = prev(T0, 1, Outcome::Running);
        assert_eq!(
            account_previous(Some(T0), 0, Some(&running)),
            Previous::Lost {
                slot: T0,
                attempt: 1
            }
        );
        // Recorded lost by a taker that died before its rerun started: still owed.
        let lost = prev(T0, 1, Outcome::Lost);
        assert_eq!(
            account_previous(Some(T0), 0, Some(&lost)),
            Previous::Lost {
                slot: T0,
                attempt: 1
            }
        );
        // Ended, but the release never landed: continue from it.
        let failed = prev(T0, 2, Outcome::Failed);
        assert_eq!(
            account_previous(Some(T0), 1, Some(&failed)),
            Previous::Finished {
                slot: T0,
                attempt: 2,
                failed: true
            }
        );
        // The row has moved past it (released, or a lost run already owed by the row).
        assert_eq!(
            account_previous(Some(T0 + 3_600_000), 0, Some(&running)),
            Previous::Nothing
        );
        assert_eq!(
            account_previous(Some(T0), 1, Some(&lost)),
            Previous::Nothing
        );
        // Summaries and unknown outcomes say nothing about a run.
        assert_eq!(
            account_previous(Some(T0), 0, Some(&prev(T0, 1, Outcome::Skipped))),
            Previous::Nothing
        );
        assert_eq!(account_previous(Some(T0), 0, None), Previous::Nothing);
    }

    #[test]
    fn manual_run_waits_until_a_lost_run_is_rerun() {
        let state = ClaimedState {
            slot: Some(T0),
            attempts: 1,
            taken_over: true,
            run_now: true,
            pool_wait: false,
        };
        let p = plan_claim(&state, T0 + 15_000, &Policy::default(), &hourly());
        assert_eq!(p.lost, Some((T0, 1)));
        assert_eq!(p.action, run(T0, 2));
        let manual = ClaimedState {
            taken_over: false,
            attempts: 0,
            ..state
        };
        let p = plan_claim(&manual, T0 + 15_000, &Policy::default(), &hourly());
        assert!(matches!(p.action, ClaimAction::Run { manual: true, .. }));
    }

    #[test]
    fn claimed_before_start_is_not_lost() {
        let state = ClaimedState {
            slot: Some(T0),
            attempts: 0,
            taken_over: true,
            run_now: false,
            pool_wait: false,
        };
        let p = plan_claim(&state, T0 + 15_000, &Policy::default(), &hourly());
        assert_eq!(p.lost, None);
        assert_eq!(p.action, run(T0, 1));
    }

    #[test]
    fn pending_retry_is_abandoned_when_the_next_slot_comes() {
        let p = Policy {
            retries: 3,
            ..Policy::default()
        };
        let retry = ClaimedState {
            slot: Some(T0),
            attempts: 1,
            taken_over: false,
            run_now: false,
            pool_wait: false,
        };
        let plan = plan_claim(&retry, T0 + 30_000, &p, &every_minute());
        assert_eq!(plan.action, run(T0, 2));
        let plan = plan_claim(&retry, T0 + MIN + 1_000, &p, &every_minute());
        assert_eq!(plan.abandoned, Some((T0, 2)));
        assert_eq!(plan.action, run(T0 + MIN, 1));
    }

    /// A row's attempts set with SQL to the largest number: no overflow (a panic in a debug
    /// build, 0 attempts in a release build); the slot is given up as one out of retries.
    #[test]
    fn the_largest_attempts_a_writer_sets_give_the_slot_up() {
        let p = Policy {
            retries: 3,
            ..Policy::default()
        };
        for taken_over in [false, true] {
            let state = ClaimedState {
                slot: Some(T0),
                attempts: u32::MAX,
                taken_over,
                run_now: false,
                pool_wait: false,
            };
            let plan = plan_claim(&state, T0 + 30_000, &p, &every_minute());
            assert!(
                !matches!(plan.action, ClaimAction::Run { slot: T0, .. }),
                "{plan:?}"
            );
        }
        let next = after_run(
            "j",
            &Finished {
                slot: T0,
                attempt: u32::MAX,
                manual: false,
                failed: true,
                now: T0 + 1_000,
                waiting_slot: T0,
            },
            &p,
            &every_minute(),
        );
        assert_eq!(next.attempts, 0, "{next:?}");
        assert_eq!(next.next_exec, T0 + MIN);
    }

    #[test]
    fn retries_back_off_exponentially_with_a_cap() {
        let p = Policy {
            retries: 5,
            retry_backoff: Duration::from_secs(10),
            retry_backoff_max: Duration::from_secs(35),
            ..Policy::default()
        };
        assert_eq!(backoff(&p, 1), Duration::from_secs(10));
        assert_eq!(backoff(&p, 2), Duration::from_secs(20));
        assert_eq!(backoff(&p, 3), Duration::from_secs(35));
        assert_eq!(backoff(&p, 40), Duration::from_secs(35));
        let s = hourly();
        let next = after_run(
            "j",
            &Finished {
                slot: T0,
                attempt: 1,
                manual: false,
                failed: true,
                now: T0 + 1_000,
                waiting_slot: 0,
            },
            &p,
            &s,
        );
        assert_eq!(
            (next.slot, next.attempts, next.next_exec),
            (T0, 1, T0 + 11_000)
        );
        let done = after_run(
            "j",
            &Finished {
                slot: T0,
                attempt: 6,
                manual: false,
                failed: true,
                now: T0 + 1_000,
                waiting_slot: 0,
            },
            &p,
            &s,
        );
        assert_eq!((done.slot, done.attempts), (T0 + 60 * MIN, 0));
        let ok = after_run(
            "j",
            &Finished {
                slot: T0,
                attempt: 1,
                manual: false,
                failed: false,
                now: T0 + 1_000,
                waiting_slot: 0,
            },
            &p,
            &s,
        );
        assert_eq!(ok.next_exec, T0 + 60 * MIN);
    }

    #[test]
    fn retry_that_would_pass_the_next_slot_is_abandoned() {
        let p = Policy {
            retries: 2,
            retry_backoff: Duration::from_secs(90),
            ..Policy::default()
        };
        let next = after_run(
            "j",
            &Finished {
                slot: T0,
                attempt: 1,
                manual: false,
                failed: true,
                now: T0 + 1_000,
                waiting_slot: 0,
            },
            &p,
            &every_minute(),
        );
        assert_eq!(next.slot, T0 + MIN);
        assert_eq!(next.abandoned, Some((T0, 2)));
    }

    #[test]
    fn manual_run_keeps_the_schedule() {
        let state = ClaimedState {
            run_now: true,
            ..fresh(T0 + 60 * MIN)
        };
        let p = plan_claim(&state, T0 + 5_000, &Policy::default(), &hourly());
        assert_eq!(
            p.action,
            ClaimAction::Run {
                slot: T0 + 5_000,
                attempt: 1,
                manual: true
            }
        );
        let after = after_run(
            "j",
            &Finished {
                slot: T0 + 5_000,
                attempt: 1,
                manual: true,
                failed: false,
                now: T0 + 6_000,
                waiting_slot: T0 + 60 * MIN,
            },
            &Policy::default(),
            &hourly(),
        );
        assert_eq!(after.next_exec, T0 + 60 * MIN);
    }

    #[test]
    fn jitter_is_fixed_per_slot_and_bounded() {
        let j = Duration::from_secs(30);
        let a = jitter_ms("backup", T0, j);
        assert_eq!(a, jitter_ms("backup", T0, j));
        assert!((0..30_000).contains(&a));
        let spread: std::collections::HashSet<_> = (0..50)
            .map(|i| jitter_ms("backup", T0 + i * MIN, j))
            .collect();
        assert!(spread.len() > 40);
        assert_eq!(jitter_ms("backup", T0, Duration::ZERO), 0);
    }

    #[test]
    fn a_per_second_job_down_for_a_day_is_one_summary() {
        let s = Schedule::parse("* * * * * *", "UTC").unwrap();
        let now = T0 + 86_400_000;
        let p = plan_claim(&fresh(T0), now, &policy(Misfire::Skip), &s);
        let skipped = p.skipped.unwrap();
        assert_eq!(skipped.count, 86_400 - 60);
        assert_eq!(p.action, run(now - 60_000, 1));
    }
}
