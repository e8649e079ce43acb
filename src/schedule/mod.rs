//! Pure schedule maths: a cron expression in an IANA time zone, and the next fire instant after a
//! given instant. Nothing here reads a clock, sleeps or does I/O; "after" is always a parameter.
//!
//! # Time zones and DST
//! Fields are wall-clock time in the schedule's zone. Following cronie, a schedule is *wildcard*
//! when its second (if written), minute or hour field starts with `*`:
//!
//! - wildcard schedules fire at every real instant whose local time matches: twice in a repeated
//!   hour, never for local times that do not exist;
//! - the others fire once per matching local time: at the earlier instant of an ambiguous local
//!   time, and at the transition instant (the first instant after the gap) for a local time that
//!   does not exist. Several such times, and the transition time itself, collapse into one firing.
//!
//! # How the search works
//! For fixed schedules, mapping a local time to its firing instant is monotonic, so the first
//! matching local time whose instant is after `after` is the answer. Wildcard schedules walk the
//! zone's constant-offset segments: within one segment local time is UTC plus a constant, so the
//! first match is found in local time and converted back. Offset transitions are located by
//! probing every [`PROBE_STEP`] and bisecting; this assumes no zone changes its offset twice within
//! six hours, which holds for the whole tz database.

mod expr;

use chrono::{DateTime, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;

pub use expr::{CronExpr, Field, ScheduleError, days_in_month};

/// How far apart offset probes are when looking for a DST transition (seconds).
const PROBE_STEP: i64 = 6 * 3600;
/// Larger than any difference between two offsets of one zone (seconds); the tz database's
/// largest is 24 h plus a few minutes (local mean time changes of 1844 and 1867).
const MAX_OFFSET_SPREAD: i64 = 26 * 3600;

/// A cron expression bound to a time zone: everything needed to compute fire times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    expr: CronExpr,
    tz: Tz,
}

/// Parses an IANA time-zone name.
///
/// # Errors
/// [`ScheduleError::UnknownTimeZone`] with the name.
pub fn parse_zone(name: &str) -> Result<Tz, ScheduleError> {
    name.trim()
        .parse::<Tz>()
        .map_err(|_| ScheduleError::UnknownTimeZone {
            name: name.to_string(),
        })
}

impl Schedule {
    /// Binds a parsed expression to a zone.
    pub fn new(expr: CronExpr, tz: Tz) -> Schedule {
        Schedule { expr, tz }
    }

    /// Parses an expression and a zone name.
    ///
    /// # Errors
    /// The first problem found, expression first.
    pub fn parse(expr: &str, zone: &str) -> Result<Schedule, ScheduleError> {
        Ok(Schedule::new(CronExpr::parse(expr)?, parse_zone(zone)?))
    }

    pub fn expr(&self) -> &CronExpr {
        &self.expr
    }

    pub fn tz(&self) -> Tz {
        self.tz
    }

    /// The first fire instant strictly after `after`, or `None` if there is none before year
    /// 262143 (chrono's limit). Sub-second parts of `after` are ignored except that the result is
    /// always strictly later.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let secs = after.timestamp();
        let next = if self.expr.is_wildcard() {
            self.next_wildcard(secs + 1)?
        } else {
            self.next_fixed(secs)?
        };
        DateTime::from_timestamp(next, 0)
    }

    /// The fire instants after `after`, in order.
    pub fn iter_after(&self, after: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        let mut cursor = Some(after);
        std::iter::from_fn(move || {
            let next = self.next_after(cursor?);
            cursor = next;
            next
        })
    }

    /// Offset from UTC (seconds) in force at a Unix instant.
    fn offset_at(&self, secs: i64) -> Option<i64> {
        let utc = DateTime::from_timestamp(secs, 0)?.naive_utc();
        Some(i64::from(
            self.tz
                .offset_from_utc_datetime(&utc)
                .fix()
                .local_minus_utc(),
        ))
    }

    fn local_at(&self, secs: i64) -> Option<NaiveDateTime> {
        Some(DateTime::from_timestamp(secs + self.offset_at(secs)?, 0)?.naive_utc())
    }

    /// Fixed schedules: the first matching local time whose firing instant is after `after`.
    fn next_fixed(&self, after: i64) -> Option<i64> {
        // Every local time up to and including local(after) fires at or before `after`.
        let mut from = self.local_at(after)? + chrono::Duration::seconds(1);
        loop {
            let local = self.expr.next_local(from)?;
            let fire = self.firing_instant(local)?;
            if fire > after {
                return Some(fire);
            }
            from = local + chrono::Duration::seconds(1);
        }
    }

    /// Where a fixed schedule's local time fires: itself, its earlier instant if ambiguous, or
    /// the end of the gap if it does not exist.
    fn firing_instant(&self, local: NaiveDateTime) -> Option<i64> {
        use chrono::LocalResult;
        match self.tz.from_local_datetime(&local) {
            LocalResult::Single(t) => Some(t.timestamp()),
            LocalResult::Ambiguous(a, b) => Some(a.timestamp().min(b.timestamp())),
            LocalResult::None => self.gap_end(local),
        }
    }

    /// The first instant whose local time is at or after `local` (which lies in a gap): the
    /// transition instant. Local time is monotonic within a day or so around a gap.
    fn gap_end(&self, local: NaiveDateTime) -> Option<i64> {
        let target = local.and_utc().timestamp();
        let (mut lo, mut hi) = (target - MAX_OFFSET_SPREAD, target + MAX_OFFSET_SPREAD);
        // Invariant: local(lo) < target <= local(hi).
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.local_at(mid)?.and_utc().timestamp() >= target {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }

    /// Wildcard schedules: the first instant at or after `from` whose local time matches.
    fn next_wildcard(&self, mut from: i64) -> Option<i64> {
        loop {
            let offset = self.offset_at(from)?;
            let local_from = DateTime::from_timestamp(from + offset, 0)?.naive_utc();
            let local = self.expr.next_local(local_from)?;
            let candidate = local.and_utc().timestamp() - offset;
            let horizon = candidate.min(from + MAX_OFFSET_SPREAD + PROBE_STEP);
            if let Some(transition) = self.first_transition(from, horizon)? {
                // The offset changes before the candidate: continue in the next segment.
                from = transition;
                continue;
            }
            if horizon == candidate {
                return Some(candidate);
            }
            // No transition for a day past `from` and no local match under this offset until
            // `candidate`: any instant before the day preceding the candidate's local date has a
            // local time in [local_from, that day), where nothing matches whatever the offset.
            let day_before = (local.date() - chrono::Days::new(2))
                .and_hms_opt(0, 0, 0)?
                .and_utc()
                .timestamp()
                - offset;
            from = day_before.max(horizon);
        }
    }

    /// The first instant in `(from, to]` whose offset differs from the offset at `from`.
    /// `Some(None)` when there is none; `None` only when out of chrono's range.
    fn first_transition(&self, from: i64, to: i64) -> Option<Option<i64>> {
        let base = self.offset_at(from)?;
        let mut lo = from;
        while lo < to {
            let probe = (lo + PROBE_STEP).min(to);
            if self.offset_at(probe)? != base {
                // Bisect in (lo, probe]: offset(lo) == base != offset(probe).
                let mut hi = probe;
                while hi - lo > 1 {
                    let mid = lo + (hi - lo) / 2;
                    if self.offset_at(mid)? == base {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                return Some(Some(hi));
            }
            lo = probe;
        }
        Some(None)
    }
}

#[cfg(test)]
mod tests;
