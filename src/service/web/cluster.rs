//! The dashboard's views of what the jobs share: locks and semaphores (with the admin's break),
//! hook events and their deliveries, and the audit trail. Each is a bounded read, newest first.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use maud::html;
use serde::Deserialize;

use crate::model::access::{Action, refusal};

use super::Web;
use super::pages::{allowed, encode, page, relative, unavailable, utc};

/// Rows per list of events or audit entries.
const LIST: i64 = 200;

pub(crate) async fn locks(State(web): State<Web>, headers: HeaderMap) -> Response {
    let who = match allowed(&web, &headers, Action::Read).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let (now, locks) =
        match tokio::try_join!(web.store.now(), web.store.locks_bounded(super::LOCKS_SHOWN)) {
            Ok(x) => x,
            Err(e) => return unavailable(e),
        };
    let can_break = refusal(who.role, Action::BreakLock, web.config.read_only).is_none();
    let body = html! {
        h1 { "Locks and semaphores" }
        p { "Holders and waiters of " code { "sqlcron lock" } " and " code { "sqlcron sem" } ", and the last use of each idle name." }
        @if locks.is_empty() { p { "No lock has been used." } } @else {
            table {
                thead { tr { th { "Name" } th { "State" } th { "Owner" } th { "Host" } th { "PID" } th { "Since" } th { "Until" } th { "Token" } @if can_break { th { "Actions" } } } }
                tbody { @for l in &locks { tr {
                    td { (l.name) }
                    td { span class=(format!("badge {}", l.state)) { (l.state) } }
                    td { (l.owner.as_deref().unwrap_or("-")) }
                    td { (l.host.as_deref().unwrap_or("-")) }
                    td { (l.pid.map(|p| p.to_string()).unwrap_or_default()) }
                    td { (l.since.map(|t| relative(t, now)).unwrap_or_default()) }
                    td { (l.until.map(|t| relative(t, now)).unwrap_or_default()) }
                    td { (l.token.map(|t| t.to_string()).unwrap_or_default()) }
                    @if can_break { td { @if l.state == "holding" {
                        a href=(web.href(&format!("/locks/{}/break", encode(&l.name)))) { "Break…" }
                    } } }
                } } }
            }
        }
    };
    page(&web, Some(&who), "Locks", body).into_response()
}

/// The confirmation before a break: who holds the lock now, and what breaking does.
pub(crate) async fn confirm_break(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let who = match allowed(&web, &headers, Action::BreakLock).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let (now, locks) =
        match tokio::try_join!(web.store.now(), web.store.locks_bounded(super::LOCKS_SHOWN)) {
            Ok(x) => x,
            Err(e) => return unavailable(e),
        };
    let holders: Vec<_> = locks
        .iter()
        .filter(|l| l.name == name && l.state == "holding")
        .collect();
    let body = html! {
        h1 { "Break " (name) "?" }
        @if holders.is_empty() { p { "Nobody holds " (name) " now." } } @else {
            p { "Breaking stops each holder at its next lease extension (within a third of its lease); the place stays taken until the lease ends, so the next holder never overlaps one still running. This cannot be undone." }
            ul { @for h in &holders {
                li { (h.owner.as_deref().unwrap_or("?")) " on " (h.host.as_deref().unwrap_or("?"))
                     " (PID " (h.pid.unwrap_or(0)) "), lease until " (h.until.map(|t| relative(t, now)).unwrap_or_default()) }
            } }
            form data-still method="post" action=(web.href(&format!("/locks/{}/break", encode(&name)))) {
                input type="hidden" name="confirm" value="yes";
                button.danger type="submit" { "Break " (name) }
                " "
                a href=(web.href("/locks")) { "Cancel" }
            }
        }
    };
    page(&web, Some(&who), "Break a lock", body).into_response()
}

#[derive(Deserialize)]
pub(crate) struct JobFilter {
    job: Option<String>,
}

pub(crate) async fn events(
    State(web): State<Web>,
    headers: HeaderMap,
    Query(filter): Query<JobFilter>,
) -> Response {
    let who = match allowed(&web, &headers, Action::Read).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let job = filter.job.as_deref().filter(|j| !j.is_empty());
    let (now, events) = match tokio::try_join!(web.store.now(), web.store.events(job, LIST)) {
        Ok(x) => x,
        Err(e) => return unavailable(e),
    };
    let can_retry = refusal(who.role, Action::RetryEvent, web.config.read_only).is_none();
    let body = html! {
        h1 { "Events" @if let Some(j) = job { " of " (j) } }
        p { "What the hooks and alerts were told, and whether it was delivered (newest first)." }
        @if events.is_empty() { p { "No event." } } @else {
            table {
                thead { tr { th { "Made" } th { "Job" } th { "Kind" } th { "Run" } th { "State" } th { "Tries" } th { "Node" } th { "Sent" } th { "Error" } } }
                tbody { @for e in &events { tr {
                    td { time datetime=(utc(e.created)) title=(who.shown.at(e.created, None)) { (relative(e.created, now)) } }
                    td { a href=(web.href(&format!("/jobs/{}", encode(&e.job)))) { (e.job) } }
                    td { (e.kind) }
                    td { @if let Some(r) = e.run_id { a href=(web.href(&format!("/runs/{r}"))) { (r) } } }
                    td { span class=(format!("badge {}", e.state)) { (e.state) } }
                    td { (e.tries) }
                    td { (e.node.as_deref().unwrap_or("-")) }
                    td { (e.sent.map(|t| who.shown.at(t, None)).unwrap_or_default()) }
                    td { (e.error.as_deref().unwrap_or(""))
                        @if can_retry && e.state == "failed" {
                            form method="post" action=(web.href(&format!("/events/{}/retry", e.id))) {
                                button type="submit" aria-label=(format!("Retry event {}", e.id)) { "Retry" }
                            }
                        } }
                } } }
            }
        }
    };
    page(&web, Some(&who), "Events", body).into_response()
}

pub(crate) async fn audit(
    State(web): State<Web>,
    headers: HeaderMap,
    Query(filter): Query<JobFilter>,
) -> Response {
    let who = match allowed(&web, &headers, Action::Read).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let job = filter.job.as_deref().filter(|j| !j.is_empty());
    let rows = match web.store.audit_log(job, LIST).await {
        Ok(x) => x,
        Err(e) => return unavailable(e),
    };
    let body = html! {
        h1 { "Audit" @if let Some(j) = job { " of " (j) } }
        p { "Every change to the jobs, by whom, from where (newest first). Who and Host are what the writer said; Database user is what the database knew of it." }
        form.search method="get" action=(web.href("/audit")) role="search" {
            label for="job" { "Job" }
            input #job name="job" value=(job.unwrap_or("")) type="search";
            button type="submit" { "Filter" }
        }
        @if rows.is_empty() { p { "No entry." } } @else {
            table {
                thead { tr { th { "When" } th { "Action" } th { "Job or lock" } th { "Who" } th { "Host" } th { "Database user" } th { "Detail" } } }
                tbody { @for a in &rows { tr {
                    td { (who.shown.at(a.at, None)) }
                    td { (a.action) }
                    td { @if let Some(j) = &a.job { (j) } }
                    td { (a.who) }
                    td { (a.host.as_deref().unwrap_or("-")) }
                    td { (a.db_user.as_deref().unwrap_or("-")) }
                    td { small { (a.detail.as_deref().unwrap_or("")) } }
                } } }
            }
        }
    };
    page(&web, Some(&who), "Audit", body).into_response()
}
