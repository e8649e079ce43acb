//! The dashboard's pages, rendered on the server (maud escapes every value): the overview, the
//! job list and a job, the nodes. Times are UTC with a relative form ("in 3min").

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{DOCTYPE, Markup, html};

use crate::model::access::{Action, refusal};
use crate::model::placement::{NodeOffer, unplaceable};
use crate::store::{JobRow, PARKED};

use super::Web;
use super::auth::{Caller, caller};

/// Jobs per page of the list.
pub const PAGE: i64 = 50;
pub(crate) const DAY_MS: i64 = 86_400_000;

/// The caller if they may do `action`; otherwise the response to send (sign in, or 403).
pub(crate) async fn allowed(
    web: &Web,
    headers: &HeaderMap,
    action: Action,
) -> Result<Caller, Response> {
    let who = caller(web, headers).await.map_err(unavailable)?;
    let Some(mut who) = who else {
        return Err(Redirect::to(&web.href("/login")).into_response());
    };
    who.shown = super::zone::Shown::of(headers);
    if let Some(why) = refusal(who.role, action, web.config.read_only) {
        return Err((StatusCode::FORBIDDEN, format!("{why}\n")).into_response());
    }
    Ok(who)
}

/// A whole page: the header with the navigation and the caller, then `body`.
pub(crate) fn page(
    web: &Web,
    who: Option<&Caller>,
    title: &str,
    body: Markup,
) -> axum::response::Html<String> {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · sqlcron" }
                link rel="stylesheet" href=(web.href("/static/style.css"));
                @if who.is_some() { script src=(web.href("/static/live.js")) defer {} }
            }
            body {
                header {
                    nav aria-label="main" {
                        a.brand href=(web.href("/")) { "sqlcron" }
                        a href=(web.href("/")) { "Overview" }
                        a href=(web.href("/jobs")) { "Jobs" }
                        a href=(web.href("/runs")) { "Runs" }
                        a href=(web.href("/timeline")) { "Timeline" }
                        a href=(web.href("/density")) { "Density" }
                        a href=(web.href("/nodes")) { "Nodes" }
                        a href=(web.href("/locks")) { "Locks" }
                        a href=(web.href("/events")) { "Events" }
                        a href=(web.href("/audit")) { "Audit" }
                    }
                    @if let Some(w) = who {
                        div.who {
                            span #live role="status" hidden {}
                            // Shown by live.js: how often the page follows the cluster.
                            select #live-every aria-label="Live updates" hidden {
                                option value="0" { "live" }
                                option value="10" { "every 10 s" }
                                option value="30" { "every 30 s" }
                                option value="60" { "every minute" }
                                option value="off" { "off" }
                            }
                            (super::zone::picker(web, w.shown))
                            span { (w.user.as_deref().unwrap_or("anonymous")) " (" (w.role) ")" }
                            @if w.session.is_some() {
                                form method="post" action=(web.href("/logout")) {
                                    button type="submit" { "Sign out" }
                                }
                            }
                        }
                    }
                }
                @if web.config.read_only { p.banner role="status" { "Read-only: actions are switched off." } }
                @if who.is_some() { main data-live=(web.href("/api/v1/stream")) { (body) } }
                @else { main { (body) } }
            }
        }
    };
    axum::response::Html(markup.into_string())
}

/// The database failed: the detail goes to the log, the browser gets a fixed sentence (the
/// error may name hosts and tables).
pub(crate) fn unavailable(e: impl std::fmt::Display) -> Response {
    tracing::warn!(error = %e, "web: a database read failed");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "the database is unavailable; the node's log says why\n",
    )
        .into_response()
}

/// `2026-11-25 14:03:12Z`.
pub(crate) fn utc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// "in 3min 2s" / "3min 2s ago".
pub(crate) fn relative(ms: i64, now: i64) -> String {
    let d = (ms - now).abs() / 1000;
    let span = match d {
        0..60 => format!("{d}s"),
        60..3600 => format!("{}min {}s", d / 60, d % 60),
        3600..172_800 => format!("{}h {}min", d / 3600, d % 3600 / 60),
        _ => format!("{} days", d / 86_400),
    };
    if ms >= now {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

/// What a job row is doing, in a word.
pub(crate) fn state(j: &JobRow) -> &'static str {
    if j.error.is_some() || j.decode_error.is_some() || j.next_exec == Some(PARKED) {
        "parked"
    } else if j.exec_by.is_some() {
        "running"
    } else if !j.enabled {
        "paused"
    } else {
        "idle"
    }
}

/// Rows the overview lists under "Running now" (all are counted).
const RUNNING_SHOWN: i64 = 200;

/// When a job runs next. While a node holds it, `next_exec` is the claim's lease end, not a
/// slot: the cell says it runs now and names the slot after the one it serves.
pub(crate) fn next_cell(
    j: &JobRow,
    now: i64,
    shown: super::zone::Shown,
    defaults: &crate::model::job::Policy,
) -> Markup {
    let zone = j
        .timezone
        .as_deref()
        .and_then(|z| crate::schedule::parse_zone(z).ok());
    if j.exec_by.is_some() {
        let after = j.slot.and_then(|slot| {
            let (schedule, _) = crate::model::row_decode::resolve(j, defaults).ok()?;
            let t = chrono::DateTime::from_timestamp_millis(slot)?;
            schedule.next_after(t).map(|n| n.timestamp_millis())
        });
        return html! {
            "running now"
            @if let Some(t) = after {
                "; then " time datetime=(utc(t)) title=(shown.at(t, zone)) { (relative(t, now)) }
            }
        };
    }
    match j.next_exec {
        Some(t) if t < PARKED && j.enabled => html! {
            time datetime=(utc(t)) title=(shown.at(t, zone)) { (relative(t, now)) }
        },
        _ => html! { "-" },
    }
}

/// How long the overview's count of the last day's outcomes is reused: counting a busy
/// cluster's day (86,400 runs at one a second) is the overview's one costly read, and every
/// open overview reads it again on each live update.
pub(crate) const COUNTS_FRESH: std::time::Duration = std::time::Duration::from_secs(5);

async fn day_counts(web: &Web, now: i64) -> crate::store::Result<Vec<(String, i64)>> {
    let cached = || web.counts.lock().ok().and_then(|c| c.clone());
    if let Some((at, counts)) = cached()
        && at.elapsed() < COUNTS_FRESH
    {
        return Ok(counts);
    }
    // One count at a time; while it runs, the others show the last count rather than queue.
    let _counting = match web.counting.try_lock() {
        Ok(guard) => guard,
        Err(_) => match cached() {
            Some((_, counts)) => return Ok(counts),
            None => web.counting.lock().await,
        },
    };
    if let Some((at, counts)) = cached()
        && at.elapsed() < COUNTS_FRESH
    {
        return Ok(counts);
    }
    let counts = web.store.outcomes_since(now - DAY_MS).await?;
    if let Ok(mut c) = web.counts.lock() {
        *c = Some((std::time::Instant::now(), counts.clone()));
    }
    Ok(counts)
}

/// What an operator should look at: nodes that stopped sending heartbeats without stopping
/// (in the last day), live nodes whose TOML files disagree, parked rows.
fn cluster_warnings(
    web: &Web,
    nodes: &[crate::store::NodeRow],
    parked: &[String],
    placements: &[(String, i64, String)],
    now: i64,
) -> Vec<Markup> {
    let mut out = vec![];
    for n in nodes.iter().filter(|n| n.alive(now)) {
        if let Some(off) = n.clock_offset.filter(|o| o.abs() > CLOCK_WARN_MS) {
            out.push(html! {
                "Node " strong { (n.name) } "'s clock is " (format!("{:.1}", off.abs() as f64 / 1000.0)) " s "
                @if off > 0 { "ahead of" } @else { "behind" }
                " the database's: sqlcron decides by the database's clock, but its logs, hooks and jobs read the node's. Run NTP on it."
            });
        }
    }
    let offers: Vec<NodeOffer> = nodes
        .iter()
        .map(|n| NodeOffer::new(&n.name, n.tags.as_deref(), n.alive(now) && !n.drain))
        .collect();
    let stranded: Vec<(&str, i64, String)> = placements
        .iter()
        .filter_map(|(p, n, first)| {
            unplaceable(Some(p), &offers).map(|why| (first.as_str(), *n, why))
        })
        .collect();
    if !stranded.is_empty() {
        out.push(html! {
            "No live node can run: "
            @for (i, (first, n, why)) in stranded.iter().take(5).enumerate() {
                @if i > 0 { "; " }
                a href=(web.href(&format!("/jobs/{}", encode(first)))) { (first) }
                @if *n > 1 { " and " (n - 1) " more like it" }
                " (" (why) ")"
            }
            @if stranded.len() > 5 { "; …" }
            " Give a node the tags they ask for, or undrain one."
        });
    }
    for n in nodes.iter().filter(|n| {
        !n.alive(now) && n.stopped.is_none() && n.last_seen.is_some_and(|t| now - t < DAY_MS)
    }) {
        out.push(html! {
            "Node " strong { (n.name) } " last sent a heartbeat "
            (n.last_seen.map(|t| relative(t, now)).unwrap_or_default())
            " without stopping: crashed, or cut off from the database. Its runs are taken over when their leases end."
        });
    }
    let drift = crate::store::drift(nodes, now);
    if !drift.is_empty() {
        let jobs: Vec<&str> = drift.iter().map(|d| d.job.as_str()).collect();
        out.push(html! {
            "The live nodes' TOML files disagree about " (drift.len()) " job(s): "
            (jobs.iter().take(5).copied().collect::<Vec<_>>().join(", "))
            @if jobs.len() > 5 { ", …" }
            " (" code { "sqlcron status" } " shows each node's version)."
        });
    }
    if !parked.is_empty() {
        out.push(html! {
            "Parked, running nowhere until fixed: "
            @for (i, name) in parked.iter().take(5).enumerate() {
                @if i > 0 { ", " }
                a href=(web.href(&format!("/jobs/{}", encode(name)))) { (name) }
            }
            @if parked.len() > 5 { ", …" }
        });
    }
    out
}

/// A node's clock this far from the database's is worth a warning (as `sqlcron doctor` says).
const CLOCK_WARN_MS: i64 = 1_000;
/// Placement values the overview checks at most.
const PLACEMENTS_SHOWN: i64 = 200;

pub(crate) async fn overview(State(web): State<Web>, headers: HeaderMap) -> Response {
    let who = match allowed(&web, &headers, Action::Read).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let s = &web.store;
    let now = match s.now().await {
        Ok(n) => n,
        Err(e) => return unavailable(e),
    };
    let (nodes, (running, held), due, outcomes, parked, placements) = match tokio::try_join!(
        s.nodes(),
        async { tokio::try_join!(s.running(RUNNING_SHOWN), s.running_count()) },
        s.next_due(10),
        day_counts(&web, now),
        s.parked_jobs(6),
        s.placements_in_use(PLACEMENTS_SHOWN)
    ) {
        Ok(x) => x,
        Err(e) => return unavailable(e),
    };
    let alive = nodes.iter().filter(|n| n.alive(now)).count();
    let count = |o: &str| outcomes.iter().find(|(k, _)| k == o).map_or(0, |(_, n)| *n);
    let failed: i64 = outcomes
        .iter()
        .filter(|(k, _)| k != "ok" && k != "skipped")
        .map(|(_, n)| n)
        .sum();
    let warnings = cluster_warnings(&web, &nodes, &parked, &placements, now);
    let body = html! {
        h1 { "Overview" }
        @if alive == 0 { p.banner.warn role="alert" { "No live node: nothing runs." } }
        @if !warnings.is_empty() {
            ul.banner.warn role="alert" aria-label="cluster warnings" { @for w in &warnings { li { (w) } } }
        }
        section.cards aria-label="summary" {
            div.card { span.big { (alive) } " of " (nodes.len()) " nodes alive" }
            div.card { span.big { (held.max(running.len() as i64)) } " running now" }
            div.card { span.big { (count("ok")) } " ok in 24 h" }
            div.card class=@if failed > 0 { "bad" } {
                span.big { (failed) } " failed in 24 h"
            }
        }
        h2 { "Running now" }
        @if running.is_empty() { p { "Nothing is running." } } @else {
            table { thead { tr { th { "Job" } th { "Node" } th { "Slot" } } }
                tbody { @for j in &running { tr {
                    td { a href=(web.href(&format!("/jobs/{}", encode(&j.name)))) { (j.name) } }
                    td { (j.exec_by.as_deref().unwrap_or("-")) }
                    td { (j.slot.map(|t| who.shown.at(t, j.timezone.as_deref().and_then(|z| crate::schedule::parse_zone(z).ok()))).unwrap_or_default()) }
                } } }
            }
            @if held > running.len() as i64 {
                p { "The first " (running.len()) " of " (held) " by name; each job's page shows the rest." }
            }
        }
        h2 { "Next runs" }
        table { thead { tr { th { "Job" } th { "Next" } th { "Schedule" } } }
            tbody { @for j in &due { tr {
                td { a href=(web.href(&format!("/jobs/{}", encode(&j.name)))) { (j.name) } }
                td { (next_cell(j, now, who.shown, &web.node.defaults)) }
                td { code { (j.schedule) } }
            } } }
        }
    };
    page(&web, Some(&who), "Overview", body).into_response()
}

/// Percent-encoding for a query value.
pub(crate) fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(crate) fn job_actions(web: &Web, j: &JobRow) -> Markup {
    actions_of(web, j, false)
}

/// The job's buttons; `ask_reason`: the pause form has a field for why (the job's page). Run
/// now and Resume lead to a page that says what they will do (confirm.rs) before doing it.
pub(crate) fn actions_of(web: &Web, j: &JobRow, ask_reason: bool) -> Markup {
    let path = |a: &str| web.href(&format!("/jobs/{}/{a}", encode(&j.name)));
    html! {
        div.actions {
            a.button href=(path("run")) aria-label=(format!("Run {} now", j.name)) { "Run now…" }
            @if j.exec_by.is_some() {
                a.button.danger href=(path("stop")) aria-label=(format!("Stop the run of {}", j.name)) { "Stop…" }
            }
            @if j.enabled {
                form method="post" action=(path("pause")) {
                    @if ask_reason {
                        label for="pause-reason" { "Why" }
                        input #pause-reason name="reason" maxlength=(super::actions::REASON_MAX) placeholder="optional" title="shown on this page while it stays paused";
                    }
                    button type="submit" aria-label=(format!("Pause {}", j.name)) { "Pause" }
                }
            } @else {
                a.button href=(path("resume")) aria-label=(format!("Resume {}", j.name)) { "Resume…" }
            }
        }
    }
}

pub(crate) async fn nodes(State(web): State<Web>, headers: HeaderMap) -> Response {
    let who = match allowed(&web, &headers, Action::Read).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let (now, nodes, held, held_count) = match tokio::try_join!(
        web.store.now(),
        web.store.nodes(),
        web.store.running(RUNNING_SHOWN),
        web.store.running_count()
    ) {
        Ok(x) => x,
        Err(e) => return unavailable(e),
    };
    let can_act = refusal(who.role, Action::Drain, web.config.read_only).is_none();
    let body = html! {
        h1 { "Nodes" }
        table {
            thead { tr { th { "Node" } th { "Host" } th { "Version" } th { "Alive" } th { "Last seen" } th { "State" } @if can_act { th { "Actions" } } } }
            tbody { @for n in &nodes { tr {
                td { (n.name) } td { (n.host.as_deref().unwrap_or("-")) } td { (n.version.as_deref().unwrap_or("-")) }
                td { @if n.alive(now) { "yes" } @else { "no" } }
                td { (n.last_seen.map(|t| relative(t, now)).unwrap_or_default()) }
                td { @if n.drain { span.badge.paused { "drained" } } @else { "serving" } }
                @if can_act { td {
                    form method="post" action=(web.href(&format!("/nodes/{}/{}", encode(&n.name), if n.drain { "undrain" } else { "drain" }))) {
                        button type="submit" { @if n.drain { "Undrain" } @else { "Drain" } }
                    }
                } }
            } } }
        }
        h2 { "Held now" }
        p { "The rows each node holds, with the end of its lease: a lease that has ended is taken over by another node at its next claim (the run on the holder ends with it)." }
        @if held.is_empty() { p { "No node holds a job." } } @else {
            table #held {
                thead { tr { th { "Node" } th { "Job" } th { "Slot" } th { "Try" } th { "Claimed" } th { "Lease ends" } } }
                tbody { @for j in &held { tr {
                    td { (j.exec_by.as_deref().unwrap_or("-")) }
                    td { a href=(web.href(&format!("/jobs/{}", encode(&j.name)))) { (j.name) } }
                    td.nowrap { (j.slot.map(|t| who.shown.at(t, None)).unwrap_or_default()) }
                    td { (j.attempt) }
                    td { (j.claimed_at.map(|t| relative(t, now)).unwrap_or_default()) }
                    td { @match j.lease_until {
                        Some(t) if t < now => span.badge.failed { "ended " (relative(t, now)) },
                        Some(t) => time datetime=(utc(t)) title=(who.shown.at(t, None)) { (relative(t, now)) },
                        None => "-",
                    } }
                } } }
            }
            @if held_count > held.len() as i64 { p { (held_count - held.len() as i64) " more not shown." } }
        }
    };
    page(&web, Some(&who), "Nodes", body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_times_read_both_ways() {
        assert_eq!(relative(65_000, 0), "in 1min 5s");
        assert_eq!(relative(0, 7_200_000), "2h 0min ago");
        assert_eq!(relative(0, 0), "in 0s");
    }

    proptest::proptest! {
        /// Any value encodes to URL-safe characters only, and decodes back to itself.
        #[test]
        fn any_query_value_round_trips(value in "\\PC{0,40}") {
            let e = encode(&value);
            proptest::prop_assert!(e.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.~%".contains(&b)));
            let mut bytes = vec![];
            let mut rest = e.as_bytes();
            while let Some((&b, tail)) = rest.split_first() {
                if b == b'%' {
                    bytes.push(u8::from_str_radix(std::str::from_utf8(&tail[..2]).unwrap(), 16).unwrap());
                    rest = &tail[2..];
                } else {
                    bytes.push(b);
                    rest = tail;
                }
            }
            proptest::prop_assert_eq!(String::from_utf8(bytes).unwrap(), value);
        }
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(encode("a b&c/ü"), "a%20b%26c%2F%C3%BC");
        assert_eq!(encode("job-1_x.y~"), "job-1_x.y~");
    }
}
