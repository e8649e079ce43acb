//! Backfill from the browser (admins): a form for a range in the job's zone, then the plan
//! (slots in the range, those that already ran successfully, those to queue) with a button that
//! queues them through the same calls as `sqlcron backfill` (`store::backfill_plan`), each audited
//! with the web user as who. Queueing cannot be undone, so it always goes through the plan.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use crate::model::access::Action;
use crate::schedule::Schedule;
use crate::store::JobRow;
use crate::store::backfill_plan::{self as backfill, Plan};

use super::Web;
use super::pages::{allowed, encode, page, unavailable};

/// Slots queued by one request at most (the CLI's `--max`); the rest need another request.
const WEB_MAX: usize = 1_000;

#[derive(Deserialize)]
pub(crate) struct RangeForm {
    from: Option<String>,
    to: Option<String>,
    confirm: Option<String>,
    /// The plan page's: the job's fingerprint as planned (`job_edit::fingerprint`), and the
    /// number of runs it showed.
    seen: Option<String>,
    count: Option<usize>,
}

/// The job and its schedule, or the page to send.
async fn job(web: &Web, name: &str) -> Result<(JobRow, Schedule), Response> {
    let row = match web.store.job(name).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            return Err(
                (StatusCode::NOT_FOUND, format!("no job named \"{name}\"\n")).into_response(),
            );
        }
        Err(e) => return Err(unavailable(e)),
    };
    match crate::model::row_decode::resolve(&row, &web.node.defaults) {
        Ok((schedule, _)) => Ok((row, schedule)),
        Err(e) => Err((
            StatusCode::CONFLICT,
            format!("{name}: cannot be backfilled: {e}\n"),
        )
            .into_response()),
    }
}

/// The plan for the form's range, or the sentence saying why there is none.
async fn plan_of(
    web: &Web,
    row: &JobRow,
    schedule: &Schedule,
    form: &RangeForm,
) -> Result<Plan, String> {
    let (Some(from), Some(to)) = (form.from.as_deref(), form.to.as_deref()) else {
        return Err(String::new());
    };
    let from = crate::schedule::parse_instant(from, schedule.tz())?;
    let to = crate::schedule::parse_instant(to, schedule.tz())?;
    let now = web.store.now().await.map_err(|e| {
        tracing::warn!(error = %e, "web: reading the database's clock");
        "the database cannot be read now".to_string()
    })?;
    backfill::plan(&web.store, row, schedule, (from, to), now, Some(WEB_MAX)).await
}

/// `GET /jobs/{name}/backfill[?from=..&to=..]`: the form, and the plan once a range is given.
pub(crate) async fn form(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(form): Query<RangeForm>,
) -> Response {
    let who = match allowed(&web, &headers, Action::Backfill).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let (row, schedule) = match job(&web, &name).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let plan = plan_of(&web, &row, &schedule, &form).await;
    let here = web.href(&format!("/jobs/{}/backfill", encode(&name)));
    let body = html! {
        h1 { "Backfill " a href=(web.href(&format!("/jobs/{}", encode(&name)))) { (name) } }
        p { "Runs each slot of a past range that has no successful run yet, oldest first, each once, as a one-off job. Times are read in the job's zone (" (schedule.tz().name()) ")." }
        form method="get" action=(here) {
            label for="from" { "From" } " "
            input #from type="datetime-local" name="from" step="1" required value=(form.from.as_deref().unwrap_or("")) ;
            " " label for="to" { "to" } " "
            input #to type="datetime-local" name="to" step="1" required value=(form.to.as_deref().unwrap_or("")) ;
            " " button type="submit" { "Plan" }
        }
        @match &plan {
            Err(why) if why.is_empty() => {},
            Err(why) => p.banner.warn role="alert" { (why) },
            Ok(p) => {
                p { (p.slots) " slot(s) in the range, " (p.done) " already ran successfully." }
                @if p.todo.is_empty() { p { "Nothing to queue." } } @else {
                    p { "Queue " strong { (p.todo.len()) } " run(s), from " (backfill::rfc3339(p.todo[0])) " to " (backfill::rfc3339(*p.todo.last().unwrap_or(&0))) " (UTC)"
                        @if p.todo.len() == WEB_MAX { ", the first " (WEB_MAX) " of the range: plan again for the rest" }
                        ". Queued runs cannot be taken back, only paused or deleted one by one." }
                    form data-still method="post" action=(here) {
                        input type="hidden" name="from" value=(form.from.as_deref().unwrap_or(""));
                        input type="hidden" name="to" value=(form.to.as_deref().unwrap_or(""));
                        input type="hidden" name="confirm" value="yes";
                        input type="hidden" name="seen" value=(crate::model::job_edit::fingerprint(&row));
                        input type="hidden" name="count" value=(p.todo.len());
                        button.danger type="submit" { "Queue " (p.todo.len()) " run(s)" }
                    }
                }
            }
        }
    };
    page(&web, Some(&who), "Backfill", body).into_response()
}

/// `POST /jobs/{name}/backfill` with `from`, `to` and `confirm=yes`: plans again (the range may
/// have changed since the page was drawn) and queues, then back to the job. With the plan
/// page's `seen` and `count`, only what the page showed: a job changed since (its schedule,
/// its command), or a plan of another size, queues nothing (409).
pub(crate) async fn queue(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
    axum::Form(form): axum::Form<RangeForm>,
) -> Response {
    let actor = match super::actions::actor(&web, &headers, Action::Backfill, &name).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    if form.confirm.as_deref() != Some("yes") {
        return (StatusCode::BAD_REQUEST, "confirm=yes is required\n").into_response();
    }
    let (row, schedule) = match job(&web, &name).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let plan = match plan_of(&web, &row, &schedule, &form).await {
        Ok(p) => p,
        Err(why) if why.is_empty() => {
            return (StatusCode::BAD_REQUEST, "from and to are required\n").into_response();
        }
        Err(why) => return (StatusCode::BAD_REQUEST, format!("{why}\n")).into_response(),
    };
    let changed = form
        .seen
        .as_deref()
        .is_some_and(|seen| seen != crate::model::job_edit::fingerprint(&row));
    if changed || form.count.is_some_and(|shown| shown != plan.todo.len()) {
        return (
            StatusCode::CONFLICT,
            format!(
                "{name} or its plan changed since the page was drawn ({} run(s) now): nothing \
                 was queued; plan again\n",
                plan.todo.len()
            ),
        )
            .into_response();
    }
    match backfill::queue(&web.store, &row, &plan.todo, &actor).await {
        Ok(queueing) if queueing.changed => {
            let made = queueing.queued.iter().filter(|q| q.created).count();
            tracing::info!(who = %actor.who, job = %name, queued = made, "web: backfill stopped: the job changed");
            (
                StatusCode::CONFLICT,
                format!(
                    "{name} changed while its backfill was queued: {made} run(s) of the plan \
                     shown were queued, the rest not; plan again\n"
                ),
            )
                .into_response()
        }
        Ok(queueing) => {
            let made = queueing.queued.iter().filter(|q| q.created).count();
            tracing::info!(who = %actor.who, job = %name, queued = made, "web: backfill");
            Redirect::to(&web.href(&format!("/jobs/{}", encode(&name)))).into_response()
        }
        Err(e) => unavailable(e),
    }
}
