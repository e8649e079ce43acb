//! The dashboard's job editor: create, change and delete a job defined with SQL (never one of
//! a TOML file), each in one audited transaction. A change is fenced by the values the editor
//! showed: it applies only if the row still has them. A change clears the row's signature (in
//! signed mode the job waits, parked, until `sqlcron sign`).

use sqlx::AssertSqlSafe;

use super::*;
use crate::model::job_edit::{EDITABLE, value};

/// How an edit or a removal went.
#[derive(Debug, PartialEq, Eq)]
pub enum EditDone {
    Done,
    /// The row changed since the editor read it, is a TOML job's, or (a removal) is running.
    Refused,
    NoSuchJob,
}

/// The integer columns among the editable ones (the rest are text).
const INTEGER_COLUMNS: [&str; 2] = ["retries", "max_catch_up"];

/// Binds a column's value with its column's type (a whole number for the integer columns:
/// the editor has checked it parses, as the node's decoding does).
fn bind_col<'q>(
    q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>,
    column: &str,
    v: Option<String>,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments> {
    if INTEGER_COLUMNS.contains(&column) {
        q.bind(v.and_then(|v| v.trim().parse::<i64>().ok()))
    } else {
        q.bind(v)
    }
}

impl Store {
    /// Creates `row` as a job (`source = 'web'`), audited as `create`. False: the name is taken.
    pub async fn create_job(&self, row: &JobRow, actor: &Actor) -> Result<bool> {
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        let mark = self.mark(&mut tx, actor, "create", None).await?;
        let cols: Vec<&str> = EDITABLE.iter().map(|(c, _)| *c).collect();
        let marks = vec!["?"; cols.len()].join(", ");
        let text = self.dialect.render(&format!(
            "INSERT INTO cron_table (name, {}, enabled, source, changed_by) \
             VALUES (?, {marks}, ?, 'web', ?)",
            cols.join(", ")
        ));
        let mut q = sqlx::query(AssertSqlSafe(text)).bind(row.name.clone());
        for c in &cols {
            q = bind_col(q, c, value(row, c));
        }
        let done = q
            .bind(i64::from(row.enabled))
            .bind(mark.clone())
            .execute(&mut *tx)
            .await
            .map_err(sql_err!(self, "create job"));
        match done {
            Ok(d) if d.rows_affected() == 1 => {}
            Ok(_) => return Ok(false),
            Err(e) if e.is_unique_violation() => return Ok(false),
            Err(e) => return Err(e),
        }
        self.audited(&mut tx, actor, &mark, "create", &row.name, None)
            .await?;
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(true)
    }

    /// Writes `new`'s editable values on the job `old` was read as, if it still has `old`'s
    /// values and is not a TOML job's. Audited as `edit` with the changed columns.
    pub async fn update_job(&self, old: &JobRow, new: &JobRow, actor: &Actor) -> Result<EditDone> {
        let changed: Vec<&str> = crate::model::job_edit::diff(old, new)
            .into_iter()
            .map(|(c, _, _)| c)
            .collect();
        let detail = format!("changed {}", changed.join(","));
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        let mark = self.mark(&mut tx, actor, "edit", Some(&detail)).await?;
        let sets: Vec<String> = EDITABLE.iter().map(|(c, _)| format!("{c} = ?")).collect();
        let same: Vec<String> = EDITABLE
            .iter()
            .map(|(c, _)| format!("({c} = ? OR ({c} IS NULL AND ? IS NULL))"))
            .collect();
        let text = self.dialect.render(&format!(
            "UPDATE cron_table SET {}, signature = NULL, changed_by = ? \
             WHERE name = ? AND source <> 'toml' AND {}",
            sets.join(", "),
            same.join(" AND ")
        ));
        let mut q = sqlx::query(AssertSqlSafe(text));
        for (c, _) in EDITABLE {
            q = bind_col(q, c, value(new, c));
        }
        q = q.bind(mark.clone()).bind(old.name.clone());
        for (c, _) in EDITABLE {
            q = bind_col(bind_col(q, c, value(old, c)), c, value(old, c));
        }
        let done = q
            .execute(&mut *tx)
            .await
            .map_err(sql_err!(self, "edit job"))?;
        if done.rows_affected() != 1 {
            tx.rollback().await.map_err(sql_err!(self, "rollback"))?;
            return Ok(match self.job(&old.name).await? {
                None => EditDone::NoSuchJob,
                Some(_) => EditDone::Refused,
            });
        }
        self.audited(&mut tx, actor, &mark, "edit", &old.name, Some(detail))
            .await?;
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(EditDone::Done)
    }

    /// Removes the job `name` if it is not a TOML job's and no node holds it. Its history stays.
    /// Audited as `delete`.
    pub async fn delete_job(&self, name: &str, actor: &Actor) -> Result<EditDone> {
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        // Marked first, so that the delete trigger knows it is not a plain SQL one.
        let marker = self.mark_removal(&mut tx, actor, "delete").await?;
        sqlx::query(AssertSqlSafe(self.dialect.render(
            "UPDATE cron_table SET changed_by = ? WHERE name = ? AND source <> 'toml' AND exec_by IS NULL",
        )))
        .bind(marker.clone())
        .bind(name.to_string())
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "mark job for removal"))?;
        let done = sqlx::query(AssertSqlSafe(self.dialect.render(
            "DELETE FROM cron_table WHERE name = ? AND changed_by = ? AND source <> 'toml' AND exec_by IS NULL",
        )))
        .bind(name.to_string())
        .bind(marker.clone())
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "delete job"))?;
        if done.rows_affected() != 1 {
            tx.rollback().await.map_err(sql_err!(self, "rollback"))?;
            return Ok(match self.job(name).await? {
                None => EditDone::NoSuchJob,
                Some(_) => EditDone::Refused,
            });
        }
        self.audited(&mut tx, actor, &marker, "delete", name, None)
            .await?;
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(EditDone::Done)
    }
}
