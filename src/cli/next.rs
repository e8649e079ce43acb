//! `sqlcron next`: when a schedule fires, in its zone, and which of those times calendars skip
//! or defer (told on stderr, so that stdout stays one time per line).

use super::*;
use crate::model::calendars::{CalendarRule, Calendars, exclude};

/// Which fire times `next` lists.
pub(super) struct When<'a> {
    /// RFC 3339; `None`: now.
    pub after: Option<&'a str>,
    pub count: usize,
    /// The job whose name `H` fields hash.
    pub job: Option<&'a str>,
}

pub(super) fn next(
    expr: &str,
    tz: &str,
    when: &When<'_>,
    rule: &CalendarRule,
    calendars: &Calendars,
) -> Result<(), Failure> {
    let schedule =
        Schedule::parse_for(expr, tz, when.job).map_err(|e| Failure::usage(e.to_string()))?;
    if let Some(resolved) = schedule.expr().and_then(|e| e.resolved()) {
        eprintln!("{expr} is {resolved} for {}", when.job.unwrap_or_default());
    }
    let after = match when.after {
        Some(text) => DateTime::parse_from_rfc3339(text)
            .map_err(|e| {
                Failure::usage(format!(
                    "--after: \"{text}\" is not an RFC 3339 timestamp ({e}), e.g. 2026-03-29T01:00:00+01:00"
                ))
            })?
            .with_timezone(&Utc),
        None => Utc::now(),
    };
    let shown = |ms: i64| {
        DateTime::from_timestamp_millis(ms)
            .unwrap_or_default()
            .with_timezone(&schedule.tz())
            .to_rfc3339_opts(SecondsFormat::Secs, false)
    };
    let mut out = String::new();
    let mut printed = 0;
    let mut slot = crate::model::policy::next_slot(&schedule, after.timestamp_millis());
    // Each step prints a time or passes a stretch the calendars exclude.
    for _ in 0..10_000 {
        if printed >= when.count || slot == i64::MAX {
            break;
        }
        match exclude(slot, rule, calendars, &schedule) {
            None => {
                out.push_str(&shown(slot));
                out.push('\n');
                printed += 1;
                slot = crate::model::policy::next_slot(&schedule, slot);
            }
            Some(e) => {
                let what = if e.skipped.count > 1 {
                    format!(
                        "{} to {} ({} times)",
                        shown(e.skipped.first),
                        shown(e.skipped.last),
                        e.skipped.count
                    )
                } else {
                    shown(e.skipped.first)
                };
                eprintln!("{what}: {}", e.message);
                slot = e.resume;
            }
        }
    }
    print!("{out}");
    Ok(())
}
