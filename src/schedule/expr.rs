//! Parsing a cron expression into bit sets, and matching local calendar times against it.
//!
//! This file knows nothing about time zones: it answers "which local wall-clock times match" and
//! "what is the first matching local time at or after this one". The time-zone rules live in
//! `schedule/mod.rs`.

use std::fmt;

use chrono::{Datelike, NaiveDate, NaiveDateTime, NaiveTime, Timelike};

/// One of the six fields of a cron expression, used to name the field at fault in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Second,
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
}

impl Field {
    fn bounds(self) -> (u32, u32) {
        match self {
            Field::Second | Field::Minute => (0, 59),
            Field::Hour => (0, 23),
            Field::DayOfMonth => (1, 31),
            Field::Month => (1, 12),
            Field::DayOfWeek => (0, 7),
        }
    }

    fn names(self) -> Option<(&'static [&'static str], u32, &'static str)> {
        const MONTHS: [&str; 12] = [
            "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
        ];
        const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
        match self {
            Field::Month => Some((&MONTHS, 1, "JAN-DEC")),
            Field::DayOfWeek => Some((&DAYS, 0, "SUN-SAT")),
            _ => None,
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::Second => "second",
            Field::Minute => "minute",
            Field::Hour => "hour",
            Field::DayOfMonth => "day-of-month",
            Field::Month => "month",
            Field::DayOfWeek => "day-of-week",
        })
    }
}

/// Why an expression or a time zone was rejected. Every variant names the input at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("empty cron expression")]
    Empty,
    #[error(
        "expected 5 fields (minute hour day-of-month month day-of-week) or 6 (second first), found {count} in \"{expr}\""
    )]
    FieldCount { count: usize, expr: String },
    #[error("{name}: {reason}")]
    Macro { name: String, reason: &'static str },
    #[error("{field} field: {message} in \"{expr}\"")]
    Field {
        field: Field,
        message: String,
        expr: String,
    },
    #[error(
        "\"{expr}\" never fires: no calendar date matches its day-of-month, month and day-of-week fields"
    )]
    NeverFires { expr: String },
    /// An `@every`, `@at` or `H` form that is malformed: what is wrong, and the schedule.
    #[error("{message} in \"{expr}\"")]
    Form { message: String, expr: String },
    #[error(
        "unknown time zone \"{name}\" (expected an IANA name such as \"Europe/Berlin\" or \"UTC\")"
    )]
    UnknownTimeZone { name: String },
}

/// A parsed cron expression: one bit set per field plus the special day forms.
///
/// Bit `n` of a set means "value `n` matches". Days of the week count from Sunday = 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronExpr {
    /// The expression as written, for messages and for `Display`.
    source: String,
    /// With `H` fields: the expression they resolved to for this job.
    resolved: Option<String>,
    seconds: u64,
    minutes: u64,
    hours: u64,
    /// Bits 1..=31.
    days: u64,
    /// `L` in day-of-month: the last day of each month.
    last_day: bool,
    /// Bits 1..=12.
    months: u64,
    /// Bits 0..=6, Sunday = 0.
    weekdays: u64,
    /// `5L`: bit 5 set means "the last Friday of the month".
    last_weekdays: u8,
    /// `1#2`: `nth_weekdays[1]` has bit 2 set, "the second Monday".
    nth_weekdays: [u8; 7],
    /// Day-of-month field starts with `*` (unrestricted in the Vixie-cron sense).
    dom_star: bool,
    /// Day-of-week field starts with `*`.
    dow_star: bool,
    /// Second (when written), minute or hour field starts with `*`: the DST rules differ (cronie).
    wildcard: bool,
}

/// A day-of-week list item that is not a plain set member.
enum DaySpecial {
    Last(u32),
    Nth(u32, u32),
}

impl CronExpr {
    /// Parses the expression of the job `job`: [`CronExpr::parse`], after replacing `H` fields
    /// by the job's own values (see `schedule/hashed.rs`). The expression keeps its written
    /// form as its source.
    ///
    /// # Errors
    /// As [`CronExpr::parse`]; `H` when no job name is given.
    pub fn parse_for(expr: &str, job: Option<&str>) -> Result<CronExpr, ScheduleError> {
        if expr.trim_start().starts_with('@') || !super::hashed::uses_hash(expr) {
            return CronExpr::parse(expr);
        }
        let Some(job) = job else {
            return Err(ScheduleError::Form {
                message: "H picks a value from the job's name: give the job's name (sqlcron next --job NAME)".into(),
                expr: expr.trim().to_string(),
            });
        };
        let expanded = super::hashed::expand(expr, job)?;
        let mut cron = CronExpr::parse(&expanded)?;
        cron.resolved = Some(std::mem::replace(&mut cron.source, expr.trim().to_string()));
        Ok(cron)
    }

    /// Parses a 5- or 6-field expression or a macro such as `@daily`.
    ///
    /// # Errors
    /// A [`ScheduleError`] naming the field, the value and what is allowed; `NeverFires` for an
    /// expression that is well formed but matches no date in the 400-year Gregorian cycle.
    pub fn parse(expr: &str) -> Result<CronExpr, ScheduleError> {
        let trimmed = expr.trim();
        if trimmed.is_empty() {
            return Err(ScheduleError::Empty);
        }
        let expanded = if let Some(name) = trimmed.strip_prefix('@') {
            macro_expansion(name).ok_or_else(|| ScheduleError::Macro {
                name: trimmed.to_string(),
                reason: if name.eq_ignore_ascii_case("reboot") {
                    "@reboot is not supported: a cluster has no single boot to run it at"
                } else {
                    "unknown macro; use @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly, @every DURATION or @at TIME"
                },
            })?
        } else {
            trimmed
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let (second_src, rest) = match fields.len() {
            5 => (None, &fields[..]),
            6 => (Some(fields[0]), &fields[1..]),
            count => {
                return Err(ScheduleError::FieldCount {
                    count,
                    expr: trimmed.to_string(),
                });
            }
        };
        let err = |field: Field, message: String| ScheduleError::Field {
            field,
            message,
            expr: trimmed.to_string(),
        };
        let plain = |field: Field, src: &str| -> Result<u64, ScheduleError> {
            let mut bits = 0;
            for item in src.split(',') {
                bits |= parse_item(field, item).map_err(|m| err(field, m))?;
            }
            Ok(bits)
        };
        let seconds = match second_src {
            Some(src) => plain(Field::Second, src)?,
            None => 1,
        };
        let minutes = plain(Field::Minute, rest[0])?;
        let hours = plain(Field::Hour, rest[1])?;
        let mut days = 0;
        let mut last_day = false;
        for item in rest[2].split(',') {
            if item.eq_ignore_ascii_case("L") {
                last_day = true;
            } else {
                days |=
                    parse_item(Field::DayOfMonth, item).map_err(|m| err(Field::DayOfMonth, m))?;
            }
        }
        let months = plain(Field::Month, rest[3])?;
        let mut weekdays = 0;
        let mut last_weekdays = 0u8;
        let mut nth_weekdays = [0u8; 7];
        for item in rest[4].split(',') {
            match parse_day_special(item).map_err(|m| err(Field::DayOfWeek, m))? {
                Some(DaySpecial::Last(day)) => last_weekdays |= 1 << day,
                Some(DaySpecial::Nth(day, n)) => nth_weekdays[day as usize] |= 1 << n,
                None => {
                    weekdays |=
                        parse_item(Field::DayOfWeek, item).map_err(|m| err(Field::DayOfWeek, m))?
                }
            }
        }
        // 7 is Sunday as well as 0.
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays | 1) & 0x7f;
        }
        let starts_with_star = |s: &str| s.starts_with('*');
        let cron = CronExpr {
            source: trimmed.to_string(),
            resolved: None,
            seconds,
            minutes,
            hours,
            days,
            last_day,
            months,
            weekdays,
            last_weekdays,
            nth_weekdays,
            dom_star: starts_with_star(rest[2]),
            dow_star: starts_with_star(rest[4]),
            wildcard: second_src.is_some_and(starts_with_star)
                || starts_with_star(rest[0])
                || starts_with_star(rest[1]),
        };
        if !cron.fires_in_gregorian_cycle() {
            return Err(ScheduleError::NeverFires {
                expr: trimmed.to_string(),
            });
        }
        Ok(cron)
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The plain expression its `H` fields resolved to, if it has any.
    pub fn resolved(&self) -> Option<&str> {
        self.resolved.as_deref()
    }

    /// True when the second (if written), minute or hour field starts with `*`. Such schedules
    /// fire at every real instant whose local time matches, including both passes of a repeated
    /// hour; the others fire once per local time (see the crate README, "Time zones and DST").
    pub fn is_wildcard(&self) -> bool {
        self.wildcard
    }

    /// Whether a local wall-clock time matches every field.
    pub fn matches(&self, t: NaiveDateTime) -> bool {
        has(self.seconds, t.second())
            && has(self.minutes, t.minute())
            && has(self.hours, t.hour())
            && self.day_mask(t.year(), t.month()) & (1 << t.day()) != 0
    }

    /// The first matching local time at or after `from`, looking at most 400 years ahead
    /// (a full Gregorian cycle, so `None` really means "never"). Steps by month, day and field
    /// value, never minute by minute.
    pub fn next_local(&self, from: NaiveDateTime) -> Option<NaiveDateTime> {
        let (y0, m0, d0) = (from.year(), from.month(), from.day());
        for year in y0..=y0.checked_add(400)? {
            let first_month = if year == y0 { m0 } else { 1 };
            let mut months = self.months & (!0u64 << first_month);
            while months != 0 {
                let month = months.trailing_zeros();
                months &= months - 1;
                let first_day = if year == y0 && month == m0 { d0 } else { 1 };
                let mut days = self.day_mask(year, month) & (!0u64 << first_day);
                while days != 0 {
                    let day = days.trailing_zeros();
                    days &= days - 1;
                    let time = if year == y0 && month == m0 && day == d0 {
                        self.next_time_of_day(from.hour(), from.minute(), from.second())
                    } else {
                        Some(self.first_time_of_day())
                    };
                    if let Some((h, m, s)) = time {
                        let date = NaiveDate::from_ymd_opt(year, month, day)?;
                        return Some(date.and_time(NaiveTime::from_hms_opt(h, m, s)?));
                    }
                }
            }
        }
        None
    }

    fn first_time_of_day(&self) -> (u32, u32, u32) {
        (
            self.hours.trailing_zeros(),
            self.minutes.trailing_zeros(),
            self.seconds.trailing_zeros(),
        )
    }

    /// The first matching time of day at or after `h:m:s`, on the same day.
    fn next_time_of_day(&self, h: u32, m: u32, s: u32) -> Option<(u32, u32, u32)> {
        let first_second = self.seconds.trailing_zeros();
        if has(self.hours, h) {
            if has(self.minutes, m)
                && let Some(second) = next_bit(self.seconds, s)
            {
                return Some((h, m, second));
            }
            if let Some(minute) = next_bit(self.minutes, m + 1) {
                return Some((h, minute, first_second));
            }
        }
        let hour = next_bit(self.hours, h + 1)?;
        Some((hour, self.minutes.trailing_zeros(), first_second))
    }

    /// The days (bits 1..=31) of one month that match the day-of-month and day-of-week fields,
    /// with the Vixie-cron rule: OR when both fields are restricted, AND otherwise.
    fn day_mask(&self, year: i32, month: u32) -> u64 {
        let Some(first) = NaiveDate::from_ymd_opt(year, month, 1) else {
            return 0;
        };
        let len = days_in_month(year, month);
        let all = ((1u64 << (len + 1)) - 1) & !1;
        let mut dom = self.days & all;
        if self.last_day {
            dom |= 1 << len;
        }
        let first_weekday = first.weekday().num_days_from_sunday();
        let mut dow = 0u64;
        for weekday in 0..7u32 {
            let wanted_all = has(self.weekdays, weekday);
            let wanted_last = self.last_weekdays & (1 << weekday) != 0;
            let nth = self.nth_weekdays[weekday as usize];
            if !wanted_all && !wanted_last && nth == 0 {
                continue;
            }
            let first_day = 1 + (weekday + 7 - first_weekday) % 7;
            let occurrences = (len - first_day) / 7 + 1;
            for k in 0..occurrences {
                let day = first_day + 7 * k;
                let is_last = k + 1 == occurrences;
                if wanted_all || (wanted_last && is_last) || nth & (1 << (k + 1)) != 0 {
                    dow |= 1 << day;
                }
            }
        }
        if !self.dom_star && !self.dow_star {
            dom | dow
        } else {
            dom & dow
        }
    }

    /// Whether any date in one full 400-year Gregorian cycle matches the day and month fields.
    /// Time-of-day fields are never empty, so this decides "never fires".
    fn fires_in_gregorian_cycle(&self) -> bool {
        (2000..2400).any(|year| {
            let mut months = self.months;
            while months != 0 {
                let month = months.trailing_zeros();
                months &= months - 1;
                if self.day_mask(year, month) != 0 {
                    return true;
                }
            }
            false
        })
    }
}

impl fmt::Display for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

fn macro_expansion(name: &str) -> Option<&'static str> {
    Some(match name.to_ascii_lowercase().as_str() {
        "yearly" | "annually" => "0 0 1 1 *",
        "monthly" => "0 0 1 * *",
        "weekly" => "0 0 * * 0",
        "daily" | "midnight" => "0 0 * * *",
        "hourly" => "0 * * * *",
        _ => return None,
    })
}

fn has(bits: u64, value: u32) -> bool {
    value < 64 && bits & (1 << value) != 0
}

fn next_bit(bits: u64, from: u32) -> Option<u32> {
    if from >= 64 {
        return None;
    }
    let masked = bits & (!0u64 << from);
    (masked != 0).then(|| masked.trailing_zeros())
}

/// Days in a month of the proleptic Gregorian calendar.
pub fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// Parses one list item of a plain field: `*`, `*/n`, `a`, `a-b`, `a-b/n` or `a/n`.
fn parse_item(field: Field, item: &str) -> Result<u64, String> {
    let (min, max) = field.bounds();
    if item.is_empty() {
        return Err("empty list item (two commas in a row, or a trailing comma)".to_string());
    }
    let (range, step) = match item.split_once('/') {
        Some((range, step_src)) => {
            let step: u32 = step_src
                .parse()
                .map_err(|_| format!("step \"{step_src}\" in \"{item}\" is not a number"))?;
            if step == 0 {
                return Err(format!("step 0 in \"{item}\" must be at least 1"));
            }
            (range, Some(step))
        }
        None => (item, None),
    };
    let (start, end) = if range == "*" {
        (min, max)
    } else if let Some((a, b)) = range.split_once('-') {
        let (a, b) = (parse_value(field, a)?, parse_value(field, b)?);
        if a > b {
            return Err(format!(
                "range {range} is reversed (the start must not be after the end)"
            ));
        }
        (a, b)
    } else {
        let a = parse_value(field, range)?;
        // `a/n` runs from a to the field's maximum.
        (a, if step.is_some() { max } else { a })
    };
    let step = step.unwrap_or(1);
    let mut bits = 0u64;
    let mut value = start;
    while value <= end {
        bits |= 1 << value;
        value += step;
    }
    Ok(bits)
}

fn parse_value(field: Field, src: &str) -> Result<u32, String> {
    let (min, max) = field.bounds();
    if let Ok(value) = src.parse::<u32>() {
        if value < min || value > max {
            return Err(format!("{value} is out of range {min}-{max}"));
        }
        return Ok(value);
    }
    if src.bytes().all(|b| b.is_ascii_digit()) && !src.is_empty() {
        return Err(format!("{src} is out of range {min}-{max}"));
    }
    if let Some((names, offset, _)) = field.names()
        && let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(src))
    {
        return Ok(i as u32 + offset);
    }
    Err(match field.names() {
        Some((_, _, range)) => {
            format!("\"{src}\" is not a number {min}-{max} or a three-letter name {range}")
        }
        None if src.is_empty() => "missing value".to_string(),
        None => format!("\"{src}\" is not a number {min}-{max}"),
    })
}

/// Recognises `5L` and `1#2` in the day-of-week field; `None` for ordinary items.
fn parse_day_special(item: &str) -> Result<Option<DaySpecial>, String> {
    let day = |src: &str| -> Result<u32, String> { Ok(parse_value(Field::DayOfWeek, src)? % 7) };
    if let Some((d, n)) = item.split_once('#') {
        let d = day(d)?;
        let n: u32 = n
            .parse()
            .map_err(|_| format!("\"#{n}\" in \"{item}\" is not a number 1-5"))?;
        if !(1..=5).contains(&n) {
            return Err(format!("#{n} in \"{item}\" is out of range 1-5"));
        }
        return Ok(Some(DaySpecial::Nth(d, n)));
    }
    if item.len() > 1
        && let Some(d) = item.strip_suffix(['L', 'l'])
        && !d.contains(['-', '/', '*'])
    {
        return Ok(Some(DaySpecial::Last(day(d)?)));
    }
    if item.eq_ignore_ascii_case("L") {
        return Err(
            "\"L\" needs a day in the day-of-week field, e.g. 5L for the last Friday".into(),
        );
    }
    Ok(None)
}
