//! A batch of releases written with multi-row statements ([`Store::release_together`]): the
//! releases become the rows of a table of values, and one statement writes the run ends of the
//! whole batch and one its rows, each row fenced by its own id and token as a single release
//! is. On MySQL, which cannot say which rows an `UPDATE` changed, the rows still the node's are
//! locked and read first, in the same transaction.

use std::collections::HashMap;

use sqlx::{AssertSqlSafe, Row};

use super::release::{Query, ReleaseOf, storable_texts};
use super::*;

impl Store {
    /// [`Store::release_together`] in multi-row statements.
    pub(super) async fn release_rows(
        &self,
        node: &str,
        batch: &[ReleaseOf<'_>],
    ) -> Result<Vec<Fenced>> {
        let landed = match self.dialect {
            Dialect::Mysql => self.release_rows_locked(node, batch).await?,
            Dialect::Postgres | Dialect::Sqlite => self.release_rows_returning(node, batch).await?,
        };
        Ok(batch
            .iter()
            .map(|r| {
                if landed.contains(&r.id) {
                    Fenced::Done
                } else {
                    Fenced::Lost
                }
            })
            .collect())
    }

    /// PostgreSQL and SQLite: the releases become the rows of a `VALUES` list, the run ends
    /// are written by one `UPDATE cron_runs ... FROM` and the rows by one `UPDATE cron_table
    /// ... FROM ... RETURNING id`, each row fenced by its own id and token as a single release
    /// is; the ids returned are the releases that landed.
    async fn release_rows_returning(
        &self,
        node: &str,
        batch: &[ReleaseOf<'_>],
    ) -> Result<Vec<i64>> {
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
        Ok(match self.dialect {
            // Not kept prepared: PostgreSQL would soon settle on a generic plan, made for
            // whatever size `cron_runs` had then. Made while it was nearly empty (a new
            // database's first burst), that plan reads the whole run history for every batch
            // until the table's statistics change, so the batch's cost grew with the history.
            // Planned for its values each time, it finds the runs by their unique key.
            Dialect::Postgres => released_ids(
                query(
                    format!("WITH {values}, finished AS ({finish}) {released}"),
                    true,
                )
                .persistent(false)
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
        })
    }

    /// MySQL and MariaDB, which have no `UPDATE ... RETURNING` and give a multi-table `UPDATE`'s
    /// assignments no order (the release's `next_exec` reads `dirty` and `run_now`, which it
    /// also sets). In one transaction: the rows still ours are read and locked (`SELECT ...
    /// FOR UPDATE`, fenced by node, id and token), with the two columns the release reads; the
    /// run ends are written by one `UPDATE cron_runs JOIN`, each fenced by its token; the rows
    /// found ours are released by one `UPDATE cron_table JOIN`, fenced again, with what was read
    /// bound as values. Should it write fewer rows than were locked, the batch is rolled back
    /// and is an error (the caller then releases each run alone). Returns the released ids.
    async fn release_rows_locked(&self, node: &str, batch: &[ReleaseOf<'_>]) -> Result<Vec<i64>> {
        let mut tx = self
            .begin_write()
            .await
            .map_err(sql_err!(self, "begin releases"))?;
        let ours = self.lock_ours(&mut tx, node, batch).await?;
        self.end_runs_joined(&mut tx, batch).await?;
        if !ours.is_empty() {
            let written = self.release_joined(&mut tx, node, &ours).await?;
            if written != ours.len() as u64 {
                tx.rollback()
                    .await
                    .map_err(sql_err!(self, "roll back releases"))?;
                return Err(StoreError::Batch(format!(
                    "released {written} rows of the {} locked",
                    ours.len()
                )));
            }
        }
        tx.commit()
            .await
            .map_err(sql_err!(self, "commit releases"))?;
        Ok(ours.iter().map(|o| o.release.id).collect())
    }

    /// The releases of `batch` whose rows are still ours (node and token), each with the row's
    /// `dirty` and `run_now`, the rows locked until the transaction ends.
    async fn lock_ours<'b>(
        &self,
        tx: &mut Tx,
        node: &str,
        batch: &'b [ReleaseOf<'b>],
    ) -> Result<Vec<Held<'b>>> {
        let rows = batch.len().next_power_of_two();
        let mut lock = sqlx::query(AssertSqlSafe(format!(
            "SELECT id, token, dirty, run_now FROM cron_table \
             WHERE exec_by = ? AND id IN ({}) FOR UPDATE",
            vec!["?"; rows].join(", ")
        )))
        .bind(node.to_string());
        for r in batch {
            lock = lock.bind(r.id);
        }
        for _ in batch.len()..rows {
            lock = lock.bind(-1i64);
        }
        let held = lock
            .fetch_all(&mut **tx)
            .await
            .map_err(sql_err!(self, "lock releases"))?
            .iter()
            .map(|row| {
                Ok((
                    row.try_get::<i64, _>(0)?,
                    (
                        row.try_get::<i64, _>(1)?,
                        row.try_get::<i64, _>(2)? != 0,
                        row.try_get::<i64, _>(3)? != 0,
                    ),
                ))
            })
            .collect::<std::result::Result<HashMap<i64, (i64, bool, bool)>, sqlx::Error>>()
            .map_err(sql_err!(self, "lock releases"))?;
        Ok(batch
            .iter()
            .filter_map(|release| {
                let &(token, dirty, run_now) = held.get(&release.id)?;
                (token == release.token).then_some(Held {
                    release,
                    dirty,
                    run_now,
                })
            })
            .collect())
    }

    /// The ends of the batch's runs, in one `UPDATE cron_runs JOIN`, each fenced by its run and
    /// claim token as [`Store::release`] writes one.
    async fn end_runs_joined(&self, tx: &mut Tx, batch: &[ReleaseOf<'_>]) -> Result<()> {
        let ends: Vec<(&ReleaseOf<'_>, &RunKey, &RunResult)> = batch
            .iter()
            .filter_map(|r| Some((r, r.run?, r.release.outcome.as_ref()?)))
            .collect();
        if ends.is_empty() {
            return Ok(());
        }
        let rows = ends.len().next_power_of_two();
        let mut q = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "UPDATE cron_runs JOIN {} ON cron_runs.job_name = v_job \
             AND cron_runs.slot = v_run_slot AND cron_runs.attempt = v_run_attempt \
             AND cron_runs.token = v_token \
             SET ended = {{now}}, outcome = v_outcome, exit_code = v_exit, \
             exit_signal = v_signal, output = v_output, message = v_message \
             WHERE cron_runs.outcome = 'running'",
            selected_rows(
                &[
                    "v_job",
                    "v_run_slot",
                    "v_run_attempt",
                    "v_token",
                    "v_outcome",
                    "v_exit",
                    "v_signal",
                    "v_output:text",
                    "v_message:text"
                ],
                rows
            )
        ))));
        for (r, key, outcome) in &ends {
            let (output, message) = storable_texts(self.dialect, outcome);
            q = q
                .bind(key.job.clone())
                .bind(key.slot)
                .bind(i64::from(key.attempt))
                .bind(r.token)
                .bind(outcome.outcome.as_str().to_string())
                .bind(outcome.exit_code)
                .bind(outcome.signal)
                .bind(output)
                .bind(message);
        }
        for _ in ends.len()..rows {
            q = q
                .bind(None::<String>)
                .bind(None::<i64>)
                .bind(None::<i64>)
                .bind(None::<i64>)
                .bind(None::<String>)
                .bind(None::<i64>)
                .bind(None::<i64>)
                .bind(None::<String>)
                .bind(None::<String>);
        }
        q.execute(&mut **tx)
            .await
            .map_err(sql_err!(self, "record run end"))?;
        Ok(())
    }

    /// The rows of `ours` released in one `UPDATE cron_table JOIN`, fenced by node and token as
    /// [`Store::release`] does, with what it decides from `dirty` and `run_now` computed from
    /// the values read under the lock. Returns the rows written.
    async fn release_joined(&self, tx: &mut Tx, node: &str, ours: &[Held<'_>]) -> Result<u64> {
        let rows = ours.len().next_power_of_two();
        let mut q = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "UPDATE cron_table JOIN {} ON cron_table.id = v_id SET \
               next_exec = CASE WHEN v_now = 1 THEN {{now}} ELSE v_next END, \
               run_now = CASE WHEN v_manual = 1 THEN 0 ELSE run_now END, \
               dirty = 0, pool_wait = 0, exec_by = NULL, prev_exec_by = NULL, \
               lease_until = NULL, claim_id = NULL, slot = v_slot, attempt = v_attempts, \
               last_status = COALESCE(v_outcome, last_status), \
               last_exit = CASE WHEN v_has = 1 THEN v_exit ELSE last_exit END, \
               last_start = CASE WHEN v_has = 1 THEN v_started ELSE last_start END, \
               last_end = CASE WHEN v_has = 1 THEN {{now}} ELSE last_end END, \
               last_node = CASE WHEN v_has = 1 THEN ? ELSE last_node END \
             WHERE exec_by = ? AND token = v_token",
            selected_rows(
                &[
                    "v_id",
                    "v_token",
                    "v_now",
                    "v_next",
                    "v_manual",
                    "v_slot",
                    "v_attempts",
                    "v_outcome",
                    "v_has",
                    "v_exit",
                    "v_started"
                ],
                rows
            )
        ))));
        for held in ours {
            let (r, dirty) = (held.release, held.dirty);
            let release = r.release;
            let outcome = release.outcome.as_ref();
            // What `RELEASE` decides from the row's `dirty` and `run_now`.
            let now = !dirty && held.run_now && !release.clear_run_now;
            q = q
                .bind(r.id)
                .bind(r.token)
                .bind(i64::from(now))
                .bind((!dirty).then_some(release.next_exec))
                .bind(i64::from(release.clear_run_now))
                .bind(release.slot)
                .bind(i64::from(release.attempts))
                .bind(outcome.map(|o| o.outcome.as_str().to_string()))
                .bind(i64::from(outcome.is_some()))
                .bind(outcome.and_then(|o| o.exit_code))
                .bind(outcome.map(|o| o.started));
        }
        for _ in ours.len()..rows {
            q = q
                .bind(-1i64)
                .bind(-1i64)
                .bind(0i64)
                .bind(None::<i64>)
                .bind(0i64)
                .bind(None::<i64>)
                .bind(None::<i64>)
                .bind(None::<String>)
                .bind(0i64)
                .bind(None::<i64>)
                .bind(None::<i64>);
        }
        Ok(q.bind(node.to_string())
            .bind(node.to_string())
            .execute(&mut **tx)
            .await
            .map_err(sql_err!(self, "release"))?
            .rows_affected())
    }
}

/// A write transaction ([`Store::begin_write`]).
type Tx = sqlx::Transaction<'static, sqlx::Any>;

/// A release of a batch whose row is still ours, with the row's `dirty` and `run_now` as read
/// under the lock.
struct Held<'b> {
    release: &'b ReleaseOf<'b>,
    dirty: bool,
    run_now: bool,
}

/// A derived table `v` of `rows` rows of parameters, as MySQL writes one: `(SELECT ? AS a,
/// ? AS b UNION ALL SELECT ?, ? ...) AS v`; a column named with a trailing `:text` is a
/// `CAST(? AS CHAR)` in every row.
fn selected_rows(columns: &[&str], rows: usize) -> String {
    let param = |c: &str| {
        if c.ends_with(":text") {
            "CAST(? AS CHAR)"
        } else {
            "?"
        }
    };
    let first = columns
        .iter()
        .map(|c| format!("{} AS {}", param(c), c.trim_end_matches(":text")))
        .collect::<Vec<_>>()
        .join(", ");
    let rest = columns
        .iter()
        .map(|c| param(c))
        .collect::<Vec<_>>()
        .join(", ");
    let mut text = format!("(SELECT {first}");
    for _ in 1..rows {
        text.push_str(" UNION ALL SELECT ");
        text.push_str(&rest);
    }
    text.push_str(") AS v");
    text
}

/// The most bytes of output and messages a batch written in multi-row statements binds (see
/// [`Store::release_together`]): 4 MiB; 1 MiB on MySQL, whose older servers refuse a
/// statement over 4 MiB (`max_allowed_packet`).
pub(super) fn rows_text_most(dialect: Dialect) -> usize {
    match dialect {
        Dialect::Mysql => 1024 * 1024,
        Dialect::Postgres | Dialect::Sqlite => 4 * 1024 * 1024,
    }
}

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
        let stored = outcome
            .filter(|_| texts)
            .map(|o| storable_texts(dialect, o));
        q = q
            .bind(r.id)
            .bind(r.token)
            .bind(finished.map(|k| k.job.clone()))
            .bind(finished.map(|k| k.slot))
            .bind(finished.map(|k| i64::from(k.attempt)))
            .bind(outcome.map(|o| o.outcome.as_str().to_string()))
            .bind(outcome.and_then(|o| o.exit_code))
            .bind(outcome.and_then(|o| o.signal))
            .bind(stored.as_ref().map(|(output, _)| output.clone()))
            .bind(stored.and_then(|(_, message)| message))
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
