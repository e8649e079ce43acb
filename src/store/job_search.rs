//! The job list's filter: name text, state (paused, running, parked, failing, idle), a tag or
//! pinned node of the placement, pool and zone; sorted by name or by when each falls due, a
//! page at a time by keyset (never an offset), with the count of every job that matches. What
//! the dashboard's job list and `/api/v1/jobs` read.

use sqlx::{AssertSqlSafe, Row};

use super::run_search::{Bind, bound};
use super::*;

/// The states a job can be filtered by.
pub const STATES: [&str; 5] = ["idle", "running", "paused", "parked", "failing"];

/// Which jobs to list. Every part is optional; the parts given must all hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Text the name contains.
    pub name: String,
    /// One of [`STATES`]; `failing`: the last run ended `failed`, `timeout` or `lost`.
    pub state: Option<String>,
    /// A tag (or a node) the placement names.
    pub tag: Option<String>,
    pub pool: Option<String>,
    /// The zone the row names; `default` for a row that names none (the node's default).
    pub zone: Option<String>,
}

/// The order of the list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum JobSort {
    #[default]
    Name,
    /// Soonest due first (a running job by the end of its lease, parked ones last), then name.
    Next,
}

impl JobSort {
    pub fn parse(text: &str) -> Option<JobSort> {
        match text {
            "" | "name" => Some(JobSort::Name),
            "next" => Some(JobSort::Next),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobSort::Name => "name",
            JobSort::Next => "next",
        }
    }

    /// The cursor of the page after `row`.
    pub fn cursor(self, row: &JobRow) -> String {
        // A name that could not be read (not UTF-8, or not text) is shown as `#id`: the next
        // page starts after that row's name as the database holds it. (A row whose real name is
        // `#id` gets the same cursor, which names the same name.)
        let name = if row.name == format!("#{}", row.id) {
            format!("{NAME_OF_ROW}{}", row.id)
        } else {
            row.name.clone()
        };
        match self {
            JobSort::Name => name,
            JobSort::Next => format!("{}|{name}", row.next_exec.unwrap_or(PARKED)),
        }
    }
}

/// Opens a cursor's name that stands for the name of the row whose id follows.
const NAME_OF_ROW: char = '\0';

/// The name a cursor starts after, as SQL and its binds: the text, or the name of the row a
/// [`NAME_OF_ROW`] cursor names (the empty text when that row is gone: the list starts again).
fn cursor_name(name: &str) -> (String, Vec<Bind>) {
    match name
        .strip_prefix(NAME_OF_ROW)
        .and_then(|id| id.parse::<i64>().ok())
    {
        Some(id) => (
            "COALESCE((SELECT n.name FROM cron_table n WHERE n.id = ?), '')".into(),
            vec![Bind::Int(id)],
        ),
        None => ("?".into(), vec![Bind::Text(name.to_string())]),
    }
}

/// `%text%` for `LIKE ... ESCAPE '!'` (a backslash is itself an escape in MySQL's literals).
pub(super) fn contains_pattern(text: &str) -> String {
    format!(
        "%{}%",
        text.replace('!', "!!")
            .replace('%', "!%")
            .replace('_', "!_")
    )
}

impl Store {
    /// A page of at most `limit` jobs matching `filter` in `sort` order, after the cursor
    /// `after` ([`JobSort::cursor`] of the last row of the previous page), and the number of
    /// every job that matches.
    pub async fn jobs_filtered(
        &self,
        filter: &JobFilter,
        sort: JobSort,
        after: Option<&str>,
        limit: i64,
    ) -> Result<(Vec<JobRow>, i64)> {
        let mut conds = vec!["name LIKE ? ESCAPE '!'".to_string()];
        let mut binds = vec![Bind::Text(contains_pattern(&filter.name))];
        match filter.state.as_deref() {
            None => {}
            Some("parked") => conds.push(format!("(next_exec = {PARKED} OR error IS NOT NULL)")),
            Some("running") => conds.push("exec_by IS NOT NULL".into()),
            Some("paused") => conds.push("enabled = 0".into()),
            Some("failing") => conds.push("last_status IN ('failed', 'timeout', 'lost')".into()),
            Some(_) => conds.push(format!(
                "enabled = 1 AND exec_by IS NULL AND error IS NULL AND next_exec <> {PARKED}"
            )),
        }
        if let Some(t) = &filter.tag {
            conds.push("placement LIKE ? ESCAPE '!'".into());
            // As the placement's JSON writes it (a quote or backslash in it escaped).
            binds.push(Bind::Text(contains_pattern(
                &serde_json::to_string(t).unwrap_or_else(|_| format!("\"{t}\"")),
            )));
        }
        if let Some(p) = &filter.pool {
            conds.push("pool = ?".into());
            binds.push(Bind::Text(p.clone()));
        }
        match filter.zone.as_deref() {
            None => {}
            Some("default") => conds.push("timezone IS NULL".into()),
            Some(z) => {
                conds.push("timezone = ?".into());
                binds.push(Bind::Text(z.to_string()));
            }
        }
        let matching = conds.join(" AND ");
        let count_text = format!("SELECT COUNT(*) AS n FROM cron_table WHERE {matching}");
        let total: i64 = bound(
            sqlx::query(AssertSqlSafe(self.dialect.render(&count_text))),
            &binds,
        )
        .fetch_one(&self.db)
        .await
        .and_then(|r| r.try_get("n"))
        .map_err(sql_err!(self, "count jobs"))?;

        // As the cursor takes it (`JobSort::cursor`): a `next_exec` that is not a number (text
        // a writer put there on SQLite) counts as parked, so the pages go past it.
        let due = match self.dialect {
            Dialect::Sqlite => {
                format!(
                    "(CASE WHEN typeof(next_exec) = 'integer' THEN next_exec ELSE {PARKED} END)"
                )
            }
            _ => format!("COALESCE(next_exec, {PARKED})"),
        };
        let (page_cond, order, cursor_binds): (String, String, Vec<Bind>) = match (sort, after) {
            (JobSort::Name, after) => {
                let (name, page_binds) = cursor_name(after.unwrap_or(""));
                (
                    format!("name > {name}"),
                    // The column, not the name of a column read as bytes (MySQL takes the name
                    // in ORDER BY for the select list's, in its bytes' order).
                    "cron_table.name".into(),
                    page_binds,
                )
            }
            (JobSort::Next, None) => ("1 = 1".into(), format!("{due}, cron_table.name"), vec![]),
            (JobSort::Next, Some(cursor)) => {
                let (at, name) = cursor.split_once('|').unwrap_or(("", cursor));
                let at: i64 = at.parse().unwrap_or(i64::MIN);
                let (name, name_binds) = cursor_name(name);
                let mut page_binds = vec![Bind::Int(at), Bind::Int(at)];
                page_binds.extend(name_binds);
                (
                    format!("({due} > ? OR ({due} = ? AND name > {name}))"),
                    format!("{due}, cron_table.name"),
                    page_binds,
                )
            }
        };
        binds.extend(cursor_binds);
        let (rows, bytes) = self
            .read_rows_text_or_bytes(
                "list jobs",
                |bytes| {
                    let cols = dialect::job_columns(self.dialect, bytes);
                    self.dialect.render(&format!(
                        "SELECT {cols} FROM cron_table WHERE {matching} AND {page_cond} \
                         ORDER BY {order} LIMIT ?"
                    ))
                },
                |q| bound(q, &binds).bind(limit),
            )
            .await?;
        Ok((claim::decode_rows(&rows, bytes), total))
    }
}
