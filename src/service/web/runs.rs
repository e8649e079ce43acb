//! The dashboard's views of runs: one run (outcome, node, attempt, token, its times and its
//! output), and the timeline of which node held which run when, with the runs lost when a
//! node's lease ran out and the takeovers that followed.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;

use crate::model::access::Action;
use crate::store::HistoryRow;

use super::Web;
use super::pages::{allowed, encode, page, relative, unavailable};
use super::zone::Shown;

/// The end of the output shown on the page; the rest is a download.
const TAIL: usize = 8 * 1024;
/// Runs drawn on one timeline.
const TIMELINE_RUNS: i64 = 2_000;

/// `27 ms`, `1.2 s`, `3min 4s`.
pub(crate) fn duration(ms: i64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{}min {}s", ms / 60_000, ms % 60_000 / 1000)
    }
}

/// A stretch of time as a person says it: "3 days", "5 h 20 min", "12 min".
pub(crate) fn span(ms: i64) -> String {
    const MIN: i64 = 60_000;
    const HOUR: i64 = 60 * MIN;
    const DAY: i64 = 24 * HOUR;
    let plural = |n: i64, one: &str| {
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {one}s")
        }
    };
    match ms {
        m if m >= DAY && m % DAY == 0 => plural(m / DAY, "day"),
        m if m >= DAY => format!("{} {} h", plural(m / DAY, "day"), m % DAY / HOUR),
        m if m >= HOUR => format!("{} h {} min", m / HOUR, m % HOUR / MIN),
        m if m >= MIN => format!("{} min", m / MIN),
        m => duration(m),
    }
}

/// The last `max` bytes of `text`, cut at a character boundary; whether it was cut.
fn tail(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut from = text.len() - max;
    while !text.is_char_boundary(from) {
        from += 1;
    }
    (&text[from..], true)
}

/// Seconds between two reads of a running run's page: the node's `[daemon] live_output`, at
/// least 1 (5 when it is off: the run's end still shows).
fn follow_every(web: &Web) -> u64 {
    match web.node.daemon.live_output.as_secs() {
        0 => 5,
        n => n,
    }
}

async fn read_run(web: &Web, id: i64) -> Result<HistoryRow, Response> {
    match web.store.run_record(id).await {
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err((StatusCode::NOT_FOUND, format!("no run {id}\n")).into_response()),
        Err(e) => Err(unavailable(e)),
    }
}

pub(crate) async fn run(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(id): Path<i64>,
) -> Response {
    let who = match allowed(&web, &headers, Action::Read).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let r = match read_run(&web, id).await {
        Ok(r) => r,
        Err(e) => return e,
    };
    let now = match web.store.now().await {
        Ok(n) => n,
        Err(e) => return unavailable(e),
    };
    // The job's zone, for a reader who chose each job's zone (the job may be gone since).
    let zone = match web.store.job(&r.job).await {
        Ok(row) => row
            .and_then(|j| j.timezone)
            .and_then(|z| crate::schedule::parse_zone(&z).ok()),
        Err(e) => return unavailable(e),
    };
    let at = |ms: i64| who.shown.at(ms, zone);
    let output = r.output.as_deref().unwrap_or("");
    let (shown, cut) = tail(output, TAIL);
    let job = web.href(&format!("/jobs/{}", encode(&r.job)));
    let body = html! {
        h1 { "Run " (r.id) " of " a href=(job) { (r.job) } " " span class=(format!("badge {}", r.outcome)) { (r.outcome) } }
        dl.definition {
            dt { "Slot" } dd { (at(r.slot)) }
            dt { "Attempt" } dd { (r.attempt) }
            dt { "Node" } dd { (r.node.as_deref().unwrap_or("-")) }
            dt { "Fencing token" } dd { (r.token.map(|t| t.to_string()).unwrap_or_default()) }
            dt { "Started" } dd { @if let Some(s) = r.started {
                (at(s)) " (" (duration(s - r.slot)) " after its slot)"
            } @else { "-" } }
            dt { "Ended" } dd { @if let Some(e) = r.ended {
                (at(e)) @if let Some(s) = r.started { " (took " (duration(e - s)) ")" }
            } @else if r.outcome == "running" {
                "still running" @if let Some(s) = r.started { ", for " (relative(s, now).trim_end_matches(" ago")) }
            } @else { "-" } }
            dt { "Exit" } dd {
                @if let Some(c) = r.exit_code { "code " (c) }
                @if let Some(s) = r.signal { " signal " (s) }
                @if r.exit_code.is_none() && r.signal.is_none() { "-" }
            }
            @if let Some(m) = &r.message { dt { "Note" } dd { (m) } }
            @if let (Some(n), Some(l)) = (r.skipped_count, r.skipped_last) {
                dt { "Skipped" } dd { (n) " slots, the last " (at(l)) }
            }
        }
        h2 { "Output" }
        @if r.outcome == "running" {
            // live.js reads the page again every few seconds while this is on it.
            p #following role="status" data-follow=(follow_every(&web)) {
                "Running: the output so far, stored by its node every " (duration(web.node.daemon.live_output.as_millis() as i64)) " once the run has run that long; this page follows it."
            }
        }
        @if output.is_empty() { p { @if r.outcome == "running" { "Nothing printed yet." } @else { "No output was stored." } } } @else {
            @if cut { p { "The last " (TAIL / 1024) " KiB of " (output.len()) " bytes. "
                a href=(web.href(&format!("/runs/{}/output", r.id))) download { "Download the full output" } } }
            @else { p { a href=(web.href(&format!("/runs/{}/output", r.id))) download { "Download" } } }
            pre.output #output { (shown) }
        }
    };
    page(&web, Some(&who), &format!("Run {}", r.id), body).into_response()
}

/// The stored output as a plain-text download (never rendered by the browser).
pub(crate) async fn output(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(id): Path<i64>,
) -> Response {
    if let Err(r) = allowed(&web, &headers, Action::Read).await {
        return r;
    }
    let r = match read_run(&web, id).await {
        Ok(r) => r,
        Err(e) => return e,
    };
    (
        [
            (
                header::CONTENT_TYPE,
                "text/plain; charset=utf-8".to_string(),
            ),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"run-{}.txt\"", r.id),
            ),
        ],
        r.output.unwrap_or_default(),
    )
        .into_response()
}

/// The windows a timeline may show, in minutes back from now.
const WINDOWS: [i64; 5] = [10, 60, 360, 1440, 10_080];

#[derive(Deserialize)]
pub(crate) struct Window {
    /// Minutes back from now: one of [`WINDOWS`].
    minutes: Option<i64>,
}

/// One node's lane of the timeline: its runs in the window.
struct Lane<'a> {
    node: &'a str,
    runs: Vec<&'a HistoryRow>,
}

pub(crate) async fn timeline(
    State(web): State<Web>,
    headers: HeaderMap,
    Query(window): Query<Window>,
) -> Response {
    let who = match allowed(&web, &headers, Action::Read).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let minutes = window.minutes.filter(|m| WINDOWS.contains(m)).unwrap_or(60);
    let now = match web.store.now().await {
        Ok(n) => n,
        Err(e) => return unavailable(e),
    };
    let from = now - minutes * 60_000;
    let runs = match web.store.runs_in_window(from, now, TIMELINE_RUNS).await {
        Ok(r) => r,
        Err(e) => return unavailable(e),
    };
    let mut lanes: BTreeMap<&str, Lane> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.started.is_some()) {
        let node = r.node.as_deref().unwrap_or("?");
        lanes
            .entry(node)
            .or_insert_with(|| Lane { node, runs: vec![] })
            .runs
            .push(r);
    }
    let lost: Vec<&HistoryRow> = runs.iter().filter(|r| r.outcome == "lost").collect();
    let body = html! {
        h1 { "Timeline" }
        p { "Which node held which run, over the last "
            @for m in WINDOWS {
                @if m == minutes { strong { (label(m)) } } @else { a href=(web.href(&format!("/timeline?minutes={m}"))) { (label(m)) } }
                " "
            }
            "(" (who.shown.name()) ", from " (who.shown.at(from, None)) " to " (who.shown.at(now, None)) ")." }
        @if lanes.is_empty() { p { "No run in this window." } } @else {
            (chart(&web, lanes.values(), from, now, who.shown))
            @if runs.len() as i64 >= TIMELINE_RUNS { p.banner { "Only the first " (TIMELINE_RUNS) " runs of the window are drawn." } }
        }
        h2 { "Leases that ran out" }
        @if lost.is_empty() { p { "No run was lost in this window." } } @else {
            table { thead { tr { th { "Job" } th { "Slot" } th { "Node that lost it" } th { "Taken over by" } th { "Note" } } }
                tbody { @for l in &lost { tr {
                    td { a href=(web.href(&format!("/jobs/{}", encode(&l.job)))) { (l.job) } }
                    td { a href=(web.href(&format!("/runs/{}", l.id))) { (who.shown.at(l.slot, None)) } }
                    td { (l.node.as_deref().unwrap_or("-")) }
                    td { (taken_over_by(&runs, l).unwrap_or("-")) }
                    td { (l.message.as_deref().unwrap_or("")) }
                } } }
            }
        }
    };
    page(&web, Some(&who), "Timeline", body).into_response()
}

fn label(minutes: i64) -> String {
    match minutes {
        10_080 => "7 days".into(),
        60 => "hour".into(),
        m if m < 60 => format!("{m} minutes"),
        m => format!("{} hours", m / 60),
    }
}

/// The node that ran the same slot next, after `lost`.
fn taken_over_by<'a>(runs: &'a [HistoryRow], lost: &HistoryRow) -> Option<&'a str> {
    runs.iter()
        .filter(|r| r.job == lost.job && r.slot == lost.slot && r.id > lost.id)
        .min_by_key(|r| r.id)
        .and_then(|r| r.node.as_deref())
}

/// The lanes as an SVG: a row per node, a bar per run from its start to its end (or now),
/// coloured by outcome; each bar links to its run and names it on hover.
fn chart<'a>(
    web: &Web,
    lanes: impl Iterator<Item = &'a Lane<'a>>,
    from: i64,
    to: i64,
    shown: Shown,
) -> Markup {
    let utc = |ms: i64| shown.at(ms, None);
    const WIDTH: f64 = 1000.0;
    const LEFT: f64 = 120.0;
    const ROW: f64 = 28.0;
    let lanes: Vec<&Lane> = lanes.collect();
    let span = (to - from).max(1) as f64;
    let x = |t: i64| LEFT + (t.clamp(from, to) - from) as f64 / span * (WIDTH - LEFT);
    let height = ROW * lanes.len() as f64 + 20.0;
    html! {
        svg.timeline viewBox=(format!("0 0 {WIDTH} {height}")) role="img" aria-label="runs by node over time" {
            @for (i, lane) in lanes.iter().enumerate() {
                @let y = ROW * i as f64;
                text.lane x="4" y=(y + 18.0) { (lane.node) }
                line.lane x1=(LEFT) x2=(WIDTH) y1=(y + ROW) y2=(y + ROW) {}
                @for r in &lane.runs {
                    @let start = x(r.started.unwrap_or(r.slot));
                    @let end = x(r.ended.unwrap_or(to));
                    a href=(web.href(&format!("/runs/{}", r.id))) {
                        rect class=(format!("bar {}", r.outcome)) x=(format!("{start:.1}")) y=(y + 4.0)
                            width=(format!("{:.1}", (end - start).max(2.0))) height=(ROW - 8.0) {
                            title { (r.job) " · " (r.outcome) " · " (utc(r.started.unwrap_or(r.slot)))
                                @if let Some(e) = r.ended { " → " (utc(e)) } }
                        }
                    }
                }
            }
            text.axis x=(LEFT) y=(height - 4.0) { (utc(from)) }
            text.axis x=(WIDTH) y=(height - 4.0) text-anchor="end" { (utc(to)) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_of_the_output_is_cut_on_a_character() {
        assert_eq!(tail("abc", 8), ("abc", false));
        assert_eq!(tail("abcdef", 3), ("def", true));
        // "é" is two bytes: a cut inside it moves past it.
        assert_eq!(tail("aé", 1), ("", true));
        assert_eq!(tail("aéz", 2), ("z", true));
    }

    #[test]
    fn spans_read_as_days_hours_and_minutes() {
        assert_eq!(span(3 * 86_400_000), "3 days");
        assert_eq!(span(86_400_000), "1 day");
        assert_eq!(span(86_400_000 + 5 * 3_600_000), "1 day 5 h");
        assert_eq!(span(5 * 3_600_000 + 20 * 60_000), "5 h 20 min");
        assert_eq!(span(12 * 60_000), "12 min");
        assert_eq!(span(1500), "1.5 s");
    }

    #[test]
    fn durations_read_as_seconds_then_minutes() {
        assert_eq!(duration(27), "27 ms");
        assert_eq!(duration(1_234), "1.2 s");
        assert_eq!(duration(185_000), "3min 5s");
    }
}
