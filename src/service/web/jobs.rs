//! The job list: filtered by name, state, tag, pool and zone, sorted by name or by when each
//! falls due, with the count of every match and keyset pages of 50; the filter lives in the
//! URL, so a filtered list can be bookmarked and shared. `/api/v1/jobs` reads the same query.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;

use crate::model::access::{Action, refusal};
use crate::store::job_search::{JobFilter, JobSort, STATES};

use super::Web;
use super::pages::{PAGE, allowed, encode, job_actions, next_cell, page, state, unavailable};

/// The longest text a filter takes.
const MAX_TEXT: usize = 200;

/// The job list's query (the page's form and the API alike).
#[derive(Deserialize, Default, Debug, Clone)]
pub(crate) struct JobsQuery {
    /// Text the name contains.
    #[serde(default)]
    pub q: String,
    pub state: Option<String>,
    pub tag: Option<String>,
    pub pool: Option<String>,
    pub zone: Option<String>,
    /// `name` (the default) or `next`.
    pub sort: Option<String>,
    /// The cursor of the previous page's last job.
    pub after: Option<String>,
}

fn given(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

impl JobsQuery {
    /// The filter and the order, or why the query is refused (a sentence).
    pub(crate) fn read(&self) -> Result<(JobFilter, JobSort), String> {
        // A cursor is a name, or a due time (at most 20 digits and a sign) and `|` before one.
        for (what, v, most) in [
            ("q", Some(&self.q), MAX_TEXT),
            ("tag", self.tag.as_ref(), MAX_TEXT),
            ("pool", self.pool.as_ref(), MAX_TEXT),
            ("zone", self.zone.as_ref(), MAX_TEXT),
            ("after", self.after.as_ref(), MAX_TEXT + 22),
        ] {
            if v.is_some_and(|v| v.chars().count() > most) {
                return Err(format!("{what}: at most {most} characters"));
            }
        }
        let state = given(&self.state);
        if let Some(s) = &state
            && !STATES.contains(&s.as_str())
        {
            return Err(format!(
                "state: \"{s}\" is not one of {}",
                STATES.join(", ")
            ));
        }
        let sort = JobSort::parse(self.sort.as_deref().unwrap_or("").trim())
            .ok_or_else(|| "sort: give name or next".to_string())?;
        Ok((
            JobFilter {
                name: self.q.trim().to_string(),
                state,
                tag: given(&self.tag),
                pool: given(&self.pool),
                zone: given(&self.zone),
            },
            sort,
        ))
    }

    /// This query with another cursor, as a query string.
    pub(crate) fn with_after(&self, after: Option<&str>) -> String {
        let mut parts = vec![];
        if !self.q.trim().is_empty() {
            parts.push(format!("q={}", encode(self.q.trim())));
        }
        for (k, v) in [
            ("state", &self.state),
            ("tag", &self.tag),
            ("pool", &self.pool),
            ("zone", &self.zone),
            ("sort", &self.sort),
        ] {
            if let Some(v) = given(v) {
                parts.push(format!("{k}={}", encode(&v)));
            }
        }
        if let Some(a) = after {
            parts.push(format!("after={}", encode(a)));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("?{}", parts.join("&"))
        }
    }
}

pub(crate) async fn jobs(
    State(web): State<Web>,
    headers: HeaderMap,
    Query(query): Query<JobsQuery>,
) -> Response {
    let who = match allowed(&web, &headers, Action::Read).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let (filter, sort) = match query.read() {
        Ok(f) => f,
        Err(m) => return (StatusCode::BAD_REQUEST, format!("{m}\n")).into_response(),
    };
    let now = match web.store.now().await {
        Ok(n) => n,
        Err(e) => return unavailable(e),
    };
    let (rows, total) = match web
        .store
        .jobs_filtered(&filter, sort, query.after.as_deref(), PAGE + 1)
        .await
    {
        Ok(r) => r,
        Err(e) => return unavailable(e),
    };
    let more = rows.len() as i64 > PAGE;
    let rows = &rows[..rows.len().min(PAGE as usize)];
    let can_act = refusal(who.role, Action::Pause, web.config.read_only).is_none();
    let body = html! {
        h1 { "Jobs" }
        @if refusal(who.role, Action::EditJob, web.config.read_only).is_none() { p { a href=(web.href("/new-job")) { "New job…" } } }
        (filter_form(&web, &query))
        p #job-count role="status" { (total) @if total == 1 { " job matches" } @else { " jobs match" } }
        @if can_act {
            form #bulk .bulk method="post" action=(web.href("/jobs/bulk")) {
                label for="bulk-action" { "With" }
                select #bulk-action name="action" {
                    option value="pause" { "Pause" }
                    option value="resume" { "Resume" }
                    option value="run" { "Run now" }
                }
                // The filter, for "all matching": the server selects by it again.
                @for (k, v) in [("q", Some(query.q.clone())), ("state", query.state.clone()), ("tag", query.tag.clone()), ("pool", query.pool.clone()), ("zone", query.zone.clone())] {
                    @if let Some(v) = v.filter(|v| !v.trim().is_empty()) { input type="hidden" name=(k) value=(v); }
                }
                button type="submit" name="all" value="no" { "the selected jobs…" }
                @if total > 0 && total <= super::bulk::BULK_MAX as i64 {
                    button type="submit" name="all" value="yes" { "all " (total) " matching…" }
                } @else if total > 0 {
                    small { " (" (total) " match: narrow the filter to " (super::bulk::BULK_MAX) " or fewer to act on all)" }
                }
            }
        }
        table {
            thead { tr { @if can_act { th { span.visually-hidden { "Select" } } } th { "Job" } th { "State" } th { "Last" } th { "Schedule" } th { "Next" } th { "Held by" } @if can_act { th { "Actions" } } } }
            tbody { @for j in rows { tr {
                @if can_act { td { input type="checkbox" form="bulk" name="job" value=(j.name) aria-label=(format!("Select {}", j.name)); } }
                td { a href=(web.href(&format!("/jobs/{}", encode(&j.name)))) { (j.name) } }
                td { span class=(format!("badge {}", state(j))) { (state(j)) } }
                td { @if let Some(s) = &j.last_status { span class=(format!("badge {s}")) { (s) } } @else { "-" } }
                td { code { (j.schedule) } " " small { (j.timezone.as_deref().unwrap_or("UTC")) } }
                td { (next_cell(j, now, who.shown, &web.node.defaults)) }
                td { (j.exec_by.as_deref().unwrap_or("-")) }
                @if can_act { td { (job_actions(&web, j)) } }
            } } }
        }
        @if let Some(last) = rows.last().filter(|_| more) {
            p { a rel="next" href=(web.href(&format!("/jobs{}", query.with_after(Some(&sort.cursor(last)))))) { "Next page" } }
        }
    };
    page(&web, Some(&who), "Jobs", body).into_response()
}

fn filter_form(web: &Web, q: &JobsQuery) -> Markup {
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    html! {
        form.search method="get" action=(web.href("/jobs")) role="search" aria-label="filter the jobs" {
            span.field {
                label for="q" { "Name contains" }
                input #q name="q" value=(q.q) type="search";
            }
            span.field {
                label for="f-state" { "State" }
                select #f-state name="state" {
                    option value="" { "any" }
                    @for s in STATES { option value=(s) selected[q.state.as_deref() == Some(s)] { (s) } }
                }
            }
            span.field {
                label for="f-tag" { "Tag" }
                input #f-tag name="tag" value=(value(&q.tag));
            }
            span.field {
                label for="f-pool" { "Pool" }
                input #f-pool name="pool" value=(value(&q.pool));
            }
            span.field {
                label for="f-zone" { "Zone" }
                input #f-zone name="zone" value=(value(&q.zone)) placeholder="Europe/Berlin, default";
            }
            span.field {
                label for="f-sort" { "Order" }
                select #f-sort name="sort" {
                    option value="name" selected[q.sort.as_deref() != Some("next")] { "by name" }
                    option value="next" selected[q.sort.as_deref() == Some("next")] { "soonest due first" }
                }
            }
            button type="submit" { "Search" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_becomes_a_filter_or_a_reason() {
        let q = JobsQuery {
            q: " back ".into(),
            state: Some("failing".into()),
            tag: Some("".into()),
            sort: Some("next".into()),
            ..JobsQuery::default()
        };
        let (f, s) = q.read().unwrap();
        assert_eq!(
            (f.name.as_str(), f.state.as_deref(), f.tag),
            ("back", Some("failing"), None)
        );
        assert_eq!(s, JobSort::Next);
        assert_eq!(
            q.with_after(Some("5|a b")),
            "?q=back&state=failing&sort=next&after=5%7Ca%20b"
        );
        let bad = JobsQuery {
            state: Some("sleepy".into()),
            ..JobsQuery::default()
        };
        assert!(bad.read().unwrap_err().contains("not one of idle"));
        let bad = JobsQuery {
            sort: Some("random".into()),
            ..JobsQuery::default()
        };
        assert!(bad.read().is_err());
    }
}
