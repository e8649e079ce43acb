//! Job chains (`after`): the rows that name upstreams, the upstream runs after a row's cursor,
//! and the trigger rows (`job#after-<run id>`), each made in one transaction with the cursor's
//! advance, compared and set: a trigger row is made once however many nodes see the run, and
//! never again once the cursor has passed it.

use sqlx::{AssertSqlSafe, Row};

use super::{Result, Store, StoreError, dialect, text_column};
use crate::model::actor::Actor;
use crate::model::chains::UpstreamRun;

/// The history rows of a job and of its chained rows (`job#after-<id>`): binds the name, then
/// [`chained_pattern`]. SQLite's `LIKE` ignores the case of ASCII letters (`Extract#after-1` is
/// not a run of `extract`): there the pattern is a `GLOB`, whose special characters a name cannot
/// hold.
pub(super) fn of_job(dialect: super::Dialect) -> &'static str {
    match dialect {
        super::Dialect::Sqlite => "(job_name = ? OR job_name GLOB ?)",
        _ => "(job_name = ? OR job_name LIKE ? ESCAPE '!')",
    }
}

/// The pattern of `job`'s chained rows, for [`of_job`].
pub(super) fn chained_pattern(dialect: super::Dialect, job: &str) -> String {
    match dialect {
        super::Dialect::Sqlite => format!("{job}#after-*"),
        _ => format!("{}#after-%", super::backfill::like_literal(job)),
    }
}

/// A row that names upstreams.
#[derive(Debug, Clone)]
pub struct ChainRow {
    pub name: String,
    /// `after_jobs`, as written.
    pub after: String,
    /// `chain_cursor`: a JSON object of the last history id looked at per upstream.
    pub cursor: Option<String>,
    /// Enabled and not parked: its triggers make rows (else they pass, as its slots would).
    pub enabled: bool,
    /// The newest run record's id (any job's, 0 without any; `None` when it cannot be read),
    /// read in the same statement as the cursor: a position the chain itself set is never
    /// above it, on any server that holds the cursor (a lagging Galera node's too), unless
    /// retention pruned every record after it.
    pub newest_run: Option<i64>,
}

/// A trigger row to make.
#[derive(Debug, Clone)]
pub struct NewTrigger {
    pub name: String,
    /// `@at <the upstream's end>`.
    pub schedule: String,
    pub starting_deadline: String,
    /// `cron_table.upstream_run`.
    pub upstream: String,
}

impl Store {
    /// The rows that name upstreams (a host-local job's template and copies have no chains).
    pub async fn chain_rows(&self) -> Result<Vec<ChainRow>> {
        let (rows, _) = self
            .read_rows_text_or_bytes(
                "read chains",
                |bytes| {
                    let cols = ["name", "after_jobs", "chain_cursor", "enabled", "error"];
                    let cols = dialect::columns(self.dialect, &cols, bytes);
                    format!(
                        "SELECT {cols}, (SELECT MAX(id) FROM cron_runs) AS newest_run \
                         FROM cron_table \
                         WHERE after_jobs IS NOT NULL AND template IS NULL \
                         AND (run_on IS NULL OR run_on <> 'every_node')"
                    )
                },
                |q| q,
            )
            .await?;
        // A row whose name, upstreams or cursor are not UTF-8 (written with SQL) starts no
        // chain: it is parked for its own columns, and its cursor is left alone.
        Ok(rows
            .iter()
            .filter_map(|r| {
                let (Ok(Some(name)), Ok(Some(after)), Ok(cursor), Ok(error)) = (
                    text_column(r, "name"),
                    text_column(r, "after_jobs"),
                    text_column(r, "chain_cursor"),
                    text_column(r, "error"),
                ) else {
                    tracing::debug!(
                        "a chained row holds text that is not UTF-8; left out of the chains"
                    );
                    return None;
                };
                Some(ChainRow {
                    name,
                    after,
                    cursor,
                    enabled: r.try_get::<i64, _>("enabled").unwrap_or(1) != 0 && error.is_none(),
                    newest_run: r
                        .try_get::<Option<i64>, _>("newest_run")
                        .ok()
                        .map(|n| n.unwrap_or(0)),
                })
            })
            .collect())
    }

    /// The runs of `job` (its own and its chained rows') with a history id above `after`, in id
    /// order, at most `limit`.
    pub async fn upstream_runs(
        &self,
        job: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<UpstreamRun>> {
        let pattern = chained_pattern(self.dialect, job);
        // `of_job` is text of this build's own, with no `{cols}` in it.
        let sql = format!(
            "SELECT {{cols}} FROM cron_runs WHERE {} AND id > ? ORDER BY cron_runs.id LIMIT ?",
            of_job(self.dialect)
        );
        let bind = |q: super::claim::AnyQuery| {
            q.bind(job.to_string())
                .bind(pattern.clone())
                .bind(after)
                .bind(limit)
        };
        self.read_runs(
            "read upstream runs",
            "id, job_name, slot, outcome, ended",
            &sql,
            bind,
            // A run whose numbers cannot be read is kept as `unreadable`, which triggers
            // nothing: the look goes past it (left out, a whole look of such runs held the
            // chain's cursor there for good).
            |r| {
                let id = r.try_get("id")?;
                let numbers = super::run_reads::lenient_numbers(r, ["slot", "ended"]);
                let [slot, ended] = numbers.values;
                Ok(UpstreamRun {
                    id,
                    job: super::text_lossy(r, "job_name")?.unwrap_or_default(),
                    slot: slot.unwrap_or_default(),
                    outcome: match numbers.unreadable {
                        true => super::run_reads::unreadable(id),
                        false => super::text_lossy(r, "outcome")?.unwrap_or_default(),
                    },
                    ended,
                })
            },
        )
        .await
    }

    /// The runs of `job`'s chained rows whose slot is in `from..=to`, by slot.
    pub async fn chained_runs(
        &self,
        job: &str,
        from: i64,
        to: i64,
    ) -> Result<Vec<crate::model::history::HistoryRow>> {
        let pattern = chained_pattern(self.dialect, job);
        let sql = format!(
            "SELECT {{cols}} FROM cron_runs WHERE {} AND job_name <> ? \
             AND slot >= ? AND slot <= ? ORDER BY cron_runs.slot, cron_runs.id LIMIT 2000",
            of_job(self.dialect)
        );
        let bind = |q: super::claim::AnyQuery| {
            q.bind(job.to_string())
                .bind(pattern.clone())
                .bind(job.to_string())
                .bind(from)
                .bind(to)
        };
        self.read_runs(
            "read chained runs",
            super::admin::LIGHT_HISTORY_COLUMNS,
            &sql,
            bind,
            super::admin::history_row,
        )
        .await
    }

    /// Where a chain starts following `job`: at its newest run, or just before a run still
    /// going above every finished one (it counts when it ends; skipped slots, abandoned
    /// retries and lost runs are no finished runs); 0 without any. A run still going below a
    /// finished one (a chained row's run that ended while the job's own went on) is passed:
    /// starting before it would replay the finished ones. A `running` record counts only
    /// while its row is claimed with the record's token: a row deleted while its run went on
    /// leaves one `running` for good, and a chain put before it waited for good.
    pub async fn chain_start(&self, job: &str) -> Result<i64> {
        let pattern = chained_pattern(self.dialect, job);
        let of_job = of_job(self.dialect);
        let row = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "SELECT (SELECT MIN(cron_runs.id) FROM cron_runs JOIN cron_table \
             ON cron_table.name = cron_runs.job_name AND cron_table.token = cron_runs.token \
             AND cron_table.exec_by IS NOT NULL \
             WHERE {of_job} AND cron_runs.outcome = 'running' \
             AND cron_runs.id > COALESCE((SELECT MAX(id) FROM cron_runs \
             WHERE {of_job} AND outcome NOT IN ('running', 'skipped', 'abandoned', 'lost')), 0)) \
             AS running_id, \
             (SELECT MAX(id) FROM cron_runs WHERE {of_job}) AS last_id"
        ))))
        .bind(job.to_string())
        .bind(pattern.clone())
        .bind(job.to_string())
        .bind(pattern.clone())
        .bind(job.to_string())
        .bind(pattern)
        .fetch_one(&self.db)
        .await
        .map_err(sql_err!(self, "read last run"))?;
        let id = |c: &str| {
            row.try_get::<Option<i64>, _>(c)
                .map_err(sql_err!(self, "read last run"))
        };
        Ok(match (id("running_id")?, id("last_id")?) {
            (Some(running), _) => running.saturating_sub(1).max(0),
            (None, last) => last.unwrap_or(0),
        })
    }

    /// Makes `trigger` (if any) as a copy of `job`'s row, and moves the row's cursor from `old`
    /// to `new`, in one transaction. [`Advance::Lost`] when another node moved the cursor first
    /// (or made the trigger row): nothing was written, and the next look reads the cursor again.
    ///
    /// A row of the trigger's name that is not this trigger (made with SQL, or left from a
    /// history whose ids started again) is not taken for it: the unique key's refusal proves
    /// nothing, so the cursor move is tried again without the trigger. Another node's trigger
    /// for the same upstream run was made with that node's cursor move, so the cursor is no
    /// longer `old` ([`Advance::Lost`]); any other row lets the cursor move on without the
    /// trigger ([`Advance::Taken`]), so one such row does not hold the chain for good, whatever
    /// its columns say.
    pub async fn advance_chain(
        &self,
        job: &str,
        old: Option<&str>,
        new: &str,
        trigger: Option<&NewTrigger>,
        actor: &Actor,
    ) -> Result<Advance> {
        let step = CursorStep {
            job,
            old,
            new,
            actor,
        };
        match self.advance_chain_once(&step, trigger).await {
            Err(e) if e.is_unique_violation() => {}
            Ok(true) => return Ok(Advance::Moved),
            Ok(false) => return Ok(Advance::Lost),
            Err(e) => return Err(e),
        }
        if trigger.is_none() {
            return Ok(Advance::Lost);
        }
        // Another node's trigger for this run was made in the transaction that moved the
        // cursor: the move below then finds the cursor moved, and nothing is written.
        Ok(match self.advance_chain_once(&step, None).await? {
            true => Advance::Taken,
            false => Advance::Lost,
        })
    }

    async fn advance_chain_once(
        &self,
        step: &CursorStep<'_>,
        trigger: Option<&NewTrigger>,
    ) -> Result<bool> {
        let CursorStep {
            job,
            old,
            new,
            actor,
        } = *step;
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        if let Some(t) = trigger {
            let mark = self.mark(&mut tx, actor, "chain", None).await?;
            let cols = super::backfill::COPIED.join(", ");
            let made = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
                "INSERT INTO cron_table (name, schedule, misfire, starting_deadline, pool, source, \
                 changed_by, calendars, upstream_run, {cols}) \
                 SELECT ?, ?, 'run_once', ?, pool, 'chain', ?, '{}', ?, {cols} \
                 FROM cron_table WHERE name = ?",
                super::backfill::BACKFILL_CALENDARS
            ))))
            .bind(t.name.clone())
            .bind(t.schedule.clone())
            .bind(t.starting_deadline.clone())
            .bind(mark)
            .bind(t.upstream.clone())
            .bind(job.to_string())
            .execute(&mut *tx)
            .await
            .map_err(sql_err!(self, "add trigger row"))?;
            if made.rows_affected() != 1 {
                return Ok(false);
            }
        }
        let moved = match old {
            Some(old) => sqlx::query(AssertSqlSafe(self.dialect.render(
                "UPDATE cron_table SET chain_cursor = ? WHERE name = ? AND chain_cursor = ?",
            )))
            .bind(new.to_string())
            .bind(job.to_string())
            .bind(old.to_string()),
            None => sqlx::query(AssertSqlSafe(self.dialect.render(
                "UPDATE cron_table SET chain_cursor = ? WHERE name = ? AND chain_cursor IS NULL",
            )))
            .bind(new.to_string())
            .bind(job.to_string()),
        }
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "move chain cursor"))?;
        if moved.rows_affected() != 1 {
            return Ok(false);
        }
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(true)
    }
}

/// One move of a chain's cursor, as [`Store::advance_chain`] is asked for it.
#[derive(Clone, Copy)]
struct CursorStep<'a> {
    job: &'a str,
    old: Option<&'a str>,
    new: &'a str,
    actor: &'a Actor,
}

/// What [`Store::advance_chain`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advance {
    /// The cursor moved, and the trigger (if any) was made.
    Moved,
    /// The cursor moved without the trigger: a row that is not this trigger holds its name.
    Taken,
    /// Nothing was written: another node moved the cursor (or made the trigger) first.
    Lost,
}
