//! Releasing a claimed row: the run's end in the history and the row's next slot, fenced by
//! `exec_by = node AND token = claim token`; alone, in steps, or several together.

use sqlx::AssertSqlSafe;

use super::*;

/// A statement with its values bound.
pub(super) type Query = sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments>;

/// One release of a batch ([`Store::release_together`]): the claimed row, its token, how it is
/// released and, after a run, the run whose end is recorded.
#[derive(Debug, Clone, Copy)]
pub struct ReleaseOf<'a> {
    pub id: i64,
    pub token: i64,
    pub release: &'a Release,
    pub run: Option<&'a RunKey>,
}

impl Store {
    /// Releases a claimed row (fenced) and, after a run, writes its outcome to the history.
    ///
    /// On PostgreSQL one statement does both. Elsewhere two, history first: if the node dies
    /// between them, the row's lease expires and the next holder finds the run's outcome by
    /// token instead of rerunning it.
    pub async fn release(
        &self,
        id: i64,
        node: &str,
        token: i64,
        release: &Release,
        run: Option<&RunKey>,
    ) -> Result<Fenced> {
        self.release_with(id, node, token, release, run, true).await
    }

    /// [`Store::release`] in two statements on every dialect, history first. For retries: on
    /// PostgreSQL the single statement locks the `cron_table` row while it waits for the history
    /// row, and a history row held by someone else would then starve the lease extensions too.
    pub async fn release_in_steps(
        &self,
        id: i64,
        node: &str,
        token: i64,
        release: &Release,
        run: Option<&RunKey>,
    ) -> Result<Fenced> {
        self.release_with(id, node, token, release, run, false)
            .await
    }

    async fn release_with(
        &self,
        id: i64,
        node: &str,
        token: i64,
        release: &Release,
        run: Option<&RunKey>,
        combined: bool,
    ) -> Result<Fenced> {
        let (finish, release) = self.release_statements(id, node, token, release, run, combined);
        if let Some(finish) = finish {
            finish
                .execute(&self.db)
                .await
                .map_err(sql_err!(self, "record run end"))?;
        }
        let updated = release
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, "release"))?;
        Ok(Fenced::from_rows(updated.rows_affected()))
    }

    /// Several releases (with their run ends) in one transaction, so that one commit ends
    /// them all: the statements are those of [`Store::release`], each fenced by its own row
    /// and token, and the result of each is its own. Any error rolls the whole batch back
    /// (nothing was written) and is returned: the caller then releases each run alone, and a
    /// commit whose reply was lost reads back as it does for a single release (the row is no
    /// longer ours, the run record is ended).
    ///
    /// The batch is written with multi-row statements (`release_rows.rs`: one on PostgreSQL;
    /// the history and the rows in one transaction on SQLite; on MySQL the rows still ours are
    /// locked first), fenced row by row in the same way. A batch of one, a row twice in it, or
    /// much output goes statement by statement in one transaction.
    pub async fn release_together(
        &self,
        node: &str,
        batch: &[ReleaseOf<'_>],
    ) -> Result<Vec<Fenced>> {
        let mut ids: Vec<i64> = batch.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        ids.dedup();
        let distinct = ids.len() == batch.len();
        // Outputs are bound all at once in a multi-row statement: a batch with much of them
        // goes statement by statement, holding one run's output at a time.
        let text_bytes: usize = batch
            .iter()
            .filter_map(|r| r.release.outcome.as_ref())
            .map(|o| o.output.len() + o.message.as_ref().map_or(0, String::len))
            .sum();
        if batch.len() > 1 && distinct && text_bytes <= release_rows::rows_text_most(self.dialect) {
            return self.release_rows(node, batch).await;
        }
        let mut tx = self
            .begin_write()
            .await
            .map_err(sql_err!(self, "begin releases"))?;
        let mut fenced = Vec::with_capacity(batch.len());
        for r in batch {
            let (finish, release) =
                self.release_statements(r.id, node, r.token, r.release, r.run, true);
            if let Some(finish) = finish {
                finish
                    .execute(&mut *tx)
                    .await
                    .map_err(sql_err!(self, "record run end"))?;
            }
            let updated = release
                .execute(&mut *tx)
                .await
                .map_err(sql_err!(self, "release"))?;
            fenced.push(Fenced::from_rows(updated.rows_affected()));
        }
        tx.commit()
            .await
            .map_err(sql_err!(self, "commit releases"))?;
        Ok(fenced)
    }

    /// The statements of one release: the run's end first where it is a statement of its own
    /// (everywhere but PostgreSQL, or in steps), then the fenced release of the row.
    fn release_statements(
        &self,
        id: i64,
        node: &str,
        token: i64,
        release: &Release,
        run: Option<&RunKey>,
        combined: bool,
    ) -> (Option<Query>, Query) {
        let dialect = self.dialect;
        let bind_finish = |q: Query, key: &RunKey, outcome: &RunResult| {
            let (output, message) = storable_texts(dialect, outcome);
            q.bind(outcome.outcome.as_str().to_string())
                .bind(outcome.exit_code)
                .bind(outcome.signal)
                .bind(output)
                .bind(message)
                .bind(key.job.clone())
                .bind(key.slot)
                .bind(i64::from(key.attempt))
                .bind(token)
        };
        let finished = run.zip(release.outcome.as_ref());
        let both = self.sql.finish_and_release.as_ref().filter(|_| combined);
        let (finish, q) = match (finished, both) {
            (Some((key, outcome)), Some(both)) => (
                None,
                bind_finish(sqlx::query(AssertSqlSafe(both.clone())), key, outcome),
            ),
            (Some((key, outcome)), None) => (
                Some(bind_finish(
                    sqlx::query(AssertSqlSafe(self.sql.finish_run.clone())),
                    key,
                    outcome,
                )),
                sqlx::query(AssertSqlSafe(self.sql.release.clone())),
            ),
            (None, _) => (None, sqlx::query(AssertSqlSafe(self.sql.release.clone()))),
        };
        let manual = i64::from(release.clear_run_now);
        let has_outcome = i64::from(release.outcome.is_some());
        let q = q
            .bind(manual)
            .bind(release.next_exec)
            .bind(manual)
            .bind(release.slot)
            .bind(i64::from(release.attempts))
            .bind(
                release
                    .outcome
                    .as_ref()
                    .map(|o| o.outcome.as_str().to_string()),
            )
            .bind(has_outcome)
            .bind(release.outcome.as_ref().and_then(|o| o.exit_code))
            .bind(has_outcome)
            .bind(release.outcome.as_ref().map(|o| o.started))
            .bind(has_outcome)
            .bind(has_outcome)
            .bind(node.to_string())
            .bind(id)
            .bind(node.to_string())
            .bind(token);
        (finish, q)
    }
}

/// A run's output and message as this database stores them (see `Dialect::storable_text`).
pub(super) fn storable_texts(dialect: Dialect, outcome: &RunResult) -> (String, Option<String>) {
    (
        dialect
            .storable_text(&outcome.output, dialect.output_max())
            .into_owned(),
        outcome
            .message
            .as_deref()
            .map(|m| dialect.storable_text(m, MESSAGE_MAX).into_owned()),
    )
}
