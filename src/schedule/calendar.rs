//! Named calendars: sets of local times (dates, date ranges, yearly dates, weekly windows, timed
//! spans) that a job skips (`skip_on`) or keeps to (`only_in`). Pure: a calendar is read from
//! text, one entry per line, and asked about a local wall-clock time; the caller reads an
//! instant in the job's zone first, so the DST contract is the schedule's.
//!
//! # Entries, one per line (the same text in TOML, in the database and from an iCalendar file)
//!
//! | entry | covers |
//! |---|---|
//! | `2026-12-25 Christmas Day` | that day, all of it |
//! | `2026-12-24..2027-01-01 Holidays` | those days, both ends included |
//! | `2026-12-24T12:00..2026-12-24T18:00 Early close` | from the first time (included) to the second (excluded) |
//! | `yearly 12-25 Christmas Day` | that day of every year (`02-29` only in leap years) |
//! | `yearly 12-24..12-26` | those days of every year; `12-30..01-02` wraps the new year |
//! | `weekly Sat,Sun 00:00-24:00 Weekend` | those days, between the times; `Mon-Fri 22:00-02:00` ends the next day |
//!
//! Text after the entry is its label ("Christmas Day"); blank lines and lines starting with `#`
//! are ignored.

use chrono::{Datelike, Duration, NaiveDate, NaiveDateTime, NaiveTime, Weekday};

/// One entry of a calendar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub span: Span,
    /// What a person calls it ("Christmas Day"); may be empty.
    pub label: String,
}

/// What an entry covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Span {
    /// Whole days, `first..=last`.
    Days { first: NaiveDate, last: NaiveDate },
    /// Local times, `from..to`.
    Timed {
        from: NaiveDateTime,
        to: NaiveDateTime,
    },
    /// Whole days of every year, `(month, day)` from `first` to `last` (wrapping the year).
    Yearly { first: (u32, u32), last: (u32, u32) },
    /// On each of `days` (bit 0 Monday), from `from` for `minutes` minutes (past midnight
    /// into the next day when it is longer than what is left of the day).
    Weekly {
        days: u8,
        from: NaiveTime,
        minutes: u32,
    },
}

/// A named calendar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calendar {
    pub name: String,
    pub entries: Vec<Entry>,
}

impl Calendar {
    /// Reads entries, one per line.
    ///
    /// # Errors
    /// The first line that is not an entry, with its number and what was expected.
    pub fn parse(name: &str, text: &str) -> Result<Calendar, String> {
        let mut entries = vec![];
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            entries.push(
                parse_entry(line)
                    .map_err(|e| format!("calendar \"{name}\", line {}: {e}", i + 1))?,
            );
        }
        Ok(Calendar {
            name: name.to_string(),
            entries,
        })
    }

    /// The first entry that covers the local time `t`.
    pub fn covering(&self, t: NaiveDateTime) -> Option<&Entry> {
        self.entries.iter().find(|e| e.span.covers(t))
    }

    /// The first local time at or after `t` that no entry covers: `t` itself when none covers
    /// it, else the end of the covered stretch (entries that overlap or touch are joined).
    pub fn covered_until(&self, t: NaiveDateTime) -> NaiveDateTime {
        let mut t = t;
        // Each step moves past one entry's occurrence; touching entries chain.
        for _ in 0..10_000 {
            match self.entries.iter().filter_map(|e| e.span.end_of(t)).max() {
                Some(end) if end > t => t = end,
                _ => break,
            }
        }
        t
    }

    /// The earliest local time at or after `t` that an entry covers, looking at most `horizon`
    /// ahead; `None` when there is none within it.
    pub fn next_covered(&self, t: NaiveDateTime, horizon: Duration) -> Option<NaiveDateTime> {
        if self.covering(t).is_some() {
            return Some(t);
        }
        self.entries
            .iter()
            .filter_map(|e| e.span.next_start(t, t + horizon))
            .min()
    }
}

impl Span {
    /// Whether the local time `t` is inside.
    pub fn covers(&self, t: NaiveDateTime) -> bool {
        let day = t.date();
        match self {
            Span::Days { first, last } => *first <= day && day <= *last,
            Span::Timed { from, to } => *from <= t && t < *to,
            Span::Yearly { first, last } => {
                let md = (day.month(), day.day());
                if first <= last {
                    *first <= md && md <= *last
                } else {
                    md >= *first || md <= *last
                }
            }
            Span::Weekly {
                days,
                from,
                minutes,
            } => {
                // Inside a window that opened today or on one of the days before.
                let reach = (i64::from(*minutes) + 1439) / 1440;
                (0..=reach).any(|back| {
                    let open_day = day - Duration::days(back);
                    let open = open_day.and_time(*from);
                    has_day(*days, open_day.weekday())
                        && open <= t
                        && t < open + Duration::minutes(i64::from(*minutes))
                })
            }
        }
    }

    /// The end (excluded) of this span's occurrence that covers `t`, if one does.
    fn end_of(&self, t: NaiveDateTime) -> Option<NaiveDateTime> {
        if !self.covers(t) {
            return None;
        }
        let midnight = |d: NaiveDate| d.and_time(NaiveTime::MIN);
        // The day after `(month, day)` of `year`; 02-29 of a common year ends on 03-01.
        let after = |year: i32, (m, d): (u32, u32)| {
            NaiveDate::from_ymd_opt(year, m, d)
                .map(|d| d + Duration::days(1))
                .or_else(|| NaiveDate::from_ymd_opt(year, 3, 1))
        };
        match self {
            Span::Days { last, .. } => Some(midnight(*last + Duration::days(1))),
            Span::Timed { to, .. } => Some(*to),
            Span::Yearly { first, last } => {
                let year = t.year();
                let md = (t.month(), t.day());
                let end_year = if first > last && md >= *first {
                    year + 1
                } else {
                    year
                };
                after(end_year, *last).map(midnight)
            }
            Span::Weekly {
                days,
                from,
                minutes,
            } => {
                let reach = (i64::from(*minutes) + 1439) / 1440;
                (0..=reach)
                    .filter_map(|back| {
                        let open_day = t.date() - Duration::days(back);
                        let open = open_day.and_time(*from);
                        let close = open + Duration::minutes(i64::from(*minutes));
                        (has_day(*days, open_day.weekday()) && open <= t && t < close)
                            .then_some(close)
                    })
                    .max()
            }
        }
    }

    /// The first local time in `(t, until]` where this span begins (or `t` itself when it is
    /// inside), if any.
    fn next_start(&self, t: NaiveDateTime, until: NaiveDateTime) -> Option<NaiveDateTime> {
        if self.covers(t) {
            return Some(t);
        }
        let found = match self {
            Span::Days { first, .. } => Some(first.and_time(NaiveTime::MIN)).filter(|s| *s > t),
            Span::Timed { from, .. } => Some(*from).filter(|s| *s > t),
            Span::Yearly { first, .. } => (0..=8).find_map(|y| {
                NaiveDate::from_ymd_opt(t.year() + y, first.0, first.1)
                    .map(|d| d.and_time(NaiveTime::MIN))
                    .filter(|s| *s > t)
            }),
            Span::Weekly { days, from, .. } => (0..=7).find_map(|d| {
                let day = t.date() + Duration::days(d);
                Some(day.and_time(*from)).filter(|s| *s > t && has_day(*days, day.weekday()))
            }),
        };
        found.filter(|s| *s <= until)
    }
}

fn has_day(days: u8, w: Weekday) -> bool {
    days & (1 << w.num_days_from_monday()) != 0
}

fn parse_entry(line: &str) -> Result<Entry, String> {
    let (head, label) = match line.split_once(char::is_whitespace) {
        Some((h, rest)) => (h, rest.trim()),
        None => (line, ""),
    };
    let (span, label) = match head {
        "yearly" => {
            let (what, label) = split_word(label);
            (yearly(what)?, label)
        }
        "weekly" => {
            let (days, rest) = split_word(label);
            let (times, label) = split_word(rest);
            (weekly(days, times)?, label)
        }
        _ => (dated(head)?, label),
    };
    Ok(Entry {
        span,
        label: label.to_string(),
    })
}

fn split_word(text: &str) -> (&str, &str) {
    match text.split_once(char::is_whitespace) {
        Some((w, rest)) => (w, rest.trim()),
        None => (text, ""),
    }
}

const EXPECTED: &str = "expected 2026-12-25, 2026-12-24..2026-12-26, 2026-12-24T12:00..2026-12-24T18:00, \
     yearly 12-25, yearly 12-24..12-26 or weekly Sat,Sun 00:00-24:00, then an optional label";

fn date(text: &str) -> Option<NaiveDate> {
    NaiveDate::parse_from_str(text, "%Y-%m-%d").ok()
}

fn local(text: &str) -> Option<NaiveDateTime> {
    NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M")
        .or_else(|_| NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S"))
        .ok()
}

fn dated(text: &str) -> Result<Span, String> {
    let bad = || format!("\"{text}\": {EXPECTED}");
    match text.split_once("..") {
        None => {
            let d = date(text).ok_or_else(bad)?;
            Ok(Span::Days { first: d, last: d })
        }
        Some((a, b)) => {
            if let (Some(first), Some(last)) = (date(a), date(b)) {
                if last < first {
                    return Err(format!("\"{text}\": the range ends before it starts"));
                }
                return Ok(Span::Days { first, last });
            }
            let (from, to) = (local(a).ok_or_else(bad)?, local(b).ok_or_else(bad)?);
            if to <= from {
                return Err(format!("\"{text}\": the span ends before it starts"));
            }
            Ok(Span::Timed { from, to })
        }
    }
}

fn month_day(text: &str) -> Option<(u32, u32)> {
    let (m, d) = text.split_once('-')?;
    let (m, d): (u32, u32) = (m.parse().ok()?, d.parse().ok()?);
    // 2024 is a leap year: 02-29 is a valid yearly date.
    NaiveDate::from_ymd_opt(2024, m, d).map(|_| (m, d))
}

fn yearly(text: &str) -> Result<Span, String> {
    let bad =
        || format!("\"yearly {text}\": expected a month and day such as 12-25 or 12-24..12-26");
    let (first, last) = match text.split_once("..") {
        None => {
            let md = month_day(text).ok_or_else(bad)?;
            (md, md)
        }
        Some((a, b)) => (month_day(a).ok_or_else(bad)?, month_day(b).ok_or_else(bad)?),
    };
    Ok(Span::Yearly { first, last })
}

fn weekday(text: &str) -> Option<u8> {
    let w: Weekday = text.parse().ok()?;
    Some(w.num_days_from_monday() as u8)
}

fn weekly(days: &str, times: &str) -> Result<Span, String> {
    let bad_days = || format!("\"{days}\": expected days such as Sat, Mon-Fri or Sat,Sun");
    let mut set = 0u8;
    for part in days.split(',') {
        match part.split_once('-') {
            None => set |= 1 << weekday(part).ok_or_else(bad_days)?,
            Some((a, b)) => {
                let (a, b) = (
                    weekday(a).ok_or_else(bad_days)?,
                    weekday(b).ok_or_else(bad_days)?,
                );
                let mut d = a;
                loop {
                    set |= 1 << d;
                    if d == b {
                        break;
                    }
                    d = (d + 1) % 7;
                }
            }
        }
    }
    let bad_times = || format!("\"{times}\": expected a window such as 02:00-06:00 or 22:00-24:00");
    let (a, b) = times.split_once('-').ok_or_else(bad_times)?;
    let from = NaiveTime::parse_from_str(a, "%H:%M").map_err(|_| bad_times())?;
    let to_minutes = if b == "24:00" {
        1440
    } else {
        let to = NaiveTime::parse_from_str(b, "%H:%M").map_err(|_| bad_times())?;
        (to - NaiveTime::MIN).num_minutes() as u32
    };
    let from_minutes = (from - NaiveTime::MIN).num_minutes() as u32;
    let minutes = if to_minutes > from_minutes {
        to_minutes - from_minutes
    } else {
        // Past midnight: 22:00-02:00 is four hours.
        1440 - from_minutes + to_minutes
    };
    Ok(Span::Weekly {
        days: set,
        from,
        minutes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> NaiveDateTime {
        local(text).unwrap()
    }

    #[test]
    fn each_kind_of_entry_covers_what_it_says() {
        let c = Calendar::parse(
            "t",
            "# holidays\n\
             2026-12-25 Christmas Day\n\
             2026-12-28..2026-12-30 Between the years\n\
             2026-12-24T12:00..2026-12-24T18:00 Early close\n\
             yearly 01-01 New Year's Day\n\
             yearly 12-31..01-01\n\
             weekly Mon-Fri 22:00-02:00 Nightly window\n\
             \n",
        )
        .unwrap();
        let label = |t: &str| c.covering(at(t)).map(|e| e.label.clone());
        assert_eq!(label("2026-12-25T00:00").as_deref(), Some("Christmas Day"));
        assert_eq!(label("2026-12-25T23:59").as_deref(), Some("Christmas Day"));
        assert_eq!(label("2026-12-26T12:00"), None, "a Saturday, no entry");
        assert_eq!(
            label("2026-12-30T09:00").as_deref(),
            Some("Between the years")
        );
        assert_eq!(label("2026-12-24T12:00").as_deref(), Some("Early close"));
        assert_eq!(label("2026-12-24T18:00"), None, "the end is excluded");
        assert_eq!(label("2031-01-01T08:00").as_deref(), Some("New Year's Day"));
        assert_eq!(label("2031-12-31T08:00").as_deref(), Some(""));
        // Friday 22:00 to Saturday 02:00; not Saturday night.
        assert_eq!(label("2026-11-27T23:00").as_deref(), Some("Nightly window"));
        assert_eq!(label("2026-11-28T01:59").as_deref(), Some("Nightly window"));
        assert_eq!(label("2026-11-28T02:00"), None);
        assert_eq!(label("2026-11-28T23:00"), None);
        // Monday 01:00 belongs to no window (Sunday's is not listed).
        assert_eq!(label("2026-11-30T01:00"), None);
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        for (text, says) in [
            ("2026-13-01", "line 1"),
            ("ok\n", "line 1"),
            ("2026-12-01\nyearly 02-30", "line 2"),
            ("weekly Funday 01:00-02:00", "expected days"),
            ("weekly Sat 25:00-02:00", "expected a window"),
            ("2026-12-05..2026-12-01", "ends before it starts"),
        ] {
            let e = Calendar::parse("c", text).unwrap_err();
            assert!(
                e.contains(says) && e.contains("calendar \"c\""),
                "{text}: {e}"
            );
        }
        assert!(Calendar::parse("c", "yearly 02-29 Leap day").is_ok());
    }

    #[test]
    fn a_covered_stretch_ends_where_no_entry_covers_it() {
        let cal = Calendar::parse(
            "c",
            "2026-12-24..2026-12-25 Eve and day\nyearly 12-26 Boxing Day\n\
             weekly Mon-Fri 22:00-02:00 Night\n2026-06-01T10:00..2026-06-01T11:30\n\
             yearly 12-30..01-02",
        )
        .unwrap();
        // Touching entries are joined: the 24th to the 26th.
        assert_eq!(
            cal.covered_until(at("2026-12-24T08:00")),
            at("2026-12-27T00:00")
        );
        assert_eq!(
            cal.covered_until(at("2026-06-01T10:15")),
            at("2026-06-01T11:30")
        );
        // A night window past midnight ends the next morning (2026-06-05 is a Friday).
        assert_eq!(
            cal.covered_until(at("2026-06-05T23:00")),
            at("2026-06-06T02:00")
        );
        // A yearly range across the new year ends in the next year.
        assert_eq!(
            cal.covered_until(at("2026-12-31T12:00")),
            at("2027-01-03T00:00")
        );
        // Not covered: the time itself.
        assert_eq!(
            cal.covered_until(at("2026-06-02T12:00")),
            at("2026-06-02T12:00")
        );
        let leap = Calendar::parse("l", "yearly 02-29").unwrap();
        assert_eq!(
            leap.covered_until(at("2028-02-29T05:00")),
            at("2028-03-01T00:00")
        );
    }

    #[test]
    fn the_next_covered_time_is_found_within_the_horizon() {
        let c = Calendar::parse("m", "weekly Sat 02:00-06:00 Maintenance").unwrap();
        let week = Duration::days(8);
        // Wednesday → Saturday 02:00.
        assert_eq!(
            c.next_covered(at("2026-11-25T10:00"), week),
            Some(at("2026-11-28T02:00"))
        );
        // Inside: now.
        assert_eq!(
            c.next_covered(at("2026-11-28T03:00"), week),
            Some(at("2026-11-28T03:00"))
        );
        // Saturday 07:00 → the next Saturday.
        assert_eq!(
            c.next_covered(at("2026-11-28T07:00"), week),
            Some(at("2026-12-05T02:00"))
        );
        assert_eq!(
            c.next_covered(at("2026-11-28T07:00"), Duration::days(1)),
            None
        );
        let y = Calendar::parse("y", "yearly 02-29").unwrap();
        assert_eq!(
            y.next_covered(at("2026-03-01T00:00"), Duration::days(4 * 366)),
            Some(at("2028-02-29T00:00"))
        );
    }
}
