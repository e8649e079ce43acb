//! Two views of slots over days. A job's **calendar**: a heatmap of its expected slots (day by
//! hour, in its zone) against what happened to each, as `explain` classifies it. The cluster's
//! **density**: how many jobs fire in each minute of a day, to show where `H` or `jitter` would
//! spread a burst.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Timelike, Utc};
use maud::{Markup, html};
use serde::Deserialize;

use crate::model::access::Action;
use crate::model::explain::{Range, explain};

use super::Web;
use super::pages::{allowed, encode, page, unavailable};

/// Slots a calendar classifies at most: a busier job gets fewer days.
const CALENDAR_SLOTS: usize = 5_000;
/// Fire times the density view walks at most, all jobs together.
const DENSITY_STEPS: usize = 2_000_000;
/// How long a density computed is served again (it reads every job).
pub(crate) const DENSITY_FRESH_MS: i64 = 300_000;
const DAY_MS: i64 = 86_400_000;

/// What a slot came to, for a heatmap cell: the worst of its cell wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Came {
    Ok,
    Rerun,
    Late,
    Missed,
    Failed,
}

impl Came {
    fn name(self) -> &'static str {
        match self {
            Came::Ok => "ok",
            Came::Rerun => "rerun",
            Came::Late => "late",
            Came::Missed => "missed",
            Came::Failed => "failed",
        }
    }
}

/// One explained slot as a heatmap counts it; `None`: not a past slot to judge (running,
/// paused, still due).
fn came(state: &str, late: bool, attempts: usize) -> Option<Came> {
    match state {
        "failed" | "timeout" | "lost" | "stopped" => Some(Came::Failed),
        "skipped" | "abandoned" | "no_record" | "parked" => Some(Came::Missed),
        "ok" | "manual" if attempts > 1 => Some(Came::Rerun),
        "ok" | "manual" if late => Some(Came::Late),
        "ok" | "manual" => Some(Came::Ok),
        _ => None,
    }
}

/// A start this long after its slot counts as late (the default misfire threshold).
const LATE_MS: i64 = 60_000;

#[derive(Deserialize)]
pub(crate) struct Days {
    days: Option<i64>,
}

#[derive(Default)]
struct Cell {
    counts: BTreeMap<Came, usize>,
}

pub(crate) async fn job_calendar(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(q): Query<Days>,
) -> Response {
    let who = match allowed(&web, &headers, Action::Read).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let s = &web.store;
    let (now, row) = match tokio::try_join!(s.now(), s.job(&name)) {
        Ok(x) => x,
        Err(e) => return unavailable(e),
    };
    let Some(row) = row else {
        return (StatusCode::NOT_FOUND, format!("no job named \"{name}\"\n")).into_response();
    };
    let schedule = match crate::model::row_decode::resolve(&row, &web.node.defaults) {
        Ok((schedule, _)) => schedule,
        Err(e) => {
            return (
                StatusCode::CONFLICT,
                format!("{name}: cannot be read: {e}\n"),
            )
                .into_response();
        }
    };
    let asked = q.days.unwrap_or(30).clamp(1, 90);
    // Fewer days for a busy schedule: halve the window until its slots fit the bound.
    let slots_in = |d: i64| {
        DateTime::<Utc>::from_timestamp_millis(now - d * DAY_MS).map_or(0, |t| {
            schedule
                .iter_after(t)
                .take_while(|t| t.timestamp_millis() <= now)
                .take(CALENDAR_SLOTS + 1)
                .count()
        })
    };
    let mut days = asked;
    while days > 1 && slots_in(days) > CALENDAR_SLOTS {
        days /= 2;
    }
    // Busier than the bound even over a day (a job every few seconds): the last stretch that
    // holds the bound, as long as the first that many slots of the day took.
    let mut window = days * DAY_MS;
    if days == 1
        && let Some(t) = DateTime::<Utc>::from_timestamp_millis(now - DAY_MS)
        && let Some(last) = schedule.iter_after(t).nth(CALENDAR_SLOTS - 1)
        && last.timestamp_millis() <= now
    {
        window = (last.timestamp_millis() - (now - DAY_MS)).max(1);
    }
    // Not before the job was made (as `explain` does): earlier slots were never owed.
    let start = match s.created_at(&name).await {
        Ok(created) => created.map_or(now - window, |c| c.max(now - window)),
        Err(e) => return unavailable(e),
    };
    let runs = match s.runs_between(&name, start, now).await {
        Ok(r) => r,
        Err(e) => return unavailable(e),
    };
    let range = Range {
        from: start,
        to: now,
        future: 0,
        limit: CALENDAR_SLOTS,
    };
    let (slots, _) = explain(&schedule, &row.explain_state(), &runs, now, range);
    let tz = schedule.tz();
    let mut grid: BTreeMap<chrono::NaiveDate, [Cell; 24]> = BTreeMap::new();
    let mut totals: BTreeMap<Came, usize> = BTreeMap::new();
    for sl in &slots {
        let late = sl
            .runs
            .first()
            .and_then(|r| r.started)
            .is_some_and(|st| st - sl.slot > LATE_MS);
        let Some(c) = came(sl.state, late, sl.runs.len()) else {
            continue;
        };
        let Some(local) =
            DateTime::<Utc>::from_timestamp_millis(sl.slot).map(|t| t.with_timezone(&tz))
        else {
            continue;
        };
        let day = grid.entry(local.date_naive()).or_default();
        *day[local.hour() as usize].counts.entry(c).or_default() += 1;
        *totals.entry(c).or_default() += 1;
    }
    let here = web.href(&format!("/jobs/{}/calendar", encode(&name)));
    let body = html! {
        h1 { "Calendar of " a href=(web.href(&format!("/jobs/{}", encode(&name)))) { (name) } }
        p { "Each past slot of the last "
            @for d in [7, 30, 90] {
                @if d == asked { strong { (d) " days" } } @else { a href=(format!("{here}?days={d}")) { (d) " days" } }
                " "
            }
            "as it came out, by day and hour in the job's zone (" (tz.name()) "). A cell shows the worst of its slots."
            @if window < asked * DAY_MS { " This schedule is busy: only the last " (super::runs::span(window)) " are shown (" (CALENDAR_SLOTS) " slots at most)." }
        }
        ul.legend aria-label="legend" {
            @for c in [Came::Ok, Came::Rerun, Came::Late, Came::Missed, Came::Failed] {
                li { span class=(format!("swatch {}", c.name())) {} " " (c.name()) " " (totals.get(&c).copied().unwrap_or(0)) }
            }
        }
        @if grid.is_empty() { p { "No past slot in this window." } } @else {
            (heatmap(&grid))
        }
    };
    page(&web, Some(&who), "Calendar", body).into_response()
}

fn heatmap(grid: &BTreeMap<chrono::NaiveDate, [Cell; 24]>) -> Markup {
    html! {
        table.heatmap {
            caption { "Slots by day (rows) and hour (columns)" }
            thead { tr { th scope="col" { "Day" } @for h in 0..24 { th scope="col" { (format!("{h:02}")) } } } }
            tbody { @for (day, hours) in grid.iter().rev() { tr {
                th scope="row" { (day.format("%a %Y-%m-%d")) }
                @for (h, cell) in hours.iter().enumerate() {
                    @match cell.counts.keys().max() {
                        None => td {},
                        Some(worst) => {
                            @let words = cell.counts.iter().map(|(c, n)| format!("{n} {}", c.name())).collect::<Vec<_>>().join(", ");
                            td class=(worst.name()) title=(format!("{day} {h:02}:00: {words}")) aria-label=(format!("{day} {h:02}:00: {words}")) {}
                        }
                    }
                }
            } } }
        }
    }
}

/// Jobs per minute of the day (UTC), over the next 24 hours.
#[derive(Clone)]
pub(crate) struct Density {
    pub at: i64,
    pub minutes: Vec<u32>,
    /// The jobs counted in the busiest minutes, by minute.
    pub busiest: Vec<(usize, Vec<String>)>,
    pub jobs: usize,
    /// The walk stopped at [`DENSITY_STEPS`].
    pub partial: bool,
}

fn density_of(rows: &[crate::store::JobRow], web: &Web, now: i64) -> Density {
    let mut minutes = vec![0u32; 1440];
    let mut who: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut steps = 0;
    let mut partial = false;
    let mut jobs = 0;
    let Some(start) = DateTime::<Utc>::from_timestamp_millis(now) else {
        return Density {
            at: now,
            minutes,
            busiest: vec![],
            jobs,
            partial,
        };
    };
    for row in rows.iter().filter(|r| r.enabled) {
        let Ok((schedule, _)) = crate::model::row_decode::resolve(row, &web.node.defaults) else {
            continue;
        };
        jobs += 1;
        let mut seen = [false; 1440];
        for t in schedule.iter_after(start) {
            if t.timestamp_millis() > now + DAY_MS {
                break;
            }
            steps += 1;
            if steps > DENSITY_STEPS {
                partial = true;
                break;
            }
            let m = (t.hour() * 60 + t.minute()) as usize;
            if !seen[m] {
                seen[m] = true;
                minutes[m] += 1;
                let names = who.entry(m).or_default();
                if names.len() < 5 {
                    names.push(row.name.clone());
                }
            }
        }
        if partial {
            break;
        }
    }
    let mut order: Vec<usize> = (0..1440).filter(|&m| minutes[m] > 0).collect();
    order.sort_by_key(|&m| (std::cmp::Reverse(minutes[m]), m));
    let busiest = order
        .into_iter()
        .take(10)
        .map(|m| (m, who.remove(&m).unwrap_or_default()))
        .collect();
    Density {
        at: now,
        minutes,
        busiest,
        jobs,
        partial,
    }
}

pub(crate) async fn density(State(web): State<Web>, headers: HeaderMap) -> Response {
    let who = match allowed(&web, &headers, Action::Read).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let now = match web.store.now().await {
        Ok(n) => n,
        Err(e) => return unavailable(e),
    };
    let cached = web
        .density
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .filter(|d| now - d.at < DENSITY_FRESH_MS);
    let d = match cached {
        Some(d) => d,
        None => {
            // One request computes, the others wait for its result.
            let _computing = web.density_lock.lock().await;
            if let Some(d) = web
                .density
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
                .filter(|d| now - d.at < DENSITY_FRESH_MS)
            {
                return render_density(&web, &who, &d);
            }
            let rows = match web.store.jobs().await {
                Ok(r) => r,
                Err(e) => return unavailable(e),
            };
            let web2 = web.clone();
            let d = match tokio::task::spawn_blocking(move || density_of(&rows, &web2, now)).await {
                Ok(d) => d,
                Err(_) => {
                    return (StatusCode::INTERNAL_SERVER_ERROR, "density failed\n").into_response();
                }
            };
            *web.density.lock().unwrap_or_else(|p| p.into_inner()) = Some(d.clone());
            d
        }
    };
    render_density(&web, &who, &d)
}

fn render_density(web: &Web, who: &super::auth::Caller, d: &Density) -> Response {
    let top = d.minutes.iter().copied().max().unwrap_or(0).max(1);
    let body = html! {
        h1 { "Density" }
        p { "How many of the " (d.jobs) " enabled jobs fire in each minute of the next 24 hours (UTC; a job counts once per minute). "
            "Tall minutes are bursts: " code { "H" } " in a schedule or " code { "jitter" } " spreads them." }
        @if d.partial { p.banner.warn { "Only the first " (DENSITY_STEPS) " fire times were walked: the counts are partial." } }
        (density_chart(&d.minutes, top))
        h2 { "Busiest minutes" }
        @if d.busiest.is_empty() { p { "Nothing fires in the next 24 hours." } } @else {
            table { thead { tr { th { "Minute (UTC)" } th { "Jobs" } th { "Among them" } } }
                tbody { @for (m, names) in &d.busiest { tr {
                    td { (format!("{:02}:{:02}", m / 60, m % 60)) }
                    td { (d.minutes[*m]) }
                    td { @for (i, n) in names.iter().enumerate() {
                        @if i > 0 { ", " }
                        a href=(web.href(&format!("/jobs/{}", encode(n)))) { (n) }
                    } }
                } } }
            }
        }
    };
    page(web, Some(who), "Density", body).into_response()
}

/// 1,440 bars, one per minute, as an SVG with the hours marked.
fn density_chart(minutes: &[u32], top: u32) -> Markup {
    const HEIGHT: f64 = 160.0;
    html! {
        svg.density viewBox=(format!("0 0 1440 {}", HEIGHT + 16.0)) role="img"
            aria-label=(format!("jobs per minute of the day, at most {top}")) {
            @for (m, n) in minutes.iter().enumerate().filter(|(_, n)| **n > 0) {
                @let h = f64::from(*n) / f64::from(top) * HEIGHT;
                rect.bar x=(m) y=(format!("{:.1}", HEIGHT - h)) width="1" height=(format!("{h:.1}")) {
                    title { (format!("{:02}:{:02}: {n} job(s)", m / 60, m % 60)) }
                }
            }
            @for h in (0..24).step_by(3) {
                text.axis x=(h * 60) y=(HEIGHT + 14.0) { (format!("{h:02}:00")) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_slot_comes_to_one_class_and_the_worst_wins() {
        assert_eq!(came("ok", false, 1), Some(Came::Ok));
        assert_eq!(came("ok", true, 1), Some(Came::Late));
        assert_eq!(came("ok", true, 2), Some(Came::Rerun));
        assert_eq!(came("failed", false, 3), Some(Came::Failed));
        assert_eq!(came("lost", false, 1), Some(Came::Failed));
        assert_eq!(came("skipped", false, 0), Some(Came::Missed));
        assert_eq!(came("no_record", false, 0), Some(Came::Missed));
        assert_eq!(came("running", false, 1), None);
        assert_eq!(came("scheduled", false, 0), None);
        assert!(
            Came::Failed > Came::Missed && Came::Missed > Came::Late && Came::Late > Came::Rerun
        );
    }
}
