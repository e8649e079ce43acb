use super::*;
use chrono::SecondsFormat;

/// The next `n` fire times after `after`, as RFC 3339 in the schedule's zone.
fn fires(expr: &str, zone: &str, after: &str, n: usize) -> Vec<String> {
    let schedule = Schedule::parse(expr, zone).unwrap();
    let after = DateTime::parse_from_rfc3339(after)
        .unwrap()
        .with_timezone(&Utc);
    schedule
        .iter_after(after)
        .take(n)
        .map(|t| {
            t.with_timezone(&schedule.tz())
                .to_rfc3339_opts(SecondsFormat::Secs, false)
        })
        .collect()
}

fn err(expr: &str) -> String {
    CronExpr::parse(expr).unwrap_err().to_string()
}

// ---------------------------------------------------------------- syntax

#[test]
fn five_fields_every_five_minutes() {
    assert_eq!(
        fires("*/5 * * * *", "UTC", "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-01T00:05:00+00:00",
            "2026-01-01T00:10:00+00:00",
            "2026-01-01T00:15:00+00:00"
        ]
    );
}

#[test]
fn six_fields_with_seconds() {
    assert_eq!(
        fires("*/20 * * * * *", "UTC", "2026-01-01T00:00:50Z", 3),
        [
            "2026-01-01T00:01:00+00:00",
            "2026-01-01T00:01:20+00:00",
            "2026-01-01T00:01:40+00:00"
        ]
    );
}

#[test]
fn result_is_strictly_after_even_with_fractions() {
    let s = Schedule::parse("* * * * * *", "UTC").unwrap();
    let after = DateTime::parse_from_rfc3339("2026-01-01T00:00:00.5Z")
        .unwrap()
        .with_timezone(&Utc);
    assert_eq!(
        s.next_after(after).unwrap().to_rfc3339(),
        "2026-01-01T00:00:01+00:00"
    );
}

#[test]
fn ranges_steps_and_lists() {
    assert_eq!(
        fires("10-20/5,45 3 * * *", "UTC", "2026-01-01T00:00:00Z", 5),
        [
            "2026-01-01T03:10:00+00:00",
            "2026-01-01T03:15:00+00:00",
            "2026-01-01T03:20:00+00:00",
            "2026-01-01T03:45:00+00:00",
            "2026-01-02T03:10:00+00:00"
        ]
    );
}

#[test]
fn value_with_step_runs_to_the_field_maximum() {
    // 50/4 in minutes: 50, 54, 58.
    assert_eq!(
        fires("50/4 0 * * *", "UTC", "2026-01-01T00:00:00Z", 4),
        [
            "2026-01-01T00:50:00+00:00",
            "2026-01-01T00:54:00+00:00",
            "2026-01-01T00:58:00+00:00",
            "2026-01-02T00:50:00+00:00"
        ]
    );
}

#[test]
fn month_and_day_names_any_case() {
    let a = CronExpr::parse("0 0 * jan-Mar mon,WED,fri").unwrap();
    let b = CronExpr::parse("0 0 * 1-3 1,3,5").unwrap();
    let t0 = Utc
        .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .unwrap()
        .naive_utc();
    assert_eq!(a.next_local(t0), b.next_local(t0));
    let mut t = t0;
    for _ in 0..50 {
        let (x, y) = (a.next_local(t).unwrap(), b.next_local(t).unwrap());
        assert_eq!(x, y);
        t = x + chrono::Duration::seconds(1);
    }
}

#[test]
fn sunday_is_zero_and_seven() {
    let zero = fires("0 12 * * 0", "UTC", "2026-01-01T00:00:00Z", 3);
    let seven = fires("0 12 * * 7", "UTC", "2026-01-01T00:00:00Z", 3);
    let sun = fires("0 12 * * sun", "UTC", "2026-01-01T00:00:00Z", 3);
    assert_eq!(zero, seven);
    assert_eq!(zero, sun);
    assert_eq!(zero[0], "2026-01-04T12:00:00+00:00"); // 2026-01-04 is a Sunday
    // A range ending in 7 includes Sunday.
    assert_eq!(
        fires("0 12 * * 6-7", "UTC", "2026-01-01T00:00:00Z", 2),
        ["2026-01-03T12:00:00+00:00", "2026-01-04T12:00:00+00:00"]
    );
}

#[test]
fn macros() {
    let cases = [
        ("@yearly", "2027-01-01T00:00:00+00:00"),
        ("@annually", "2027-01-01T00:00:00+00:00"),
        ("@monthly", "2026-02-01T00:00:00+00:00"),
        ("@weekly", "2026-01-18T00:00:00+00:00"),
        ("@daily", "2026-01-16T00:00:00+00:00"),
        ("@midnight", "2026-01-16T00:00:00+00:00"),
        ("@hourly", "2026-01-15T11:00:00+00:00"),
    ];
    for (expr, want) in cases {
        assert_eq!(
            fires(expr, "UTC", "2026-01-15T10:30:00Z", 1),
            [want],
            "{expr}"
        );
    }
    assert!(CronExpr::parse("@hourly").unwrap().is_wildcard());
    assert!(!CronExpr::parse("@daily").unwrap().is_wildcard());
}

#[test]
fn last_day_of_month() {
    assert_eq!(
        fires("0 0 L * *", "UTC", "2026-01-15T00:00:00Z", 4),
        [
            "2026-01-31T00:00:00+00:00",
            "2026-02-28T00:00:00+00:00",
            "2026-03-31T00:00:00+00:00",
            "2026-04-30T00:00:00+00:00"
        ]
    );
    assert_eq!(
        fires("0 0 L 2 *", "UTC", "2027-03-01T00:00:00Z", 2),
        ["2028-02-29T00:00:00+00:00", "2029-02-28T00:00:00+00:00"]
    );
}

#[test]
fn last_weekday_and_nth_weekday() {
    // Last Friday of each month.
    assert_eq!(
        fires("0 9 * * 5L", "UTC", "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-30T09:00:00+00:00",
            "2026-02-27T09:00:00+00:00",
            "2026-03-27T09:00:00+00:00"
        ]
    );
    // Second Monday.
    assert_eq!(
        fires("0 9 * * 1#2", "UTC", "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-12T09:00:00+00:00",
            "2026-02-09T09:00:00+00:00",
            "2026-03-09T09:00:00+00:00"
        ]
    );
    // Fifth Friday only in months that have one.
    assert_eq!(
        fires("0 9 * * FRI#5", "UTC", "2026-01-01T00:00:00Z", 2),
        ["2026-01-30T09:00:00+00:00", "2026-05-29T09:00:00+00:00"]
    );
}

#[test]
fn day_or_rule_when_both_restricted() {
    // The 13th OR any Friday.
    let got = fires("0 0 13 * 5", "UTC", "2026-02-01T00:00:00Z", 5);
    assert_eq!(
        got,
        [
            "2026-02-06T00:00:00+00:00",
            "2026-02-13T00:00:00+00:00", // both the 13th and a Friday: once
            "2026-02-20T00:00:00+00:00",
            "2026-02-27T00:00:00+00:00",
            "2026-03-06T00:00:00+00:00"
        ]
    );
    assert_eq!(
        fires("0 0 15 * 1", "UTC", "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-05T00:00:00+00:00",
            "2026-01-12T00:00:00+00:00",
            "2026-01-15T00:00:00+00:00"
        ]
    );
}

#[test]
fn day_and_rule_when_one_field_starts_with_star() {
    // Day-of-month */2 (odd days) AND Monday: both must match.
    assert_eq!(
        fires("0 0 */2 * 1", "UTC", "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-05T00:00:00+00:00",
            "2026-01-19T00:00:00+00:00",
            "2026-02-09T00:00:00+00:00"
        ]
    );
    // Day-of-week * and day 31: only months with 31 days.
    assert_eq!(
        fires("0 0 31 * *", "UTC", "2026-01-31T00:00:00Z", 3),
        [
            "2026-03-31T00:00:00+00:00",
            "2026-05-31T00:00:00+00:00",
            "2026-07-31T00:00:00+00:00"
        ]
    );
}

#[test]
fn february_29th_across_leap_years() {
    assert_eq!(
        fires("0 0 29 2 *", "UTC", "2024-03-01T00:00:00Z", 3),
        [
            "2028-02-29T00:00:00+00:00",
            "2032-02-29T00:00:00+00:00",
            "2036-02-29T00:00:00+00:00"
        ]
    );
    // 2100 is not a leap year: 2096 then 2104.
    assert_eq!(
        fires("0 0 29 2 *", "UTC", "2096-03-01T00:00:00Z", 1),
        ["2104-02-29T00:00:00+00:00"]
    );
    // 2000 is.
    assert_eq!(
        fires("0 0 29 2 *", "UTC", "1997-01-01T00:00:00Z", 1),
        ["2000-02-29T00:00:00+00:00"]
    );
    // Feb 29 OR a Monday in February (both restricted).
    assert_eq!(
        fires("0 0 29 2 1", "UTC", "2026-01-01T00:00:00Z", 2),
        ["2026-02-02T00:00:00+00:00", "2026-02-09T00:00:00+00:00"]
    );
}

#[test]
fn month_ends_roll_over_year() {
    assert_eq!(
        fires("59 23 31 12 *", "UTC", "2026-12-31T23:59:00Z", 1),
        ["2027-12-31T23:59:00+00:00"]
    );
    assert_eq!(
        fires("0 0 30 * *", "UTC", "2027-01-30T00:00:00Z", 1),
        ["2027-03-30T00:00:00+00:00"]
    );
}

#[test]
fn single_value_range_is_fine() {
    assert!(CronExpr::parse("6-6 * * * *").is_ok());
}

// ---------------------------------------------------------------- errors

#[test]
fn errors_name_field_value_and_allowed_range() {
    assert_eq!(
        err("60 * * * *"),
        "minute field: 60 is out of range 0-59 in \"60 * * * *\""
    );
    assert_eq!(
        err("0 24 * * *"),
        "hour field: 24 is out of range 0-23 in \"0 24 * * *\""
    );
    assert_eq!(
        err("0 0 0 * *"),
        "day-of-month field: 0 is out of range 1-31 in \"0 0 0 * *\""
    );
    assert_eq!(
        err("0 0 * 13 *"),
        "month field: 13 is out of range 1-12 in \"0 0 * 13 *\""
    );
    assert_eq!(
        err("0 0 * * 8"),
        "day-of-week field: 8 is out of range 0-7 in \"0 0 * * 8\""
    );
    assert_eq!(
        err("61 * * * * *"),
        "second field: 61 is out of range 0-59 in \"61 * * * * *\""
    );
    assert!(err("99999999999999999999 * * * *").contains("out of range 0-59"));
}

#[test]
fn reversed_range_zero_step_and_bad_nth() {
    assert_eq!(
        err("5-1 * * * *"),
        "minute field: range 5-1 is reversed (the start must not be after the end) in \"5-1 * * * *\""
    );
    assert!(err("*/0 * * * *").starts_with("minute field: step 0 in \"*/0\" must be at least 1"));
    assert!(err("0 0 * * 1#0").starts_with("day-of-week field: #0 in \"1#0\" is out of range 1-5"));
    assert!(err("0 0 * * 1#6").starts_with("day-of-week field: #6 in \"1#6\" is out of range 1-5"));
}

#[test]
fn wrong_field_count() {
    assert_eq!(
        err("* * * *"),
        "expected 5 fields (minute hour day-of-month month day-of-week) or 6 (second first), found 4 in \"* * * *\""
    );
    assert!(err("* * * * * * *").contains("found 7"));
    assert_eq!(err("   "), "empty cron expression");
}

#[test]
fn unknown_names_and_macros() {
    assert!(err("0 0 * JANUARY *").starts_with(
        "month field: \"JANUARY\" is not a number 1-12 or a three-letter name JAN-DEC"
    ));
    assert!(err("0 0 * * MONDAY").starts_with(
        "day-of-week field: \"MONDAY\" is not a number 0-7 or a three-letter name SUN-SAT"
    ));
    assert!(err("0 0 * * xyz").contains("\"xyz\""));
    assert!(err("x * * * *").starts_with("minute field: \"x\" is not a number 0-59"));
    assert!(err("@reboot").starts_with("@reboot: @reboot is not supported"));
    assert!(err("@fortnightly").starts_with("@fortnightly: unknown macro"));
    assert!(err("1,,2 * * * *").contains("empty list item"));
}

#[test]
fn never_fires_is_rejected() {
    assert_eq!(
        err("0 0 31 4 *"),
        "\"0 0 31 4 *\" never fires: no calendar date matches its day-of-month, month and day-of-week fields"
    );
    assert!(err("0 0 30 2 *").contains("never fires"));
    assert!(err("0 0 31 4,6,9,11 *").contains("never fires"));
    // Day-of-month starts with '*', so the day fields are ANDed: the 31st that is the last
    // Friday, in February, never happens.
    assert!(err("0 0 */31 2 5L").contains("never fires"));
    // Fifth Monday in February happens in leap years starting on a Monday: fine.
    assert!(CronExpr::parse("0 0 * 2 1#5").is_ok());
}

#[test]
fn unknown_time_zone_is_named() {
    assert_eq!(
        Schedule::parse("* * * * *", "Europe/Berln")
            .unwrap_err()
            .to_string(),
        "unknown time zone \"Europe/Berln\" (expected an IANA name such as \"Europe/Berlin\" or \"UTC\")"
    );
}

// ---------------------------------------------------------------- time zones and DST

#[test]
fn berlin_spring_gap_fixed_schedule_fires_at_transition() {
    // 2026-03-29: 02:00 CET -> 03:00 CEST; 02:30 does not exist.
    assert_eq!(
        fires(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-28T12:00:00+01:00",
            3
        ),
        [
            "2026-03-29T03:00:00+02:00",
            "2026-03-30T02:30:00+02:00",
            "2026-03-31T02:30:00+02:00"
        ]
    );
}

#[test]
fn berlin_spring_gap_collapses_several_times_and_the_transition_time() {
    // 02:00, 02:15, 02:30, 02:45 and 03:00 all fire once, at 03:00 CEST.
    assert_eq!(
        fires(
            "0,15,30,45 2,3 * * *",
            "Europe/Berlin",
            "2026-03-29T01:50:00+01:00",
            3
        ),
        [
            "2026-03-29T03:00:00+02:00",
            "2026-03-29T03:15:00+02:00",
            "2026-03-29T03:30:00+02:00"
        ]
    );
}

#[test]
fn gap_firing_just_before_transition() {
    // One second before the gap starts, the collapsed firing is still ahead.
    assert_eq!(
        fires(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-29T01:59:59+01:00",
            1
        ),
        ["2026-03-29T03:00:00+02:00"]
    );
    assert_eq!(
        fires(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-29T03:00:00+02:00",
            1
        ),
        ["2026-03-30T02:30:00+02:00"]
    );
}

#[test]
fn berlin_spring_gap_wildcard_skips_missing_times() {
    assert_eq!(
        fires(
            "*/30 * * * *",
            "Europe/Berlin",
            "2026-03-29T01:00:00+01:00",
            3
        ),
        [
            "2026-03-29T01:30:00+01:00",
            "2026-03-29T03:00:00+02:00",
            "2026-03-29T03:30:00+02:00"
        ]
    );
}

#[test]
fn berlin_autumn_overlap_fixed_fires_once_at_earlier_instant() {
    // 2026-10-25: 03:00 CEST -> 02:00 CET; 02:30 happens twice.
    assert_eq!(
        fires(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-10-24T12:00:00+02:00",
            2
        ),
        ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]
    );
    // Asking from inside the second pass does not fire again.
    assert_eq!(
        fires(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-10-25T02:10:00+01:00",
            1
        ),
        ["2026-10-26T02:30:00+01:00"]
    );
}

#[test]
fn berlin_autumn_overlap_wildcard_fires_in_both_passes() {
    assert_eq!(
        fires(
            "30 * * * *",
            "Europe/Berlin",
            "2026-10-25T01:45:00+02:00",
            3
        ),
        [
            "2026-10-25T02:30:00+02:00",
            "2026-10-25T02:30:00+01:00",
            "2026-10-25T03:30:00+01:00"
        ]
    );
    // Minute wildcard, hour fixed: both passes of 02:xx.
    assert_eq!(
        fires(
            "*/20 2 * * *",
            "Europe/Berlin",
            "2026-10-25T00:00:00+02:00",
            7
        ),
        [
            "2026-10-25T02:00:00+02:00",
            "2026-10-25T02:20:00+02:00",
            "2026-10-25T02:40:00+02:00",
            "2026-10-25T02:00:00+01:00",
            "2026-10-25T02:20:00+01:00",
            "2026-10-25T02:40:00+01:00",
            "2026-10-26T02:00:00+01:00"
        ]
    );
}

#[test]
fn new_york_transitions() {
    // 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST.
    assert_eq!(
        fires(
            "30 2 * * *",
            "America/New_York",
            "2026-03-07T12:00:00-05:00",
            2
        ),
        ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"]
    );
    assert_eq!(
        fires(
            "30 1 * * *",
            "America/New_York",
            "2026-10-31T12:00:00-04:00",
            2
        ),
        ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"]
    );
    assert_eq!(
        fires(
            "0 * * * *",
            "America/New_York",
            "2026-11-01T00:30:00-04:00",
            3
        ),
        [
            "2026-11-01T01:00:00-04:00",
            "2026-11-01T01:00:00-05:00",
            "2026-11-01T02:00:00-05:00"
        ]
    );
}

#[test]
fn lord_howe_thirty_minute_shift() {
    // Australia/Lord_Howe: +10:30 standard, +11:00 summer. 2026-04-05 02:00 +11 -> 01:30 +10:30;
    // 2026-10-04 02:00 +10:30 -> 02:30 +11.
    assert_eq!(
        fires(
            "45 1 * * *",
            "Australia/Lord_Howe",
            "2026-04-04T12:00:00+11:00",
            2
        ),
        ["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"]
    );
    assert_eq!(
        fires(
            "*/15 1 * * *",
            "Australia/Lord_Howe",
            "2026-04-05T01:40:00+11:00",
            4
        ),
        [
            "2026-04-05T01:45:00+11:00",
            "2026-04-05T01:30:00+10:30",
            "2026-04-05T01:45:00+10:30",
            "2026-04-06T01:00:00+10:30"
        ]
    );
    assert_eq!(
        fires(
            "15 2 * * *",
            "Australia/Lord_Howe",
            "2026-10-03T12:00:00+10:30",
            2
        ),
        ["2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"]
    );
}

#[test]
fn zone_without_dst() {
    assert_eq!(
        fires("0 4 * * *", "Asia/Tokyo", "2026-03-29T00:00:00+09:00", 2),
        ["2026-03-29T04:00:00+09:00", "2026-03-30T04:00:00+09:00"]
    );
    assert_eq!(
        fires("0 0 1 1 *", "Asia/Kolkata", "2026-06-01T00:00:00Z", 1),
        ["2027-01-01T00:00:00+05:30"]
    );
}

#[test]
fn wildcard_rare_schedule_across_many_transitions() {
    // Every minute of Feb 29 in Berlin: years away, with DST transitions in between.
    assert_eq!(
        fires(
            "* * 29 2 *",
            "Europe/Berlin",
            "2026-01-01T00:00:00+01:00",
            1
        ),
        ["2028-02-29T00:00:00+01:00"]
    );
    // Samoa skipped 2011-12-30 entirely (jump from -10 to +14).
    assert_eq!(
        fires(
            "0 * 30 12 *",
            "Pacific/Apia",
            "2011-12-29T22:00:00-10:00",
            2
        ),
        ["2012-12-30T00:00:00+14:00", "2012-12-30T01:00:00+14:00"]
    );
    assert_eq!(
        fires(
            "0 12 30 12 *",
            "Pacific/Apia",
            "2011-12-29T22:00:00-10:00",
            1
        ),
        ["2011-12-31T00:00:00+14:00"]
    );
}

// ---------------------------------------------------------------- brute force comparison

mod brute {
    //! An independent, slow matcher: fields are generated as value sets, rendered to text, and
    //! matched here by walking instants minute by minute.
    use super::*;
    use chrono::{Datelike, Timelike};
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    pub struct Generated {
        pub text: String,
        minutes: Vec<u32>,
        hours: Vec<u32>,
        dom: Vec<u32>,
        dom_last: bool,
        months: Vec<u32>,
        dow: Vec<u32>,
        dow_last: Vec<u32>,
        dow_nth: Vec<(u32, u32)>,
        dom_star: bool,
        dow_star: bool,
    }

    /// A field item: (rendered text, values).
    fn plain_field(min: u32, max: u32) -> impl Strategy<Value = (String, Vec<u32>)> {
        prop_oneof![
            Just(("*".to_string(), (min..=max).collect())),
            (1..=(max - min + 1)).prop_map(move |step| (
                format!("*/{step}"),
                (min..=max).step_by(step as usize).collect()
            )),
            proptest::collection::btree_set(min..=max, 1..4).prop_map(|set| (
                set.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
                set.into_iter().collect()
            )),
            (min..=max, min..=max, 1..5u32).prop_map(|(a, b, step)| {
                let (a, b) = (a.min(b), a.max(b));
                (
                    format!("{a}-{b}/{step}"),
                    (a..=b).step_by(step as usize).collect(),
                )
            }),
        ]
    }

    pub fn expression() -> impl Strategy<Value = Generated> {
        let dom = prop_oneof![
            4 => plain_field(1, 31).prop_map(|(t, v)| (t, v, false)),
            1 => Just(("L".to_string(), vec![], true)),
            1 => (1..=31u32).prop_map(|d| (format!("{d},L"), vec![d], true)),
        ];
        let dow = prop_oneof![
            4 => plain_field(0, 7).prop_map(|(t, v)| (t, v, vec![], vec![])),
            1 => (0..7u32).prop_map(|d| (format!("{d}L"), vec![], vec![d], vec![])),
            1 => (0..7u32, 1..=5u32).prop_map(|(d, n)| (format!("{d}#{n}"), vec![], vec![], vec![(d, n)])),
        ];
        (
            plain_field(0, 59),
            plain_field(0, 23),
            dom,
            plain_field(1, 12),
            dow,
        )
            .prop_map(|(mi, h, (dt, dv, dl), mo, (wt, wv, wl, wn))| Generated {
                text: format!("{} {} {} {} {}", mi.0, h.0, dt, mo.0, wt),
                minutes: mi.1,
                hours: h.1,
                dom_star: dt.starts_with('*'),
                dom: dv,
                dom_last: dl,
                months: mo.1,
                dow_star: wt.starts_with('*'),
                dow: wv.into_iter().map(|d| d % 7).collect(),
                dow_last: wl,
                dow_nth: wn,
            })
    }

    impl Generated {
        pub fn matches(&self, t: NaiveDateTime) -> bool {
            let len = days_in_month(t.year(), t.month());
            let day = t.day();
            let weekday = t.weekday().num_days_from_sunday();
            let dom_ok = self.dom.contains(&day) || (self.dom_last && day == len);
            let dow_ok = self.dow.contains(&weekday)
                || (self.dow_last.contains(&weekday) && day + 7 > len)
                || self
                    .dow_nth
                    .iter()
                    .any(|&(d, n)| d == weekday && (day - 1) / 7 + 1 == n);
            let day_ok = if !self.dom_star && !self.dow_star {
                dom_ok || dow_ok
            } else {
                dom_ok && dow_ok
            };
            t.second() == 0
                && self.minutes.contains(&t.minute())
                && self.hours.contains(&t.hour())
                && self.months.contains(&t.month())
                && day_ok
        }
    }

    fn local(tz: Tz, secs: i64) -> NaiveDateTime {
        let utc = DateTime::from_timestamp(secs, 0).unwrap();
        utc.with_timezone(&tz).naive_local()
    }

    /// The first firing after `after` by walking instants minute by minute, up to `limit`.
    pub fn brute_next(
        g: &Generated,
        wildcard: bool,
        tz: Tz,
        after: i64,
        limit: i64,
    ) -> Option<i64> {
        let mut t = after - after.rem_euclid(60) + 60;
        while t <= limit {
            let here = local(tz, t);
            if wildcard {
                if g.matches(here) {
                    return Some(t);
                }
            } else {
                // The first pass of a repeated local time: no earlier instant shows it.
                let repeated = [1800i64, 3600, 7200]
                    .iter()
                    .any(|&d| local(tz, t - d) == here);
                if g.matches(here) && !repeated {
                    return Some(t);
                }
                // A transition that skipped local times: fire if any skipped one matches.
                let before = local(tz, t - 60);
                let mut skipped = before + chrono::Duration::minutes(1);
                while skipped < here {
                    if g.matches(skipped) {
                        return Some(t);
                    }
                    skipped += chrono::Duration::minutes(1);
                }
            }
            t += 60;
        }
        None
    }

    const ZONES: [&str; 8] = [
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
        "Asia/Tokyo",
        "America/Santiago",
        "Pacific/Chatham",
        "Asia/Kathmandu",
    ];

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

        #[test]
        fn fast_matches_brute_force(
            g in expression(),
            zone in 0..ZONES.len(),
            // 2020-01-01 .. 2030-01-01, biased towards DST change days by the minute-level walk.
            start in 1_577_836_800i64..1_893_456_000i64,
        ) {
            let Ok(expr) = CronExpr::parse(&g.text) else {
                // Only "never fires" may be rejected; prove it is right on a year sample.
                let err = CronExpr::parse(&g.text).unwrap_err();
                prop_assert!(matches!(err, ScheduleError::NeverFires { .. }), "{err}");
                return Ok(());
            };
            let tz: Tz = ZONES[zone].parse().unwrap();
            let wildcard = expr.is_wildcard();
            let schedule = Schedule::new(expr, tz);
            // Walk three consecutive firings within a bounded window.
            let limit = start + 60 * 86_400;
            let mut after = start;
            for _ in 0..3 {
                let fast = schedule
                    .next_after(DateTime::from_timestamp(after, 0).unwrap())
                    .map(|t| t.timestamp());
                let slow = brute_next(&g, wildcard, tz, after, limit);
                match slow {
                    Some(s) => prop_assert_eq!(fast, Some(s), "{} in {} after {}", g.text, ZONES[zone], after),
                    None => prop_assert!(fast.is_none_or(|f| f > limit), "{} in {} after {}: fast {:?}", g.text, ZONES[zone], after, fast),
                }
                match slow { Some(s) => after = s, None => break }
            }
        }
    }

    /// Starts placed on DST change days, where the rules actually differ.
    #[test]
    fn fast_matches_brute_force_around_transitions() {
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases: 300,
            ..ProptestConfig::default()
        });
        let days: [(&str, &str); 6] = [
            ("Europe/Berlin", "2026-03-29T00:00:00Z"),
            ("Europe/Berlin", "2026-10-24T22:00:00Z"),
            ("America/New_York", "2026-11-01T03:00:00Z"),
            ("Australia/Lord_Howe", "2026-04-04T13:00:00Z"),
            ("Australia/Lord_Howe", "2026-10-03T13:00:00Z"),
            ("Pacific/Chatham", "2026-04-04T12:00:00Z"),
        ];
        runner
            .run(
                &(expression(), 0..days.len(), 0i64..6 * 3600),
                |(g, i, shift)| {
                    let Ok(expr) = CronExpr::parse(&g.text) else {
                        return Ok(());
                    };
                    let tz: Tz = days[i].0.parse().unwrap();
                    let start =
                        DateTime::parse_from_rfc3339(days[i].1).unwrap().timestamp() + shift;
                    let wildcard = expr.is_wildcard();
                    let schedule = Schedule::new(expr, tz);
                    let limit = start + 3 * 86_400;
                    let mut after = start;
                    for _ in 0..4 {
                        let fast = schedule
                            .next_after(DateTime::from_timestamp(after, 0).unwrap())
                            .map(|t| t.timestamp());
                        let slow = brute_next(&g, wildcard, tz, after, limit);
                        match slow {
                            Some(s) => prop_assert_eq!(
                                fast,
                                Some(s),
                                "{} in {} after {}",
                                g.text,
                                days[i].0,
                                after
                            ),
                            None => {
                                prop_assert!(fast.is_none_or(|f| f > limit));
                                break;
                            }
                        }
                        after = slow.unwrap();
                    }
                    Ok(())
                },
            )
            .unwrap();
    }
}

// ---------------------------------------------------------------- no input panics

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn cron_ish() -> impl Strategy<Value = String> {
        let token = prop_oneof![
            Just("*".to_string()),
            Just("L".to_string()),
            Just("#".to_string()),
            Just("/".to_string()),
            Just("-".to_string()),
            Just(",".to_string()),
            Just(" ".to_string()),
            Just("@".to_string()),
            "[0-9]{1,3}",
            "[A-Za-z]{1,4}",
            any::<u64>().prop_map(|n| n.to_string()),
        ];
        proptest::collection::vec(token, 0..24).prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, .. ProptestConfig::default() })]

        #[test]
        fn arbitrary_text_never_panics(s in any::<String>()) {
            let _ = CronExpr::parse(&s);
            let _ = parse_zone(&s);
        }

        #[test]
        fn cron_like_text_never_panics_and_parsed_ones_compute(s in cron_ish(), t in -62_000_000_000i64..253_000_000_000i64) {
            if let Ok(expr) = CronExpr::parse(&s) {
                for zone in ["UTC", "Europe/Berlin", "Australia/Lord_Howe"] {
                    let schedule = Schedule::new(expr.clone(), zone.parse().unwrap());
                    let after = DateTime::from_timestamp(t, 0).unwrap();
                    if let Some(next) = schedule.next_after(after) {
                        prop_assert!(next > after);
                    }
                }
            }
        }
    }

    #[test]
    fn extreme_instants_do_not_panic() {
        let schedule = Schedule::parse("* * * * * *", "Europe/Berlin").unwrap();
        assert!(schedule.next_after(DateTime::<Utc>::MAX_UTC).is_none());
        assert!(schedule.next_after(DateTime::<Utc>::MIN_UTC).is_some());
        let schedule = Schedule::parse("0 0 29 2 1", "Asia/Tokyo").unwrap();
        let _ = schedule.next_after(DateTime::<Utc>::MAX_UTC - chrono::Duration::days(30));
    }
}
