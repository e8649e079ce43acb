//! The two schedules that are not cron expressions: `@every DURATION [anchor INSTANT]`, slots
//! a fixed number of seconds apart counted from an anchor, and `@at INSTANT`, one slot.
//!
//! Both are instants, not wall-clock times: an interval is DST-free by definition (a day of 23
//! or 25 hours still has 24 one-hour slots… of real time), and every node computes the same slots
//! because they depend only on the anchor (the Unix epoch unless given) and the period.

use chrono::{DateTime, NaiveDateTime};
use chrono_tz::Tz;

use super::{ScheduleError, Zone};

/// `@every`: slots at `anchor + k × period` for every integer k.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Every {
    /// Seconds between slots, at least 1.
    pub period: i64,
    /// One slot (Unix seconds); any slot may serve, they all give the same sequence.
    pub anchor: i64,
}

fn form(message: impl Into<String>, expr: &str) -> ScheduleError {
    ScheduleError::Form {
        message: message.into(),
        expr: expr.trim().to_string(),
    }
}

impl Every {
    /// Parses `DURATION [anchor INSTANT]` (the text after `@every`); `expr` is the whole
    /// schedule, for messages.
    pub fn parse(rest: &str, expr: &str) -> Result<Every, ScheduleError> {
        let (duration, anchor) = match rest.split_once(" anchor ") {
            Some((d, a)) => (d.trim(), Some(a.trim())),
            None => (rest.trim(), None),
        };
        if duration.is_empty() {
            return Err(form(
                "@every needs a duration such as 90s, 15m or 2h30m",
                expr,
            ));
        }
        let d = humantime::parse_duration(duration).map_err(|e| {
            form(
                format!("@every: \"{duration}\" is not a duration such as 90s or 2h30m ({e})"),
                expr,
            )
        })?;
        if d.subsec_nanos() != 0 || d.as_secs() == 0 {
            return Err(form(
                "@every: the period must be a whole number of seconds, at least 1s",
                expr,
            ));
        }
        let period = i64::try_from(d.as_secs())
            .ok()
            .filter(|p| *p <= 100 * 366 * 86_400)
            .ok_or_else(|| form("@every: the period must be at most 100 years", expr))?;
        let anchor = match anchor {
            None => 0,
            Some(a) => DateTime::parse_from_rfc3339(a)
                .map_err(|e| {
                    form(
                        format!(
                            "@every: anchor \"{a}\" is not an RFC 3339 instant such as 2026-01-01T00:15:00Z ({e})"
                        ),
                        expr,
                    )
                })?
                .timestamp(),
        };
        Ok(Every { period, anchor })
    }

    /// The first slot strictly after the Unix second `after`.
    pub fn next_after(&self, after: i64) -> Option<i64> {
        let k = (after.checked_sub(self.anchor)?).div_euclid(self.period) + 1;
        self.anchor.checked_add(k.checked_mul(self.period)?)
    }
}

/// Parses the instant of `@at`: RFC 3339 with an offset, or a local date and time
/// (`2026-12-24T18:00`, `2026-12-24 18:00:00`) read in the job's zone, where a local time that
/// occurs twice is its first occurrence and one that does not exist is the end of the gap.
pub fn parse_at(rest: &str, expr: &str, tz: Tz) -> Result<i64, ScheduleError> {
    let text = rest.trim();
    if text.is_empty() {
        return Err(form(
            "@at needs an instant such as 2026-12-24T18:00:00+01:00",
            expr,
        ));
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.timestamp());
    }
    let local = ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(text, f).ok())
        .ok_or_else(|| {
            form(
                format!(
                    "@at: \"{text}\" is not an instant (RFC 3339 such as 2026-12-24T18:00:00+01:00, or a local 2026-12-24T18:00 in the job's zone)"
                ),
                expr,
            )
        })?;
    Zone(tz)
        .firing_instant(local)
        .ok_or_else(|| form(format!("@at: \"{text}\" is out of range"), expr))
}
