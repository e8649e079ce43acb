//! Which slots a job's calendars let run: `skip_on` (a slot inside one of them is skipped),
//! `only_in` (a slot outside all of them is skipped, or with `defer` runs once at the next
//! opening). Pure decisions, taken when a row is claimed; the instants are milliseconds (UTC) and
//! each is read as a wall-clock time in the job's zone before a calendar is asked, so the DST
//! contract is the schedule's. See docs/calendars.md.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, NaiveDateTime, TimeZone};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::model::history::Skipped;
use crate::schedule::Schedule;
use crate::schedule::calendar::Calendar;

/// The calendars a job keeps to, resolved from `[defaults]` and its own keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CalendarRule {
    pub skip_on: Vec<String>,
    pub only_in: Vec<String>,
    /// A slot outside `only_in` runs at the next opening instead of being skipped.
    pub defer: bool,
}

/// The most calendars one job may name (`skip_on` and `only_in` together).
pub const MAX_CALENDARS_PER_JOB: usize = 50;

/// The calendar keys a `[[job]]` or a row sets (`None`: the `[defaults]` value). Stored as a
/// JSON object in `cron_table.calendars`, with only the keys set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalendarOverrides {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_on: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only_in: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defer: Option<bool>,
}

impl CalendarOverrides {
    pub fn is_empty(&self) -> bool {
        self.skip_on.is_none() && self.only_in.is_none() && self.defer.is_none()
    }

    /// The JSON of `cron_table.calendars`; `None` when nothing is set.
    pub fn to_json(&self) -> Option<String> {
        (!self.is_empty()).then(|| serde_json::to_string(self).unwrap_or_default())
    }

    /// Reads `cron_table.calendars`.
    ///
    /// # Errors
    /// Not a JSON object of `skip_on`, `only_in` (lists of calendar names) and `defer`.
    pub fn from_json(text: &str) -> Result<CalendarOverrides, String> {
        let o: CalendarOverrides = serde_json::from_str(text).map_err(|e| {
            format!(
                "not a JSON object such as {{\"skip_on\": [\"holidays\"], \"only_in\": \
                 [\"window\"], \"defer\": true}} ({e})"
            )
        })?;
        let names: Vec<&String> = o.skip_on.iter().chain(o.only_in.iter()).flatten().collect();
        if names.len() > MAX_CALENDARS_PER_JOB {
            return Err(format!(
                "names {} calendars, more than {MAX_CALENDARS_PER_JOB}",
                names.len()
            ));
        }
        for name in names {
            crate::model::names::check_name(name, 200)?;
        }
        Ok(o)
    }

    /// These keys laid over `base`.
    pub fn apply_to(&self, base: &CalendarRule) -> CalendarRule {
        CalendarRule {
            skip_on: self.skip_on.clone().unwrap_or(base.skip_on.clone()),
            only_in: self.only_in.clone().unwrap_or(base.only_in.clone()),
            defer: self.defer.unwrap_or(base.defer),
        }
    }
}

impl CalendarRule {
    pub fn is_empty(&self) -> bool {
        self.skip_on.is_empty() && self.only_in.is_empty()
    }

    /// For people: "skip_on holidays-de; only_in window (deferred)"; `None` without calendars.
    pub fn describe(&self) -> Option<String> {
        let mut parts = vec![];
        if !self.skip_on.is_empty() {
            parts.push(format!("skip_on {}", self.skip_on.join(",")));
        }
        if !self.only_in.is_empty() {
            let deferred = if self.defer { " (deferred)" } else { "" };
            parts.push(format!("only_in {}{deferred}", self.only_in.join(",")));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// Every calendar named, once each.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.skip_on.iter().chain(&self.only_in).cloned().collect();
        names.sort();
        names.dedup();
        names
    }

    /// The first calendar named that `known` lacks, as the message a parked row shows.
    pub fn missing(&self, known: &Calendars) -> Option<String> {
        self.names()
            .into_iter()
            .find(|n| !known.contains_key(n))
            .map(|n| {
                format!(
                    "calendar \"{n}\" is not defined (add a [[calendar]] table with that name, \
                     or a row to cron_calendars)"
                )
            })
    }
}

/// Calendars by name.
pub type Calendars = BTreeMap<String, Calendar>;

/// Why a slot may not run where it falls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// The calendar that covers it (`skip_on`), or the `only_in` ones it is outside of.
    pub calendar: String,
    /// The covering entry's label (empty for `only_in`, or an entry without one).
    pub label: String,
    /// Outside every `only_in` calendar (rather than inside a `skip_on` one).
    pub outside: bool,
    /// The local time it was looked up as.
    pub local: NaiveDateTime,
}

impl Blocked {
    /// "2026-12-25 is Christmas Day in holidays-de", "2026-12-27 is in weekends",
    /// "outside maintenance".
    pub fn reason(&self) -> String {
        if self.outside {
            return format!("outside {}", self.calendar);
        }
        let day = self.local.date();
        if self.label.is_empty() {
            format!("{day} is in {}", self.calendar)
        } else {
            format!("{day} is {} in {}", self.label, self.calendar)
        }
    }
}

/// The local wall-clock time of `ms` in `tz`.
pub fn local_time(ms: i64, tz: Tz) -> NaiveDateTime {
    DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .with_timezone(&tz)
        .naive_local()
}

/// The instant of the local time `t` in `tz`: the earlier of two in an hour repeated by DST, and
/// the first valid minute after it in an hour skipped by DST.
pub fn instant_of(t: NaiveDateTime, tz: Tz) -> i64 {
    for minutes in 0..=180 {
        if let Some(at) = tz
            .from_local_datetime(&(t + Duration::minutes(minutes)))
            .earliest()
        {
            return at.timestamp_millis();
        }
    }
    t.and_utc().timestamp_millis()
}

/// Whether the slot `ms` is kept from running by `rule`, and why.
pub fn blocked(rule: &CalendarRule, calendars: &Calendars, tz: Tz, ms: i64) -> Option<Blocked> {
    let local = local_time(ms, tz);
    for name in &rule.skip_on {
        if let Some(entry) = calendars.get(name).and_then(|c| c.covering(local)) {
            return Some(Blocked {
                calendar: name.clone(),
                label: entry.label.clone(),
                outside: false,
                local,
            });
        }
    }
    let inside = rule.only_in.iter().any(|n| {
        calendars
            .get(n)
            .is_some_and(|c| c.covering(local).is_some())
    });
    (!rule.only_in.is_empty() && !inside).then(|| Blocked {
        calendar: rule.only_in.join(", "),
        label: String::new(),
        outside: true,
        local,
    })
}

/// How far ahead a deferred slot looks for a window's opening.
const DEFER_HORIZON_DAYS: i64 = 400;
/// The most slots one claim walks past; the rest are walked by the next claim.
const MAX_SKIP_WALK: u64 = 100_000;

/// What a claim does with a slot its calendars keep from running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excluded {
    /// The slots not run now (the slot and the ones after it for the same reason).
    pub skipped: Skipped,
    /// For the history: "calendar: 2026-12-25 is Christmas Day in holidays-de" or
    /// "deferred: outside maintenance; runs at 2026-11-28T02:00:00+01:00".
    pub message: String,
    /// The slot the row waits for next: the first one the calendars let run, the window's
    /// opening for a deferred slot, or where the walk stopped.
    pub resume: i64,
    /// A deferred slot (it runs at `resume`), rather than a skipped one.
    pub deferred: bool,
}

/// Decides about the regular slot `slot` that a claim would run: `None` when the calendars let
/// it run. Else the slots skipped from it on (while the same reason holds) and the slot to wait
/// for, or, with `defer`, the window's next opening.
pub fn exclude(
    slot: i64,
    rule: &CalendarRule,
    calendars: &Calendars,
    schedule: &Schedule,
) -> Option<Excluded> {
    let tz = schedule.tz();
    let why = blocked(rule, calendars, tz, slot)?;
    if why.outside && rule.defer {
        let opening = rule
            .only_in
            .iter()
            .filter_map(|n| calendars.get(n))
            .filter_map(|c| c.next_covered(why.local, Duration::days(DEFER_HORIZON_DAYS)))
            .min()
            .map(|t| instant_of(t, tz));
        if let Some(open) = opening.filter(|o| *o > slot) {
            // The slots before the opening collapse into the one run at the opening.
            let (count, last, _) = walk(slot, schedule, |s| s < open);
            let at = DateTime::from_timestamp_millis(open)
                .unwrap_or_default()
                .with_timezone(&tz)
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            return Some(Excluded {
                skipped: Skipped {
                    count,
                    first: slot,
                    last,
                },
                message: format!("deferred: {}; runs at the opening, {at}", why.reason()),
                resume: open,
                deferred: true,
            });
        }
    }
    let (count, last, resume) = walk(slot, schedule, |s| {
        blocked(rule, calendars, tz, s).is_some_and(|b| same_reason(&b, &why))
    });
    Some(Excluded {
        skipped: Skipped {
            count,
            first: slot,
            last,
        },
        message: format!("calendar: {}", why.reason()),
        resume,
        deferred: false,
    })
}

/// The same calendar, entry label and kind, on the same local day for a `skip_on` entry (a
/// history line names one day).
fn same_reason(b: &Blocked, first: &Blocked) -> bool {
    b.outside == first.outside
        && b.calendar == first.calendar
        && b.label == first.label
        && (b.outside || b.local.date() == first.local.date())
}

/// Walks the slots from `first` while `keep` holds (at most [`MAX_SKIP_WALK`]): how many, the
/// last of them, and the slot after them.
fn walk(first: i64, schedule: &Schedule, keep: impl Fn(i64) -> bool) -> (u64, i64, i64) {
    let (mut count, mut last, mut s) = (0, first, first);
    while count < MAX_SKIP_WALK && s != i64::MAX && (count == 0 || keep(s)) {
        count += 1;
        last = s;
        s = schedule.next_after_ms(s);
    }
    (count, last, s)
}

/// The first slot after `after` (ms) that `rule` lets run (at its window's opening for a
/// deferred one), looking until `until`; `None` when there is none. Jumps over covered
/// stretches, so ten years of a per-minute job are quick; gives up (answering `Some(until)`) after
/// `max_steps` slots, not to refuse a job it could not prove excluded.
pub fn first_allowed(
    after: i64,
    until: i64,
    rule: &CalendarRule,
    calendars: &Calendars,
    schedule: &Schedule,
    max_steps: u32,
) -> Option<i64> {
    let tz = schedule.tz();
    let mut s = schedule.next_after_ms(after);
    for _ in 0..max_steps {
        if s == i64::MAX || s > until {
            return None;
        }
        let Some(why) = blocked(rule, calendars, tz, s) else {
            return Some(s);
        };
        let resume_local = if why.outside {
            let opening = rule
                .only_in
                .iter()
                .filter_map(|n| calendars.get(n))
                .filter_map(|c| c.next_covered(why.local, Duration::days(DEFER_HORIZON_DAYS)))
                .min()?;
            if rule.defer {
                let open = instant_of(opening, tz);
                if blocked(rule, calendars, tz, open).is_none() {
                    return Some(open);
                }
            }
            opening
        } else {
            calendars.get(&why.calendar)?.covered_until(why.local)
        };
        let resume = instant_of(resume_local, tz).max(s);
        // The first slot at or after the end of the stretch.
        s = schedule.next_after_ms(resume - 1);
    }
    Some(until)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cals(defs: &[(&str, &str)]) -> Calendars {
        defs.iter()
            .map(|(n, text)| (n.to_string(), Calendar::parse(n, text).unwrap()))
            .collect()
    }

    fn ms(text: &str) -> i64 {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .timestamp_millis()
    }

    fn rule(skip_on: &[&str], only_in: &[&str], defer: bool) -> CalendarRule {
        CalendarRule {
            skip_on: skip_on.iter().map(|s| s.to_string()).collect(),
            only_in: only_in.iter().map(|s| s.to_string()).collect(),
            defer,
        }
    }

    #[test]
    fn a_holiday_skips_its_slots_with_the_label_and_resumes_the_next_day() {
        let c = cals(&[(
            "holidays-de",
            "2026-12-25 Christmas Day\n2026-12-26 Boxing Day",
        )]);
        let s = Schedule::parse("0 6 * * *", "Europe/Berlin").unwrap();
        let r = rule(&["holidays-de"], &[], false);
        let slot = ms("2026-12-25T06:00:00+01:00");
        let e = exclude(slot, &r, &c, &s).unwrap();
        assert_eq!(
            e.message,
            "calendar: 2026-12-25 is Christmas Day in holidays-de"
        );
        // One history line per label: the 26th is its own.
        assert_eq!(e.skipped.count, 1);
        assert_eq!(e.resume, ms("2026-12-26T06:00:00+01:00"));
        let e2 = exclude(e.resume, &r, &c, &s).unwrap();
        assert_eq!(
            e2.message,
            "calendar: 2026-12-26 is Boxing Day in holidays-de"
        );
        assert_eq!(e2.resume, ms("2026-12-27T06:00:00+01:00"));
        assert_eq!(exclude(e2.resume, &r, &c, &s), None);
    }

    #[test]
    fn a_holiday_is_read_in_the_jobs_zone() {
        let c = cals(&[("h", "2026-12-25 Christmas Day")]);
        let r = rule(&["h"], &[], false);
        // 23:30 UTC on the 24th is the 25th in Tokyo, not in UTC.
        let slot = ms("2026-12-24T23:30:00Z");
        let tokyo = Schedule::parse("30 8 * * *", "Asia/Tokyo").unwrap();
        let utc = Schedule::parse("30 23 * * *", "UTC").unwrap();
        assert!(exclude(slot, &r, &c, &tokyo).is_some());
        assert_eq!(exclude(slot, &r, &c, &utc), None);
    }

    #[test]
    fn a_stretch_of_frequent_slots_is_one_history_line() {
        let c = cals(&[("h", "2026-12-25 Christmas Day")]);
        let s = Schedule::parse("*/5 * * * *", "UTC").unwrap();
        let e = exclude(
            ms("2026-12-25T00:00:00Z"),
            &rule(&["h"], &[], false),
            &c,
            &s,
        )
        .unwrap();
        assert_eq!(e.skipped.count, 24 * 12);
        assert_eq!(e.skipped.last, ms("2026-12-25T23:55:00Z"));
        assert_eq!(e.resume, ms("2026-12-26T00:00:00Z"));
    }

    #[test]
    fn outside_a_window_a_slot_is_skipped_or_deferred_to_the_opening_once() {
        let c = cals(&[("maintenance", "weekly Sat 02:00-04:00")]);
        let s = Schedule::parse("0 * * * *", "UTC").unwrap();
        // 2026-11-27 is a Friday.
        let slot = ms("2026-11-27T10:00:00Z");
        let skip = exclude(slot, &rule(&[], &["maintenance"], false), &c, &s).unwrap();
        assert_eq!(skip.message, "calendar: outside maintenance");
        assert_eq!(skip.resume, ms("2026-11-28T02:00:00Z"));
        assert_eq!(skip.skipped.count, 16);
        let defer = exclude(slot, &rule(&[], &["maintenance"], true), &c, &s).unwrap();
        assert!(defer.deferred);
        assert_eq!(defer.resume, ms("2026-11-28T02:00:00Z"));
        assert_eq!(defer.skipped.count, 16);
        assert_eq!(
            defer.message,
            "deferred: outside maintenance; runs at the opening, 2026-11-28T02:00:00Z"
        );
        // The opening itself runs; inside the window every slot runs.
        assert_eq!(
            exclude(defer.resume, &rule(&[], &["maintenance"], true), &c, &s),
            None
        );
        assert_eq!(
            exclude(
                ms("2026-11-28T03:00:00Z"),
                &rule(&[], &["maintenance"], true),
                &c,
                &s
            ),
            None
        );
    }

    #[test]
    fn a_window_opening_in_a_skipped_dst_hour_opens_at_the_first_valid_minute() {
        // Europe/Berlin springs forward at 02:00 on 2027-03-28: 02:30 does not exist.
        let c = cals(&[("w", "weekly Sun 02:30-05:00")]);
        let s = Schedule::parse("0 1 * * *", "Europe/Berlin").unwrap();
        let slot = ms("2027-03-28T01:00:00+01:00");
        let e = exclude(slot, &rule(&[], &["w"], true), &c, &s).unwrap();
        assert_eq!(e.resume, ms("2027-03-28T03:00:00+02:00"));
        // And the window's close is read on the wall clock: 04:30 local is inside.
        assert_eq!(
            blocked(
                &rule(&[], &["w"], false),
                &c,
                s.tz(),
                ms("2027-03-28T04:30:00+02:00")
            ),
            None
        );
    }

    #[test]
    fn ten_years_are_searched_quickly_and_a_job_never_allowed_is_found() {
        let c = cals(&[
            ("always", "weekly Mon-Sun 00:00-24:00 Always"),
            ("xmas", "yearly 12-25 Christmas Day"),
            ("night", "weekly Mon-Fri 22:00-02:00"),
        ]);
        let s = Schedule::parse("* * * * *", "UTC").unwrap();
        let now = ms("2026-11-26T00:00:00Z");
        let ten_years = now + 3653 * 86_400_000;
        let never = first_allowed(
            now,
            ten_years,
            &rule(&["always"], &[], false),
            &c,
            &s,
            100_000,
        );
        assert_eq!(never, None);
        // Christmas only (only_in), never on Christmas (skip_on): excluded every time.
        let both = rule(&["xmas"], &["xmas"], false);
        assert_eq!(first_allowed(now, ten_years, &both, &c, &s, 100_000), None);
        // Christmas Day only: the next one.
        let only = rule(&[], &["xmas"], false);
        assert_eq!(
            first_allowed(now, ten_years, &only, &c, &s, 100_000),
            Some(ms("2026-12-25T00:00:00Z"))
        );
        // A weekday at 00:30 falls in the night window: skip_on jumps past it to 02:00.
        let at = ms("2026-11-27T00:29:30Z");
        assert_eq!(
            first_allowed(
                at,
                ten_years,
                &rule(&["night"], &[], false),
                &c,
                &s,
                100_000
            ),
            Some(ms("2026-11-27T02:00:00Z"))
        );
    }

    #[test]
    fn overrides_are_a_json_object_of_known_keys() {
        let o = CalendarOverrides::from_json(r#"{"skip_on": ["h"], "defer": true}"#).unwrap();
        assert_eq!(o.skip_on, Some(vec!["h".to_string()]));
        assert_eq!(o.only_in, None);
        assert_eq!(o.to_json().unwrap(), r#"{"skip_on":["h"],"defer":true}"#);
        let base = rule(&["d"], &["w"], false);
        assert_eq!(o.apply_to(&base), rule(&["h"], &["w"], true));
        assert!(CalendarOverrides::from_json(r#"{"skip": ["h"]}"#).is_err());
        assert!(CalendarOverrides::from_json(r#"{"skip_on": "h"}"#).is_err());
        assert!(CalendarOverrides::from_json(r#"{"skip_on": ["a b"]}"#).is_err());
        let known = cals(&[("h", "2026-12-25")]);
        assert!(
            rule(&["h"], &["w"], false)
                .missing(&known)
                .unwrap()
                .contains("\"w\"")
        );
    }
}
