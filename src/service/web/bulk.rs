//! Bulk actions with guard rails: the jobs list sends the jobs ticked on its page, or "every job
//! matching the filter" (chosen on the server, by the same query as the list), and the
//! dashboard's flow does nothing until a confirmation page has shown the exact jobs, their count
//! and what will happen to each. At most [`BULK_MAX`] jobs at once. The confirmed form carries
//! the names it showed and one batch id, written in every audit row of the batch (`batch ID, K
//! of N`); a batch is applied once, and a job already in the asked state, or already asked to
//! run, is left alone. A client that posts `confirm=yes` with names of its own acts as that many
//! single actions would (docs/dashboard.md).

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::html;

use crate::model::access::Action;
use crate::model::job_row::JobRow;
use crate::store::RunAsk;

use super::Web;
use super::jobs::JobsQuery;
use super::pages::{allowed, encode, page, state, unavailable};

/// Jobs one bulk action may name.
pub(crate) const BULK_MAX: usize = 500;

/// A batch id: 16 hex digits.
fn batch_ok(b: &str) -> bool {
    b.len() == 16 && b.bytes().all(|c| c.is_ascii_hexdigit())
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn values<'a>(fields: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    fields
        .iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

fn bad(m: String) -> Response {
    (StatusCode::BAD_REQUEST, m).into_response()
}

/// The action's verb as the pages say it.
fn verb(a: Action) -> &'static str {
    match a {
        Action::Pause => "Pause",
        Action::Resume => "Resume",
        _ => "Run now",
    }
}

/// What the action does to `j`, or why it leaves it alone.
fn effect(a: Action, j: &JobRow) -> Result<(), &'static str> {
    match a {
        Action::Pause if !j.enabled => Err("paused already"),
        Action::Resume if j.enabled => Err("not paused"),
        Action::RunNow if j.run_now => Err("a run is asked for already"),
        // Nothing would run it until the resume: not reported done.
        Action::RunNow if !j.enabled => Err("paused (resume it first)"),
        _ => Ok(()),
    }
}

/// `POST /jobs/bulk`: `action=pause|resume|run`, and the jobs: one `job=NAME` per ticked job,
/// or `all=yes` with the list's filter (`q`, `state`, `tag`, `pool`, `zone`). Without
/// `confirm=yes` it answers the confirmation page; with it (that page's button) it acts.
pub(crate) async fn bulk(
    State(web): State<Web>,
    headers: HeaderMap,
    axum::Form(fields): axum::Form<Vec<(String, String)>>,
) -> Response {
    let action = match field(&fields, "action") {
        Some("pause") => Action::Pause,
        Some("resume") => Action::Resume,
        Some("run") => Action::RunNow,
        _ => return bad("action must be pause, resume or run\n".into()),
    };
    if field(&fields, "confirm") == Some("yes") {
        return act(&web, &headers, action, &fields).await;
    }
    // The preview is checked as the action is (role and origin): a page on another site
    // cannot have the dashboard show its choice of jobs behind a proxy's sign-on.
    if let Err(r) = super::actions::actor(&web, &headers, action, "bulk").await {
        return r;
    }
    let who = match allowed(&web, &headers, action).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let all = field(&fields, "all") == Some("yes");
    let (rows, total) = if all {
        let query = JobsQuery {
            q: field(&fields, "q").unwrap_or_default().to_string(),
            state: field(&fields, "state").map(str::to_string),
            tag: field(&fields, "tag").map(str::to_string),
            pool: field(&fields, "pool").map(str::to_string),
            zone: field(&fields, "zone").map(str::to_string),
            sort: None,
            after: None,
        };
        let (filter, sort) = match query.read() {
            Ok(f) => f,
            Err(m) => return bad(format!("{m}\n")),
        };
        match web
            .store
            .jobs_filtered(&filter, sort, None, BULK_MAX as i64)
            .await
        {
            Ok(r) => r,
            Err(e) => return unavailable(e),
        }
    } else {
        let names: std::collections::BTreeSet<&str> = values(&fields, "job").into_iter().collect();
        if names.len() > BULK_MAX {
            return bad(format!("select between 1 and {BULK_MAX} jobs\n"));
        }
        let mut rows = vec![];
        for n in names {
            match web.store.job(n).await {
                Ok(Some(r)) => rows.push(r),
                Ok(None) => {}
                Err(e) => return unavailable(e),
            }
        }
        let total = rows.len() as i64;
        (rows, total)
    };
    if total == 0 {
        return bad("no job selected (or none of them exists any more)\n".into());
    }
    if total > BULK_MAX as i64 {
        return bad(format!(
            "{total} jobs match: at most {BULK_MAX} at once; narrow the filter\n"
        ));
    }
    let acting = rows.iter().filter(|j| effect(action, j).is_ok()).count();
    let batch = format!("{:016x}", rand::random::<u64>());
    let title = format!("{} {total} job(s)?", verb(action));
    let body = html! {
        h1 { (title) }
        p #bulk-count role="status" {
            @if all { "Every job matching the filter: " } @else { "The selected jobs: " }
            strong { (total) } " job(s); " (acting) " will change, " (total as usize - acting) " are left alone."
        }
        form data-still method="post" action=(web.href("/jobs/bulk")) {
            input type="hidden" name="action" value=(field(&fields, "action").unwrap_or_default());
            input type="hidden" name="confirm" value="yes";
            input type="hidden" name="batch" value=(batch);
            table {
                thead { tr { th { "Job" } th { "State" } th { "Here" } } }
                tbody { @for j in &rows { tr {
                    td { a href=(web.href(&format!("/jobs/{}", encode(&j.name)))) { (j.name) }
                         input type="hidden" name="job" value=(j.name);
                         input type="hidden" name="seen" value=(j.token);
                         input type="hidden" name="definition" value=(crate::model::job_edit::fingerprint(j)); }
                    td { span class=(format!("badge {}", state(j))) { (state(j)) } }
                    td { @match effect(action, j) { Ok(()) => { (verb(action).to_lowercase()) } Err(why) => { "left alone: " (why) } } }
                } } }
            }
            @if action == Action::Pause {
                label for="bulk-reason" { "Why" }
                input #bulk-reason name="reason" maxlength=(super::actions::REASON_MAX) placeholder="optional";
            }
            button type="submit" aria-label=(format!("Confirm: {} {acting} job(s)", verb(action).to_lowercase())) { (verb(action)) " " (acting) " job(s)" }
            " "
            a href=(web.href("/jobs")) { "Cancel" }
        }
    };
    page(&web, Some(&who), &title, body).into_response()
}

/// The confirmed form: each named job through the same store call as one action, with the
/// batch in its audit row; then a page that says what was done to each.
async fn act(
    web: &Web,
    headers: &HeaderMap,
    action: Action,
    fields: &[(String, String)],
) -> Response {
    let names = values(fields, "job");
    let seen = values(fields, "seen");
    // Each job's fingerprint as the confirmation page showed it: a job changed since (a
    // writer's new command) gets no run asked under the operator's name. A script's post may
    // leave them all out, as it may for a single `Run now`.
    let shown = values(fields, "definition");
    let batch = field(fields, "batch").unwrap_or_default();
    if names.is_empty()
        || names.len() > BULK_MAX
        || seen.len() != names.len()
        || !(shown.is_empty() || shown.len() == names.len())
        || !batch_ok(batch)
    {
        return bad(format!(
            "a confirmed bulk action names 1 to {BULK_MAX} jobs, each with its seen token (and its definition, or none has one), and a batch id: use the confirmation page\n"
        ));
    }
    let reason = field(fields, "reason")
        .map(str::trim)
        .filter(|r| !r.is_empty());
    let target = format!("bulk: {} job(s), batch {batch}", names.len());
    let actor = match super::actions::actor(web, headers, action, &target).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    if reason.is_some_and(|r| !super::actions::reason_allowed(r) || r.contains("(batch")) {
        return bad(format!(
            "reason: at most {} characters on one line, no control or direction marks, no \"(batch\"\n",
            super::actions::REASON_MAX
        ));
    }
    // A batch is applied once: the same form posted again (a resubmit, a replay) does nothing.
    match web.store.batch_applied(batch).await {
        Ok(false) => {}
        Ok(true) => {
            return (
                StatusCode::CONFLICT,
                format!("batch {batch} was applied already: nothing more was done\n"),
            )
                .into_response();
        }
        Err(e) => return unavailable(e),
    }
    let n = names.len();
    let mut done: Vec<(&str, &'static str)> = vec![];
    for (k, (name, seen)) in names.iter().zip(&seen).enumerate() {
        let note = match reason {
            Some(r) => format!("reason: {r} (batch {batch}, {} of {n})", k + 1),
            None => format!("batch {batch}, {} of {n}", k + 1),
        };
        let s = &web.store;
        let result = match action {
            Action::Pause | Action::Resume => s
                .set_enabled_noting(name, action == Action::Resume, &actor, Some(note), true)
                .await
                .map(|changed| {
                    if changed {
                        "done"
                    } else {
                        "left alone (already so, or gone)"
                    }
                }),
            _ => match seen.parse::<i64>() {
                // A paused job: nothing would run it until the resume (the confirmation said
                // it is left alone).
                Ok(_) if s.job(name).await.ok().flatten().is_some_and(|j| !j.enabled) => {
                    Ok("left alone (paused: resume it first)")
                }
                Ok(seen) => s
                    .request_run_once_noting(name, seen, shown.get(k).copied(), &actor, Some(note))
                    .await
                    .map(|ask| match ask {
                        RunAsk::Requested => "done",
                        RunAsk::AlreadyAsked => "left alone (a run is asked for already)",
                        RunAsk::RanSince => "left alone (it ran since the confirmation page)",
                        RunAsk::Changed => "left alone (it changed since the confirmation page)",
                        RunAsk::NoSuchJob => "left alone (gone)",
                    }),
                Err(_) => Ok("left alone (no seen token)"),
            },
        };
        match result {
            Ok(r) => done.push((name, r)),
            Err(e) => return unavailable(e),
        }
    }
    let acted = done.iter().filter(|(_, r)| *r == "done").count();
    tracing::info!(who = %actor.who, action = ?action, batch, jobs = n, acted, "web: bulk action");
    let body = html! {
        h1 { (verb(action)) ": " (acted) " of " (n) " job(s)" }
        p #bulk-done role="status" { "Batch " code { (batch) } ": " (acted) " done, " (n - acted) " left alone. The audit trail names the batch in each row." }
        table {
            thead { tr { th { "Job" } th { "Result" } } }
            tbody { @for (name, r) in &done { tr { td { a href=(web.href(&format!("/jobs/{}", encode(name)))) { (name) } } td { (r) } } } }
        }
        p { a href=(web.href("/jobs")) { "Back to the jobs" } }
    };
    let who = super::auth::caller(web, headers).await.ok().flatten();
    page(web, who.as_ref(), "Bulk action", body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_id_is_sixteen_hex_digits() {
        assert!(batch_ok("00ff00ff00ff00ff"));
        assert!(!batch_ok("00ff00ff00ff00f"));
        assert!(!batch_ok("00ff00ff00ff00fg"));
        assert!(!batch_ok("00ff00ff00ff00ff0"));
    }
}
