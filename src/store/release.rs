//! Releasing a claimed row: the run's end in the history and the row's next slot, fenced by
//! `exec_by = node AND token = claim token`; alone, in steps, or several together.

use sqlx::{AssertSqlSafe, Row};

use super::*;

/// A statement with its values bound.
type Query = sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments>;

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
    /// On PostgreSQL and SQLite the batch is written with multi-row statements (one on
    /// PostgreSQL, the history and the rows in one transaction on SQLite), fenced row by row
    /// in the same way; MySQL has no `UPDATE ... RETURNING` to say which rows were released, and
    /// writes the statements of each release in turn.
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
        if batch.len() > 1
            && distinct
            && text_bytes <= ROWS_TEXT_MOST
            && self.dialect != Dialect::Mysql
        {
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

    /// [`Store::release_together`] in multi-row statements: the releases become the rows of
    /// a `VALUES` list, the run ends are written by one `UPDATE cron_runs ... FROM` and the
    /// rows by one `UPDATE cron_table ... FROM ... RETURNING id`, each row fenced by its own id
    /// and token as a single release is; the ids returned are the releases that landed.
    async fn release_rows(&self, node: &str, batch: &[ReleaseOf<'_>]) -> Result<Vec<Fenced>> {
        // Padded to a power of two with rows that match nothing: a handful of statement texts
        // to prepare per connection, not one per batch size.
        let rows = batch.len().next_power_of_two();
        let values = release_values(rows);
        let finish = FINISHED;
        let released = RELEASED;
        let query = |text: String, texts: bool| {
            bind_releases(
                sqlx::query(AssertSqlSafe(self.dialect.render(&text))),
                self.dialect,
                batch,
                rows,
                texts,
            )
        };
        // The released rows' ids; parameters after the rows: the node (`last_node`), the node.
        let released_ids = |rows: Vec<sqlx::any::AnyRow>| {
            rows.iter()
                .map(|r| r.try_get::<i64, _>(0))
                .collect::<std::result::Result<Vec<i64>, _>>()
                .map_err(sql_err!(self, "release"))
        };
        let returned = match self.dialect {
            Dialect::Postgres => released_ids(
                query(
                    format!("WITH {values}, finished AS ({finish}) {released}"),
                    true,
                )
                .bind(node.to_string())
                .bind(node.to_string())
                .fetch_all(&self.db)
                .await
                .map_err(sql_err!(self, "release"))?,
            )?,
            _ => {
                let mut tx = self
                    .begin_write()
                    .await
                    .map_err(sql_err!(self, "begin releases"))?;
                query(format!("WITH {values} {finish}"), true)
                    .execute(&mut *tx)
                    .await
                    .map_err(sql_err!(self, "record run end"))?;
                let ids = released_ids(
                    query(format!("WITH {values} {released}"), false)
                        .bind(node.to_string())
                        .bind(node.to_string())
                        .fetch_all(&mut *tx)
                        .await
                        .map_err(sql_err!(self, "release"))?,
                )?;
                tx.commit()
                    .await
                    .map_err(sql_err!(self, "commit releases"))?;
                ids
            }
        };
        Ok(batch
            .iter()
            .map(|r| {
                if returned.contains(&r.id) {
                    Fenced::Done
                } else {
                    Fenced::Lost
                }
            })
            .collect())
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
            q.bind(outcome.outcome.as_str().to_string())
                .bind(outcome.exit_code)
                .bind(outcome.signal)
                .bind(
                    dialect
                        .storable_text(&outcome.output, dialect.output_max())
                        .into_owned(),
                )
                .bind(
                    outcome
                        .message
                        .as_deref()
                        .map(|m| dialect.storable_text(m, MESSAGE_MAX).into_owned()),
                )
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

/// The most bytes of output and messages a batch written in multi-row statements binds (see
/// [`Store::release_together`]).
const ROWS_TEXT_MOST: usize = 4 * 1024 * 1024;

/// The ends of the runs of `v` (see [`release_values`]), each fenced by its claim token as
/// [`Store::release`] writes one.
const FINISHED: &str = "UPDATE cron_runs SET ended = {now}, outcome = v_outcome, exit_code = v_exit, \
     exit_signal = v_signal, output = v_output, message = v_message FROM v \
     WHERE job_name = v_job AND cron_runs.slot = v_run_slot \
     AND cron_runs.attempt = v_run_attempt AND cron_runs.token = v_token \
     AND cron_runs.outcome = 'running'";

/// The fenced release of the rows of `v` (see [`release_values`]), as [`Store::release`]
/// writes one: parameters the node (for `last_node`), then the node (the fence).
const RELEASED: &str = "UPDATE cron_table SET \
       next_exec = CASE WHEN dirty = 1 THEN NULL \
                        WHEN run_now = 1 AND v_manual = 0 THEN {now} ELSE v_next END, \
       run_now = CASE WHEN v_manual = 1 THEN 0 ELSE run_now END, \
       dirty = 0, pool_wait = 0, exec_by = NULL, prev_exec_by = NULL, lease_until = NULL, claim_id = NULL, \
       slot = v_slot, attempt = v_attempts, \
       last_status = COALESCE(v_outcome, last_status), \
       last_exit = CASE WHEN v_has = 1 THEN v_exit ELSE last_exit END, \
       last_start = CASE WHEN v_has = 1 THEN v_started ELSE last_start END, \
       last_end = CASE WHEN v_has = 1 THEN {now} ELSE last_end END, \
       last_node = CASE WHEN v_has = 1 THEN ? ELSE last_node END \
     FROM v WHERE id = v_id AND exec_by = ? AND token = v_token RETURNING id";

/// `v(...) AS (VALUES ...)` with `rows` rows of parameters, one per release: the claimed row
/// and its token; the run whose end is recorded (its job NULL when none is); the outcome,
/// exit code, signal, output and message; whether the run was manual; the row's next
/// `next_exec`, slot and attempts; whether there is an outcome, and when the run started.
fn release_values(rows: usize) -> String {
    const ROW: &str = "(CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS TEXT), CAST(? AS BIGINT), \
         CAST(? AS BIGINT), CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS TEXT), \
         CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT), \
         CAST(? AS BIGINT), CAST(? AS BIGINT))";
    format!(
        "v (v_id, v_token, v_job, v_run_slot, v_run_attempt, v_outcome, v_exit, v_signal, v_output, \
         v_message, v_manual, v_next, v_slot, v_attempts, v_has, v_started) AS (VALUES {})",
        vec![ROW; rows].join(", ")
    )
}

/// Binds the releases of `batch` as the rows of [`release_values`], then rows that match
/// nothing (id -1, no run) up to `rows`. Without `texts`, the outputs and messages are bound
/// as NULL (for a statement that does not write them).
fn bind_releases(
    mut q: Query,
    dialect: Dialect,
    batch: &[ReleaseOf<'_>],
    rows: usize,
    texts: bool,
) -> Query {
    for r in batch {
        let outcome = r.release.outcome.as_ref();
        let finished = r.run.filter(|_| outcome.is_some());
        q = q
            .bind(r.id)
            .bind(r.token)
            .bind(finished.map(|k| k.job.clone()))
            .bind(finished.map(|k| k.slot))
            .bind(finished.map(|k| i64::from(k.attempt)))
            .bind(outcome.map(|o| o.outcome.as_str().to_string()))
            .bind(outcome.and_then(|o| o.exit_code))
            .bind(outcome.and_then(|o| o.signal))
            .bind(outcome.filter(|_| texts).map(|o| {
                dialect
                    .storable_text(&o.output, dialect.output_max())
                    .into_owned()
            }))
            .bind(outcome.filter(|_| texts).and_then(|o| {
                o.message
                    .as_deref()
                    .map(|m| dialect.storable_text(m, MESSAGE_MAX).into_owned())
            }))
            .bind(i64::from(r.release.clear_run_now))
            .bind(r.release.next_exec)
            .bind(r.release.slot)
            .bind(i64::from(r.release.attempts))
            .bind(i64::from(outcome.is_some()))
            .bind(outcome.map(|o| o.started));
    }
    for _ in batch.len()..rows {
        q = q
            .bind(-1i64)
            .bind(-1i64)
            .bind(None::<String>)
            .bind(None::<i64>)
            .bind(None::<i64>)
            .bind(None::<String>)
            .bind(None::<i64>)
            .bind(None::<i64>)
            .bind(None::<String>)
            .bind(None::<String>)
            .bind(0i64)
            .bind(None::<i64>)
            .bind(None::<i64>)
            .bind(0i64)
            .bind(0i64)
            .bind(None::<i64>);
    }
    q
}
