//! Resuming a paused job without the slots it missed: the operator's alternative to the misfire
//! policy, chosen on the dashboard's resume page or with `sqlcron resume --skip-missed`.

use sqlx::AssertSqlSafe;

use super::*;
use crate::model::actor::Actor;
use crate::model::job::Outcome;

/// What a skip was asked to do, computed by `model::resume::skip_to` from the row as read.
pub struct Skip {
    /// The fencing token and the slot the row was read with: the skip applies only to that.
    pub seen_token: i64,
    pub seen_slot: Option<i64>,
    /// The slot the row waits for next, and when it becomes due (with its jitter).
    pub slot: i64,
    pub next_exec: i64,
    /// The skipped slots `(count, first, last)`, recorded as one `skipped` history line.
    pub skipped: Option<(u64, i64, i64)>,
    /// The count reached `model::resume::COUNT_MAX`: it is a lower bound.
    pub capped: bool,
}

/// How a skip went.
#[derive(Debug, PartialEq, Eq)]
pub enum SkipDone {
    Resumed,
    /// The row is no longer the paused, idle, prepared row that was read (resumed, run,
    /// changed, parked), or it is an `every_node` template.
    Changed,
    NoSuchJob,
}

impl Store {
    /// Resumes `name` at `skip.slot`, recording what it skips, in one transaction: fenced by the
    /// token and slot read and by the row being paused and held by no node, so it never moves a
    /// row a node holds or one that changed since the page showed it. Audited as `resume` with
    /// what was skipped; `node` names the history line's writer.
    pub async fn resume_skipping(
        &self,
        name: &str,
        skip: &Skip,
        node: &str,
        actor: &Actor,
    ) -> Result<SkipDone> {
        let at_least = if skip.capped { "at least " } else { "" };
        let detail = match skip.skipped {
            Some((n, _, _)) => format!("skipped {at_least}{n} missed slot(s)"),
            None => "nothing missed to skip".to_string(),
        };
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        let mark = self.mark(&mut tx, actor, "resume", Some(&detail)).await?;
        let done = sqlx::query(AssertSqlSafe(self.dialect.render(
            // Only a prepared, runnable row: not an every_node template (its copies run), not
            // one waiting to be prepared after a change (next_exec NULL), not a parked one.
            "UPDATE cron_table SET enabled = 1, slot = ?, attempt = 0, next_exec = ?, changed_by = ? \
             WHERE name = ? AND enabled = 0 AND exec_by IS NULL AND token = ? \
             AND (slot = ? OR (slot IS NULL AND ? IS NULL)) \
             AND next_exec IS NOT NULL AND next_exec < ? AND error IS NULL \
             AND (run_on IS NULL OR run_on <> 'every_node')",
        )))
        .bind(skip.slot)
        .bind(skip.next_exec)
        .bind(mark.clone())
        .bind(name.to_string())
        .bind(skip.seen_token)
        .bind(skip.seen_slot)
        .bind(skip.seen_slot)
        .bind(PARKED)
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "resume skipping"))?;
        if done.rows_affected() != 1 {
            tx.rollback().await.map_err(sql_err!(self, "rollback"))?;
            return Ok(match self.job(name).await? {
                None => SkipDone::NoSuchJob,
                Some(_) => SkipDone::Changed,
            });
        }
        if let Some((count, first, last)) = skip.skipped {
            let message = format!(
                "{at_least}{count} missed slot(s) skipped on resume by {}",
                actor.who
            );
            sqlx::query(AssertSqlSafe(self.sql.summary.clone()))
                .bind(name.to_string())
                .bind(first)
                .bind(0i64)
                .bind(node.to_string())
                .bind(Outcome::Skipped.as_str().to_string())
                .bind(count as i64)
                .bind(last)
                .bind(message)
                .execute(&mut *tx)
                .await
                .map_err(sql_err!(self, "record the skipped slots"))?;
        }
        self.audited(&mut tx, actor, &mark, "resume", name, Some(detail))
            .await?;
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(SkipDone::Resumed)
    }
}
