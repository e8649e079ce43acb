//! The runs view: the history of the whole cluster or of one job, filtered by outcome, node,
//! when the runs ended and text in their output, a page at a time by cursor (newest, newer,
//! older, oldest), so every run recorded can be reached. `/api/v1/runs` reads the same filter
//! and cursors (`api.rs`); the reads are `store/run_search.rs`.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::DateTime;
use maud::{Markup, html};
use serde::Deserialize;

use crate::model::access::Action;
use crate::store::run_search::{OUTCOMES, RunFilter, RunPlace, RunsPage, SEARCH_WINDOW};

use super::Web;
use super::pages::{PAGE, allowed, encode, page, unavailable};
use super::runs::duration;

/// The longest name or search text a filter takes.
const MAX_TEXT: usize = 200;

/// The filter and cursor as a URL's query gives them (the page's form and the API alike).
#[derive(Deserialize, Default, Debug, Clone)]
pub(crate) struct RunsQuery {
    pub job: Option<String>,
    pub outcome: Option<String>,
    pub node: Option<String>,
    /// `1h`, `24h`, `7d` back from now, or an RFC 3339 instant.
    pub since: Option<String>,
    /// An RFC 3339 instant.
    pub until: Option<String>,
    /// Text in the output.
    pub q: Option<String>,
    pub before: Option<i64>,
    pub after: Option<i64>,
    /// Runs on a page of the API (the page shows 50).
    pub limit: Option<i64>,
}

fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

/// An instant of a filter: a span back from `now` (`90min`, `24h`, `7d`) or RFC 3339.
fn instant(text: &str, now: i64) -> Result<i64, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.timestamp_millis());
    }
    crate::model::duration::parse_duration(text)
        .map(|d| now - i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2))
        .map_err(|_| {
            format!("\"{text}\" is neither a span back from now (1h, 7d) nor an RFC 3339 time")
        })
}

impl RunsQuery {
    /// The filter and the place of the page, or why the query is refused (a sentence).
    pub(crate) fn read(&self, now: i64) -> Result<(RunFilter, RunPlace), String> {
        let text = |v: &Option<String>, what: &str| -> Result<Option<String>, String> {
            match given(v) {
                Some(s) if s.chars().count() > MAX_TEXT => {
                    Err(format!("{what}: at most {MAX_TEXT} characters"))
                }
                s => Ok(s.map(str::to_string)),
            }
        };
        let outcome = text(&self.outcome, "outcome")?;
        if let Some(o) = &outcome
            && !OUTCOMES.contains(&o.as_str())
        {
            return Err(format!(
                "outcome: \"{o}\" is not one of {}",
                OUTCOMES.join(", ")
            ));
        }
        let filter = RunFilter {
            job: text(&self.job, "job")?,
            outcome,
            node: text(&self.node, "node")?,
            since: given(&self.since)
                .map(|s| instant(s, now))
                .transpose()
                .map_err(|m| format!("since: {m}"))?,
            until: given(&self.until)
                .map(|s| instant(s, now))
                .transpose()
                .map_err(|m| format!("until: {m}"))?,
            text: text(&self.q, "q")?,
        };
        let place = match (self.before, self.after) {
            (Some(_), Some(_)) => return Err("give before or after, not both".into()),
            (Some(b), None) => RunPlace::Before(b.max(1)),
            (None, Some(a)) => RunPlace::After(a.clamp(0, i64::MAX - 1)),
            (None, None) => RunPlace::Newest,
        };
        Ok((filter, place))
    }

    /// This query's filter with another cursor, as a query string (`?job=...&before=N`).
    pub(crate) fn with_place(&self, place: RunPlace) -> String {
        let mut parts = vec![];
        for (k, v) in [
            ("job", &self.job),
            ("outcome", &self.outcome),
            ("node", &self.node),
            ("since", &self.since),
            ("until", &self.until),
            ("q", &self.q),
        ] {
            if let Some(v) = given(v) {
                parts.push(format!("{k}={}", encode(v)));
            }
        }
        match place {
            RunPlace::Newest => {}
            RunPlace::Before(id) => parts.push(format!("before={id}")),
            RunPlace::After(id) => parts.push(format!("after={id}")),
        }
        if let Some(l) = self.limit {
            parts.push(format!("limit={l}"));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("?{}", parts.join("&"))
        }
    }
}

/// `GET /runs`: the runs view.
pub(crate) async fn runs_view(
    State(web): State<Web>,
    headers: HeaderMap,
    Query(query): Query<RunsQuery>,
) -> Response {
    let who = match allowed(&web, &headers, Action::Read).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let now = match web.store.now().await {
        Ok(n) => n,
        Err(e) => return unavailable(e),
    };
    let (filter, place) = match query.read(now) {
        Ok(f) => f,
        Err(m) => return (StatusCode::BAD_REQUEST, format!("{m}\n")).into_response(),
    };
    let result = match web.store.runs_page(&filter, place, PAGE).await {
        Ok(p) => p,
        Err(e) => return unavailable(e),
    };
    let title = match &filter.job {
        Some(j) => format!("Runs of {j}"),
        None => "Runs".to_string(),
    };
    let body = html! {
        h1 { (title) }
        (filter_form(&web, &query))
        (pager(&web, &query, place, &result))
        @if let Some(n) = result.searched {
            p.note role="status" { "The search looked through " (n) " runs (at most " (SEARCH_WINDOW)
              " a page) and stopped there; “Older” goes on from where it stopped." }
        }
        @if result.runs.is_empty() {
            p { "No run matches." }
        } @else {
            table {
                thead { tr { th { "Run" } th { "Job" } th { "Slot" } th { "Try" } th { "Outcome" } th { "Node" } th { "Ended" } th { "Took" } } }
                tbody { @for r in &result.runs { tr class=(r.outcome) {
                    td { a href=(web.href(&format!("/runs/{}", r.id))) { (r.id) } }
                    td { a href=(web.href(&format!("/jobs/{}", encode(&r.job)))) { (r.job) } }
                    td.nowrap { (who.shown.at(r.slot, None)) }
                    td { (r.attempt) }
                    td { span class=(format!("badge {}", r.outcome)) { (r.outcome) } }
                    td { (r.node.as_deref().unwrap_or("-")) }
                    td.nowrap { (r.ended.map(|e| who.shown.at(e, None)).unwrap_or_default()) }
                    td { @if let (Some(a), Some(b)) = (r.started, r.ended) { (duration(b - a)) } }
                } } }
            }
            (pager(&web, &query, place, &result))
        }
    };
    page(&web, Some(&who), &title, body).into_response()
}

fn filter_form(web: &Web, q: &RunsQuery) -> Markup {
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    html! {
        form.search method="get" action=(web.href("/runs")) role="search" aria-label="filter the runs" {
            span.field {
                label for="f-job" { "Job" }
                input #f-job name="job" value=(value(&q.job));
            }
            span.field {
                label for="f-outcome" { "Outcome" }
                select #f-outcome name="outcome" {
                    option value="" { "any" }
                    @for o in OUTCOMES { option value=(o) selected[q.outcome.as_deref() == Some(o)] { (o) } }
                }
            }
            span.field {
                label for="f-node" { "Node" }
                input #f-node name="node" value=(value(&q.node));
            }
            span.field {
                label for="f-since" { "Ended within" }
                select #f-since name="since" {
                    option value="" { "any time" }
                    @for (v, t) in [("1h", "the last hour"), ("24h", "the last day"), ("7d", "the last week"), ("30d", "the last 30 days")] {
                        option value=(v) selected[q.since.as_deref() == Some(v)] { (t) }
                    }
                    @if let Some(s) = given(&q.since).filter(|s| !["1h", "24h", "7d", "30d"].contains(s)) {
                        option value=(s) selected { "since " (s) }
                    }
                }
            }
            @if let Some(u) = given(&q.until) { input type="hidden" name="until" value=(u); }
            span.field {
                label for="f-q" { "Output contains" }
                input #f-q name="q" type="search" value=(value(&q.q));
            }
            button type="submit" { "Show" }
        }
    }
}

/// Links to the newest, newer, older and oldest pages of the same filter.
fn pager(web: &Web, q: &RunsQuery, place: RunPlace, page: &RunsPage) -> Markup {
    let link = |p: RunPlace| web.href(&format!("/runs{}", q.with_place(p)));
    html! {
        nav.pager aria-label="pages of runs" {
            @if place != RunPlace::Newest { a rel="first" href=(link(RunPlace::Newest)) { "« Newest" } " " }
            @if let Some(n) = page.newer { a rel="prev" href=(link(RunPlace::After(n))) { "‹ Newer" } " " }
            @if let Some(o) = page.older { a rel="next" href=(link(RunPlace::Before(o))) { "Older ›" } " " }
            @if place != RunPlace::After(0) && (page.older.is_some() || place == RunPlace::Newest && !page.runs.is_empty()) {
                a rel="last" href=(link(RunPlace::After(0))) { "Oldest »" }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> RunsQuery {
        let mut q = RunsQuery::default();
        for (k, v) in pairs {
            let text = Some(v.to_string());
            match *k {
                "job" => q.job = text,
                "outcome" => q.outcome = text,
                "node" => q.node = text,
                "since" => q.since = text,
                "until" => q.until = text,
                "q" => q.q = text,
                "before" => q.before = v.parse().ok(),
                "after" => q.after = v.parse().ok(),
                _ => panic!("{k}"),
            }
        }
        q
    }

    #[test]
    fn a_query_becomes_a_filter_and_a_place() {
        let now = 10 * 3_600_000;
        let (f, p) = q(&[
            ("job", "backup"),
            ("outcome", "failed"),
            ("since", "1h"),
            ("before", "77"),
        ])
        .read(now)
        .unwrap();
        assert_eq!(f.job.as_deref(), Some("backup"));
        assert_eq!(f.outcome.as_deref(), Some("failed"));
        assert_eq!(f.since, Some(9 * 3_600_000));
        assert_eq!(p, RunPlace::Before(77));
        let (f, p) = q(&[
            ("until", "1970-01-01T01:00:00Z"),
            ("after", "-5"),
            ("job", " "),
        ])
        .read(now)
        .unwrap();
        assert_eq!(
            (f.until, f.job, p),
            (Some(3_600_000), None, RunPlace::After(0))
        );
    }

    #[test]
    fn a_bad_query_is_refused_with_the_reason() {
        let now = 0;
        for (pairs, says) in [
            (vec![("outcome", "weird")], "not one of ok, failed"),
            (vec![("since", "yesterday")], "since: \"yesterday\""),
            (vec![("before", "1"), ("after", "2")], "not both"),
        ] {
            let e = q(&pairs).read(now).unwrap_err();
            assert!(e.contains(says), "{e}");
        }
        let long = "x".repeat(MAX_TEXT + 1);
        assert!(
            q(&[("q", &long)])
                .read(now)
                .unwrap_err()
                .starts_with("q: at most")
        );
    }

    #[test]
    fn links_keep_the_filter_and_change_the_cursor() {
        let query = q(&[("job", "a b"), ("q", "50%"), ("before", "9")]);
        assert_eq!(
            query.with_place(RunPlace::After(3)),
            "?job=a%20b&q=50%25&after=3"
        );
        assert_eq!(RunsQuery::default().with_place(RunPlace::Newest), "");
    }
}
