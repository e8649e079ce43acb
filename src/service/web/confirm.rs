//! The pages that stand between a click and an action whose effect an operator should see
//! first: `Run now` (what runs, as whom, and that a click is one run) and `Resume` (how many
//! slots passed while the job was paused and how many its misfire policy will run, with the
//! choice to skip them all). A script may still post to the action itself.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::html;

use crate::model::access::Action;
use crate::model::resume::{describe, preview, skip_to};
use crate::store::resume::{Skip, SkipDone};

use super::Web;
use super::pages::{allowed, encode, page, unavailable};

/// `GET /jobs/{name}/run`: what running now does, and the button that does it (operators).
pub(crate) async fn confirm_run(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let who = match allowed(&web, &headers, Action::RunNow).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let row = match web.store.job(&name).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            return (StatusCode::NOT_FOUND, format!("no job named \"{name}\"\n")).into_response();
        }
        Err(e) => return unavailable(e),
    };
    let job = web.href(&format!("/jobs/{}", encode(&name)));
    let what = row
        .command
        .clone()
        .or_else(|| row.argv.clone())
        .or_else(|| row.http.as_ref().map(|_| "an HTTP request".to_string()))
        .unwrap_or_default();
    let body = html! {
        h1 { "Run " (name) " now?" }
        p { "One extra run, outside the schedule, on the first node free to take it (its placement and pool still apply). It runs " code { (what) } @if let Some(u) = &row.run_user { " as " code { (u) } } "." }
        @if row.exec_by.is_some() { p { "A run is in progress on " strong { (row.exec_by.as_deref().unwrap_or("")) } ": this one starts right after it ends." } }
        @if row.run_now { p role="status" { "A run is already asked for and has not started: asking again adds nothing." } }
        @if !row.enabled { p role="status" { "The job is paused: nothing runs it until it is resumed. The run asked for here waits, and starts at the resume (as " code { "sqlcron run --queue" } ")." } }
        form data-still method="post" action=(format!("{job}/run")) {
            // The token the job is shown at: one click, one run (actions::run_now).
            input type="hidden" name="seen" value=(row.token);
            // And the definition it shows: a job changed since runs nothing (actions::run_now).
            input type="hidden" name="definition" value=(crate::model::job_edit::fingerprint(&row));
            @if row.enabled {
                button type="submit" aria-label=(format!("Confirm: run {name} now")) { "Run now" }
            } @else {
                input type="hidden" name="queue" value="yes";
                button type="submit" aria-label=(format!("Confirm: run {name} at the resume")) { "Run at the resume" }
            }
            " "
            a href=(job) { "Cancel" }
        }
    };
    page(&web, Some(&who), "Run now", body).into_response()
}

/// `GET /jobs/{name}/resume`: what resuming does now, by the job's own policy, and the choice
/// to skip every slot that passed instead.
pub(crate) async fn confirm_resume(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let who = match allowed(&web, &headers, Action::Resume).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let (now, row) = match tokio::try_join!(web.store.now(), web.store.job(&name)) {
        Ok(x) => x,
        Err(e) => return unavailable(e),
    };
    let Some(row) = row else {
        return (StatusCode::NOT_FOUND, format!("no job named \"{name}\"\n")).into_response();
    };
    let job = web.href(&format!("/jobs/{}", encode(&name)));
    let path = format!("{job}/resume");
    let resolved = crate::model::row_decode::resolve(&row, &web.node.defaults);
    let body = html! {
        h1 { "Resume " (name) "?" }
        @if row.enabled {
            p { "The job is not paused." }
        } @else {
            @match &resolved {
                Ok((schedule, policy)) => {
                    @let attempts = u32::try_from(row.attempt).unwrap_or(0);
                    @let p = preview(row.slot, attempts, row.run_now, now, policy, schedule);
                    @let zone = Some(schedule.tz());
                    p #resume-preview role="status" { (describe(&p, policy.misfire.as_str(), policy.max_catch_up)) }
                    @if let (Some(first), Some(last)) = (p.first, p.last) { p { "From " (who.shown.at(first, zone)) " to " (who.shown.at(last, zone)) "." } }
                    @if p.manual { p { "A run asked for while it was paused runs first." } }
                    form data-still method="post" action=(path) {
                        button type="submit" aria-label=(format!("Confirm: resume {name}")) { "Resume" }
                    }
                    @if p.passed > 0 && p.next != i64::MAX && row.run_on.as_deref() != Some("every_node") {
                        form data-still method="post" action=(path) {
                            input type="hidden" name="skip" value="yes";
                            input type="hidden" name="seen" value=(row.token);
                            input type="hidden" name="slot" value=(row.slot.map(|s| s.to_string()).unwrap_or_default());
                            button type="submit" aria-label=(format!("Resume {name}, skipping the missed slots")) { "Resume, skipping all " (p.passed) " passed slot(s)" }
                            " next run at " (who.shown.at(p.next, zone))
                        }
                    }
                }
                Err(e) => {
                    p { "Its definition cannot be read (" (e) "): it is resumed as it is and the node that claims it records the error." }
                    form data-still method="post" action=(path) {
                        button type="submit" aria-label=(format!("Confirm: resume {name}")) { "Resume" }
                    }
                }
            }
        }
        p { a href=(job) { "Cancel" } }
    };
    page(&web, Some(&who), "Resume", body).into_response()
}

/// The resume form: `skip=yes` with the token and slot the page showed skips what passed.
#[derive(serde::Deserialize, Default)]
pub(crate) struct ResumeForm {
    #[serde(default)]
    skip: String,
    seen: Option<i64>,
    #[serde(default)]
    slot: String,
}

/// `POST /jobs/{name}/resume`: a plain resume (the misfire policy decides), or with `skip=yes`
/// a resume that skips every slot up to now, only if the row is still the one the page showed.
pub(crate) async fn resume(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
    form: Result<axum::Form<ResumeForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let form = form.map(|f| f.0).unwrap_or_default();
    if form.skip != "yes" {
        return super::actions::act(&web, &headers, Action::Resume, &name).await;
    }
    let actor = match super::actions::actor(&web, &headers, Action::Resume, &name).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let (Some(seen), Ok(seen_slot)) = (
        form.seen,
        match form.slot.as_str() {
            "" => Ok(None),
            s => s.parse::<i64>().map(Some),
        },
    ) else {
        return (
            StatusCode::BAD_REQUEST,
            "skip: give seen and slot as the resume page does\n",
        )
            .into_response();
    };
    let (now, row) = match tokio::try_join!(web.store.now(), web.store.job(&name)) {
        Ok(x) => x,
        Err(e) => return unavailable(e),
    };
    let Some(row) = row else {
        return (StatusCode::NOT_FOUND, format!("no job named \"{name}\"\n")).into_response();
    };
    let (schedule, policy) = match crate::model::row_decode::resolve(&row, &web.node.defaults) {
        Ok(x) => x,
        Err(e) => {
            return (
                StatusCode::CONFLICT,
                format!("{name}'s definition cannot be read ({e}): resume it without skipping\n"),
            )
                .into_response();
        }
    };
    if row.run_on.as_deref() == Some("every_node") {
        return (
            StatusCode::CONFLICT,
            format!("{name} is an every_node template: its copies run, not it; resume it without skipping\n"),
        )
            .into_response();
    }
    let attempts = u32::try_from(row.attempt).unwrap_or(0);
    let Some((slot, skipped, capped)) = skip_to(seen_slot, attempts, now, &schedule) else {
        return (
            StatusCode::CONFLICT,
            format!("{name} has no slot after now (a one-off, or its schedule ended): skipping would end it without a run; resume it without skipping\n"),
        )
            .into_response();
    };
    let skip = Skip {
        seen_token: seen,
        seen_slot,
        slot,
        next_exec: slot.saturating_add(crate::model::policy::jitter_ms(&name, slot, policy.jitter)),
        skipped,
        capped,
    };
    match web
        .store
        .resume_skipping(&name, &skip, &web.node.node_name, &actor)
        .await
    {
        Ok(SkipDone::Resumed) => {
            tracing::info!(who = %actor.who, action = "Resume", target = %name, skipped = skip.skipped.map_or(0, |s| s.0), "web: action");
            super::actions::back(&web, &headers)
        }
        Ok(SkipDone::Changed) => (
            StatusCode::CONFLICT,
            format!(
                "{name} changed since the resume page was drawn (resumed, run or edited): nothing was done; look again\n"
            ),
        )
            .into_response(),
        Ok(SkipDone::NoSuchJob) => {
            (StatusCode::NOT_FOUND, format!("no job named \"{name}\"\n")).into_response()
        }
        Err(e) => unavailable(e),
    }
}
