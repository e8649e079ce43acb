//! A job's page: its definition (where it comes from, in plain words), the slots of the last
//! day and the next five with why each ran or not (the `explain` view, DST notes included), a
//! plot of its lateness and durations, its runs, and links to its events and audit entries.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

use crate::model::access::{Action, refusal};
use crate::model::explain::{Range, explain};
use crate::store::HistoryRow;

use super::Web;
use super::pages::{DAY_MS, actions_of, allowed, encode, next_cell, page, state, unavailable};
use super::runs::duration;

/// An HTTP job's target as scheme, host and port only: webhook secrets live in paths and
/// user names, which are not shown (its headers and body are not either).
fn http_url(request: &str) -> String {
    serde_json::from_str::<serde_json::Value>(request)
        .ok()
        .and_then(|v| v.get("url").and_then(|u| u.as_str()).map(origin_of))
        .unwrap_or_else(|| "(unreadable request)".into())
}

/// `https://user:secret@host:8443/path?q` → `https://host:8443/…`.
fn origin_of(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "(not a URL)".into();
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let more = if authority.len() < rest.len() {
        "/…"
    } else {
        ""
    };
    format!("{scheme}://{host}{more}")
}

/// The reason of a pause's audit detail (`reason: ...`), with what the database saw if the
/// trigger added it: never cut, so a claim that hid a change shows it.
fn pause_reason(detail: Option<&str>) -> Option<&str> {
    detail?.strip_prefix("reason: ")
}

pub(crate) async fn job(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let who = match allowed(&web, &headers, Action::Read).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let s = &web.store;
    let (now, row, runs) =
        match tokio::try_join!(s.now(), s.job(&name), s.runs_light(Some(&name), 50)) {
            Ok(x) => x,
            Err(e) => return unavailable(e),
        };
    let Some(row) = row else {
        return (StatusCode::NOT_FOUND, format!("no job named \"{name}\"\n")).into_response();
    };
    let resolved = crate::model::row_decode::resolve(&row, &web.node.defaults);
    // Who paused it, when and why: the newest pause or resume of the trail, while paused.
    let paused = if row.enabled {
        None
    } else {
        // Newest by id (the database's, where `at` is a direct writer's own), and a change of
        // `enabled` made with SQL ends the search too: an older pause does not explain it.
        match s.audit_log(Some(&name), 50).await {
            Ok(mut trail) => {
                trail.sort_by_key(|a| std::cmp::Reverse(a.id));
                trail
                    .into_iter()
                    .find(|a| {
                        a.action == "pause"
                            || a.action == "resume"
                            || a.action.starts_with("sql_")
                                && a.detail.as_deref().is_some_and(|d| d.contains("enabled"))
                    })
                    .filter(|a| a.action == "pause")
            }
            Err(e) => return unavailable(e),
        }
    };
    let explained = match &resolved {
        Ok((schedule, _)) => {
            // The last day, or since the job was made when that is later (as `explain` does).
            let from = match s.created_at(&name).await {
                Ok(created) => created.map_or(now - DAY_MS, |c| c.max(now - DAY_MS)),
                Err(e) => return unavailable(e),
            };
            let from = crate::model::explain::narrow_from(
                schedule,
                from,
                now,
                crate::model::explain::MAX_SLOTS,
            );
            match s.runs_between(&name, from, now).await {
                Ok(r) => {
                    let state = row.explain_state();
                    let range = Range {
                        from,
                        to: now,
                        future: 5,
                        limit: 48,
                    };
                    Some(explain(schedule, &state, &r, now, range).0)
                }
                Err(e) => return unavailable(e),
            }
        }
        Err(_) => None,
    };
    let can_act = refusal(who.role, Action::Pause, web.config.read_only).is_none();
    let can_edit = refusal(who.role, Action::EditJob, web.config.read_only).is_none();
    let can_delete = refusal(who.role, Action::DeleteJob, web.config.read_only).is_none();
    let zone = resolved.as_ref().ok().map(|(s, _)| s.tz());
    let can_backfill = refusal(who.role, Action::Backfill, web.config.read_only).is_none()
        && row.run_on.as_deref() != Some("every_node");
    let body = html! {
        h1 { (row.name) " " span class=(format!("badge {}", state(&row))) { (state(&row)) } }
        @if can_act { (actions_of(&web, &row, true)) }
        @if can_edit { p.edit-links {
            a href=(web.href(&format!("/jobs/{}/edit", encode(&row.name)))) { @if row.source == "toml" { "Where it is defined" } @else { "Edit…" } } " "
            a href=(web.href(&format!("/new-job?from={}", encode(&row.name)))) { "Clone…" }
            @if can_delete && row.source != "toml" { " " a href=(web.href(&format!("/jobs/{}/delete", encode(&row.name)))) { "Delete…" } }
        } }
        @if let Some(p) = &paused {
            p #paused-by role="status" { "Paused by " (p.who)
                @if let Some(u) = &p.db_user { " (database user " (u) ")" }
                ", " (who.shown.at(p.at, None))
                @if let Some(r) = pause_reason(p.detail.as_deref()) { ": " q { bdi { (r) } } } }
        }
        p { a href=(web.href(&format!("/jobs/{}/calendar", encode(&row.name)))) { "Calendar of its slots" } }
        @if can_backfill { p { a href=(web.href(&format!("/jobs/{}/backfill", encode(&row.name)))) { "Backfill a range…" } } }
        @if let Some(e) = row.error.as_ref().or(row.decode_error.as_ref()) {
            p.banner.warn role="alert" { "Parked: " (e) }
        }
        @if let Err(e) = &resolved { p.banner.warn role="alert" { "Cannot be read: " (e) } }
        dl.definition {
            dt { "Schedule" } dd { code { (row.schedule) } " in " (row.timezone.as_deref().unwrap_or("UTC"))
                @if let Some(words) = resolved.as_ref().ok().and_then(|(s, _)| crate::schedule::describe(s)) { br; small { (words) } } }
            dt { "Next" } dd { (next_cell(&row, now, who.shown, &web.node.defaults)) }
            dt { "Runs" } dd { @if let Some(h) = &row.http { "HTTP " code { (http_url(h)) } } @else { code { (row.argv.as_deref().or(row.command.as_deref()).unwrap_or("-")) } } }
            dt { "As" } dd { (row.run_user.as_deref().unwrap_or("the default user")) }
            @if let Some(c) = resolved.as_ref().ok().and_then(|(_, p)| p.calendars.describe()) {
                dt { "Calendars" } dd { (c) }
            }
            dt { "Defined in" } dd { (row.source) }
            dt { "Held by" } dd { (row.exec_by.as_deref().unwrap_or("-")) }
        }
        h2 { "Slots: the last day and the next five" }
        @match &explained {
            Some(slots) if !slots.is_empty() => {
                table { thead { tr { th { "Slot (job's zone)" } th { "State" } th { "What happened" } } }
                    tbody { @for sl in slots.iter().rev() { tr class=(sl.state) {
                        td.nowrap { (sl.local) } td { (sl.state) }
                        td { (sl.text) @if let Some(n) = &sl.note { br; small { (n) } } }
                    } } }
                }
            }
            _ => p { "No slot to explain." },
        }
        h2 { "Lateness and duration" }
        (plot(&runs))
        p { a href=(web.href(&format!("/events?job={}", encode(&row.name)))) { "Hook events of " (row.name) }
            " · " a href=(web.href(&format!("/audit?job={}", encode(&row.name)))) { "Audit entries of " (row.name) } }
        h2 { "Recent runs" }
        p { a href=(web.href(&format!("/runs?job={}", encode(&row.name)))) { "Every run of " (row.name) ", filtered and searched" } }
        @if runs.is_empty() { p { "No run recorded." } } @else {
            table { thead { tr { th { "Slot" } th { "Try" } th { "Outcome" } th { "Node" } th { "Ended" } th { "Took" } } }
                tbody { @for r in &runs { tr class=(r.outcome) {
                    td { a href=(web.href(&format!("/runs/{}", r.id))) { (who.shown.at(r.slot, zone)) } } td { (r.attempt) }
                    td { span class=(format!("badge {}", r.outcome)) { (r.outcome) } }
                    td { (r.node.as_deref().unwrap_or("-")) }
                    td { (r.ended.map(|e| who.shown.at(e, zone)).unwrap_or_default()) }
                    td { @if let (Some(a), Some(b)) = (r.started, r.ended) { (duration(b - a)) } }
                } } }
            }
        }
    };
    page(&web, Some(&who), &row.name, body).into_response()
}

/// The last runs as an SVG: for each, how late it started after its slot (a dot) and how long
/// it took (a bar), oldest on the left, on one scale in seconds.
fn plot(runs: &[HistoryRow]) -> Markup {
    const WIDTH: f64 = 600.0;
    const HEIGHT: f64 = 120.0;
    let points: Vec<(i64, i64, &str)> = runs
        .iter()
        .rev()
        .filter(|r| r.outcome != "skipped")
        .filter_map(|r| {
            let s = r.started?;
            Some((
                (s - r.slot).max(0),
                r.ended.map_or(0, |e| e - s),
                r.outcome.as_str(),
            ))
        })
        .collect();
    if points.is_empty() {
        return html! { p { "No run to plot." } };
    }
    let top = points
        .iter()
        .map(|(late, took, _)| (*late).max(*took))
        .max()
        .unwrap_or(1)
        .max(1000);
    let step = WIDTH / points.len() as f64;
    let y = |ms: i64| HEIGHT - ms as f64 / top as f64 * (HEIGHT - 10.0);
    html! {
        figure.plot {
            svg viewBox=(format!("0 0 {WIDTH} {}", HEIGHT + 4.0)) role="img"
                aria-label=(format!("lateness and duration of the last {} runs, up to {}", points.len(), duration(top))) {
                @for (i, (late, took, outcome)) in points.iter().enumerate() {
                    @let x = step * i as f64;
                    rect class=(format!("bar {outcome}")) x=(format!("{:.1}", x + step * 0.2)) y=(format!("{:.1}", y(*took)))
                        width=(format!("{:.1}", step * 0.6)) height=(format!("{:.1}", HEIGHT - y(*took))) {
                        title { "took " (duration(*took)) }
                    }
                    circle.late cx=(format!("{:.1}", x + step / 2.0)) cy=(format!("{:.1}", y(*late))) r="3" {
                        title { "started " (duration(*late)) " after its slot" }
                    }
                }
            }
            figcaption { "Bars: duration; dots: start after the slot. Top of the scale: " (duration(top)) "." }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// A stored request of any shape shows as a scheme and host at most: never a path,
        /// a query or the user part, where webhook secrets live.
        #[test]
        fn any_http_target_shows_no_path_or_user(url in "\\PC{0,60}") {
            let shown = origin_of(&url);
            if let Some((_, rest)) = shown.split_once("://") {
                proptest::prop_assert!(!rest.contains('@') && !rest.contains('?'));
                proptest::prop_assert!(!rest.trim_end_matches("/…").contains('/'));
            }
        }
    }

    #[test]
    fn an_http_target_shows_its_origin_only() {
        assert_eq!(
            origin_of("https://u:secret@hooks.example:8443/services/T/B/XXXX?k=1"),
            "https://hooks.example:8443/…"
        );
        assert_eq!(origin_of("https://TOKEN@host"), "https://host");
        assert_eq!(
            http_url(r#"{"url":"http://h/api/webhooks/1/tok"}"#),
            "http://h/…"
        );
    }
}
