//! Runs asked for by hand: `sqlcron run` and the dashboard's guarded `Run now` (one click, one
//! run, and only of the definition its page showed), each recorded in the audit trail.

use sqlx::AssertSqlSafe;

use super::*;

/// What the dashboard's guarded `Run now` ([`Store::request_run_once`]) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunAsk {
    /// A run is asked for.
    Requested,
    /// A run was asked for already (another tab, click or post) and has not started: nothing
    /// added.
    AlreadyAsked,
    /// The job was claimed since the page was drawn: the click was about a state that is gone.
    RanSince,
    /// The job's definition is no longer the one the page showed: nothing added.
    Changed,
    NoSuchJob,
}

impl Store {
    /// `run JOB`: one extra run as soon as possible, recorded in the audit trail. An idle row
    /// becomes due now; a running one runs again right after it is released.
    pub async fn request_run(&self, name: &str, actor: &Actor) -> Result<bool> {
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        // Vouched for: the audit triggers record a run_now set by anybody else.
        let mark = self.mark(&mut tx, actor, "run", None).await?;
        let done = sqlx::query(AssertSqlSafe(self.dialect.render(
            "UPDATE cron_table SET run_now = 1, changed_by = ?, \
             next_exec = CASE WHEN exec_by IS NULL AND next_exec IS NOT NULL AND next_exec < ? THEN {now} ELSE next_exec END \
             WHERE name = ?",
        )))
        .bind(mark.clone())
        .bind(PARKED)
        .bind(name.to_string())
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "request run"))?;
        if done.rows_affected() != 1 {
            return Ok(false);
        }
        self.audited(&mut tx, actor, &mark, "run", name, None)
            .await?;
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(true)
    }

    /// The dashboard's `Run now`: one click, one run, one audit row. `seen` is the fencing token
    /// the page showed the job at: a run is asked for only when none is asked for yet and the
    /// job has not been claimed since the page was drawn (two tabs, a double click, three posts
    /// at once: the first asks, the others are told why not). Audited as `run`, like
    /// [`Store::request_run`], which `sqlcron run` uses unguarded.
    ///
    /// `shown`: the job's fingerprint (`job_edit::fingerprint`) as the page showed it, its
    /// command among the rest: a job changed since (a writer's new command) gets no run asked
    /// under the operator's name ([`RunAsk::Changed`]). Read under a lock in the same
    /// transaction.
    pub async fn request_run_once(
        &self,
        name: &str,
        seen: i64,
        shown: Option<&str>,
        actor: &Actor,
    ) -> Result<RunAsk> {
        self.request_run_once_noting(name, seen, shown, actor, None)
            .await
    }

    /// [`Store::request_run_once`] with the audit row's `detail` (a bulk action's batch).
    pub async fn request_run_once_noting(
        &self,
        name: &str,
        seen: i64,
        shown: Option<&str>,
        actor: &Actor,
        detail: Option<String>,
    ) -> Result<RunAsk> {
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        if let Some(shown) = shown
            && !self.still_as_planned(&mut tx, name, shown).await?
        {
            tx.rollback().await.map_err(sql_err!(self, "rollback"))?;
            return Ok(match self.job(name).await? {
                None => RunAsk::NoSuchJob,
                Some(_) => RunAsk::Changed,
            });
        }
        self.request_run_in(tx, name, seen, actor, detail).await
    }

    async fn request_run_in(
        &self,
        mut tx: sqlx::Transaction<'static, sqlx::Any>,
        name: &str,
        seen: i64,
        actor: &Actor,
        detail: Option<String>,
    ) -> Result<RunAsk> {
        let mark = self.mark(&mut tx, actor, "run", detail.as_deref()).await?;
        let done = sqlx::query(AssertSqlSafe(self.dialect.render(
            "UPDATE cron_table SET run_now = 1, changed_by = ?, \
             next_exec = CASE WHEN exec_by IS NULL AND next_exec IS NOT NULL AND next_exec < ? THEN {now} ELSE next_exec END \
             WHERE name = ? AND run_now = 0 AND token = ?",
        )))
        .bind(mark.clone())
        .bind(PARKED)
        .bind(name.to_string())
        .bind(seen)
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "request run"))?;
        if done.rows_affected() == 1 {
            self.audited(&mut tx, actor, &mark, "run", name, detail)
                .await?;
            tx.commit().await.map_err(sql_err!(self, "commit"))?;
            return Ok(RunAsk::Requested);
        }
        tx.rollback().await.map_err(sql_err!(self, "rollback"))?;
        Ok(match self.job(name).await? {
            None => RunAsk::NoSuchJob,
            Some(j) if j.run_now => RunAsk::AlreadyAsked,
            Some(_) => RunAsk::RanSince,
        })
    }
}
