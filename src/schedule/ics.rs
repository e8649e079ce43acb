//! iCalendar (RFC 5545) files, such as the public-holiday calendars an operator downloads, read
//! into calendar entries (`calendar.rs`): each `VEVENT` becomes one line.
//!
//! - All-day events (`DTSTART;VALUE=DATE:20261225`, `DTEND` the day after, exclusive) become a
//!   date or a date range; timed ones (`DTSTART:20261224T120000Z`, or with `TZID=`) a timed span
//!   in the calendar's zone.
//! - `RRULE:FREQ=YEARLY` without `COUNT` or `UNTIL` becomes a `yearly` entry; with either, the
//!   occurrences are written out (at most [`MAX_OCCURRENCES`]). Other rules (`MONTHLY`, `BYDAY`
//!   offsets such as Easter-dependent days) are refused with the event's name: holiday files
//!   list those dates one by one.
//! - `SUMMARY` is the label. Folded lines are unfolded and `\,` `\;` `\n` `\\` unescaped.

use chrono::{Datelike, Duration, NaiveDate, NaiveDateTime, TimeZone};
use chrono_tz::Tz;

/// Occurrences one bounded yearly rule may write out.
pub const MAX_OCCURRENCES: usize = 200;

/// The entries of an iCalendar text, one line each, timed events read in `zone`.
///
/// # Errors
/// A sentence naming the event (its `SUMMARY`) and what cannot be read.
pub fn entries(text: &str, zone: Tz) -> Result<Vec<String>, String> {
    let mut out = vec![];
    let mut event: Option<Vec<(String, String)>> = None;
    for line in unfold(text) {
        let (key, value) = match line.split_once(':') {
            Some(kv) => kv,
            None => continue,
        };
        let name = key
            .split(';')
            .next()
            .unwrap_or_default()
            .to_ascii_uppercase();
        match (name.as_str(), value.trim()) {
            ("BEGIN", v) if v.eq_ignore_ascii_case("VEVENT") => event = Some(vec![]),
            ("END", v) if v.eq_ignore_ascii_case("VEVENT") => {
                if let Some(props) = event.take() {
                    out.extend(one_event(&props, zone)?);
                }
            }
            _ => {
                if let Some(props) = event.as_mut() {
                    props.push((key.to_string(), value.to_string()));
                }
            }
        }
    }
    if out.is_empty() {
        return Err("no VEVENT found: is this an iCalendar (.ics) file?".into());
    }
    Ok(out)
}

/// Content lines, with folded continuation lines (starting with a space or tab) joined.
fn unfold(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = vec![];
    for raw in text.split('\n') {
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        match (raw.strip_prefix([' ', '\t']), lines.last_mut()) {
            (Some(rest), Some(last)) => last.push_str(rest),
            _ => lines.push(raw.to_string()),
        }
    }
    lines
}

fn unescape(v: &str) -> String {
    let mut out = String::new();
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n' | 'N') => out.push(' '),
                Some(other) => out.push(other),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    // A label is one line of text.
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A property's value and its parameters (`VALUE=DATE`, `TZID=...`).
fn prop<'a>(props: &'a [(String, String)], name: &str) -> Option<(&'a str, Vec<(String, String)>)> {
    props.iter().find_map(|(k, v)| {
        let mut parts = k.split(';');
        let n = parts.next()?;
        n.eq_ignore_ascii_case(name).then(|| {
            let params = parts
                .filter_map(|p| p.split_once('='))
                .map(|(a, b)| (a.to_ascii_uppercase(), b.trim_matches('"').to_string()))
                .collect();
            (v.trim(), params)
        })
    })
}

/// A date or a local time (in `zone`) as written in a `DTSTART` or `DTEND`.
enum When {
    Day(NaiveDate),
    At(NaiveDateTime),
}

fn when(value: &str, params: &[(String, String)], zone: Tz) -> Option<When> {
    if value.len() == 8 {
        return NaiveDate::parse_from_str(value, "%Y%m%d")
            .ok()
            .map(When::Day);
    }
    let (text, utc) = match value.strip_suffix('Z') {
        Some(t) => (t, true),
        None => (value, false),
    };
    let naive = NaiveDateTime::parse_from_str(text, "%Y%m%dT%H%M%S").ok()?;
    let instant = if utc {
        chrono::Utc.from_utc_datetime(&naive)
    } else {
        let from: Tz = params
            .iter()
            .find(|(k, _)| k == "TZID")
            .and_then(|(_, z)| z.parse().ok())
            .unwrap_or(zone);
        from.from_local_datetime(&naive)
            .earliest()?
            .with_timezone(&chrono::Utc)
    };
    Some(When::At(instant.with_timezone(&zone).naive_local()))
}

fn one_event(props: &[(String, String)], zone: Tz) -> Result<Vec<String>, String> {
    let label = prop(props, "SUMMARY")
        .map(|(v, _)| unescape(v))
        .unwrap_or_default();
    let name = if label.is_empty() {
        "an event without SUMMARY".to_string()
    } else {
        format!("\"{label}\"")
    };
    let (start, params) = prop(props, "DTSTART").ok_or_else(|| format!("{name}: no DTSTART"))?;
    let start = when(start, &params, zone)
        .ok_or_else(|| format!("{name}: DTSTART \"{start}\" cannot be read"))?;
    let end = match prop(props, "DTEND") {
        Some((v, p)) => {
            Some(when(v, &p, zone).ok_or_else(|| format!("{name}: DTEND \"{v}\" cannot be read"))?)
        }
        None => None,
    };
    let rule = prop(props, "RRULE").map(|(v, _)| v.to_ascii_uppercase());
    let suffix = if label.is_empty() {
        String::new()
    } else {
        format!(" {label}")
    };
    match start {
        When::Day(first) => {
            // DTEND of an all-day event is the day after its last (exclusive); none: one day.
            let last = match end {
                Some(When::Day(e)) if e > first => e - Duration::days(1),
                _ => first,
            };
            let span = last - first;
            let Some(rule) = rule else {
                return Ok(vec![days(first, last, &suffix)]);
            };
            let parts = rule_parts(&rule);
            if parts.get("FREQ").map(String::as_str) != Some("YEARLY")
                || parts.keys().any(|k| {
                    !matches!(
                        k.as_str(),
                        "FREQ" | "COUNT" | "UNTIL" | "INTERVAL" | "BYMONTH" | "BYMONTHDAY" | "WKST"
                    )
                })
            {
                return Err(format!(
                    "{name}: RRULE:{rule} is not a yearly rule on a fixed date; list its dates one by one"
                ));
            }
            let interval: i32 = parts
                .get("INTERVAL")
                .and_then(|i| i.parse().ok())
                .unwrap_or(1)
                .max(1);
            let count: Option<usize> = parts.get("COUNT").and_then(|c| c.parse().ok());
            let until = parts
                .get("UNTIL")
                .and_then(|u| NaiveDate::parse_from_str(&u[..u.len().min(8)], "%Y%m%d").ok());
            if count.is_none() && until.is_none() && interval == 1 {
                let md = |d: NaiveDate| format!("{:02}-{:02}", d.month(), d.day());
                return Ok(vec![if span.num_days() == 0 {
                    format!("yearly {}{suffix}", md(first))
                } else {
                    format!("yearly {}..{}{suffix}", md(first), md(last))
                }]);
            }
            let mut out = vec![];
            let mut year = first.year();
            while out.len() < count.unwrap_or(MAX_OCCURRENCES).min(MAX_OCCURRENCES) {
                let Some(day) = first.with_year(year) else {
                    year += interval;
                    continue;
                };
                if until.is_some_and(|u| day > u) {
                    break;
                }
                out.push(days(day, day + span, &suffix));
                year += interval;
            }
            Ok(out)
        }
        When::At(from) => {
            if rule.is_some() {
                return Err(format!(
                    "{name}: a repeating timed event; list its times one by one"
                ));
            }
            let to = match end {
                Some(When::At(t)) if t > from => t,
                _ => {
                    return Err(format!(
                        "{name}: a timed event needs a DTEND after its DTSTART"
                    ));
                }
            };
            Ok(vec![format!(
                "{}..{}{suffix}",
                from.format("%Y-%m-%dT%H:%M:%S"),
                to.format("%Y-%m-%dT%H:%M:%S")
            )])
        }
    }
}

fn days(first: NaiveDate, last: NaiveDate, suffix: &str) -> String {
    if first == last {
        format!("{first}{suffix}")
    } else {
        format!("{first}..{last}{suffix}")
    }
}

fn rule_parts(rule: &str) -> std::collections::BTreeMap<String, String> {
    rule.split(';')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::calendar::Calendar;

    #[test]
    fn a_public_holiday_file_reads_into_entries_that_cover_its_days() {
        let text = include_str!("../../tests/data/holidays-de-2026.ics");
        let lines = entries(text, chrono_tz::Europe::Berlin).unwrap();
        assert!(
            lines.contains(&"2026-12-25 1. Weihnachtstag".to_string()),
            "{lines:?}"
        );
        assert!(
            lines.contains(&"2026-04-03 Karfreitag".to_string()),
            "{lines:?}"
        );
        let c = Calendar::parse("holidays-de", &lines.join("\n")).unwrap();
        let at = |t: &str| NaiveDateTime::parse_from_str(t, "%Y-%m-%dT%H:%M").unwrap();
        assert_eq!(
            c.covering(at("2026-12-25T04:00")).map(|e| e.label.as_str()),
            Some("1. Weihnachtstag")
        );
        assert_eq!(
            c.covering(at("2026-10-03T00:00")).map(|e| e.label.as_str()),
            Some("Tag der Deutschen Einheit")
        );
        assert!(c.covering(at("2026-12-23T12:00")).is_none());
    }

    #[test]
    fn rules_folds_escapes_and_timed_events() {
        let text = "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20201225\r\n\
                    DTEND;VALUE=DATE:20201226\r\nRRULE:FREQ=YEARLY\r\nSUMMARY:Christmas\\, \r\n  Day\r\nEND:VEVENT\r\n\
                    BEGIN:VEVENT\r\nDTSTART;VALUE=DATE:20260501\r\nRRULE:FREQ=YEARLY;COUNT=3\r\nSUMMARY:May Day\r\nEND:VEVENT\r\n\
                    BEGIN:VEVENT\r\nDTSTART:20261224T110000Z\r\nDTEND;TZID=Europe/Berlin:20261224T180000\r\nSUMMARY:Early close\r\nEND:VEVENT\r\n\
                    END:VCALENDAR\r\n";
        let lines = entries(text, chrono_tz::Europe::Berlin).unwrap();
        assert_eq!(
            lines,
            [
                "yearly 12-25 Christmas, Day",
                "2026-05-01 May Day",
                "2027-05-01 May Day",
                "2028-05-01 May Day",
                "2026-12-24T12:00:00..2026-12-24T18:00:00 Early close",
            ]
        );
        let easter = "BEGIN:VEVENT\nDTSTART;VALUE=DATE:20260405\nRRULE:FREQ=YEARLY;BYDAY=1SU;BYMONTH=4\nSUMMARY:Ostern\nEND:VEVENT\n";
        let e = entries(easter, chrono_tz::UTC).unwrap_err();
        assert!(e.contains("\"Ostern\"") && e.contains("one by one"), "{e}");
        assert!(
            entries("not a calendar", chrono_tz::UTC)
                .unwrap_err()
                .contains("no VEVENT")
        );
    }
}
