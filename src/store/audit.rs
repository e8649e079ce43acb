//! The audit trail, `cron_audit`: one row per operator action (`sqlcron run`, `pause`,
//! `resume`, `unlock`, a TOML apply and what it changed) written here, and one per definition
//! change made with plain SQL, written by the schema's triggers.
//!
//! How the triggers tell the two apart: every change made through sqlcron sets
//! `cron_table.changed_by` to a fresh value ([`Store::mark`]) and, on PostgreSQL and MySQL,
//! vouches for that value on its own connection in the same transaction (a session setting,
//! `sqlcron.marker` / `@sqlcron_marker`, that a column written by SQL cannot imitate). The
//! triggers there leave a change to sqlcron only when the row's `changed_by` (the old row's, for
//! a delete) equals the vouched value; every other change is recorded as a SQL change with the
//! database user, whatever the row says. On SQLite, which has no session settings, a trigger
//! records an insert or an update only when `changed_by` did not change, and a delete unless the
//! row was marked `removing ...` first: a writer of the file can do anything, triggers included,
//! and the file's permissions are the control there (docs/security.md). The database clock
//! times every row.

use sqlx::{AssertSqlSafe, Row};

use super::*;

/// A value of `changed_by` no earlier change used.
fn marker(actor: &Actor) -> String {
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
    /// Milliseconds since the epoch, database clock.
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
}

/// The statement that records one action; binds: action, job, who, host, pid, detail.
pub(super) const AUDIT_INSERT: &str = "INSERT INTO cron_audit (at, action, job, who, host, pid, detail) \
     VALUES ({now}, ?, ?, ?, ?, ?, ?)";

impl Store {
    /// A fresh `changed_by` value for one change by `actor`, vouched for on `conn` (which must
    /// be in the transaction that writes it): see the module's doc.
    pub(super) async fn mark(
        &self,
        conn: &mut sqlx::AnyConnection,
        actor: &Actor,
    ) -> Result<String> {
        let value = marker(actor);
        self.vouch(conn, &value).await?;
        Ok(value)
    }

    /// A fresh `removing ...` value of `changed_by` for a row about to be deleted by `actor`,
    /// vouched for on `conn`: set on the row before its delete, it tells every dialect's delete
    /// trigger that the delete is sqlcron's own (see the module's doc).
    pub(super) async fn mark_removal(
        &self,
        conn: &mut sqlx::AnyConnection,
        actor: &Actor,
    ) -> Result<String> {
        let value = format!("removing {}", marker(actor));
        self.vouch(conn, &value).await?;
        Ok(value)
    }

    /// Vouches for `value` as sqlcron's own `changed_by` on `conn`, for its transaction.
    pub(super) async fn vouch(&self, conn: &mut sqlx::AnyConnection, value: &str) -> Result<()> {
        let text = match self.dialect {
            Dialect::Sqlite => return Ok(()),
            Dialect::Postgres => "SELECT set_config('sqlcron.marker', $1, true)",
            Dialect::Mysql => "SET @sqlcron_marker = ?",
        };
        sqlx::query(text)
            .bind(value.to_string())
            .execute(conn)
            .await
            .map_err(sql_err!(self, "vouch for a change"))?;
        Ok(())
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

    /// The audit trail, newest first, optionally of one job.
    pub async fn audit_log(&self, job: Option<&str>, limit: i64) -> Result<Vec<AuditRow>> {
        let cols = "id, at, action, job, who, host, pid, detail";
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
                    action: r.try_get("action")?,
                    job: r.try_get("job")?,
                    who: r.try_get("who")?,
                    host: r.try_get("host")?,
                    pid: r.try_get("pid")?,
                    detail: r.try_get("detail")?,
                })
            })
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(sql_err!(self, "decode audit"))
    }
}
