//! The audit trail, `cron_audit`: one row per operator action (`sqlcron run`, `pause`,
//! `resume`, `unlock`, a TOML apply and what it changed) and one per definition change, whoever
//! made it.
//!
//! On PostgreSQL and MySQL the schema's triggers write the row of every change of a definition,
//! always (migrations 0026 and 0023): nothing a client sets can skip it, and every row carries
//! `db_user`, what the database itself knows of the writer, set by a trigger of `cron_audit`
//! whatever the writer put there. sqlcron says who the operator is: before a change it sets
//! `cron_table.changed_by` to a fresh value and puts a *claim* on its connection, for its
//! transaction (the session setting `sqlcron.claim` / `@sqlcron_claim`: that value, the action,
//! the operator, the detail). A trigger that records a row marked with the claim's value takes
//! the action, operator and detail from it and notes that it did (`sqlcron.recorded` /
//! `@sqlcron_recorded`); sqlcron then writes no row of its own ([`Store::audited`]), or writes
//! one when nothing changed (a pause of a paused job). A claim is only what a writer says: it
//! changes how the row reads, never whether it is written, nor its `db_user`.
//!
//! On SQLite, which has no session settings, a trigger records an insert or an update only
//! when `changed_by` did not change, and a delete unless the row was marked `removing ...`
//! first, and sqlcron writes its own rows: a writer of the file can do anything, triggers
//! included, and the file's permissions are the control there (docs/security.md). The database
//! clock times every row.

use sqlx::{AssertSqlSafe, Row};

use super::*;

/// A value of `changed_by` no earlier change used.
pub(super) fn marker(actor: &Actor) -> String {
    format!(
        "{}@{} pid {} #{:016x}",
        actor.who,
        actor.host.as_deref().unwrap_or("?"),
        actor.pid.unwrap_or(0),
        rand::random::<u64>()
    )
}

/// One row of `cron_audit`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AuditRow {
    pub id: i64,
    /// Milliseconds since the epoch, database clock (RFC 3339 in JSON: `model::json_time`).
    #[serde(serialize_with = "crate::model::json_time::instant")]
    pub at: i64,
    /// `run`, `pause`, `resume`, `apply_create`, `apply_update`, `apply_remove`, `sql_insert`,
    /// `sql_update`, `sql_delete`, `lock_break` (then `job` is the lock's name), `calendar_write`,
    /// `calendar_remove`, `sql_calendar_insert`, `sql_calendar_update`, `sql_calendar_delete`
    /// (then `job` is the calendar's name), `denied` (an action the dashboard refused).
    pub action: String,
    pub job: Option<String>,
    pub who: String,
    pub host: Option<String>,
    pub pid: Option<i64>,
    pub detail: Option<String>,
    /// What the database itself knew of the writer of the row: on PostgreSQL `session_user`
    /// (`as current_user` when it differs) `from` the client's address, on MySQL/MariaDB
    /// `USER()`; set by a trigger, whatever the writer put there. `None` on SQLite, and for
    /// rows written before the column existed.
    pub db_user: Option<String>,
}

/// The statement that records one action; binds: action, job, who, host, pid, detail.
pub(super) const AUDIT_INSERT: &str = "INSERT INTO cron_audit (at, action, job, who, host, pid, detail) \
     VALUES ({now}, ?, ?, ?, ?, ?, ?)";

impl Store {
    /// A fresh `changed_by` value for one change by `actor`, claimed on `conn` (which must be in
    /// the transaction that writes it) as `action` with `detail`: see the module's doc. After
    /// the write, [`Store::audited`] records the action where no trigger did.
    pub(super) async fn mark(
        &self,
        conn: &mut sqlx::AnyConnection,
        actor: &Actor,
        action: &str,
        detail: Option<&str>,
    ) -> Result<String> {
        let value = marker(actor);
        self.claim_change(conn, actor, &value, action, detail)
            .await?;
        Ok(value)
    }

    /// A fresh `removing ...` value of `changed_by` for a row about to be deleted by `actor`,
    /// claimed on `conn` as `action`: set on the row before its delete, it tells every
    /// dialect's delete trigger that the delete is sqlcron's own (see the module's doc).
    pub(super) async fn mark_removal(
        &self,
        conn: &mut sqlx::AnyConnection,
        actor: &Actor,
        action: &str,
    ) -> Result<String> {
        let value = format!("removing {}", marker(actor));
        self.claim_change(conn, actor, &value, action, None).await?;
        Ok(value)
    }

    /// Claims the rows marked `value` on `conn`, for its transaction, as `action` by `actor`
    /// with `detail`. Also sets the marker schemas before PostgreSQL's migration 0026 and
    /// MySQL's 0023 read (`sqlcron.marker` / `@sqlcron_marker`), so that a node of this version
    /// writes one row per change during a rolling upgrade too.
    pub(super) async fn claim_change(
        &self,
        conn: &mut sqlx::AnyConnection,
        actor: &Actor,
        value: &str,
        action: &str,
        detail: Option<&str>,
    ) -> Result<()> {
        let text = match self.dialect {
            Dialect::Sqlite => return Ok(()),
            Dialect::Postgres => {
                "SELECT set_config('sqlcron.marker', $1, true), set_config('sqlcron.claim', $2, true)"
            }
            Dialect::Mysql => "SET @sqlcron_marker = ?, @sqlcron_claim = ?",
        };
        let claim = serde_json::json!({
            "marker": value,
            "action": action,
            "who": actor.who,
            "host": actor.host,
            "pid": actor.pid,
            "detail": detail,
        });
        sqlx::query(text)
            .bind(value.to_string())
            .bind(claim.to_string())
            .execute(conn)
            .await
            .map_err(sql_err!(self, "claim a change"))?;
        Ok(())
    }

    /// After a change claimed with `value`: records `action` on `job` unless a trigger recorded
    /// it already (always on SQLite, which leaves sqlcron's changes to sqlcron; elsewhere when
    /// the write changed nothing a trigger records, such as a pause of a paused job).
    pub(super) async fn audited(
        &self,
        conn: &mut sqlx::AnyConnection,
        actor: &Actor,
        value: &str,
        action: &str,
        job: &str,
        detail: Option<String>,
    ) -> Result<()> {
        let text = match self.dialect {
            Dialect::Sqlite => None,
            Dialect::Postgres => Some(
                "SELECT COUNT(*) FROM (SELECT 1) AS one \
                 WHERE current_setting('sqlcron.recorded', true) = $1",
            ),
            Dialect::Mysql => Some(
                "SELECT COUNT(*) FROM (SELECT 1) AS one \
                 WHERE CAST(@sqlcron_recorded AS BINARY) = CAST(? AS BINARY)",
            ),
        };
        if let Some(text) = text {
            let recorded: i64 = sqlx::query_scalar(text)
                .bind(value.to_string())
                .fetch_one(&mut *conn)
                .await
                .map_err(sql_err!(self, "ask whether the change was recorded"))?;
            if recorded > 0 {
                return Ok(());
            }
        }
        self.audit_in(&mut *conn, actor, action, job, detail).await
    }

    /// Records one action.
    pub(super) async fn audit_in<'c, E>(
        &self,
        conn: E,
        actor: &Actor,
        action: &str,
        job: &str,
        detail: Option<String>,
    ) -> Result<()>
    where
        E: sqlx::Executor<'c, Database = sqlx::Any>,
    {
        sqlx::query(AssertSqlSafe(self.dialect.render(AUDIT_INSERT)))
            .bind(action.to_string())
            .bind(job.to_string())
            .bind(actor.who.clone())
            .bind(actor.host.clone())
            .bind(actor.pid)
            .bind(detail)
            .execute(conn)
            .await
            .map_err(sql_err!(self, "write audit"))?;
        Ok(())
    }

    /// Records an action the dashboard refused (`denied`): who asked, what, and from where, in
    /// `detail`. `target` is the job, node, lock or event it was asked for.
    pub async fn audit_denied(&self, actor: &Actor, target: &str, detail: &str) -> Result<()> {
        self.audit_in(
            &self.db,
            actor,
            "denied",
            target,
            Some(self.dialect.storable_text(detail, 2000).into_owned()),
        )
        .await
    }

    /// Whether an audit row already names the bulk batch `batch` (16 hex digits): a batch is
    /// applied once.
    pub async fn batch_applied(&self, batch: &str) -> Result<bool> {
        let n: i64 = sqlx::query_scalar(AssertSqlSafe(
            self.dialect
                .render("SELECT COUNT(*) FROM cron_audit WHERE detail LIKE ?"),
        ))
        .bind(format!("%batch {batch},%"))
        .fetch_one(&self.db)
        .await
        .map_err(sql_err!(self, "look for a batch"))?;
        Ok(n > 0)
    }

    /// When the job of this name was last created (by an apply, SQL, `sqlcron at` or a
    /// backfill), as the audit trail has it; `None` when the trail no longer says.
    pub async fn created_at(&self, job: &str) -> Result<Option<i64>> {
        sqlx::query_scalar(AssertSqlSafe(self.dialect.render(
            "SELECT MAX(at) FROM cron_audit WHERE job = ? \
             AND action IN ('apply_create', 'sql_insert', 'at', 'backfill')",
        )))
        .bind(job.to_string())
        .fetch_one(&self.db)
        .await
        .map_err(sql_err!(self, "read when the job was created"))
    }

    /// The audit trail, newest first, optionally of one job. Its text is read as bytes and
    /// shown with replacements where it is not UTF-8 (the triggers copy a row's name as it was
    /// written with SQL; an editor may write the trail too): one such row must not hide the
    /// trail.
    pub async fn audit_log(&self, job: Option<&str>, limit: i64) -> Result<Vec<AuditRow>> {
        let text_cols = ["action", "job", "who", "host", "detail", "db_user"]
            .map(|c| format!("{} AS {c}", dialect::bytes_of(self.dialect, c)))
            .join(", ");
        let cols = format!("id, at, pid, {text_cols}");
        let text = match job {
            Some(_) => format!(
                "SELECT {cols} FROM cron_audit WHERE job = ? ORDER BY at DESC, id DESC LIMIT ?"
            ),
            None => format!("SELECT {cols} FROM cron_audit ORDER BY at DESC, id DESC LIMIT ?"),
        };
        let mut q = sqlx::query(AssertSqlSafe(self.dialect.render(&text)));
        if let Some(j) = job {
            q = q.bind(j.to_string());
        }
        let rows = q
            .bind(limit)
            .fetch_all(&self.db)
            .await
            .map_err(sql_err!(self, "read audit"))?;
        rows.iter()
            .map(|r| {
                Ok(AuditRow {
                    id: r.try_get("id")?,
                    at: r.try_get("at")?,
                    action: text_lossy(r, "action")?.unwrap_or_default(),
                    job: text_lossy(r, "job")?,
                    who: text_lossy(r, "who")?.unwrap_or_default(),
                    host: text_lossy(r, "host")?,
                    pid: r.try_get("pid")?,
                    detail: text_lossy(r, "detail")?,
                    db_user: text_lossy(r, "db_user")?,
                })
            })
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(sql_err!(self, "decode audit"))
    }
}
