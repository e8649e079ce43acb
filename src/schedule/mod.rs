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

pub mod calendar;
mod describe;
mod expr;
mod hashed;
pub mod ics;
mod once;

use chrono::{DateTime, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;

pub use describe::describe;
pub use expr::{CronExpr, Field, ScheduleError, days_in_month};
pub use hashed::name_hash;
pub use once::Every;

/// How far apart offset probes are when looking for a DST transition (seconds).
const PROBE_STEP: i64 = 6 * 3600;
/// Larger than any difference between two offsets of one zone (seconds); the tz database's
/// largest is 24 h plus a few minutes (local mean time changes of 1844 and 1867).
const MAX_OFFSET_SPREAD: i64 = 26 * 3600;

/// A schedule bound to a time zone: everything needed to compute fire times. Three kinds: a
/// cron expression (fields read in the zone), an interval (`@every`, anchored, DST-free) and a
/// one-off instant (`@at`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    kind: Kind,
    tz: Tz,
}

/// What a schedule is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Cron(CronExpr),
    Every(Every),
    /// One instant (Unix seconds): `@at`.
    At(i64),
    /// No instant of its own: `@after`, a job that runs only when its upstreams finish.
    Never,
}

/// The schedule of a job that runs only when its upstreams finish (`after`, no `schedule`).
pub const AFTER_ONLY: &str = "@after";

/// Parses a time a user typed: RFC 3339, or a date or local date and time read in `tz`
/// (`2026-11-22`, `2026-11-22T02:00`, `2026-11-22 02:00:30`); a local time in a DST gap is the
/// instant the clock jumps to. Milliseconds since the epoch.
///
/// # Errors
/// A sentence naming the text and the forms accepted, or that the time does not exist.
pub fn parse_instant(text: &str, tz: Tz) -> Result<i64, String> {
    use chrono::{NaiveDate, NaiveDateTime};
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.timestamp_millis());
    }
    let naive = ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(text, f).ok())
        .or_else(|| {
            NaiveDate::parse_from_str(text, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
        })
        .ok_or_else(|| {
            format!(
                "\"{text}\" is not a time: use 2026-11-22, 2026-11-22T02:00 (the job's zone) or RFC 3339"
            )
        })?;
    tz.from_local_datetime(&naive)
        .earliest()
        .or_else(|| {
            tz.from_local_datetime(&(naive + chrono::Duration::hours(1)))
                .earliest()
        })
        .map(|t| t.timestamp_millis())
        .ok_or_else(|| format!("\"{text}\" does not exist in {tz}"))
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
    /// Binds a parsed cron expression to a zone.
    pub fn new(expr: CronExpr, tz: Tz) -> Schedule {
        Schedule {
            kind: Kind::Cron(expr),
            tz,
        }
    }

    /// Parses a schedule that does not use the `H` field, and a zone name.
    ///
    /// # Errors
    /// The first problem found, schedule first.
    pub fn parse(text: &str, zone: &str) -> Result<Schedule, ScheduleError> {
        Schedule::parse_for(text, zone, None)
    }

    /// Parses the schedule of the job named `job` (which `H` fields hash), and a zone name:
    /// a cron expression or macro, `@every DURATION [anchor INSTANT]` or `@at INSTANT`.
    ///
    /// # Errors
    /// The first problem found, schedule first; `H` without a job name.
    pub fn parse_for(text: &str, zone: &str, job: Option<&str>) -> Result<Schedule, ScheduleError> {
        let tz = parse_zone(zone)?;
        let kind = if text.trim() == AFTER_ONLY {
            Kind::Never
        } else if let Some(rest) = macro_argument(text, "@every") {
            Kind::Every(Every::parse(rest, text)?)
        } else if let Some(rest) = macro_argument(text, "@at") {
            Kind::At(once::parse_at(rest, text, tz)?)
        } else {
            Kind::Cron(CronExpr::parse_for(text, job)?)
        };
        Ok(Schedule { kind, tz })
    }

    pub fn kind(&self) -> &Kind {
        &self.kind
    }

    /// The cron expression, for cron schedules.
    pub fn expr(&self) -> Option<&CronExpr> {
        match &self.kind {
            Kind::Cron(e) => Some(e),
            _ => None,
        }
    }

    pub fn tz(&self) -> Tz {
        self.tz
    }

    /// True for `@at`: the schedule has one slot, which runs even when it is already past when
    /// the job is created (its misfire policy decides, as for any late slot).
    pub fn is_one_off(&self) -> bool {
        matches!(self.kind, Kind::At(_))
    }

    /// The first fire instant strictly after `after`, or `None` if there is none (a one-off
    /// instant already passed; chrono's limit, year 262143). Sub-second parts of `after` are
    /// ignored except that the result is always strictly later.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let secs = after.timestamp();
        let next = match &self.kind {
            Kind::Cron(expr) => {
                let cron = Cron { expr, tz: self.tz };
                if expr.is_wildcard() {
                    cron.next_wildcard(secs + 1)?
                } else {
                    cron.next_fixed(secs)?
                }
            }
            Kind::Every(every) => every.next_after(secs)?,
            Kind::At(at) => Some(*at).filter(|at| *at > secs)?,
            Kind::Never => None?,
        };
        DateTime::from_timestamp(next, 0)
    }

    /// The first fire instant strictly after `ms` (milliseconds since the epoch), in
    /// milliseconds; `i64::MAX` when the schedule ends.
    pub fn next_after_ms(&self, ms: i64) -> i64 {
        DateTime::from_timestamp_millis(ms)
            .and_then(|t| self.next_after(t))
            .map(|t| t.timestamp_millis())
            .unwrap_or(i64::MAX)
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
}

/// `text` without its macro name, when it starts with `name` and a space (or is only `name`).
fn macro_argument<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let t = text.trim();
    let head = t.get(..name.len())?;
    if !head.eq_ignore_ascii_case(name) {
        return None;
    }
    let rest = &t[name.len()..];
    (rest.is_empty() || rest.starts_with(char::is_whitespace)).then(|| rest.trim())
}

/// The cron search: an expression and the zone its fields are read in.
struct Cron<'a> {
    expr: &'a CronExpr,
    tz: Tz,
}

/// Local-time arithmetic in one zone.
#[derive(Clone, Copy)]
pub(crate) struct Zone(pub(crate) Tz);

impl Zone {
    /// Offset from UTC (seconds) in force at a Unix instant.
    fn offset_at(&self, secs: i64) -> Option<i64> {
        let utc = DateTime::from_timestamp(secs, 0)?.naive_utc();
        Some(i64::from(
            self.0
                .offset_from_utc_datetime(&utc)
                .fix()
                .local_minus_utc(),
        ))
    }

    fn local_at(&self, secs: i64) -> Option<NaiveDateTime> {
        Some(DateTime::from_timestamp(secs + self.offset_at(secs)?, 0)?.naive_utc())
    }

    /// Where a fixed schedule's local time fires: itself, its earlier instant if ambiguous, or
    /// the end of the gap if it does not exist.
    pub(crate) fn firing_instant(&self, local: NaiveDateTime) -> Option<i64> {
        use chrono::LocalResult;
        match self.0.from_local_datetime(&local) {
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
}

impl Cron<'_> {
    fn zone(&self) -> Zone {
        Zone(self.tz)
    }

    /// Fixed schedules: the first matching local time whose firing instant is after `after`.
    fn next_fixed(&self, after: i64) -> Option<i64> {
        // Every local time up to and including local(after) fires at or before `after`.
        let mut from = self.zone().local_at(after)? + chrono::Duration::seconds(1);
        loop {
            let local = self.expr.next_local(from)?;
            let fire = self.zone().firing_instant(local)?;
            if fire > after {
                return Some(fire);
            }
            from = local + chrono::Duration::seconds(1);
        }
    }

    /// Wildcard schedules: the first instant at or after `from` whose local time matches.
    fn next_wildcard(&self, mut from: i64) -> Option<i64> {
        loop {
            let offset = self.zone().offset_at(from)?;
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
        let base = self.zone().offset_at(from)?;
        let mut lo = from;
        while lo < to {
            let probe = (lo + PROBE_STEP).min(to);
            if self.zone().offset_at(probe)? != base {
                // Bisect in (lo, probe]: offset(lo) == base != offset(probe).
                let mut hi = probe;
                while hi - lo > 1 {
                    let mid = lo + (hi - lo) / 2;
                    if self.zone().offset_at(mid)? == base {
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

#[cfg(test)]
mod tests_forms;
