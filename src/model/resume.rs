//! What resuming a paused job will do, told before the operator resumes it: how many slots
//! passed while it was paused and how many of them the misfire policy runs, decided by the same
//! [`plan_claim`] the node that claims it will call; and the one alternative an operator may
//! choose instead, skipping them all ([`skip_to`]).

use crate::model::job::Policy;
use crate::model::policy::{ClaimAction, ClaimedState, next_slot, plan_claim};
use crate::schedule::Schedule;

/// The most slots counted; beyond it the preview says "at least".
pub const COUNT_MAX: u64 = 100_000;

/// What a resume now would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumePreview {
    /// Slots from the one the row waits for up to `now` (inclusive): what the pause kept from
    /// running.
    pub passed: u64,
    /// The oldest and newest of them (ms), when any passed.
    pub first: Option<i64>,
    pub last: Option<i64>,
    /// Of those, how many the misfire policy runs one after the other once resumed.
    pub runs: u64,
    /// How many it records as skipped.
    pub skipped: u64,
    /// A `sqlcron run` asked for while paused: one manual run comes first.
    pub manual: bool,
    /// The first slot after `now`: where a skip continues.
    pub next: i64,
    /// [`COUNT_MAX`] was reached: the figures are lower bounds.
    pub capped: bool,
}

/// Slots in `[from, to]`, at most [`COUNT_MAX`]: (count, last, capped).
fn count_slots(schedule: &Schedule, from: i64, to: i64) -> (u64, Option<i64>, bool) {
    let (mut n, mut last, mut s) = (0u64, None, from);
    while s <= to {
        if n == COUNT_MAX {
            return (n, last, true);
        }
        n += 1;
        last = Some(s);
        s = next_slot(schedule, s);
    }
    (n, last, false)
}

/// What resuming at `now` does with a row waiting for `slot` after `attempts` attempts of it.
pub fn preview(
    slot: Option<i64>,
    attempts: u32,
    run_now: bool,
    now: i64,
    policy: &Policy,
    schedule: &Schedule,
) -> ResumePreview {
    let next = next_slot(schedule, now);
    let Some(slot) = slot.filter(|s| *s <= now) else {
        return ResumePreview {
            passed: 0,
            first: None,
            last: None,
            runs: 0,
            skipped: 0,
            manual: run_now,
            next: slot.unwrap_or(next),
            capped: false,
        };
    };
    let (passed, last, capped) = count_slots(schedule, slot, now);
    let state = ClaimedState {
        slot: Some(slot),
        attempts,
        taken_over: false,
        run_now: false,
        pool_wait: false,
    };
    let plan = plan_claim(&state, now, policy, schedule);
    let runs = match plan.action {
        // Each slot from the one it runs up to now runs in turn (run_all keeps them all; a
        // single latest slot for run_once; a fresh slot for any policy).
        ClaimAction::Run { slot: from, .. } => count_slots(schedule, from, now).0,
        ClaimAction::Wait { .. } => 0,
    };
    ResumePreview {
        passed,
        first: Some(slot),
        last,
        runs,
        skipped: passed.saturating_sub(runs),
        manual: run_now,
        next,
        capped,
    }
}

/// A skip: the slot the row waits for after skipping every slot up to `now`, the summary of
/// what it skips, `(count, first, last)`, for the history (`None` when nothing passed), and
/// whether the count stopped at [`COUNT_MAX`] (then `last` is `now`, so the line still covers
/// every skipped slot). A slot already tried (`attempts` > 0) has its runs in the history: the
/// summary starts after it.
pub type SkipPlan = (i64, Option<(u64, i64, i64)>, bool);

/// The skip at `now` (see [`SkipPlan`]); `None` when the schedule has no slot after `now` (a
/// one-off, an ended schedule): skipping would end the job without a run.
pub fn skip_to(
    slot: Option<i64>,
    attempts: u32,
    now: i64,
    schedule: &Schedule,
) -> Option<SkipPlan> {
    let next = next_slot(schedule, now);
    if next == i64::MAX {
        return None;
    }
    let first = slot.map(|s| {
        if attempts > 0 {
            next_slot(schedule, s)
        } else {
            s
        }
    });
    Some(match first.filter(|s| *s <= now) {
        Some(first) => {
            let (count, last, capped) = count_slots(schedule, first, now);
            let last = if capped { now } else { last.unwrap_or(first) };
            (next, Some((count, first, last)), capped)
        }
        None if slot.is_some_and(|s| s <= now) => (next, None, false),
        None => (slot.unwrap_or(next), None, false),
    })
}

/// The preview as a sentence: how many slots passed and what the policy does with them.
pub fn describe(p: &ResumePreview, misfire: &str, max_catch_up: u32) -> String {
    let at_least = if p.capped { "at least " } else { "" };
    if p.passed == 0 {
        return "No slot passed while it was paused: it continues at its next slot.".into();
    }
    let runs = match p.runs {
        0 => "none of them runs".to_string(),
        1 => "one of them runs (the newest)".to_string(),
        n => format!("{at_least}{n} of them run, oldest first"),
    };
    let catch_up = if misfire == "run_all" {
        format!(", max_catch_up = {max_catch_up}")
    } else {
        String::new()
    };
    format!(
        "{at_least}{} slot(s) passed while it was paused. With misfire = {misfire}{catch_up}, {runs}; {at_least}{} are recorded as skipped.",
        p.passed, p.skipped
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::job::{Misfire, Policy};
    use std::time::Duration;

    const MIN: i64 = 60_000;
    /// 2026-01-01T00:00:00Z.
    const BASE: i64 = 1_767_225_600_000;

    fn every_minute() -> Schedule {
        Schedule::parse("* * * * *", "UTC").unwrap()
    }

    fn policy(misfire: Misfire) -> Policy {
        Policy {
            misfire,
            max_catch_up: 3,
            ..Policy::default()
        }
    }

    #[test]
    fn each_policy_says_how_many_of_the_passed_slots_run() {
        let s = every_minute();
        // Paused for ten minutes: the row waits for BASE; now is BASE + 10 min + 1 s.
        let now = BASE + 10 * MIN + 1_000;
        let skip = preview(Some(BASE), 0, false, now, &policy(Misfire::Skip), &s);
        assert_eq!(
            (skip.passed, skip.first, skip.last),
            (11, Some(BASE), Some(BASE + 10 * MIN))
        );
        // The newest slot is one second late: fresh, so it runs whatever the policy.
        assert_eq!((skip.runs, skip.skipped), (1, 10));
        let once = preview(Some(BASE), 0, false, now, &policy(Misfire::RunOnce), &s);
        assert_eq!((once.runs, once.skipped), (1, 10));
        let all = preview(Some(BASE), 0, false, now, &policy(Misfire::RunAll), &s);
        // max_catch_up 3 of the ten missed, and the fresh one.
        assert_eq!((all.runs, all.skipped), (4, 7));
        assert_eq!(all.next, BASE + 11 * MIN);
        assert!(!all.capped);
    }

    #[test]
    fn a_deadline_drops_every_missed_slot() {
        let s = every_minute();
        let p = Policy {
            starting_deadline: Some(Duration::from_secs(30)),
            ..policy(Misfire::RunAll)
        };
        let now = BASE + 5 * MIN + 45_000;
        let pr = preview(Some(BASE), 0, false, now, &p, &s);
        assert_eq!((pr.passed, pr.runs, pr.skipped), (6, 0, 6));
    }

    #[test]
    fn nothing_passed_when_the_slot_is_ahead() {
        let s = every_minute();
        let pr = preview(
            Some(BASE + MIN),
            0,
            true,
            BASE,
            &policy(Misfire::RunAll),
            &s,
        );
        assert_eq!(
            (pr.passed, pr.runs, pr.next, pr.manual),
            (0, 0, BASE + MIN, true)
        );
        assert_eq!(
            skip_to(Some(BASE + MIN), 0, BASE, &s),
            Some((BASE + MIN, None, false))
        );
        let once = Schedule::parse("@at 2026-01-01T00:00:00Z", "UTC").unwrap();
        assert_eq!(
            skip_to(Some(BASE), 0, BASE + MIN, &once),
            None,
            "a one-off has no slot to skip to"
        );
    }

    #[test]
    fn a_skip_continues_after_now_and_summarises_what_it_drops() {
        let s = every_minute();
        let now = BASE + 10 * MIN + 1_000;
        assert_eq!(
            skip_to(Some(BASE), 0, now, &s),
            Some((BASE + 11 * MIN, Some((11, BASE, BASE + 10 * MIN)), false))
        );
        // The slot it waited for was tried already: its runs are in the history.
        assert_eq!(
            skip_to(Some(BASE), 1, now, &s),
            Some((
                BASE + 11 * MIN,
                Some((10, BASE + MIN, BASE + 10 * MIN)),
                false
            ))
        );
        assert_eq!(
            skip_to(Some(BASE), 2, BASE + 1_000, &s),
            Some((BASE + MIN, None, false))
        );
        // Past the cap the line still reaches now.
        let every_second = Schedule::parse("* * * * * *", "UTC").unwrap();
        let far = BASE + 3 * 86_400_000;
        assert_eq!(
            skip_to(Some(BASE), 0, far, &every_second),
            Some((far + 1_000, Some((COUNT_MAX, BASE, far)), true))
        );
    }

    #[test]
    fn a_per_second_job_paused_for_days_is_counted_up_to_the_cap() {
        let s = Schedule::parse("* * * * * *", "UTC").unwrap();
        let pr = preview(
            Some(BASE),
            0,
            false,
            BASE + 3 * 86_400_000,
            &policy(Misfire::RunAll),
            &s,
        );
        assert!(pr.capped);
        assert_eq!(pr.passed, COUNT_MAX);
    }

    #[test]
    fn the_preview_says_what_runs_and_what_is_skipped() {
        let p = ResumePreview {
            passed: 11,
            first: Some(0),
            last: Some(600_000),
            runs: 4,
            skipped: 7,
            manual: false,
            next: 660_000,
            capped: false,
        };
        assert_eq!(
            describe(&p, "run_all", 3),
            "11 slot(s) passed while it was paused. With misfire = run_all, max_catch_up = 3, \
             4 of them run, oldest first; 7 are recorded as skipped."
        );
        let none = ResumePreview {
            passed: 0,
            runs: 0,
            skipped: 0,
            ..p.clone()
        };
        assert!(describe(&none, "skip", 0).starts_with("No slot passed"));
        let capped = ResumePreview {
            capped: true,
            runs: 1,
            ..p
        };
        assert!(describe(&capped, "run_once", 0).starts_with("at least 11"));
    }
}
