//! Reads and small writes for the command line and the node registry: status, history, pause,
//! node heartbeats (manual runs: `run_requests.rs`).

use sqlx::{AssertSqlSafe, Row};

use super::*;

impl Store {
    /// Registers this daemon in `cron_nodes`.
    pub async fn register_node(
        &self,
        name: &str,
        host: &str,
        pid: u32,
        toml_jobs: &str,
        tags: &[String],
    ) -> Result<()> {
        sqlx::query(AssertSqlSafe(self.sql.node_upsert.clone()))
            .bind(name.to_string())
            .bind(host.to_string())
            .bind(i64::from(pid))
            // MySQL's column is VARCHAR(64): a long package version with a full commit must
            // not fail the registration.
            .bind(crate::model::VERSION.chars().take(64).collect::<String>())
            .bind(toml_jobs.to_string())
            .bind(serde_json::to_string(tags).unwrap_or_default())
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, "register node"))?;
        Ok(())
    }

    /// Refreshes this node's `last_seen` (heartbeat), and records how far its clock is from the
    /// database's (`local_now`: this host's clock, ms).
    ///
    /// Returns, on PostgreSQL and SQLite, the id of the newest row of the audit trail (which
    /// every change of a job's definition writes, by trigger): while it stays the same, no
    /// definition changed, and the node need not read its host-local templates again. `None`
    /// on MySQL (no RETURNING for an UPDATE; its peek carries the id instead), with no audit
    /// row, or for a node not registered.
    pub async fn node_seen(&self, name: &str, local_now: i64) -> Result<Option<i64>> {
        let q = sqlx::query(AssertSqlSafe(self.sql.node_seen.clone()))
            .bind(local_now)
            .bind(name.to_string());
        if self.dialect == Dialect::Mysql {
            q.execute(&self.db)
                .await
                .map_err(sql_err!(self, "node heartbeat"))?;
            return Ok(None);
        }
        let row = q
            .fetch_optional(&self.db)
            .await
            .map_err(sql_err!(self, "node heartbeat"))?;
        Ok(row.and_then(|r| r.try_get::<Option<i64>, _>(0).ok().flatten()))
    }

    /// Records that this node stopped.
    pub async fn node_stopped(&self, name: &str) -> Result<()> {
        self.node_touch(name, &self.sql.node_stopped, "node stop")
            .await
    }

    async fn node_touch(&self, name: &str, statement: &str, op: &'static str) -> Result<()> {
        sqlx::query(AssertSqlSafe(statement.to_string()))
            .bind(name.to_string())
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, op))?;
        Ok(())
    }

    /// Every node's row, by name. A row with text that is not UTF-8 (written with SQL on SQLite
    /// or MariaDB) is shown with replacement characters, and one with a number the node cannot
    /// read is left out with a warning: neither holds up every node's start, which reads these.
    pub async fn nodes(&self) -> Result<Vec<NodeRow>> {
        let (rows, _) = self
            .read_rows_text_or_bytes(
                "list nodes",
                |bytes| {
                    let cols = dialect::select_list(
                        self.dialect,
                        &["name", "host", "version", "toml_jobs", "tags"],
                        &[
                            "pid",
                            "started",
                            "last_seen",
                            "stopped",
                            "drain",
                            "clock_offset",
                        ],
                        bytes,
                    );
                    format!("SELECT {cols} FROM cron_nodes ORDER BY cron_nodes.name")
                },
                |q| q,
            )
            .await?;
        Ok(rows.iter().filter_map(node_row).collect())
    }

    /// Every job row, by name.
    pub async fn jobs(&self) -> Result<Vec<JobRow>> {
        let (rows, bytes) = self
            .read_rows_text_or_bytes(
                "list jobs",
                |bytes| {
                    let cols = dialect::job_columns(self.dialect, bytes);
                    format!("SELECT {cols} FROM cron_table ORDER BY cron_table.name")
                },
                |q| q,
            )
            .await?;
        Ok(claim::decode_rows(&rows, bytes))
    }

    /// The name and signature of every signed row: what a node reads with each heartbeat to
    /// learn the newest signed generations (`daemon::generations::learn`).
    /// A name or signature that is not UTF-8 is left out (no signature verifies it).
    pub async fn signatures(&self) -> Result<Vec<(String, String)>> {
        let (rows, _) = self
            .read_rows_text_or_bytes(
                "list signatures",
                |bytes| {
                    let cols = dialect::columns(self.dialect, &["name", "signature"], bytes);
                    format!(
                        "SELECT {cols} FROM cron_table WHERE signature IS NOT NULL \
                         ORDER BY cron_table.name"
                    )
                },
                |q| q,
            )
            .await?;
        Ok(rows
            .iter()
            .filter_map(
                |r| match (text_column(r, "name"), text_column(r, "signature")) {
                    (Ok(Some(name)), Ok(Some(signature))) => Some((name, signature)),
                    _ => None,
                },
            )
            .collect())
    }

    /// Every signed row, by name.
    pub async fn signed_jobs(&self) -> Result<Vec<JobRow>> {
        let (rows, bytes) = self
            .read_rows_text_or_bytes(
                "list signed jobs",
                |bytes| {
                    let cols = dialect::job_columns(self.dialect, bytes);
                    format!(
                        "SELECT {cols} FROM cron_table WHERE signature IS NOT NULL \
                         ORDER BY cron_table.name"
                    )
                },
                |q| q,
            )
            .await?;
        Ok(claim::decode_rows(&rows, bytes))
    }

    pub async fn job(&self, name: &str) -> Result<Option<JobRow>> {
        let (rows, bytes) = self
            .read_rows_text_or_bytes(
                "read job",
                |bytes| {
                    let cols = dialect::job_columns(self.dialect, bytes);
                    self.dialect
                        .render(&format!("SELECT {cols} FROM cron_table WHERE name = ?"))
                },
                |q| q.bind(name.to_string()),
            )
            .await?;
        Ok(claim::decode_rows(&rows, bytes).pop())
    }

    /// The history, newest first, optionally of one job.
    pub async fn history(&self, job: Option<&str>, limit: i64) -> Result<Vec<HistoryRow>> {
        self.history_of(HISTORY_COLUMNS, job, limit).await
    }

    /// When `job` last ended successfully (ms), if it ever did: what a job that `requires` it
    /// asks at its slot.
    pub async fn last_success(&self, job: &str) -> Result<Option<i64>> {
        let pattern = super::chains::chained_pattern(self.dialect, job);
        let row = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "SELECT MAX(ended) AS ended FROM cron_runs WHERE {} AND outcome = 'ok'",
            super::chains::of_job(self.dialect)
        ))))
        .bind(job.to_string())
        .bind(pattern)
        .fetch_one(&self.db)
        .await
        .map_err(sql_err!(self, "read last success"))?;
        row.try_get::<Option<i64>, _>("ended")
            .map_err(sql_err!(self, "read last success"))
    }

    /// Every row's upstreams as written: `(name, requires, after_jobs)` of the rows that have
    /// either.
    pub async fn upstream_edges(&self) -> Result<Vec<(String, Option<String>, Option<String>)>> {
        let (rows, _) = self
            .read_rows_text_or_bytes(
                "read upstreams",
                |bytes| {
                    let cols =
                        dialect::columns(self.dialect, &["name", "requires", "after_jobs"], bytes);
                    format!(
                        "SELECT {cols} FROM cron_table \
                         WHERE requires IS NOT NULL OR after_jobs IS NOT NULL"
                    )
                },
                |q| q,
            )
            .await?;
        // A row whose name or upstreams are not UTF-8 names no edge (it is parked).
        Ok(rows
            .iter()
            .filter_map(|r| {
                match (
                    text_column(r, "name"),
                    text_column(r, "requires"),
                    text_column(r, "after_jobs"),
                ) {
                    (Ok(Some(name)), Ok(requires), Ok(after)) => Some((name, requires, after)),
                    _ => None,
                }
            })
            .collect())
    }

    /// The history read as `cols` ([`HISTORY_COLUMNS`] or [`LIGHT_HISTORY_COLUMNS`]).
    pub(super) async fn history_of(
        &self,
        cols: &str,
        job: Option<&str>,
        limit: i64,
    ) -> Result<Vec<HistoryRow>> {
        let sql = match job {
            Some(_) => {
                "SELECT {cols} FROM cron_runs WHERE job_name = ? ORDER BY cron_runs.id DESC LIMIT ?"
            }
            None => "SELECT {cols} FROM cron_runs ORDER BY cron_runs.id DESC LIMIT ?",
        };
        let bind = |q: claim::AnyQuery| match job {
            Some(j) => q.bind(j.to_string()).bind(limit),
            None => q.bind(limit),
        };
        self.read_runs("read history", cols, sql, bind, history_row)
            .await
    }

    /// The runs of `job` whose slot is in `from..=to`, and the skipped-slots records that
    /// cover part of it, by slot and attempt; without their output (nobody reading a range
    /// shows it, and a day of a busy job's output is large).
    pub async fn runs_between(&self, job: &str, from: i64, to: i64) -> Result<Vec<HistoryRow>> {
        self.read_runs(
            "read runs",
            LIGHT_HISTORY_COLUMNS,
            "SELECT {cols} FROM cron_runs WHERE job_name = ? \
             AND ((slot >= ? AND slot <= ?) OR (outcome = 'skipped' AND slot < ? AND skipped_last >= ?)) \
             ORDER BY cron_runs.slot, cron_runs.attempt, cron_runs.id",
            |q| {
                q.bind(job.to_string())
                    .bind(from)
                    .bind(to)
                    .bind(from)
                    .bind(from)
            },
            history_row,
        )
        .await
    }

    /// `pause` / `resume`, recorded in the audit trail in the same transaction. False if there
    /// is no such job.
    pub async fn set_enabled(&self, name: &str, enabled: bool, actor: &Actor) -> Result<bool> {
        self.set_enabled_because(name, enabled, actor, None).await
    }

    /// [`Store::set_enabled`] with why, kept in the audit row's detail (`reason: ...`): what
    /// the job's page shows beside who paused it and when.
    pub async fn set_enabled_because(
        &self,
        name: &str,
        enabled: bool,
        actor: &Actor,
        reason: Option<&str>,
    ) -> Result<bool> {
        let detail = reason
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(|r| format!("reason: {r}"));
        self.set_enabled_noting(name, enabled, actor, detail, false)
            .await
    }

    /// Pause or resume with the audit row's whole `detail` given (a bulk action's batch).
    /// `changing_only`: a job already in that state is left alone, with no audit row (false
    /// is returned, as for a job that does not exist), so a form posted twice acts once.
    pub async fn set_enabled_noting(
        &self,
        name: &str,
        enabled: bool,
        actor: &Actor,
        detail: Option<String>,
        changing_only: bool,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        let action = if enabled { "resume" } else { "pause" };
        let mark = self.mark(&mut tx, actor, action, detail.as_deref()).await?;
        let only = if changing_only {
            " AND enabled <> ?"
        } else {
            ""
        };
        let text = self.dialect.render(&format!(
            "UPDATE cron_table SET enabled = ?, changed_by = ? WHERE name = ?{only}"
        ));
        let mut q = sqlx::query(AssertSqlSafe(text))
            .bind(i64::from(enabled))
            .bind(mark.clone())
            .bind(name.to_string());
        if changing_only {
            q = q.bind(i64::from(enabled));
        }
        let done = q
            .execute(&mut *tx)
            .await
            .map_err(sql_err!(self, "set enabled"))?;
        if done.rows_affected() != 1 {
            return Ok(false);
        }
        self.audited(&mut tx, actor, &mark, action, name, detail)
            .await?;
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(true)
    }

    /// Writes `signature` on the job `name` (`sqlcron sign`), audited as `sign`. False when no
    /// such job exists. A definition changed since it was read keeps a signature that no longer
    /// matches it, so the row stays refused: nothing here needs to be compared.
    pub async fn set_signature(&self, name: &str, signature: &str, actor: &Actor) -> Result<bool> {
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        let mark = self.mark(&mut tx, actor, "sign", None).await?;
        let done = sqlx::query(AssertSqlSafe(
            self.dialect
                .render("UPDATE cron_table SET signature = ?, changed_by = ? WHERE name = ?"),
        ))
        .bind(signature.to_string())
        .bind(mark.clone())
        .bind(name.to_string())
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "sign"))?;
        if done.rows_affected() != 1 {
            return Ok(false);
        }
        self.audited(&mut tx, actor, &mark, "sign", name, None)
            .await?;
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(true)
    }

    /// `drain` / `undrain` a node: it claims nothing new while drained. Audited (the node's
    /// name in the `job` column). False if no node of that name ever registered.
    pub async fn set_drain(&self, node: &str, drain: bool, actor: &Actor) -> Result<bool> {
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        let done = sqlx::query(AssertSqlSafe(
            self.dialect
                .render("UPDATE cron_nodes SET drain = ? WHERE name = ?"),
        ))
        .bind(i64::from(drain))
        .bind(node.to_string())
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "set drain"))?;
        // MySQL counts only changed rows: an unchanged flag still needs the node to exist.
        let exists = done.rows_affected() == 1
            || sqlx::query_scalar::<_, i64>(AssertSqlSafe(
                self.dialect
                    .render("SELECT COUNT(*) FROM cron_nodes WHERE name = ?"),
            ))
            .bind(node.to_string())
            .fetch_one(&mut *tx)
            .await
            .map_err(sql_err!(self, "find node"))?
                > 0;
        if !exists {
            return Ok(false);
        }
        let action = if drain { "drain" } else { "undrain" };
        self.audit_in(&mut *tx, actor, action, node, None).await?;
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(true)
    }

    /// Runs a node holds now: rows it claimed whose lease has not ended.
    pub async fn running_on(&self, node: &str) -> Result<i64> {
        let n: Option<i64> =
            sqlx::query_scalar(AssertSqlSafe(self.dialect.render(
                "SELECT COUNT(*) FROM cron_table WHERE exec_by = ? AND lease_until > {now}",
            )))
            .bind(node.to_string())
            .fetch_one(&self.db)
            .await
            .map_err(sql_err!(self, "count running"))?;
        Ok(n.unwrap_or(0))
    }

    /// Runs arbitrary SQL (tests and `sqlcron` maintenance only).
    pub async fn execute_raw(&self, sql: &str) -> Result<u64> {
        let done = sqlx::query(AssertSqlSafe(sql.to_string()))
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, "execute"))?;
        Ok(done.rows_affected())
    }

    /// Runs a query returning one integer (tests and benchmarks).
    pub async fn scalar_i64(&self, sql: &str) -> Result<Option<i64>> {
        self.scalar(sql).await
    }

    /// Runs a query returning one integer per row (tests and benchmarks).
    pub async fn scalars_i64(&self, sql: &str) -> Result<Vec<i64>> {
        self.scalars(sql).await
    }

    /// Runs a query returning one value per row, of any type the driver decodes (tests).
    pub async fn scalars<T>(&self, sql: &str) -> Result<Vec<T>>
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any> + Send + Unpin,
    {
        sqlx::query_scalar(AssertSqlSafe(sql.to_string()))
            .fetch_all(&self.db)
            .await
            .map_err(sql_err!(self, "query"))
    }

    /// Runs a query returning one value of any type the driver decodes (tests and benchmarks).
    pub async fn scalar<T>(&self, sql: &str) -> Result<Option<T>>
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any>,
    {
        let row = sqlx::query(AssertSqlSafe(sql.to_string()))
            .fetch_one(&self.db)
            .await
            .map_err(sql_err!(self, "query"))?;
        row.try_get(0).map_err(sql_err!(self, "query"))
    }
}

/// The columns of `cron_runs` a [`HistoryRow`] is read from.
pub(super) const HISTORY_COLUMNS: &str = "id, job_name, slot, attempt, node, token, started, ended, outcome, \
     exit_code, exit_signal, output, skipped_count, skipped_last, message, rate_held_ms";

/// [`HISTORY_COLUMNS`] without the output (read as NULL): for lists that never show it, so a
/// page of runs costs what their metadata does, not up to 16 MiB of output each.
pub(super) const LIGHT_HISTORY_COLUMNS: &str = "id, job_name, slot, attempt, node, token, started, ended, outcome, \
     exit_code, exit_signal, NULL AS output, skipped_count, skipped_last, message, rate_held_ms";

pub(super) fn history_row(r: &sqlx::any::AnyRow) -> std::result::Result<HistoryRow, sqlx::Error> {
    let text = |col: &str| text_lossy(r, col);
    Ok(HistoryRow {
        id: r.try_get("id")?,
        job: text("job_name")?.unwrap_or_default(),
        slot: r.try_get("slot")?,
        attempt: r.try_get("attempt")?,
        node: text("node")?,
        token: r.try_get("token")?,
        started: r.try_get("started")?,
        ended: r.try_get("ended")?,
        outcome: text("outcome")?.unwrap_or_default(),
        exit_code: r.try_get("exit_code")?,
        signal: r.try_get("exit_signal")?,
        output: text("output")?,
        skipped_count: r.try_get("skipped_count")?,
        skipped_last: r.try_get("skipped_last")?,
        message: text("message")?,
        held_ms: r.try_get("rate_held_ms")?,
    })
}

/// One row of `cron_nodes`, its text read with replacements for bytes that are not UTF-8; `None`
/// (with a warning) for a number that is not one.
fn node_row(r: &sqlx::any::AnyRow) -> Option<NodeRow> {
    let text = |col: &str| text_lossy(r, col).ok().flatten();
    let numbers = || -> std::result::Result<NodeRow, sqlx::Error> {
        Ok(NodeRow {
            name: text("name").unwrap_or_default(),
            host: text("host"),
            pid: r.try_get("pid")?,
            version: text("version"),
            started: r.try_get("started")?,
            last_seen: r.try_get("last_seen")?,
            stopped: r.try_get("stopped")?,
            toml_jobs: text("toml_jobs"),
            tags: text("tags"),
            drain: r.try_get::<i64, _>("drain")? != 0,
            clock_offset: r.try_get("clock_offset")?,
        })
    };
    numbers()
        .inspect_err(|e| {
            let node = text("name").unwrap_or_default();
            tracing::warn!(node = %node, error = %e, "a cron_nodes row that cannot be read; left out");
        })
        .ok()
}
