//! The job editor: create, change, clone and delete jobs defined with SQL (operators edit,
//! admins delete). Each form is checked as a node checks a row before running it
//! (`row_decode::resolve`, and the run-as account against this node's `allowed_users`), then a
//! page shows what changes (a diff) and only its button saves, fenced by the values it showed.
//! A TOML job is shown read-only: its file is where it changes. In signed mode a saved job has
//! no signature and stays parked until `sqlcron sign`.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};

use crate::config::security::SqlJobs;
use crate::model::access::Action;
use crate::model::job_edit::{EDITABLE, apply, diff, fingerprint, value};
use crate::model::job_row::JobRow;
use crate::store::job_edit::EditDone;

use super::Web;
use super::pages::{allowed, encode, page, unavailable};

/// Rows the editor leaves alone: a TOML job's (its file says what it is), an `every_node`
/// copy (its template says) and a derived row (`JOB#after-RUN`, `JOB#backfill-SLOT`).
fn read_only(row: &JobRow) -> bool {
    row.source == "toml"
        || row.template.is_some()
        || row.name.contains('#')
        || row.name.contains('@')
}

/// What a node would say of `row`, or nothing when it would run it.
fn check(web: &Web, row: &JobRow) -> Result<(), String> {
    crate::model::names::check_name(&row.name, 191).map_err(|m| format!("name: {m}"))?;
    if row.name.contains('#') || row.name.contains('@') {
        return Err(
            "name: `#` and `@` are kept for the names sqlcron derives (JOB#after-RUN, T@NODE)"
                .into(),
        );
    }
    crate::model::row_decode::resolve(row, &web.node.defaults)?;
    if let Some(user) = &row.run_user {
        web.node
            .daemon
            .allowed
            .check_names(user, None)
            .map_err(|m| format!("run as: {m} (this node would refuse it)"))?;
    }
    Ok(())
}

fn signed_note(web: &Web) -> Option<Markup> {
    (web.node.security.sql_jobs == SqlJobs::Signed).then(|| html! {
        p.warning role="note" { "This cluster runs only signed jobs ([security] sql_jobs = \"signed\"): the job is saved without a signature and stays parked, running nothing, until it is signed with " code { "sqlcron sign NAME --key KEY" } " on a host that holds a trusted key." }
    })
}

/// The form: `row`'s editable values, and the name when the job is new.
fn form(web: &Web, action: &str, row: &JobRow, new: bool, error: Option<&str>) -> Markup {
    html! {
        @if let Some(e) = error { p.error role="alert" { (e) } }
        (signed_note(web).unwrap_or_default())
        form.editor data-still method="post" action=(action) {
            table {
                @if new { tr { th { label for="e-name" { "Name" } } td { input #e-name name="name" value=(row.name) required maxlength="191"; } } }
                @for (c, label) in EDITABLE {
                    tr { th { label for=(format!("e-{c}")) { (label) } }
                         td { input id=(format!("e-{c}")) name=(c) value=(value(row, c).unwrap_or_default()) size="60" placeholder=(if c == "schedule" || c == "command" { "" } else { "the node's default" }); } }
                }
            }
            button type="submit" { "Review the change" }
            " " a href=(web.href("/jobs")) { "Cancel" }
        }
    }
}

fn fields(pairs: &[(String, String)]) -> BTreeMap<String, String> {
    pairs.iter().cloned().collect()
}

/// `GET /new-job[?from=NAME]`: the form for a new job, or a copy of `from`.
pub(crate) async fn new_form(
    State(web): State<Web>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let who = match allowed(&web, &headers, Action::EditJob).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let row = match q.get("from") {
        Some(from) => match web.store.job(from).await {
            Ok(Some(r)) => JobRow {
                name: format!("{from}-copy"),
                ..r
            },
            Ok(None) => {
                return (StatusCode::NOT_FOUND, format!("no job named \"{from}\"\n"))
                    .into_response();
            }
            Err(e) => return unavailable(e),
        },
        None => JobRow::blank(""),
    };
    let body = html! {
        h1 { "New job" }
        @if q.contains_key("from") { p { "A copy of the editable fields of " (q["from"]) "; its other settings (environment, placement, limits) are not copied." } }
        (form(&web, &web.href("/new-job"), &row, true, None))
    };
    page(&web, Some(&who), "New job", body).into_response()
}

/// `POST /new-job`: without `confirm=yes` the review page, with it the job is created.
pub(crate) async fn create(
    State(web): State<Web>,
    headers: HeaderMap,
    axum::Form(pairs): axum::Form<Vec<(String, String)>>,
) -> Response {
    let f = fields(&pairs);
    let name = f
        .get("name")
        .map(|n| n.trim().to_string())
        .unwrap_or_default();
    let actor = match super::actions::actor(&web, &headers, Action::EditJob, &name).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let who = match allowed(&web, &headers, Action::EditJob).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let row = match apply(&JobRow::blank(&name), &f) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    if let Err(e) = check(&web, &row) {
        let body =
            html! { h1 { "New job" } (form(&web, &web.href("/new-job"), &row, true, Some(&e))) };
        return (
            StatusCode::BAD_REQUEST,
            page(&web, Some(&who), "New job", body),
        )
            .into_response();
    }
    if f.get("confirm").map(String::as_str) != Some("yes") {
        let changes = diff(&JobRow::blank(&name), &row);
        let body = html! {
            h1 { "Create " (name) "?" }
            (changes_table(&changes))
            (signed_note(&web).unwrap_or_default())
            (confirm_form(&web.href("/new-job"), &row, true, &format!("Create {name}"), None))
        };
        return page(&web, Some(&who), "New job", body).into_response();
    }
    match web.store.create_job(&row, &actor).await {
        Ok(true) => {
            tracing::info!(who = %actor.who, job = %name, "web: job created");
            Redirect::to(&web.href(&format!("/jobs/{}", encode(&name)))).into_response()
        }
        Ok(false) => (
            StatusCode::CONFLICT,
            format!("a job named \"{name}\" exists already: nothing was created\n"),
        )
            .into_response(),
        Err(e) => unavailable(e),
    }
}

fn changes_table(changes: &[(&str, Option<String>, Option<String>)]) -> Markup {
    html! {
        table.diff {
            thead { tr { th { "Field" } th { "Before" } th { "After" } } }
            tbody { @for (c, a, b) in changes { tr {
                td { (c) }
                td { del { (a.as_deref().unwrap_or("(default)")) } }
                td { ins { (b.as_deref().unwrap_or("(default)")) } }
            } } }
        }
    }
}

/// The review page's form: every value as hidden fields, the fingerprint of the row as read.
fn confirm_form(action: &str, row: &JobRow, new: bool, button: &str, seen: Option<&str>) -> Markup {
    html! {
        form data-still method="post" action=(action) {
            @if new { input type="hidden" name="name" value=(row.name); }
            @for (c, _) in EDITABLE { input type="hidden" name=(c) value=(value(row, c).unwrap_or_default()); }
            @if let Some(s) = seen { input type="hidden" name="seen" value=(s); }
            input type="hidden" name="confirm" value="yes";
            button type="submit" aria-label=(button) { (button) }
        }
    }
}

/// The TOML nodes that define `name` in their file (from `cron_nodes.toml_jobs`).
async fn defined_by(web: &Web, name: &str) -> Vec<String> {
    web.store
        .nodes()
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|n| {
            n.toml_jobs
                .as_deref()
                .and_then(|t| serde_json::from_str::<BTreeMap<String, String>>(t).ok())
                .is_some_and(|m| m.contains_key(name))
        })
        .map(|n| n.name)
        .collect()
}

async fn read(web: &Web, name: &str) -> Result<JobRow, Response> {
    match web.store.job(name).await {
        Ok(Some(r)) => Ok(r),
        Ok(None) => {
            Err((StatusCode::NOT_FOUND, format!("no job named \"{name}\"\n")).into_response())
        }
        Err(e) => Err(unavailable(e)),
    }
}

/// `GET /jobs/{name}/edit`: the form, or for a TOML job where it is defined.
pub(crate) async fn edit_form(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let who = match allowed(&web, &headers, Action::EditJob).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let row = match read(&web, &name).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    let path = web.href(&format!("/jobs/{}/edit", encode(&name)));
    let body = if read_only(&row) {
        let nodes = defined_by(&web, &name).await;
        html! {
            h1 { (name) }
            @if row.source == "toml" {
                p #read-only role="note" { "Defined in the TOML file of " @if nodes.is_empty() { "a node" } @else { (nodes.join(", ")) } ": it is changed there (then " code { "systemctl reload sqlcron" } "), not here. A change made here would be undone by the next apply." }
            } @else {
                p #read-only role="note" { "Made by sqlcron (an every_node copy of its template, or a step of a chain or backfill): change what it is made from." }
            }
            table { @for (c, label) in EDITABLE { tr { th { (label) } td { code { (value(&row, c).unwrap_or_else(|| "(default)".into())) } } } } }
        }
    } else {
        html! { h1 { "Edit " (name) } (form(&web, &path, &row, false, None)) }
    };
    page(&web, Some(&who), &format!("Edit {name}"), body).into_response()
}

/// `POST /jobs/{name}/edit`: without `confirm=yes` the diff, with it the change is saved if the
/// row still has the values the diff was made from (`seen`).
pub(crate) async fn save(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
    axum::Form(pairs): axum::Form<Vec<(String, String)>>,
) -> Response {
    let actor = match super::actions::actor(&web, &headers, Action::EditJob, &name).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let who = match allowed(&web, &headers, Action::EditJob).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let old = match read(&web, &name).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    if old.source == "toml" {
        return (
            StatusCode::CONFLICT,
            format!("{name} is defined in a TOML file: change it there\n"),
        )
            .into_response();
    }
    let f = fields(&pairs);
    let new = match apply(&old, &f) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    let path = web.href(&format!("/jobs/{}/edit", encode(&name)));
    if let Err(e) = check(&web, &new) {
        let body = html! { h1 { "Edit " (name) } (form(&web, &path, &new, false, Some(&e))) };
        return (
            StatusCode::BAD_REQUEST,
            page(&web, Some(&who), "Edit", body),
        )
            .into_response();
    }
    let changes = diff(&old, &new);
    if f.get("confirm").map(String::as_str) != Some("yes") {
        let body = html! {
            h1 { "Save the change to " (name) "?" }
            @if changes.is_empty() { p { "Nothing changes." } } @else {
                (changes_table(&changes))
                (signed_note(&web).unwrap_or_default())
                (confirm_form(&path, &new, false, &format!("Save {name}"), Some(&fingerprint(&old))))
            }
            p { a href=(web.href(&format!("/jobs/{}", encode(&name)))) { "Cancel" } }
        };
        return page(&web, Some(&who), "Edit", body).into_response();
    }
    if f.get("seen") != Some(&fingerprint(&old)) {
        return (
            StatusCode::CONFLICT,
            format!(
                "{name} changed since the change was reviewed: nothing was saved; look again\n"
            ),
        )
            .into_response();
    }
    match web.store.update_job(&old, &new, &actor).await {
        Ok(EditDone::Done) => {
            tracing::info!(who = %actor.who, job = %name, "web: job edited");
            Redirect::to(&web.href(&format!("/jobs/{}", encode(&name)))).into_response()
        }
        Ok(EditDone::Refused) => (
            StatusCode::CONFLICT,
            format!("{name} changed while it was being saved: nothing was saved; look again\n"),
        )
            .into_response(),
        Ok(EditDone::NoSuchJob) => {
            (StatusCode::NOT_FOUND, format!("no job named \"{name}\"\n")).into_response()
        }
        Err(e) => unavailable(e),
    }
}

/// `GET /jobs/{name}/delete`: what removing does, and the button (admins).
pub(crate) async fn confirm_delete(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    let who = match allowed(&web, &headers, Action::DeleteJob).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let row = match read(&web, &name).await {
        Ok(r) => r,
        Err(r) => return r,
    };
    let job = web.href(&format!("/jobs/{}", encode(&name)));
    let body = html! {
        h1 { "Delete " (name) "?" }
        @if row.source == "toml" {
            p { "It is defined in a TOML file: remove it there (then reload)." }
        } @else if row.exec_by.is_some() {
            p { "It is running on " (row.exec_by.as_deref().unwrap_or("")) ": stop the run or wait for its end first." }
        } @else {
            p { "The job is removed from every node; its history and audit trail stay. This cannot be undone (a copy of its fields: " a href=(web.href(&format!("/new-job?from={}", encode(&name)))) { "Clone" } ")." }
            form data-still method="post" action=(format!("{job}/delete")) {
                input type="hidden" name="confirm" value="yes";
                button.danger type="submit" aria-label=(format!("Confirm: delete {name}")) { "Delete " (name) }
            }
        }
        p { a href=(job) { "Cancel" } }
    };
    page(&web, Some(&who), "Delete", body).into_response()
}

#[derive(serde::Deserialize)]
pub(crate) struct Confirm {
    #[serde(default)]
    confirm: String,
}

/// `POST /jobs/{name}/delete` with `confirm=yes`.
pub(crate) async fn delete(
    State(web): State<Web>,
    headers: HeaderMap,
    Path(name): Path<String>,
    axum::Form(form): axum::Form<Confirm>,
) -> Response {
    let actor = match super::actions::actor(&web, &headers, Action::DeleteJob, &name).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    if form.confirm != "yes" {
        return (
            StatusCode::BAD_REQUEST,
            "deleting a job cannot be undone: confirm it on its delete page\n",
        )
            .into_response();
    }
    match web.store.delete_job(&name, &actor).await {
        Ok(EditDone::Done) => {
            tracing::info!(who = %actor.who, job = %name, "web: job deleted");
            Redirect::to(&web.href("/jobs")).into_response()
        }
        Ok(EditDone::Refused) => (
            StatusCode::CONFLICT,
            format!("{name} is a TOML job's or is running: nothing was deleted\n"),
        )
            .into_response(),
        Ok(EditDone::NoSuchJob) => {
            (StatusCode::NOT_FOUND, format!("no job named \"{name}\"\n")).into_response()
        }
        Err(e) => unavailable(e),
    }
}
