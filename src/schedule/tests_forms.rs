//! `@every`, `@at` and `H`: the schedules that are not plain cron expressions.

use super::*;
use chrono::SecondsFormat;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

fn fires_for(expr: &str, zone: &str, job: Option<&str>, after: &str, n: usize) -> Vec<String> {
    let schedule = Schedule::parse_for(expr, zone, job).unwrap();
    schedule
        .iter_after(at(after))
        .take(n)
        .map(|t| {
            t.with_timezone(&schedule.tz())
                .to_rfc3339_opts(SecondsFormat::Secs, false)
        })
        .collect()
}

#[test]
fn every_counts_from_the_epoch_and_ignores_dst() {
    // 90 s from 1970-01-01T00:00:00Z: 2026-01-01T00:00:00Z is 1767225600 = 19635840 × 90.
    assert_eq!(
        fires_for("@every 90s", "UTC", None, "2026-01-01T00:00:00Z", 3),
        [
            "2026-01-01T00:01:30+00:00",
            "2026-01-01T00:03:00+00:00",
            "2026-01-01T00:04:30+00:00"
        ]
    );
    // Across the Berlin spring-forward gap: real hours, whatever the wall clock says.
    assert_eq!(
        fires_for(
            "@every 1h",
            "Europe/Berlin",
            None,
            "2026-03-29T00:30:00Z",
            3
        ),
        [
            "2026-03-29T03:00:00+02:00",
            "2026-03-29T04:00:00+02:00",
            "2026-03-29T05:00:00+02:00"
        ]
    );
}

#[test]
fn every_with_an_anchor_and_compound_durations() {
    assert_eq!(
        fires_for(
            "@every 2h30m anchor 2026-01-01T00:15:00+01:00",
            "UTC",
            None,
            "2026-01-01T00:00:00Z",
            2
        ),
        ["2026-01-01T01:45:00+00:00", "2026-01-01T04:15:00+00:00"]
    );
    // Before the anchor, the same grid extends backwards.
    assert_eq!(
        fires_for(
            "@every 1d anchor 2030-06-01T03:00:00Z",
            "UTC",
            None,
            "2026-01-01T05:00:00Z",
            1
        ),
        ["2026-01-02T03:00:00+00:00"]
    );
}

#[test]
fn every_rejects_bad_periods_and_anchors() {
    for (text, needle) in [
        ("@every", "needs a duration"),
        ("@every 0s", "at least 1s"),
        ("@every 1500ms", "whole number of seconds"),
        ("@every soon", "not a duration"),
        ("@every 1h anchor yesterday", "not an RFC 3339 instant"),
    ] {
        let e = Schedule::parse(text, "UTC").unwrap_err().to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
}

#[test]
fn at_fires_once_and_reads_local_times_in_the_zone() {
    let s = Schedule::parse("@at 2026-12-24T18:00:00+01:00", "UTC").unwrap();
    assert!(s.is_one_off());
    assert_eq!(
        s.next_after(at("2026-12-01T00:00:00Z")),
        Some(at("2026-12-24T17:00:00Z"))
    );
    assert_eq!(s.next_after(at("2026-12-24T17:00:00Z")), None);
    let local = Schedule::parse("@at 2026-12-24T18:00", "Europe/Berlin").unwrap();
    assert_eq!(local.kind(), s.kind());
    // 02:30 does not exist in Berlin on 2026-03-29: the end of the gap, 03:00 CEST.
    let gap = Schedule::parse("@at 2026-03-29 02:30", "Europe/Berlin").unwrap();
    assert_eq!(
        gap.kind(),
        &Kind::At(at("2026-03-29T01:00:00Z").timestamp())
    );
    // 02:30 occurs twice on 2026-10-25: the first one.
    let twice = Schedule::parse("@at 2026-10-25T02:30", "Europe/Berlin").unwrap();
    assert_eq!(
        twice.kind(),
        &Kind::At(at("2026-10-25T00:30:00Z").timestamp())
    );
    let e = Schedule::parse("@at next tuesday", "UTC")
        .unwrap_err()
        .to_string();
    assert!(e.contains("is not an instant"), "{e}");
}

#[test]
fn h_is_stable_per_job_and_spreads_jobs() {
    let a = CronExpr::parse_for("H H * * *", Some("backup")).unwrap();
    let again = CronExpr::parse_for("H H * * *", Some("backup")).unwrap();
    assert_eq!(a, again, "the same job resolves the same way every time");
    assert_eq!(a.source(), "H H * * *");
    // The resolution is part of the contract: it must not change between versions.
    assert_eq!(a.resolved(), Some(expected_backup()));
    let minutes: std::collections::BTreeSet<String> = (0..200)
        .map(|i| {
            let e = CronExpr::parse_for("H H * * *", Some(&format!("job-{i}"))).unwrap();
            e.resolved().unwrap().to_string()
        })
        .collect();
    assert!(
        minutes.len() > 150,
        "200 jobs should get mostly distinct times, got {}",
        minutes.len()
    );
}

/// What `H H * * *` resolves to for the job "backup" (computed once and fixed).
fn expected_backup() -> &'static str {
    "39 23 * * *"
}

#[test]
fn h_ranges_and_steps() {
    for i in 0..100 {
        let job = format!("j{i}");
        let e = CronExpr::parse_for("H/15 H(0-5) H * H(1-5)", Some(&job)).unwrap();
        let parts: Vec<&str> = e.resolved().unwrap().split(' ').collect();
        let (start, rest) = parts[0].split_once('-').unwrap();
        assert!(start.parse::<u32>().unwrap() < 15, "{parts:?}");
        assert_eq!(rest, "59/15");
        assert!(parts[1].parse::<u32>().unwrap() <= 5);
        let dom = parts[2].parse::<u32>().unwrap();
        assert!((1..=28).contains(&dom));
        assert!((1..=5).contains(&parts[4].parse::<u32>().unwrap()));
        let h = CronExpr::parse_for("H(0-29)/10 * * * *", Some(&job)).unwrap();
        let first = h.resolved().unwrap().split('-').next().unwrap();
        assert!(first.parse::<u32>().unwrap() < 10);
    }
    // Day names are not H.
    assert!(CronExpr::parse_for("0 0 * * THU", None).is_ok());
}

#[test]
fn h_errors_name_the_problem() {
    let no_job = CronExpr::parse_for("H * * * *", None)
        .unwrap_err()
        .to_string();
    assert!(no_job.contains("--job"), "{no_job}");
    for (text, needle) in [
        ("H(30-10) * * * *", "range must lie"),
        ("H(0-70) * * * *", "range must lie"),
        ("H/0 * * * *", "step after /"),
        ("H[1-2] * * * *", "write H, H(a-b)"),
    ] {
        let e = CronExpr::parse_for(text, Some("x"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
}
