//! Browsing the history: the runs that match a filter (job, outcome, node, when they ended,
//! text in their output), a page at a time from a cursor (a record id), newest first, either way
//! to the first run ever recorded. What the dashboard's runs view and `/api/v1/runs` read.
//!
//! Every page is bounded: at most `limit` rows on an index (`cron_runs` by id, by job and id,
//! by outcome and id, by node and id), and a search of the output looks through at most
//! [`SEARCH_WINDOW`] runs per page and says where it stopped.

use sqlx::{AssertSqlSafe, Row};

use super::admin::{LIGHT_HISTORY_COLUMNS, history_row};
use super::*;

/// The most runs one search of the output looks through before it returns a page (full or
/// not) with a cursor to go on from.
pub const SEARCH_WINDOW: i64 = 2_000;

/// The outcomes a run record can have.
pub const OUTCOMES: [&str; 8] = [
    "ok",
    "failed",
    "timeout",
    "lost",
    "running",
    "stopped",
    "abandoned",
    "skipped",
];

/// Which runs to show. Every part is optional; the parts given must all hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// The job's name, exactly.
    pub job: Option<String>,
    /// One of [`OUTCOMES`].
    pub outcome: Option<String>,
    /// The node that recorded the run.
    pub node: Option<String>,
    /// Ended at or after this instant (ms); a run still going matches.
    pub since: Option<i64>,
    /// Ended at or before this instant (ms).
    pub until: Option<i64>,
    /// Text the stored output holds, compared without regard to case.
    pub text: Option<String>,
}

/// Where a page starts: the newest runs, the runs before a record id (older), or the runs
/// after one (newer; `After(0)` is the oldest page).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunPlace {
    Newest,
    Before(i64),
    After(i64),
}

/// A page of runs, newest first, and where the pages beside it start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunsPage {
    pub runs: Vec<HistoryRow>,
    /// `Before(id)` for the next older page, if older runs may match.
    pub older: Option<i64>,
    /// `After(id)` for the next newer page, if newer runs may match.
    pub newer: Option<i64>,
    /// Set when a search of the output stopped at its window before the page was full: the
    /// number of runs it looked through (the cursors go on from where it stopped).
    pub searched: Option<i64>,
}

/// A value to bind, in the order of the statement's `?`s (shared with `job_search.rs`).
pub(super) enum Bind {
    Int(i64),
    Text(String),
}

impl Store {
    /// A page of at most `limit` runs matching `filter`, from `place`, without their output.
    pub async fn runs_page(
        &self,
        filter: &RunFilter,
        place: RunPlace,
        limit: i64,
    ) -> Result<RunsPage> {
        let (mut conds, mut binds) = self.run_conditions(filter);
        let newest_first = !matches!(place, RunPlace::After(_));
        match place {
            RunPlace::Newest => {}
            RunPlace::Before(id) => {
                conds.push("id < ?".into());
                binds.push(Bind::Int(id));
            }
            RunPlace::After(id) => {
                conds.push("id > ?".into());
                binds.push(Bind::Int(id));
            }
        }
        let dir = if newest_first { "DESC" } else { "ASC" };
        // Ordered as the index that serves the filter: with `job_name = ?` (or the outcome, or
        // the node) first, the planner walks that index and stops at the page, where by `id` alone it may
        // walk the primary key through every other job's runs to find them.
        let order = match (&filter.job, &filter.outcome, &filter.node) {
            // (The columns, not the names of columns a read as bytes casts.)
            (Some(_), _, _) => format!("cron_runs.job_name {dir}, cron_runs.id {dir}"),
            (None, Some(_), _) => format!("cron_runs.outcome {dir}, cron_runs.id {dir}"),
            (None, None, Some(_)) => format!("cron_runs.node {dir}, cron_runs.id {dir}"),
            (None, None, None) => format!("cron_runs.id {dir}"),
        };
        let order = order.as_str();
        if let Some(text) = filter.text.as_deref().filter(|t| !t.is_empty()) {
            // The window: the next SEARCH_WINDOW runs the other conditions let through.
            let window = format!(
                "SELECT MIN(id) AS lo, MAX(id) AS hi, COUNT(*) AS n FROM \
                 (SELECT id FROM cron_runs WHERE {} ORDER BY {order} LIMIT {SEARCH_WINDOW}) w",
                where_of(&conds)
            );
            let row = bound(
                sqlx::query(AssertSqlSafe(self.dialect.render(&window))),
                &binds,
            )
            .fetch_one(&self.db)
            .await
            .map_err(sql_err!(self, "read runs to search"))?;
            let (lo, hi, n): (Option<i64>, Option<i64>, i64) = (
                row.try_get("lo").map_err(sql_err!(self, "read runs"))?,
                row.try_get("hi").map_err(sql_err!(self, "read runs"))?,
                row.try_get("n").map_err(sql_err!(self, "read runs"))?,
            );
            let (Some(lo), Some(hi)) = (lo, hi) else {
                return Ok(finish(&mut vec![], place, limit, None, None));
            };
            conds.push("id >= ? AND id <= ?".into());
            binds.push(Bind::Int(lo));
            binds.push(Bind::Int(hi));
            conds.push(self.output_contains());
            binds.push(Bind::Text(text.to_string()));
            let mut page = self.read_page(&conds, &binds, order, limit).await?;
            if page.len() as i64 <= limit && n == SEARCH_WINDOW {
                // The window ended before the page filled: go on from its far end.
                let edge = if newest_first { lo } else { hi };
                return Ok(finish(&mut page, place, limit, Some(n), Some(edge)));
            }
            return Ok(finish(&mut page, place, limit, None, None));
        }
        let mut page = self.read_page(&conds, &binds, order, limit).await?;
        Ok(finish(&mut page, place, limit, None, None))
    }

    /// The filter's conditions, with their values in order.
    fn run_conditions(&self, filter: &RunFilter) -> (Vec<String>, Vec<Bind>) {
        let mut conds = vec![];
        let mut binds = vec![];
        if let Some(j) = &filter.job {
            conds.push("job_name = ?".to_string());
            binds.push(Bind::Text(j.clone()));
        }
        if let Some(o) = &filter.outcome {
            // Written into the statement, not bound: with a bound outcome PostgreSQL's generic
            // plan (after five runs of the statement) cannot tell a rare outcome from a common
            // one and walks the primary key through every run. Only the fixed names are
            // written; any other text matches nothing.
            conds.push(match OUTCOMES.iter().find(|k| **k == o.as_str()) {
                Some(known) => format!("outcome = '{known}'"),
                None => "1 = 0".to_string(),
            });
        }
        if let Some(n) = &filter.node {
            conds.push("node = ?".to_string());
            binds.push(Bind::Text(n.clone()));
        }
        if let Some(s) = filter.since {
            conds.push("(ended >= ? OR ended IS NULL)".to_string());
            binds.push(Bind::Int(s));
        }
        if let Some(u) = filter.until {
            conds.push("ended <= ?".to_string());
            binds.push(Bind::Int(u));
        }
        (conds, binds)
    }

    /// Whether the output holds the bound text, without regard to case: both sides folded by
    /// the database's own `lower()` (so they always agree; SQLite folds ASCII letters only).
    fn output_contains(&self) -> String {
        match self.dialect {
            Dialect::Postgres => "strpos(lower(output), lower(?)) > 0",
            Dialect::Sqlite => "instr(lower(output), lower(?)) > 0",
            Dialect::Mysql => "LOCATE(LOWER(?), LOWER(output)) > 0",
        }
        .to_string()
    }

    async fn read_page(
        &self,
        conds: &[String],
        binds: &[Bind],
        order: &str,
        limit: i64,
    ) -> Result<Vec<HistoryRow>> {
        let text = format!(
            "SELECT {{cols}} FROM cron_runs WHERE {} ORDER BY {order} LIMIT {}",
            where_of(conds),
            limit + 1
        );
        self.read_runs(
            "read runs",
            LIGHT_HISTORY_COLUMNS,
            &text,
            |q| bound(q, binds),
            history_row,
        )
        .await
    }
}

/// The page from rows read in `place`'s order (one more than `limit` if there are more),
/// newest first, with its cursors; `edge` is where a search window stopped.
fn finish(
    rows: &mut Vec<HistoryRow>,
    place: RunPlace,
    limit: i64,
    searched: Option<i64>,
    edge: Option<i64>,
) -> RunsPage {
    let more = rows.len() as i64 > limit;
    rows.truncate(limit.max(0) as usize);
    let far = rows.last().map(|r| r.id);
    let near = rows.first().map(|r| r.id);
    // Further in the direction read: past the last row shown, or past the search window.
    let further = if more { far } else { edge };
    let (older, newer) = match place {
        RunPlace::Newest => (further, None),
        RunPlace::Before(id) => (further, Some(near.unwrap_or(id.saturating_sub(1)))),
        RunPlace::After(id) => {
            rows.reverse();
            let back = (id > 0).then(|| near.unwrap_or(id.saturating_add(1)));
            (back, further)
        }
    };
    RunsPage {
        runs: std::mem::take(rows),
        older,
        newer,
        searched,
    }
}
fn where_of(conds: &[String]) -> String {
    if conds.is_empty() {
        "1 = 1".into()
    } else {
        conds.join(" AND ")
    }
}

pub(super) fn bound<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>,
    binds: &[Bind],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments> {
    for b in binds {
        q = match b {
            Bind::Int(i) => q.bind(*i),
            Bind::Text(t) => q.bind(t.clone()),
        };
    }
    q
}
