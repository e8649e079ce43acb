//! `/api/v1`: the same data as the pages, as JSON, with the same sign-in and roles
//! (docs/dashboard.md). Lists are paged by cursor: `?after=<the last name>`. Instants are RFC
//! 3339 UTC strings (`model::json_time`); the slots query takes milliseconds.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::model::access::Action;
use crate::model::json_time::rfc3339;
use crate::store::run_search::RunPlace;
use crate::store::{JobRow, PARKED};

use super::Web;
use super::pages::{PAGE, allowed};

/// A job as the API shows it (no environment, no secrets).
#[derive(Serialize)]
struct ApiJob<'a> {
    name: &'a str,
    schedule: &'a str,
    timezone: Option<&'a str>,
    enabled: bool,
    source: &'a str,
    #[serde(serialize_with = "crate::model::json_time::opt_instant")]
    next_exec: Option<i64>,
    exec_by: Option<&'a str>,
    parked: Option<&'a str>,
}

fn api_job(j: &JobRow) -> ApiJob<'_> {
    ApiJob {
        name: &j.name,
        schedule: &j.schedule,
        timezone: j.timezone.as_deref(),
        enabled: j.enabled,
        source: &j.source,
        next_exec: j.next_exec.filter(|t| *t < PARKED),
        exec_by: j.exec_by.as_deref(),
        parked: j.error.as_deref().or(j.decode_error.as_deref()),
    }
}

/// An error as JSON; a database error's detail goes to the log only (it may name hosts).
fn problem(status: StatusCode, e: impl std::fmt::Display) -> Response {
    let text = if status == StatusCode::SERVICE_UNAVAILABLE {
        tracing::warn!(error = %e, "web: a database read failed");
        "the database is unavailable; the node's log says why".to_string()
    } else {
        e.to_string()
    };
    (status, Json(serde_json::json!({ "error": text }))).into_response()
}

async fn reader(web: &Web, headers: &HeaderMap) -> Result<(), Response> {
    allowed(web, headers, Action::Read)
        .await
        .map(|_| ())
        .map_err(|r| {
            if r.status().is_redirection() {
                problem(StatusCode::UNAUTHORIZED, "sign in first")
            } else {
                r
            }
        })
}

pub(crate) async fn jobs(
    State(web): State<Web>,
    headers: HeaderMap,
    Query(query): Query<super::jobs::JobsQuery>,
) -> Response {
    if let Err(r) = reader(&web, &headers).await {
        return r;
    }
    let (filter, sort) = match query.read() {
        Ok(f) => f,
        Err(m) => return problem(StatusCode::BAD_REQUEST, m),
    };
    match web
        .store
        .jobs_filtered(&filter, sort, query.after.as_deref(), PAGE + 1)
        .await
    {
        Ok((rows, total)) => {
            let more = rows.len() as i64 > PAGE;
            let page = &rows[..rows.len().min(PAGE as usize)];
            let next = page.last().filter(|_| more).map(|j| sort.cursor(j));
            Json(serde_json::json!({
                "jobs": page.iter().map(api_job).collect::<Vec<_>>(),
                "total": total,
                "next_after": next,
            }))
            .into_response()
        }
        Err(e) => problem(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

pub(crate) async fn job(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    if let Err(r) = reader(&web, &headers).await {
        return r;
    }
    match web.store.job(&name).await {
        Ok(Some(j)) => Json(api_job(&j)).into_response(),
        Ok(None) => problem(StatusCode::NOT_FOUND, format!("no job named \"{name}\"")),
        Err(e) => problem(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

/// One slot as `explain` tells it (`sqlcron explain --json`), with the ids of its runs.
#[derive(Serialize)]
struct ApiSlot {
    #[serde(serialize_with = "crate::model::json_time::instant")]
    slot: i64,
    local: String,
    state: &'static str,
    text: String,
    note: Option<String>,
    runs: Vec<i64>,
}

#[derive(Serialize)]
struct ApiSlots {
    job: String,
    timezone: String,
    #[serde(serialize_with = "crate::model::json_time::instant")]
    from: i64,
    #[serde(serialize_with = "crate::model::json_time::instant")]
    to: i64,
    #[serde(serialize_with = "crate::model::json_time::instant")]
    now: i64,
    slots: Vec<ApiSlot>,
    left_out: usize,
}

#[derive(Deserialize)]
pub(crate) struct SlotsQuery {
    from: Option<i64>,
    to: Option<i64>,
}

/// Past slots shown at most by `/api/v1/jobs/{name}/slots` (the oldest are counted instead).
const SLOTS: usize = 500;
const DAY_MS: i64 = 86_400_000;

/// `GET /api/v1/jobs/{name}/slots[?from=MS&to=MS]`: each slot of the range (default: the last
/// day, or since the job was made) and the next five, as `explain` tells them. A range holding
/// more than [`crate::model::explain::MAX_SLOTS`] slots starts later: the answer's `from`.
pub(crate) async fn slots(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(q): Query<SlotsQuery>,
) -> Response {
    if let Err(r) = reader(&web, &headers).await {
        return r;
    }
    let s = &web.store;
    let (now, row, created) = match tokio::try_join!(s.now(), s.job(&name), s.created_at(&name)) {
        Ok(x) => x,
        Err(e) => return problem(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    let Some(row) = row else {
        return problem(StatusCode::NOT_FOUND, format!("no job named \"{name}\""));
    };
    let (schedule, _) = match crate::model::row_decode::resolve(&row, &web.node.defaults) {
        Ok(x) => x,
        Err(e) => return problem(StatusCode::CONFLICT, format!("{name}: cannot be read: {e}")),
    };
    let to = q.to.unwrap_or(now).min(now);
    let from = q
        .from
        .unwrap_or_else(|| created.map_or(now - DAY_MS, |c| c.max(now - DAY_MS)));
    if from > to {
        return problem(StatusCode::BAD_REQUEST, "from is after to");
    }
    // At most MAX_SLOTS slots are explained (the newest): `from` in the answer says where the
    // range really starts, and only that range's runs are read.
    let from =
        crate::model::explain::narrow_from(&schedule, from, to, crate::model::explain::MAX_SLOTS);
    let runs = match s.runs_between(&name, from, to).await {
        Ok(r) => r,
        Err(e) => return problem(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    let range = crate::model::explain::Range {
        from,
        to,
        future: 5,
        limit: SLOTS,
    };
    let (lines, left_out) =
        crate::model::explain::explain(&schedule, &row.explain_state(), &runs, now, range);
    Json(ApiSlots {
        job: name,
        timezone: schedule.tz().name().to_string(),
        from,
        to,
        now,
        slots: lines
            .into_iter()
            .map(|l| ApiSlot {
                slot: l.slot,
                local: l.local,
                state: l.state,
                text: l.text,
                note: l.note,
                runs: l.runs.iter().map(|r| r.id).collect(),
            })
            .collect(),
        left_out,
    })
    .into_response()
}

pub(crate) async fn runs(
    State(web): State<Web>,
    headers: HeaderMap,
    Query(query): Query<super::history::RunsQuery>,
) -> Response {
    if let Err(r) = reader(&web, &headers).await {
        return r;
    }
    let now = match web.store.now().await {
        Ok(n) => n,
        Err(e) => return problem(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    let (filter, place) = match query.read(now) {
        Ok(f) => f,
        Err(m) => return problem(StatusCode::BAD_REQUEST, m),
    };
    let limit = query.limit.unwrap_or(PAGE).clamp(1, 500);
    match web.store.runs_page(&filter, place, limit).await {
        Ok(page) => {
            let link = |p: RunPlace| web.href(&format!("/api/v1/runs{}", query.with_place(p)));
            Json(serde_json::json!({
                "runs": page.runs.iter().map(api_run).collect::<Vec<_>>(),
                "older": page.older.map(|id| link(RunPlace::Before(id))),
                "newer": page.newer.map(|id| link(RunPlace::After(id))),
                "searched": page.searched,
            }))
            .into_response()
        }
        Err(e) => problem(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

/// A run as the API shows it; the output only in `/api/v1/runs/{id}`.
fn api_run(r: &crate::store::HistoryRow) -> serde_json::Value {
    serde_json::json!({
        "id": r.id, "job": r.job, "slot": rfc3339(r.slot), "attempt": r.attempt, "node": r.node,
        "token": r.token, "started": r.started.map(rfc3339), "ended": r.ended.map(rfc3339),
        "outcome": r.outcome, "exit_code": r.exit_code, "signal": r.signal,
        "message": r.message,
    })
}

pub(crate) async fn run(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(id): Path<i64>,
) -> Response {
    if let Err(r) = reader(&web, &headers).await {
        return r;
    }
    match web.store.run_record(id).await {
        Ok(Some(r)) => {
            let mut v = api_run(&r);
            v["output"] = serde_json::json!(r.output);
            Json(v).into_response()
        }
        Ok(None) => problem(StatusCode::NOT_FOUND, format!("no run {id}")),
        Err(e) => problem(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

pub(crate) async fn locks(State(web): State<Web>, headers: HeaderMap) -> Response {
    if let Err(r) = reader(&web, &headers).await {
        return r;
    }
    match web.store.locks_bounded(super::LOCKS_SHOWN).await {
        Ok(locks) => Json(serde_json::json!({
            "locks": locks.iter().map(|l| serde_json::json!({
                "name": l.name, "state": l.state, "owner": l.owner, "host": l.host,
                "pid": l.pid, "since": l.since.map(rfc3339), "until": l.until.map(rfc3339),
                "token": l.token,
            })).collect::<Vec<_>>()
        }))
        .into_response(),
        Err(e) => problem(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

/// `?job=NAME&limit=N` of the lists (runs, events, audit).
#[derive(Deserialize)]
pub(crate) struct JobQuery {
    job: Option<String>,
    limit: Option<i64>,
}

pub(crate) async fn events(
    State(web): State<Web>,
    headers: HeaderMap,
    Query(query): Query<JobQuery>,
) -> Response {
    if let Err(r) = reader(&web, &headers).await {
        return r;
    }
    let limit = query.limit.unwrap_or(PAGE).clamp(1, 500);
    match web.store.events(query.job.as_deref(), limit).await {
        Ok(events) => Json(serde_json::json!({
            "events": events.iter().map(|e| serde_json::json!({
                "id": e.id, "job": e.job, "kind": e.kind, "run_id": e.run_id,
                "created": rfc3339(e.created), "state": e.state, "tries": e.tries,
                "node": e.node, "sent": e.sent.map(rfc3339), "error": e.error,
            })).collect::<Vec<_>>()
        }))
        .into_response(),
        Err(e) => problem(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

pub(crate) async fn audit(
    State(web): State<Web>,
    headers: HeaderMap,
    Query(query): Query<JobQuery>,
) -> Response {
    if let Err(r) = reader(&web, &headers).await {
        return r;
    }
    let limit = query.limit.unwrap_or(PAGE).clamp(1, 500);
    match web.store.audit_log(query.job.as_deref(), limit).await {
        Ok(rows) => Json(serde_json::json!({
            "audit": rows.iter().map(|a| serde_json::json!({
                "id": a.id, "at": rfc3339(a.at), "action": a.action, "job": a.job, "who": a.who,
                "host": a.host, "pid": a.pid, "detail": a.detail,
            })).collect::<Vec<_>>()
        }))
        .into_response(),
        Err(e) => problem(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

pub(crate) async fn nodes(State(web): State<Web>, headers: HeaderMap) -> Response {
    if let Err(r) = reader(&web, &headers).await {
        return r;
    }
    match tokio::try_join!(web.store.now(), web.store.nodes()) {
        Ok((now, nodes)) => Json(serde_json::json!({
            "nodes": nodes.iter().map(|n| serde_json::json!({
                "name": n.name, "host": n.host, "version": n.version,
                "alive": n.alive(now), "last_seen": n.last_seen.map(rfc3339), "drain": n.drain,
            })).collect::<Vec<_>>()
        }))
        .into_response(),
        Err(e) => problem(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}
