//! What the web dashboard reads and its sessions (docs/dashboard.md). Every read is bounded (a
//! page, a limit) and served by an index; the dashboard runs on its own pool, with a statement
//! timeout, so it cannot slow the run path.

use sqlx::{AssertSqlSafe, Row};

use super::admin::{HISTORY_COLUMNS, LIGHT_HISTORY_COLUMNS, history_row};
use super::*;

/// A place in the feed of run changes: the newest record seen (by id) and the latest ending
/// seen (end time, then id). Shown to browsers as `started.ended.ended_id`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunCursor {
    pub started_id: i64,
    pub ended: i64,
    pub ended_id: i64,
}

impl RunCursor {
    /// Moves past `run`.
    pub fn advance(&mut self, run: &HistoryRow) {
        self.started_id = self.started_id.max(run.id);
        if let Some(e) = run.ended
            && (e, run.id) > (self.ended, self.ended_id)
        {
            self.ended = e;
            self.ended_id = run.id;
        }
    }
}

impl std::fmt::Display for RunCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.started_id, self.ended, self.ended_id)
    }
}

impl std::str::FromStr for RunCursor {
    type Err = ();
    fn from_str(s: &str) -> std::result::Result<Self, ()> {
        let mut parts = s.splitn(3, '.').map(|p| p.parse::<i64>().map_err(|_| ()));
        let (Some(a), Some(b), Some(c)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(());
        };
        Ok(RunCursor {
            started_id: a?,
            ended: b?,
            ended_id: c?,
        })
    }
}

/// An API token as its row holds it: never the secret, only its SHA-256 (hex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebToken {
    pub name: String,
    pub prefix: String,
    pub hash: String,
    pub role: String,
}

/// A signed-in browser, as the session table holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSession {
    pub user: String,
    pub role: String,
    pub expires: i64,
}

impl Store {
    /// The enabled jobs that fall due next, soonest first (parked rows excluded).
    pub async fn next_due(&self, limit: i64) -> Result<Vec<JobRow>> {
        let (rows, bytes) = self
            .read_rows_text_or_bytes(
                "list due jobs",
                |bytes| {
                    let cols = dialect::job_columns(self.dialect, bytes);
                    self.dialect.render(&format!(
                        "SELECT {cols} FROM cron_table WHERE enabled = 1 AND next_exec < ? \
                         ORDER BY next_exec LIMIT ?"
                    ))
                },
                |q| q.bind(PARKED).bind(limit),
            )
            .await?;
        Ok(claim::decode_rows(&rows, bytes))
    }

    /// The names of parked rows (they run nowhere until fixed), at most `limit`. Read as bytes
    /// (a name written with SQL may not be UTF-8: shown with replacements, it must not fail
    /// the page).
    pub async fn parked_jobs(&self, limit: i64) -> Result<Vec<String>> {
        let name = dialect::bytes_of(self.dialect, "name");
        let rows = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "SELECT {name} AS name FROM cron_table WHERE error IS NOT NULL OR next_exec = ? \
             ORDER BY cron_table.name LIMIT ?",
        ))))
        .bind(PARKED)
        .bind(limit)
        .fetch_all(&self.db)
        .await
        .map_err(sql_err!(self, "list parked jobs"))?;
        rows.iter()
            .map(|r| Ok(text_lossy(r, "name")?.unwrap_or_default()))
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(sql_err!(self, "list parked jobs"))
    }

    /// Each placement that enabled jobs ask for, with how many ask and the first of them by
    /// name, at most `limit` placements (one pass over the table, no per-row work).
    pub async fn placements_in_use(&self, limit: i64) -> Result<Vec<(String, i64, String)>> {
        // As bytes, the labels shown with replacements (see `parked_jobs`).
        let (placement, first) = (
            dialect::bytes_of(self.dialect, "cron_table.placement"),
            dialect::bytes_of(self.dialect, "MIN(cron_table.name)"),
        );
        let rows = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "SELECT {placement} AS placement, COUNT(*) AS n, {first} AS first FROM cron_table \
             WHERE enabled = 1 AND placement IS NOT NULL GROUP BY cron_table.placement \
             ORDER BY cron_table.placement LIMIT ?",
        ))))
        .bind(limit)
        .fetch_all(&self.db)
        .await
        .map_err(sql_err!(self, "list placements in use"))?;
        rows.iter()
            .map(|r| {
                Ok((
                    text_lossy(r, "placement")?.unwrap_or_default(),
                    r.try_get("n")?,
                    text_lossy(r, "first")?.unwrap_or_default(),
                ))
            })
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(sql_err!(self, "decode placement"))
    }

    /// The jobs held by a node right now, at most `limit`, by name. MySQL marks its claims with
    /// `claim_id` (indexed; it has no partial indexes); PostgreSQL and SQLite claim with
    /// `RETURNING` and leave `claim_id` empty, so there the held rows are read by `exec_by`
    /// (the partial index `cron_table_held`).
    /// How many rows a node holds now (the overview's count, which its list may cut).
    pub async fn running_count(&self) -> Result<i64> {
        let held = match self.dialect {
            Dialect::Mysql => "claim_id IS NOT NULL AND exec_by IS NOT NULL",
            Dialect::Postgres | Dialect::Sqlite => "exec_by IS NOT NULL",
        };
        sqlx::query_scalar(AssertSqlSafe(
            self.dialect
                .render(&format!("SELECT COUNT(*) FROM cron_table WHERE {held}")),
        ))
        .fetch_one(&self.db)
        .await
        .map_err(sql_err!(self, "count running jobs"))
    }

    pub async fn running(&self, limit: i64) -> Result<Vec<JobRow>> {
        let held = match self.dialect {
            Dialect::Mysql => "claim_id IS NOT NULL",
            Dialect::Postgres | Dialect::Sqlite => "exec_by IS NOT NULL",
        };
        let (rows, bytes) = self
            .read_rows_text_or_bytes(
                "list running jobs",
                |bytes| {
                    let cols = dialect::job_columns(self.dialect, bytes);
                    self.dialect.render(&format!(
                        "SELECT {cols} FROM cron_table WHERE {held} \
                         ORDER BY cron_table.name LIMIT ?"
                    ))
                },
                |q| q.bind(limit),
            )
            .await?;
        Ok(claim::decode_rows(&rows, bytes)
            .into_iter()
            .filter(|j| j.exec_by.is_some())
            .collect())
    }

    /// How many runs ended since `since` (database clock, ms), by outcome.
    pub async fn outcomes_since(&self, since: i64) -> Result<Vec<(String, i64)>> {
        self.read_runs(
            "count outcomes",
            "outcome",
            "SELECT {cols}, COUNT(*) AS n FROM cron_runs WHERE ended >= ? \
             GROUP BY cron_runs.outcome ORDER BY cron_runs.outcome",
            |q| q.bind(since),
            |r| {
                Ok((
                    text_lossy(r, "outcome")?.unwrap_or_default(),
                    r.try_get::<i64, _>("n")?,
                ))
            },
        )
        .await
    }

    /// One run record by its id.
    pub async fn run_record(&self, id: i64) -> Result<Option<HistoryRow>> {
        Ok(self
            .read_runs(
                "read run",
                HISTORY_COLUMNS,
                "SELECT {cols} FROM cron_runs WHERE id = ?",
                |q| q.bind(id),
                history_row,
            )
            .await?
            .pop())
    }

    /// The runs that started or ended after `cursor`, oldest change first, at most `limit` of
    /// each (new records by id; endings by end time, then id: both on an index).
    pub async fn runs_changed(&self, cursor: &RunCursor, limit: i64) -> Result<Vec<HistoryRow>> {
        let started = self.read_runs(
            "read new runs",
            LIGHT_HISTORY_COLUMNS,
            "SELECT {cols} FROM cron_runs WHERE id > ? ORDER BY cron_runs.id LIMIT ?",
            |q| q.bind(cursor.started_id).bind(limit),
            history_row,
        );
        let ended = self.read_runs(
            "read ended runs",
            LIGHT_HISTORY_COLUMNS,
            "SELECT {cols} FROM cron_runs WHERE ended > ? OR (ended = ? AND id > ?) \
             ORDER BY cron_runs.ended, cron_runs.id LIMIT ?",
            |q| {
                q.bind(cursor.ended)
                    .bind(cursor.ended)
                    .bind(cursor.ended_id)
                    .bind(limit)
            },
            history_row,
        );
        let mut runs = started.await?;
        runs.extend(ended.await?);
        runs.sort_by_key(|r| (r.id, r.ended));
        runs.dedup_by(|a, b| a.id == b.id && a.ended == b.ended);
        Ok(runs)
    }

    /// The newest runs, of one job or all, without their output (see [`Store::history`]).
    pub async fn runs_light(&self, job: Option<&str>, limit: i64) -> Result<Vec<HistoryRow>> {
        self.history_of(LIGHT_HISTORY_COLUMNS, job, limit).await
    }

    /// Where the change feed stands now: the newest record and the latest ending.
    pub async fn run_cursor(&self) -> Result<RunCursor> {
        let started_id: Option<i64> = sqlx::query("SELECT MAX(id) AS n FROM cron_runs")
            .fetch_one(&self.db)
            .await
            .and_then(|r| r.try_get("n"))
            .map_err(sql_err!(self, "read run cursor"))?;
        let last = sqlx::query(
            "SELECT ended, id FROM cron_runs WHERE ended IS NOT NULL ORDER BY ended DESC, id DESC LIMIT 1",
        )
        .fetch_optional(&self.db)
        .await
        .map_err(sql_err!(self, "read run cursor"))?;
        let (ended, ended_id) = match last {
            Some(r) => (
                r.try_get("ended")
                    .map_err(sql_err!(self, "read run cursor"))?,
                r.try_get("id").map_err(sql_err!(self, "read run cursor"))?,
            ),
            None => (0, 0),
        };
        Ok(RunCursor {
            started_id: started_id.unwrap_or(0),
            ended,
            ended_id,
        })
    }

    /// The runs that were under way at some time in `from..to`: ended in it, or not ended
    /// and started before `to`; at most `limit`, by start.
    pub async fn runs_in_window(&self, from: i64, to: i64, limit: i64) -> Result<Vec<HistoryRow>> {
        self.read_runs(
            "read runs in window",
            LIGHT_HISTORY_COLUMNS,
            "SELECT {cols} FROM cron_runs WHERE (ended >= ? AND started < ?) \
             OR (ended IS NULL AND started < ? AND outcome = 'running') \
             ORDER BY cron_runs.started, cron_runs.id LIMIT ?",
            |q| q.bind(from).bind(to).bind(to).bind(limit),
            history_row,
        )
        .await
    }

    /// Records an API token (its prefix and the hash of its secret) and the audit entry, in one
    /// transaction. False when a token of that name exists.
    pub async fn create_web_token(
        &self,
        token: &WebToken,
        lifetime_ms: Option<i64>,
        actor: &crate::model::actor::Actor,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        let taken: Option<String> = sqlx::query_scalar(AssertSqlSafe(
            self.dialect
                .render("SELECT name FROM cron_web_tokens WHERE name = ?"),
        ))
        .bind(token.name.clone())
        .fetch_optional(&mut *tx)
        .await
        .map_err(sql_err!(self, "read tokens"))?;
        if taken.is_some() {
            return Ok(false);
        }
        sqlx::query(AssertSqlSafe(self.dialect.render(
            "INSERT INTO cron_web_tokens (name, prefix, hash, role, created, expires) \
             VALUES (?, ?, ?, ?, {now}, CASE WHEN ? = 1 THEN {now} + ? ELSE NULL END)",
        )))
        .bind(token.name.clone())
        .bind(token.prefix.clone())
        .bind(token.hash.clone())
        .bind(token.role.clone())
        .bind(i64::from(lifetime_ms.is_some()))
        .bind(lifetime_ms.unwrap_or(0))
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "create token"))?;
        let detail = format!("role {}", token.role);
        self.audit_in(
            &mut *tx,
            actor,
            "web_token_create",
            &token.name,
            Some(detail),
        )
        .await?;
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(true)
    }

    /// The live (unexpired) token with this prefix.
    pub async fn web_token(&self, prefix: &str) -> Result<Option<WebToken>> {
        let row = sqlx::query(AssertSqlSafe(self.dialect.render(
            "SELECT name, prefix, hash, role FROM cron_web_tokens WHERE prefix = ? \
             AND (expires IS NULL OR expires > {now})",
        )))
        .bind(prefix.to_string())
        .fetch_optional(&self.db)
        .await
        .map_err(sql_err!(self, "read token"))?;
        row.map(|r| {
            Ok(WebToken {
                name: r.try_get("name")?,
                prefix: r.try_get("prefix")?,
                hash: r.try_get("hash")?,
                role: r.try_get("role")?,
            })
        })
        .transpose()
        .map_err(sql_err!(self, "decode token"))
    }

    /// Deletes a token, with its audit entry. False if there is none of that name.
    pub async fn revoke_web_token(
        &self,
        name: &str,
        actor: &crate::model::actor::Actor,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        let done = sqlx::query(AssertSqlSafe(
            self.dialect
                .render("DELETE FROM cron_web_tokens WHERE name = ?"),
        ))
        .bind(name.to_string())
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "revoke token"))?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        self.audit_in(&mut *tx, actor, "web_token_revoke", name, None)
            .await?;
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(true)
    }

    /// Records a session: `id` is the hash of the cookie's secret. Expired sessions go first.
    pub async fn create_web_session(
        &self,
        id: &str,
        user: &str,
        role: &str,
        lifetime_ms: i64,
    ) -> Result<()> {
        sqlx::query(AssertSqlSafe(
            self.dialect
                .render("DELETE FROM cron_web_sessions WHERE expires < {now}"),
        ))
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "prune sessions"))?;
        sqlx::query(AssertSqlSafe(self.dialect.render(
            "INSERT INTO cron_web_sessions (id, user_name, role, created, expires) \
             VALUES (?, ?, ?, {now}, {now} + ?)",
        )))
        .bind(id.to_string())
        .bind(user.to_string())
        .bind(role.to_string())
        .bind(lifetime_ms)
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "create session"))?;
        Ok(())
    }

    /// The live session with this id, if any.
    pub async fn web_session(&self, id: &str) -> Result<Option<WebSession>> {
        let row = sqlx::query(AssertSqlSafe(self.dialect.render(
            "SELECT user_name, role, expires FROM cron_web_sessions WHERE id = ? AND expires > {now}",
        )))
        .bind(id.to_string())
        .fetch_optional(&self.db)
        .await
        .map_err(sql_err!(self, "read session"))?;
        row.map(|r| {
            Ok(WebSession {
                user: r.try_get("user_name")?,
                role: r.try_get("role")?,
                expires: r.try_get("expires")?,
            })
        })
        .transpose()
        .map_err(sql_err!(self, "decode session"))
    }

    /// Ends a session (sign-out), on every node at once.
    pub async fn delete_web_session(&self, id: &str) -> Result<()> {
        sqlx::query(AssertSqlSafe(
            self.dialect
                .render("DELETE FROM cron_web_sessions WHERE id = ?"),
        ))
        .bind(id.to_string())
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "end session"))?;
        Ok(())
    }
}
