//! One-off jobs (`@at`): created by `sqlcron at`, and removed by retention once done.

use sqlx::AssertSqlSafe;

use super::audit::marker;
use super::*;

/// What `sqlcron at` creates.
#[derive(Debug, Clone)]
pub struct OneOff {
    pub name: String,
    /// `@at` and an RFC 3339 instant.
    pub schedule: String,
    /// A shell command line, or
    pub command: Option<String>,
    /// a JSON array of program and arguments.
    pub argv: Option<String>,
    pub run_user: Option<String>,
    pub workdir: Option<String>,
    /// `sqlcron at --key`: a signature of the definition (`model/signing.rs`).
    pub signature: Option<String>,
}

impl OneOff {
    /// What a signature of this job covers.
    pub fn definition(&self) -> crate::model::signing::Definition {
        crate::model::signing::Definition::from_columns([
            ("command", self.command.clone()),
            ("argv", self.argv.clone()),
            ("run_user", self.run_user.clone()),
            ("workdir", self.workdir.clone()),
        ])
    }
}

/// The mark a done one-off's row carries while retention removes it (the audit trigger then
/// records no `sql_delete`; the removal is audited as `expired`).
const REMOVING: &str = "removing (one-off done)";

impl Store {
    /// Creates a one-off job row (`source = 'cli'`), recorded in the audit trail. False when a
    /// job of that name exists.
    pub async fn add_one_off(&self, job: &OneOff, actor: &Actor) -> Result<bool> {
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        let detail = format!(
            "{} {}",
            job.schedule,
            job.command.clone().or(job.argv.clone()).unwrap_or_default()
        );
        let mark = self.mark(&mut tx, actor, "at", Some(&detail)).await?;
        let done = sqlx::query(AssertSqlSafe(self.dialect.render(
            "INSERT INTO cron_table (name, schedule, command, argv, run_user, workdir, signature, \
             source, changed_by) VALUES (?, ?, ?, ?, ?, ?, ?, 'cli', ?)",
        )))
        .bind(job.name.clone())
        .bind(job.schedule.clone())
        .bind(job.command.clone())
        .bind(job.argv.clone())
        .bind(job.run_user.clone())
        .bind(job.workdir.clone())
        .bind(job.signature.clone())
        .bind(mark.clone())
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "add one-off"));
        let done = match done {
            Ok(d) => d,
            // The name is taken (a job of any source).
            Err(e) if e.is_unique_violation() => return Ok(false),
            Err(e) => return Err(e),
        };
        if done.rows_affected() != 1 {
            return Ok(false);
        }
        self.audited(&mut tx, actor, &mark, "at", &job.name, Some(detail))
            .await?;
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(true)
    }

    /// Removes one-off jobs created with SQL or `sqlcron at` whose only slot is done and whose
    /// last activity is older than `cutoff` (a TOML one-off stays until it leaves the file: the
    /// file would create it again). Returns their names; each removal is audited as `expired`.
    pub async fn remove_done_one_offs(&self, cutoff: i64, actor: &Actor) -> Result<Vec<String>> {
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        // A fresh mark each time: rows a SQL writer marked with a value of its own are not
        // removed with these.
        let removing = format!("{REMOVING} {}", marker(actor));
        let expired = "one-off done";
        self.claim_change(&mut tx, actor, &removing, "expired", Some(expired))
            .await?;
        let marked = sqlx::query(AssertSqlSafe(self.dialect.render(
            "UPDATE cron_table SET changed_by = ? WHERE source <> 'toml' \
             AND schedule LIKE '@at %' AND next_exec = ? AND exec_by IS NULL \
             AND COALESCE(last_end, claimed_at, 0) < ?",
        )))
        .bind(removing.clone())
        .bind(i64::MAX)
        .bind(cutoff)
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "mark done one-offs"))?;
        if marked.rows_affected() == 0 {
            return Ok(vec![]);
        }
        // As bytes, shown with replacements: a name that is not UTF-8 (written with SQL on
        // SQLite or MariaDB) would fail this read, and every round's expiry with it.
        let names: Vec<String> = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "SELECT {} AS name FROM cron_table WHERE changed_by = ? ORDER BY cron_table.name",
            dialect::bytes_of(self.dialect, "name")
        ))))
        .bind(removing.clone())
        .fetch_all(&mut *tx)
        .await
        .map_err(sql_err!(self, "read done one-offs"))?
        .iter()
        .filter_map(|r| text_lossy(r, "name").ok().flatten())
        .collect();
        sqlx::query(AssertSqlSafe(
            self.dialect
                .render("DELETE FROM cron_table WHERE changed_by = ?"),
        ))
        .bind(removing.clone())
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "remove done one-offs"))?;
        for name in &names {
            self.audited(
                &mut tx,
                actor,
                &removing,
                "expired",
                name,
                Some(expired.into()),
            )
            .await?;
        }
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(names)
    }
}
