//! `sqlcron explain`: what happened, or will happen, to every slot of one job in a range. A pure
//! function of the schedule, the row's state and the job's run records; "now" is a parameter.

use chrono::{DateTime, LocalResult, SecondsFormat, TimeZone, Utc};

use crate::model::history::HistoryRow;
use crate::schedule::Schedule;

/// The row's state as `explain` needs it.
#[derive(Debug, Clone, Default)]
pub struct RowState {
    pub enabled: bool,
    /// The slot the row waits for (or runs, when claimed).
    pub slot: Option<i64>,
    pub next_exec: Option<i64>,
    /// The node holding the claim.
    pub exec_by: Option<String>,
    /// Why the row is parked.
    pub error: Option<String>,
}

/// One line of the explanation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SlotExplained {
    /// The slot, milliseconds since the epoch (RFC 3339 UTC in JSON: `model::json_time`).
    #[serde(serialize_with = "crate::model::json_time::instant")]
    pub slot: i64,
    /// The slot in the schedule's zone, RFC 3339.
    pub local: String,
    /// `ok`, `failed`, `timeout`, `lost`, `stopped`, `running`, `skipped`, `abandoned`, `manual`, `paused`,
    /// `due`, `parked`, `no_record` or `scheduled` (a future slot).
    pub state: &'static str,
    /// The sentence a person reads.
    pub text: String,
    /// A DST remark: the local time does not exist, or occurs twice.
    pub note: Option<String>,
    /// The run records of the slot, oldest attempt first.
    pub runs: Vec<HistoryRow>,
}

/// What `explain` covers: past slots in `from..=to` (ms) and `future` fire times after `now`.
#[derive(Debug, Clone, Copy)]
pub struct Range {
    pub from: i64,
    pub to: i64,
    pub future: usize,
    /// Most lines for past slots (the newest are kept); the rest are counted.
    pub limit: usize,
}

/// The most past slots one explanation walks. A per-second job has 86,400 slots a day; a range
/// asked from 1970 would hold 1.8 billion and take minutes of CPU. Callers narrow the range
/// with [`narrow_from`] before they read its runs; [`explain`] stops at this many whatever it
/// is given.
pub const MAX_SLOTS: usize = 100_000;

/// The latest start at or after `from` such that `from..=to` holds at most `max` slots of
/// `schedule` (within a factor of two of the longest such stretch), so that a range asked with
/// no bound costs at most a few times `max` steps of the schedule. `from` itself when the
/// range is small enough.
pub fn narrow_from(schedule: &Schedule, from: i64, to: i64, max: usize) -> i64 {
    if to <= from {
        return from;
    }
    let fits = |start: i64| {
        let Some(t) = DateTime::from_timestamp_millis(start.saturating_sub(1)) else {
            return false;
        };
        schedule
            .iter_after(t)
            .take_while(|t| t.timestamp_millis() <= to)
            .take(max + 1)
            .count()
            <= max
    };
    // Gallop back from `to`: a window twice as long each time, until it reaches `from` or
    // holds too many slots. The counts double with the windows, so the steps add up to about
    // twice `max`.
    let mut best = to;
    let mut window: i64 = 1_000;
    loop {
        let start = to.saturating_sub(window).max(from);
        if !fits(start) {
            return best;
        }
        if start == from {
            return from;
        }
        best = start;
        window = window.saturating_mul(2);
    }
}

/// The explanation, oldest slot first, and how many past slots were left out by `limit` (the
/// oldest ones). At most [`MAX_SLOTS`] past slots are walked: a range that holds more is cut
/// at its start (narrow it first with [`narrow_from`] so that the cut is known).
pub fn explain(
    schedule: &Schedule,
    row: &RowState,
    runs: &[HistoryRow],
    now: i64,
    range: Range,
) -> (Vec<SlotExplained>, usize) {
    let past_end = range.to.min(now);
    let mut used = vec![false; runs.len()];
    let mut by_slot: std::collections::HashMap<i64, Vec<usize>> = Default::default();
    for (i, r) in runs.iter().enumerate() {
        if r.outcome != "skipped" {
            by_slot.entry(r.slot).or_default().push(i);
        }
    }
    let skipped: Vec<usize> = (0..runs.len())
        .filter(|i| runs[*i].outcome == "skipped")
        .collect();
    // The oldest record's slot: slots before it have no record because there was none yet.
    let oldest = runs.iter().map(|r| r.slot).min();
    let from = narrow_from(schedule, range.from, past_end, MAX_SLOTS);
    let start = DateTime::from_timestamp_millis(from.saturating_sub(1)).unwrap_or_default();
    let slots: Vec<i64> = schedule
        .iter_after(start)
        .map(|t| t.timestamp_millis())
        .take_while(|slot| *slot <= past_end)
        .take(MAX_SLOTS)
        .collect();
    // The newest slots are the ones asked about most: the oldest are left out first, and
    // only counted (their runs are theirs, not extra runs).
    let left_out = slots.len().saturating_sub(range.limit);
    for slot in &slots[..left_out] {
        for i in by_slot.get(slot).into_iter().flatten() {
            used[*i] = true;
        }
    }
    let mut lines = Vec::with_capacity(slots.len() - left_out + range.future);
    for &slot in &slots[left_out..] {
        let mine: Vec<HistoryRow> = by_slot
            .get(&slot)
            .into_iter()
            .flatten()
            .map(|i| {
                used[*i] = true;
                runs[*i].clone()
            })
            .collect();
        let (state, text) = if !mine.is_empty() {
            describe_runs(&mine)
        } else if let Some(i) = skipped.iter().find(|i| covers(&runs[**i], slot)) {
            used[*i] = true;
            ("skipped", describe_skipped(&runs[*i], slot))
        } else {
            unrecorded(row, slot, now, oldest)
        };
        lines.push(line(schedule, slot, state, text, mine));
    }
    // Records on no scheduled slot: manual runs (`sqlcron run` serves its own slot).
    for (i, r) in runs.iter().enumerate() {
        if used[i] || r.outcome == "skipped" || r.slot < from || r.slot > range.to {
            continue;
        }
        let (_, text) = describe_runs(std::slice::from_ref(r));
        let text = format!("extra run (sqlcron run): {text}");
        lines.push(line(schedule, r.slot, "manual", text, vec![r.clone()]));
    }
    lines.sort_by_key(|l| l.slot);
    let after = DateTime::from_timestamp_millis(now.max(range.from - 1)).unwrap_or_default();
    for t in schedule.iter_after(after).take(range.future) {
        let slot = t.timestamp_millis();
        let (state, text) = future(row, slot, now);
        lines.push(line(schedule, slot, state, text, Vec::new()));
    }
    (lines, left_out)
}

fn line(
    schedule: &Schedule,
    slot: i64,
    state: &'static str,
    text: String,
    runs: Vec<HistoryRow>,
) -> SlotExplained {
    SlotExplained {
        slot,
        local: local(schedule, slot),
        state,
        text,
        note: dst_note(schedule, slot),
        runs,
    }
}

/// A slot in the schedule's zone, RFC 3339 with its offset.
pub fn local(schedule: &Schedule, ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .with_timezone(&schedule.tz())
        .to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Whether a skipped-slots record covers `slot`.
fn covers(r: &HistoryRow, slot: i64) -> bool {
    r.outcome == "skipped" && r.slot <= slot && slot <= r.skipped_last.unwrap_or(r.slot)
}

fn ms(d: i64) -> String {
    if d < 1000 {
        format!("{}ms", d.max(0))
    } else {
        humantime::format_duration(std::time::Duration::from_secs((d / 1000) as u64)).to_string()
    }
}

/// One attempt: "ok on n1 (attempt 1, exit 0, 1s, started 35ms late)".
pub fn describe_run(r: &HistoryRow) -> String {
    let node = r.node.as_deref().unwrap_or("?");
    let mut parts = vec![format!("attempt {}", r.attempt)];
    if let Some(code) = r.exit_code {
        parts.push(format!("exit {code}"));
    }
    if let Some(sig) = r.signal {
        parts.push(format!("signal {sig}"));
    }
    if let (Some(s), Some(e)) = (r.started, r.ended) {
        parts.push(format!("took {}", ms(e - s)));
    }
    if let Some(s) = r.started {
        parts.push(format!("started {} late", ms(s - r.slot)));
    }
    // What the slot waited for before it ran (its upstreams: "waited 14m for extract").
    if let Some(waited) = r
        .message
        .as_deref()
        .and_then(|m| m.split("; ").find(|p| p.starts_with("waited ")))
    {
        parts.push(waited.to_string());
    }
    if let Some(held) = r.held_ms.filter(|h| *h > 0) {
        parts.push(format!(
            "held {:.1} s by the start rate",
            held as f64 / 1000.0
        ));
    }
    let what = match r.outcome.as_str() {
        "lost" => "lost (its node stopped renewing the lease)",
        "running" => "running",
        other => other,
    };
    format!("{what} on {node} ({})", parts.join(", "))
}

/// The runs of one slot, oldest attempt first.
fn describe_runs(runs: &[HistoryRow]) -> (&'static str, String) {
    let last = runs.last().expect("at least one run");
    let state = match last.outcome.as_str() {
        "ok" => "ok",
        "failed" => "failed",
        "timeout" => "timeout",
        "lost" => "lost",
        "running" => "running",
        "abandoned" => "abandoned",
        "stopped" => "stopped",
        _ => "failed",
    };
    let mut text = String::from("ran: ");
    for (i, r) in runs.iter().enumerate() {
        if i > 0 {
            text.push_str(if runs[i - 1].outcome == "lost" {
                "; rerun: "
            } else {
                "; retried: "
            });
        }
        if r.outcome == "abandoned" {
            text.push_str(&format!(
                "abandoned ({})",
                r.message.as_deref().unwrap_or("retries given up")
            ));
        } else {
            text.push_str(&describe_run(r));
        }
    }
    if last.outcome == "lost" {
        text.push_str("; not rerun (rerun_lost = false, or retries used up)");
    }
    (state, text)
}

fn describe_skipped(r: &HistoryRow, slot: i64) -> String {
    let count = r.skipped_count.unwrap_or(1);
    let why = r.message.as_deref().unwrap_or("missed");
    // A job's calendars write "calendar: ..." and "deferred: ..." (model/calendars.rs), its
    // upstreams "requires: ..." (model/requires.rs).
    let kept = why
        .strip_prefix("calendar: ")
        .or_else(|| why.strip_prefix("requires: "));
    let mut text = match (kept, why.strip_prefix("deferred: ")) {
        (Some(reason), _) => format!("skipped: {reason}"),
        (_, Some(reason)) => format!("deferred: {reason}"),
        _ => format!("skipped as missed: {why}"),
    };
    if count > 1 {
        text.push_str(&format!(
            " ({count} slots, this one of those from {} to {})",
            fmt_utc(r.slot),
            fmt_utc(r.skipped_last.unwrap_or(r.slot))
        ));
    }
    if let Some(noticed) = r.started {
        text.push_str(&format!("; noticed {} after the slot", ms(noticed - slot)));
    }
    text
}

/// A past slot with no record of its own.
fn unrecorded(row: &RowState, slot: i64, now: i64, oldest: Option<i64>) -> (&'static str, String) {
    let waiting = row.slot.is_some_and(|s| s <= slot);
    if let Some(e) = &row.error {
        return ("parked", format!("not run: the row is parked ({e})"));
    }
    if waiting && row.exec_by.is_some() && row.slot == Some(slot) {
        let node = row.exec_by.as_deref().unwrap_or("?");
        return ("running", format!("claimed by {node}, starting"));
    }
    if waiting && !row.enabled {
        return (
            "paused",
            "not run: the job is paused (on resume, the misfire policy decides)".into(),
        );
    }
    if waiting {
        let late = ms(now - slot);
        return ("due", format!("due {late} ago, not started yet"));
    }
    if oldest.is_none_or(|f| slot < f) {
        (
            "no_record",
            "no record: before the job's oldest kept record (not yet defined, or pruned)".into(),
        )
    } else {
        (
            "no_record",
            "no record: the slot passed without a run or a skipped record (the schedule or the \
             job was changed since, or its records were pruned)"
                .into(),
        )
    }
}

fn future(row: &RowState, slot: i64, now: i64) -> (&'static str, String) {
    if let Some(e) = &row.error {
        return ("parked", format!("will not run: the row is parked ({e})"));
    }
    if !row.enabled {
        return ("paused", "will not run while the job is paused".into());
    }
    let mut text = format!("will run in {}", ms(slot - now));
    if let Some(next) = row.next_exec
        && next > slot
        && row.slot.is_some_and(|s| s > slot)
    {
        text = format!("will not run: the row waits for {}", fmt_utc(next));
    }
    ("scheduled", text)
}

fn fmt_utc(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A remark when the slot's local time does not exist (a fixed schedule then fires at the end
/// of the gap) or occurs twice.
pub fn dst_note(schedule: &Schedule, ms: i64) -> Option<String> {
    let tz = schedule.tz();
    let t = DateTime::from_timestamp_millis(ms)?;
    let local = t.with_timezone(&tz).naive_local();
    let expr = schedule.expr()?;
    if !expr.matches(local) {
        let before = (t - chrono::Duration::seconds(1))
            .with_timezone(&tz)
            .naive_local()
            + chrono::Duration::seconds(1);
        let intended = expr.next_local(before)?;
        if intended < local {
            return Some(format!(
                "{} does not exist on {} in {tz}: runs at {}",
                intended.format("%H:%M"),
                intended.format("%Y-%m-%d"),
                local.format("%H:%M")
            ));
        }
    }
    if let LocalResult::Ambiguous(first, second) = tz.from_local_datetime(&local) {
        let (a, b) = (first.format("%:z"), second.format("%:z"));
        return Some(if expr.is_wildcard() {
            format!(
                "{} occurs twice on {} in {tz} ({a} and {b}): this schedule runs at both",
                local.format("%H:%M"),
                local.format("%Y-%m-%d")
            )
        } else {
            format!(
                "{} occurs twice on {} in {tz} ({a} and {b}): runs once, at the first",
                local.format("%H:%M"),
                local.format("%Y-%m-%d")
            )
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;

    fn at(rfc: &str) -> i64 {
        DateTime::parse_from_rfc3339(rfc)
            .unwrap()
            .timestamp_millis()
    }

    fn run(slot: i64, attempt: i64, outcome: &str, node: &str) -> HistoryRow {
        HistoryRow {
            id: slot,
            job: "j".into(),
            slot,
            attempt,
            node: Some(node.into()),
            token: Some(1),
            started: Some(slot + 20),
            ended: Some(slot + 1_020),
            outcome: outcome.into(),
            exit_code: (outcome != "lost").then_some(if outcome == "ok" { 0 } else { 3 }),
            signal: None,
            output: None,
            skipped_count: None,
            skipped_last: None,
            message: None,
            held_ms: None,
        }
    }

    fn row(slot: i64) -> RowState {
        RowState {
            enabled: true,
            slot: Some(slot),
            next_exec: Some(slot),
            ..RowState::default()
        }
    }

    fn range(from: i64, to: i64) -> Range {
        Range {
            from,
            to,
            future: 2,
            limit: 1000,
        }
    }

    /// Issue 50: a range from 1970 of a per-second job is narrowed to about `MAX_SLOTS` slots
    /// before `to`, and its explanation walks no more than those.
    #[test]
    fn a_range_without_bound_is_narrowed_to_the_newest_slots() {
        let s = Schedule::parse("* * * * * *", "UTC").unwrap();
        let to = at("2026-11-20T00:00:00Z");
        let from = narrow_from(&s, 0, to, MAX_SLOTS);
        let held = (to - from) / 1000 + 1;
        assert!(
            held as usize <= MAX_SLOTS && held as usize > MAX_SLOTS / 2,
            "{held} slots"
        );
        // A range that fits is kept whole, and a negative or inverted one is left alone.
        assert_eq!(
            narrow_from(&s, to - 3_600_000, to, MAX_SLOTS),
            to - 3_600_000
        );
        assert_eq!(narrow_from(&s, i64::MIN, to, 10), to - 8_000);
        assert_eq!(narrow_from(&s, to, to - 1, 10), to);
        let daily = Schedule::parse("0 0 * * *", "UTC").unwrap();
        assert_eq!(narrow_from(&daily, 0, to, MAX_SLOTS), 0);
        let (lines, left_out) = explain(
            &s,
            &row(to + 1000),
            &[],
            to,
            Range {
                from: 0,
                to,
                future: 1,
                limit: 10,
            },
        );
        assert_eq!(lines.len(), 11);
        assert_eq!(lines[9].slot, to);
        assert_eq!(left_out as i64, held - 10);
    }

    #[test]
    fn each_slot_says_what_happened() {
        let s = Schedule::parse("0 * * * *", "UTC").unwrap();
        let base = at("2026-11-20T00:00:00Z");
        let mut skipped = run(base + 3 * H, 0, "skipped", "n2");
        skipped.skipped_count = Some(2);
        skipped.skipped_last = Some(base + 4 * H);
        skipped.started = Some(base + 4 * H + 600_000);
        skipped.message = Some("2 missed slot(s) not run (misfire = skip)".into());
        let runs = vec![
            run(base, 1, "ok", "n1"),
            run(base + H, 1, "failed", "n1"),
            run(base + H, 2, "ok", "n2"),
            run(base + 2 * H, 1, "lost", "n1"),
            run(base + 2 * H, 2, "ok", "n3"),
            skipped,
            run(base + 5 * H + 123_000, 0, "ok", "n1"),
        ];
        let now = base + 6 * H + 10_000;
        let (lines, left) = explain(&s, &row(base + 6 * H), &runs, now, range(base, now));
        assert_eq!(left, 0);
        let states: Vec<&str> = lines.iter().map(|l| l.state).collect();
        assert_eq!(
            states,
            [
                "ok",
                "ok",
                "ok",
                "skipped",
                "skipped",
                "no_record",
                "manual",
                "due",
                "scheduled",
                "scheduled"
            ]
        );
        assert!(
            lines[1].text.contains("failed on n1") && lines[1].text.contains("retried: ok on n2")
        );
        assert!(lines[2].text.contains("lost") && lines[2].text.contains("rerun: ok on n3"));
        assert!(
            lines[3].text.contains("misfire = skip") && lines[3].text.contains("noticed 1h 10m")
        );
        assert!(lines[5].text.contains("without a run or a skipped record"));
        assert!(lines[6].text.contains("sqlcron run"));
        assert!(lines[7].text.contains("due 10s ago"));
        assert_eq!(lines[8].slot, base + 7 * H);
        assert!(
            lines[8].text.contains("will run in 59m 50s"),
            "{}",
            lines[8].text
        );
    }

    #[test]
    fn a_run_held_by_the_start_rate_says_for_how_long() {
        let mut r = run(at("2026-11-20T00:00:00Z"), 1, "ok", "n1");
        r.held_ms = Some(3_240);
        assert!(
            describe_run(&r).contains("held 3.2 s by the start rate"),
            "{}",
            describe_run(&r)
        );
        r.held_ms = None;
        assert!(!describe_run(&r).contains("held"));
        r.message = Some("waited 14m for extract; output cut".into());
        assert!(
            describe_run(&r).contains(", waited 14m for extract)"),
            "{}",
            describe_run(&r)
        );
    }

    #[test]
    fn slots_a_calendar_skipped_or_deferred_name_the_calendar() {
        let s = Schedule::parse("0 * * * *", "UTC").unwrap();
        let base = at("2026-12-25T00:00:00Z");
        let mut holiday = run(base, 0, "skipped", "n1");
        holiday.skipped_count = Some(2);
        holiday.skipped_last = Some(base + H);
        holiday.message = Some("calendar: 2026-12-25 is Christmas Day in holidays-de".into());
        let mut deferred = run(base + 2 * H, 0, "skipped", "n1");
        deferred.message =
            Some("deferred: outside maintenance; runs at the opening, 2026-12-25T03:30:00Z".into());
        let runs = vec![holiday, deferred];
        let now = base + 2 * H + 1000;
        let (lines, _) = explain(&s, &row(base + 3 * H), &runs, now, range(base, now));
        assert!(
            lines[1]
                .text
                .starts_with("skipped: 2026-12-25 is Christmas Day in holidays-de"),
            "{lines:?}"
        );
        assert!(
            lines[2]
                .text
                .starts_with("deferred: outside maintenance; runs at the opening"),
            "{lines:?}"
        );
    }

    #[test]
    fn paused_and_parked_rows_say_so() {
        let s = Schedule::parse("0 * * * *", "UTC").unwrap();
        let base = at("2026-11-20T00:00:00Z");
        let paused = RowState {
            enabled: false,
            ..row(base)
        };
        let (lines, _) = explain(&s, &paused, &[], base + 90 * 60_000, range(base, base + H));
        assert_eq!(lines[0].state, "paused");
        assert_eq!(lines[1].state, "paused");
        assert_eq!(lines[2].state, "paused");
        assert!(lines[2].text.contains("will not run"));
        let parked = RowState {
            error: Some("schedule: bad".into()),
            ..row(base)
        };
        let (lines, _) = explain(&s, &parked, &[], base + 10, range(base, base + 10));
        assert!(lines.iter().all(|l| l.state == "parked"), "{lines:?}");
    }

    #[test]
    fn dst_days_are_noted() {
        let s = Schedule::parse("30 2 * * *", "Europe/Berlin").unwrap();
        let from = at("2026-03-28T00:00:00Z");
        let to = at("2026-03-30T23:00:00Z");
        let (lines, _) = explain(&s, &row(to), &[], to, range(from, to));
        let spring = lines
            .iter()
            .find(|l| l.local.starts_with("2026-03-29"))
            .unwrap();
        assert_eq!(spring.local, "2026-03-29T03:00:00+02:00");
        assert_eq!(
            spring.note.as_deref(),
            Some("02:30 does not exist on 2026-03-29 in Europe/Berlin: runs at 03:00")
        );
        assert!(
            lines
                .iter()
                .filter(|l| !l.local.starts_with("2026-03-29"))
                .all(|l| l.note.is_none())
        );
        let autumn = dst_note(&s, at("2026-10-25T02:30:00+02:00")).unwrap();
        assert!(autumn.contains("occurs twice") && autumn.contains("runs once, at the first"));
        let every = Schedule::parse("*/30 * * * *", "Europe/Berlin").unwrap();
        let twice = dst_note(&every, at("2026-10-25T02:30:00+01:00")).unwrap();
        assert!(twice.contains("runs at both"), "{twice}");
    }

    #[test]
    fn long_ranges_are_cut_at_the_limit() {
        let s = Schedule::parse("* * * * * *", "UTC").unwrap();
        let base = at("2026-11-20T00:00:00Z");
        let r = Range {
            limit: 100,
            ..range(base, base + 1_000_000)
        };
        let (lines, left) = explain(&s, &row(base + 2_000_000), &[], base + 2_000_000, r);
        assert_eq!(lines.len(), 100 + 2);
        assert_eq!(left, 901);
        assert_eq!(lines[0].slot, base + 901_000, "the newest slots are kept");
    }
}
