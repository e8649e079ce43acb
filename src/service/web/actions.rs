//! What the dashboard changes: run now, pause, resume, drain, undrain. Each re-checks the
//! caller's role and the request's origin on the server, goes through the store call the CLI
//! uses (the same rules, the same audit row, with `web:<user>` as who), then sends the browser
//! back to the page it came from.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

use crate::model::access::Action;
use crate::model::actor::Actor;

use super::Web;
use super::auth::same_origin;
use super::pages::allowed;

/// The caller, when the request comes from the dashboard's own pages and their role allows
/// `action`; otherwise the refusal to send, recorded in the audit trail as `denied` (who,
/// what, on what, from which address) when the caller was known or the origin was wrong.
pub(crate) async fn actor(
    web: &Web,
    headers: &HeaderMap,
    action: Action,
    target: &str,
) -> Result<Actor, Response> {
    let who = match allowed(web, headers, action).await {
        Ok(who) => who,
        Err(refused) => {
            if refused.status() == StatusCode::FORBIDDEN {
                let name = match super::auth::caller(web, headers).await {
                    Ok(Some(c)) => c.who(),
                    _ => "web:?".to_string(),
                };
                denied(
                    web,
                    headers,
                    &name,
                    action,
                    target,
                    "the role does not allow it",
                )
                .await;
            }
            return Err(refused);
        }
    };
    // A cookie goes with any request the browser makes; a bearer token only with those its
    // holder makes, so only cookie callers must prove the request came from our pages.
    if !who.token
        && let Err(why) = same_origin(headers)
    {
        denied(web, headers, &who.who(), action, target, &why.to_string()).await;
        return Err((StatusCode::FORBIDDEN, format!("{why}\n")).into_response());
    }
    Ok(Actor {
        who: who.who(),
        host: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string()),
        pid: Some(i64::from(std::process::id())),
    })
}

/// Writes the `denied` audit row of a refused action. A failure to write it is logged: the
/// refusal stands either way.
async fn denied(
    web: &Web,
    headers: &HeaderMap,
    who: &str,
    action: Action,
    target: &str,
    why: &str,
) {
    let from = headers
        .get(super::PEER_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("?");
    let actor = Actor {
        who: who.to_string(),
        host: None,
        pid: None,
    };
    let detail = format!("{} refused: {why} (from {from})", action_name(action));
    if let Err(e) = web.store.audit_denied(&actor, target, &detail).await {
        tracing::warn!(error = %e, who, "web: could not record a refused action");
    }
}

/// An action as the audit trail names it.
fn action_name(action: Action) -> String {
    format!("{action:?}").to_lowercase()
}

/// Does `action` to `target` through the store call the CLI uses. False: no such target.
async fn perform(
    web: &Web,
    actor: &Actor,
    action: Action,
    target: &str,
) -> crate::store::Result<bool> {
    let s = &web.store;
    let done = match action {
        Action::RunNow => s.request_run(target, actor).await,
        Action::Pause => s.set_enabled(target, false, actor).await,
        Action::Resume => s.set_enabled(target, true, actor).await,
        Action::Drain => s.set_drain(target, true, actor).await,
        Action::Undrain => s.set_drain(target, false, actor).await,
        Action::BreakLock => s
            .lock_break(target, None, actor)
            .await
            .map(|broken| !broken.is_empty()),
        Action::StopRun => s.request_stop(target, None, actor).await,
        Action::RetryEvent => match target.parse::<i64>() {
            Ok(id) => s.event_retry(id, actor).await,
            Err(_) => Ok(false),
        },
        // Backfill and the editor have their own pages and forms (backfill.rs, editor.rs).
        Action::Read | Action::Backfill | Action::EditJob | Action::DeleteJob => Ok(true),
    };
    if let Ok(true) = done {
        tracing::info!(who = %actor.who, action = ?action, target, "web: action");
    }
    done
}

/// Back to the page the browser came from, if it is a dashboard page; else the overview.
pub(crate) fn back(web: &Web, headers: &HeaderMap) -> Response {
    let to = headers
        .get(header::REFERER)
        .and_then(|v| v.to_str().ok())
        .and_then(|r| dashboard_path(r, &web.config.public_path))
        .unwrap_or_else(|| web.href("/"));
    Redirect::to(&to).into_response()
}

pub(crate) async fn act(web: &Web, headers: &HeaderMap, action: Action, target: &str) -> Response {
    let actor = match actor(web, headers, action, target).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    match perform(web, &actor, action, target).await {
        Ok(true) => back(web, headers),
        Ok(false) => (
            StatusCode::NOT_FOUND,
            format!("nothing by that name to act on (or no live holder): {target}\n"),
        )
            .into_response(),
        Err(e) => super::pages::unavailable(e),
    }
}

/// The path (and query) of a `Referer` that points into the dashboard, to send the browser back
/// there: only the path is kept, never the host, so the answer cannot lead elsewhere.
fn dashboard_path(referer: &str, base: &str) -> Option<String> {
    let (_, rest) = referer.split_once("://")?;
    let path = &rest[rest.find('/')?..];
    let path = path.split('#').next().unwrap_or_default();
    let inside = if base.is_empty() {
        path.starts_with('/')
    } else {
        path == base
            || path.starts_with(&format!("{base}/"))
            || path.starts_with(&format!("{base}?"))
    };
    (inside && !path.starts_with("//") && !path.contains('\\') && !super::auth::dot_segment(path))
        .then(|| path.to_string())
}

/// `GET /jobs/{name}/stop`: what stopping does, and the button (operators).
pub(crate) async fn confirm_stop(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let who = match allowed(&web, &headers, Action::StopRun).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let row = match web.store.job(&name).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            return (StatusCode::NOT_FOUND, format!("no job named \"{name}\"\n")).into_response();
        }
        Err(e) => return super::pages::unavailable(e),
    };
    let job = web.href(&format!("/jobs/{}", super::pages::encode(&name)));
    let body = maud::html! {
        h1 { "Stop " (name) "?" }
        @if let Some(node) = &row.exec_by {
            p { "The run in progress on " strong { (node) } " is stopped at the node's next lease extension (within a third of the lease): its process group gets SIGTERM, then SIGKILL after the job's kill grace. It is recorded " code { "stopped" } " and not retried; the next slot runs as scheduled. This cannot be undone." }
            form data-still method="post" action=(format!("{job}/stop")) {
                input type="hidden" name="confirm" value="yes";
                input type="hidden" name="seen" value=(row.token);
                button.danger type="submit" { "Stop the run" }
                " "
                a href=(job) { "Cancel" }
            }
        } @else {
            p { "Nothing runs " (name) " now." }
        }
    };
    super::pages::page(&web, Some(&who), "Stop a run", body).into_response()
}

/// The stop page's form: the confirmation, and the fencing token of the run it showed.
#[derive(serde::Deserialize)]
pub(crate) struct StopForm {
    #[serde(default)]
    confirm: String,
    seen: Option<i64>,
}

/// `POST /jobs/{name}/stop` with `confirm=yes`. With `seen` (the stop page's own button), only
/// the run the page showed is stopped: once it has ended, the next slot's run is left alone
/// (409), not stopped and recorded `stopped` in its place. Without it (a script's post), the
/// run in progress, as `sqlcron stop` does.
pub(crate) async fn stop(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
    axum::Form(form): axum::Form<StopForm>,
) -> Response {
    let why = "stopping a run cannot be undone: confirm it on the job's stop page\n";
    let Some(seen) = form.seen else {
        let confirm = Confirm {
            confirm: form.confirm,
        };
        return act_confirmed(&web, &headers, &confirm, Action::StopRun, &name, why).await;
    };
    let actor = match actor(&web, &headers, Action::StopRun, &name).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    if form.confirm != "yes" {
        return (StatusCode::BAD_REQUEST, why).into_response();
    }
    match web.store.request_stop(&name, Some(seen), &actor).await {
        Ok(true) => {
            tracing::info!(who = %actor.who, action = "StopRun", target = %name, "web: action");
            back(&web, &headers)
        }
        Ok(false) => (
            StatusCode::CONFLICT,
            format!(
                "the run the stop page showed is no longer in progress (another may be): nothing \
                 stopped; open the stop page again: {name}\n"
            ),
        )
            .into_response(),
        Err(e) => super::pages::unavailable(e),
    }
}

/// `act`, for what cannot be undone: only with `confirm=yes` (the confirmation page's button).
/// The caller is checked first, so a caller without the role learns nothing more than that.
async fn act_confirmed(
    web: &Web,
    headers: &HeaderMap,
    form: &Confirm,
    action: Action,
    target: &str,
    why: &'static str,
) -> Response {
    if form.confirm != "yes" {
        if let Err(r) = actor(web, headers, action, target).await {
            return r;
        }
        return (StatusCode::BAD_REQUEST, why).into_response();
    }
    act(web, headers, action, target).await
}

/// The `Run now` form: the fencing token the page showed the job at, and for a paused job
/// `queue=yes` (the run waits for the resume).
#[derive(serde::Deserialize)]
pub(crate) struct RunForm {
    seen: Option<i64>,
    #[serde(default)]
    queue: String,
    /// The job's fingerprint as the page showed it (`job_edit::fingerprint`): a job changed
    /// since (another command) gets no run asked.
    definition: Option<String>,
}

/// `POST /jobs/NAME/run`. With `seen` (the dashboard's own button), one click is one run: a
/// second post for the same page (another tab, a double click) adds nothing and says why
/// (409). Without it (a script's post), a run is asked for as `sqlcron run` asks.
pub(crate) async fn run_now(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
    form: Result<axum::Form<RunForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    // A post with no form at all (curl -X POST) asks as `sqlcron run` does.
    let Some((seen, queue, shown)) = form
        .ok()
        .and_then(|f| Some((f.0.seen?, f.0.queue == "yes", f.0.definition)))
    else {
        return act(&web, &headers, Action::RunNow, &name).await;
    };
    let actor = match actor(&web, &headers, Action::RunNow, &name).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    // A paused job runs nothing until it is resumed: the page said so and asked to queue the
    // run (a page drawn before the pause did not: nothing is added, as `sqlcron run` refuses).
    match web.store.job(&name).await {
        Ok(Some(row)) if !row.enabled && !queue => {
            return (
                StatusCode::CONFLICT,
                format!(
                    "{name} is paused: nothing runs it until it is resumed; nothing was added. \
                     Open its Run now page again to have it run at the resume\n"
                ),
            )
                .into_response();
        }
        Ok(_) => {}
        Err(e) => return super::pages::unavailable(e),
    }
    use crate::store::RunAsk;
    match web
        .store
        .request_run_once(&name, seen, shown.as_deref(), &actor)
        .await
    {
        Ok(RunAsk::Requested) => {
            tracing::info!(who = %actor.who, action = "RunNow", target = %name, "web: action");
            back(&web, &headers)
        }
        Ok(RunAsk::AlreadyAsked) => (
            StatusCode::CONFLICT,
            format!(
                "a run of {name} is already asked for (from another tab or click) and has not started: nothing was added\n"
            ),
        )
            .into_response(),
        Ok(RunAsk::RanSince) => (
            StatusCode::CONFLICT,
            format!(
                "{name} has run since this page was drawn: nothing was added; reload the page to ask for another run\n"
            ),
        )
            .into_response(),
        Ok(RunAsk::Changed) => (
            StatusCode::CONFLICT,
            format!(
                "{name} has changed since this page was drawn (its command or another column): \
                 nothing was added; reload the page to see what would run\n"
            ),
        )
            .into_response(),
        Ok(RunAsk::NoSuchJob) => (
            StatusCode::NOT_FOUND,
            format!("nothing by that name to act on: {name}\n"),
        )
            .into_response(),
        Err(e) => super::pages::unavailable(e),
    }
}

/// The longest reason a pause keeps.
pub(crate) const REASON_MAX: usize = 500;

/// A reason a pause may keep: one line of at most [`REASON_MAX`] characters, without control
/// characters or the marks that reorder text on a page (U+200E-F, U+202A-E, U+2066-9).
pub fn reason_allowed(reason: &str) -> bool {
    reason.chars().count() <= REASON_MAX
        && !reason.chars().any(|c| {
            c.is_control()
                || matches!(c, '\u{200E}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
        })
}

#[derive(serde::Deserialize)]
pub(crate) struct PauseForm {
    reason: Option<String>,
}

/// `POST /jobs/{name}/pause`, with an optional `reason` (the job's page asks for one): kept in
/// the audit row and shown on the job's page while it stays paused.
pub(crate) async fn pause(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
    form: Result<axum::Form<PauseForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let reason = form
        .ok()
        .and_then(|f| f.0.reason)
        .filter(|r| !r.trim().is_empty());
    let Some(reason) = reason else {
        return act(&web, &headers, Action::Pause, &name).await;
    };
    // Who asks first: a refused caller is refused (and recorded) whatever the reason says.
    let actor = match actor(&web, &headers, Action::Pause, &name).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    if !reason_allowed(&reason) {
        return (
            StatusCode::BAD_REQUEST,
            format!("reason: at most {REASON_MAX} characters on one line, no control or direction marks\n"),
        )
            .into_response();
    }
    match web
        .store
        .set_enabled_because(&name, false, &actor, Some(&reason))
        .await
    {
        Ok(true) => {
            tracing::info!(who = %actor.who, action = "Pause", target = %name, "web: action");
            back(&web, &headers)
        }
        Ok(false) => (
            StatusCode::NOT_FOUND,
            format!("nothing by that name to act on: {name}\n"),
        )
            .into_response(),
        Err(e) => super::pages::unavailable(e),
    }
}

pub(crate) async fn drain(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    act(&web, &headers, Action::Drain, &name).await
}

/// The form of the confirmation page (`/locks/{name}/break`): the break happens only with
/// `confirm=yes`, so a stray click on the locks page cannot stop a holder.
#[derive(serde::Deserialize)]
pub(crate) struct Confirm {
    #[serde(default)]
    confirm: String,
}

pub(crate) async fn break_lock(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
    axum::Form(form): axum::Form<Confirm>,
) -> Response {
    let why = "breaking a lock stops its holder: confirm it on the lock's page\n";
    act_confirmed(&web, &headers, &form, Action::BreakLock, &name, why).await
}

pub(crate) async fn retry_event(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(id): Path<i64>,
) -> Response {
    act(&web, &headers, Action::RetryEvent, &id.to_string()).await
}

pub(crate) async fn undrain(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    act(&web, &headers, Action::Undrain, &name).await
}

#[cfg(test)]
mod tests {
    use super::dashboard_path;

    #[test]
    fn the_way_back_stays_in_the_dashboard() {
        let p = |r: &str, b: &str| dashboard_path(r, b);
        assert_eq!(
            p("http://h:8080/cron/jobs?q=a", "/cron").as_deref(),
            Some("/cron/jobs?q=a")
        );
        assert_eq!(p("https://proxy/cron", "/cron").as_deref(), Some("/cron"));
        assert_eq!(p("http://h/jobs", "").as_deref(), Some("/jobs"));
        assert_eq!(p("http://h/cronx/jobs", "/cron"), None);
        assert_eq!(p("http://h//evil.example/x", ""), None);
        assert_eq!(p("http://h/other", "/cron"), None);
        assert_eq!(p("not a url", ""), None);
        // A dot segment would take the browser outside the prefix.
        assert_eq!(p("http://h/cron/../grafana/x", "/cron"), None);
        assert_eq!(p("http://h/cron/%2E%2e/grafana", "/cron"), None);
        assert_eq!(p("http://h/cron/./jobs", "/cron"), None);
        assert_eq!(
            p("http://h/cron/jobs?q=..", "/cron").as_deref(),
            Some("/cron/jobs?q=..")
        );
    }

    proptest::proptest! {
        /// Whatever a browser sends as `Referer`, the way back is a path inside the dashboard
        /// or nothing: never another host, never a protocol-relative `//` path.
        #[test]
        fn any_referer_leads_back_inside_or_nowhere(referer in "\\PC{0,80}", base in "(/[a-z]{1,5}){0,2}") {
            if let Some(path) = dashboard_path(&referer, &base) {
                proptest::prop_assert!(path.starts_with('/'));
                proptest::prop_assert!(!path.starts_with("//"));
                proptest::prop_assert!(!path.contains('\\'));
                let inside = base.is_empty()
                    || path == base
                    || path.starts_with(&format!("{base}/"))
                    || path.starts_with(&format!("{base}?"));
                proptest::prop_assert!(inside);
            }
        }
    }
}
