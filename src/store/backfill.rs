//! `sqlcron backfill`: one-off rows that run past slots of a job. Each is named
//! `JOB#backfill-<slot>` with schedule `@at <slot>`, so the history's uniqueness on (job, slot,
//! attempt) makes every backfilled slot run once, however often the backfill is asked for.

use sqlx::{AssertSqlSafe, Row};

use super::*;

/// The columns a backfill row copies from its job (its schedule, misfire and deadline are its
/// own: `@at` the slot, `run_once`, [`BACKFILL_DEADLINE`]; its pool is the job's or a pool of
/// one).
pub(super) const COPIED: [&str; 22] = [
    "timezone",
    "command",
    "argv",
    "http",
    "env",
    "workdir",
    "retries",
    "retry_backoff",
    "retry_backoff_max",
    "timeout",
    "kill_grace",
    "on_lease_lost",
    "rerun_lost",
    "run_user",
    "run_group",
    "env_file",
    "inherit_env",
    "limits",
    "alerts",
    "placement",
    "overlap",
    // A signed job's backfill rows run the same definition: its signature holds for them.
    "signature",
];

/// A backfill row's `starting_deadline`: its slot is in the past by definition, so neither the
/// job's deadline nor `[defaults] starting_deadline` may drop it as missed. A hundred years is
/// no deadline in practice, written explicitly so that the defaults do not fill it in.
pub const BACKFILL_DEADLINE: &str = "36500days";

/// A backfill row's calendars: none, whatever `[defaults]` says. A backfill runs the slots it
/// was asked for; calendars decide only about regular slots.
pub const BACKFILL_CALENDARS: &str = r#"{"skip_on":[],"only_in":[]}"#;

/// The name of the backfill row of `job`'s `slot` (ms).
pub fn backfill_name(job: &str, slot: i64) -> String {
    format!("{job}#backfill-{slot}")
}

/// `text` as a LIKE pattern matching itself (escape character `!`).
pub(super) fn like_literal(text: &str) -> String {
    text.replace('!', "!!")
        .replace('%', "!%")
        .replace('_', "!_")
}

impl Store {
    /// Slots of `job` in `[from, to]` that ran successfully, as the job or as a backfill row.
    pub async fn successful_slots(
        &self,
        job: &str,
        from: i64,
        to: i64,
    ) -> Result<std::collections::BTreeSet<i64>> {
        let rows = sqlx::query(AssertSqlSafe(self.dialect.render(
            "SELECT slot FROM cron_runs WHERE outcome = 'ok' AND slot >= ? AND slot <= ? \
             AND (job_name = ? OR job_name LIKE ? ESCAPE '!')",
        )))
        .bind(from)
        .bind(to)
        .bind(job.to_string())
        .bind(format!("{}#backfill-%", like_literal(job)))
        .fetch_all(&self.db)
        .await
        .map_err(sql_err!(self, "read successful slots"))?;
        rows.iter()
            .map(|r| r.try_get::<i64, _>("slot"))
            .collect::<std::result::Result<_, _>>()
            .map_err(sql_err!(self, "read successful slots"))
    }

    /// Creates the backfill row of `job`'s `slot`, copying the job's definition; `pool` is the
    /// job's pool, or a pool of one (`backfill:JOB`, created here) so that the backfill runs
    /// one slot at a time. `planned` is the job's fingerprint (`job_edit::fingerprint`) as the
    /// plan was made: the row is copied only if it still has it, read under a lock in the
    /// insert's own transaction, so a change made while a long backfill is queued is not
    /// queued under the operator's name.
    pub async fn add_backfill(
        &self,
        job: &str,
        slot: i64,
        schedule: &str,
        pool: Option<&str>,
        actor: &Actor,
        planned: &str,
    ) -> Result<Backfilled> {
        let pool = match pool {
            Some(p) => p.to_string(),
            None => {
                let own = format!("backfill:{job}");
                let (ins, conflict) = self.dialect.insert_ignore();
                sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
                    "{ins} INTO cron_pools (name, size) VALUES (?, 1){conflict}"
                ))))
                .bind(own.clone())
                .execute(&self.db)
                .await
                .map_err(sql_err!(self, "create backfill pool"))?;
                own
            }
        };
        let name = backfill_name(job, slot);
        let cols = COPIED.join(", ");
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        if !self.still_as_planned(&mut tx, job, planned).await? {
            return Ok(Backfilled::Changed);
        }
        let mark = self
            .mark(&mut tx, actor, "backfill", Some(schedule))
            .await?;
        let done = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "INSERT INTO cron_table (name, schedule, misfire, starting_deadline, pool, source, \
             changed_by, calendars, {cols}) \
             SELECT ?, ?, 'run_once', '{BACKFILL_DEADLINE}', ?, 'cli', ?, '{BACKFILL_CALENDARS}', {cols} \
             FROM cron_table WHERE name = ?"
        ))))
        .bind(name.clone())
        .bind(schedule.to_string())
        .bind(pool)
        .bind(mark.clone())
        .bind(job.to_string())
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "add backfill row"));
        let done = match done {
            Ok(d) => d,
            Err(e) if e.is_unique_violation() => return Ok(Backfilled::Already),
            Err(e) => return Err(e),
        };
        if done.rows_affected() != 1 {
            return Ok(Backfilled::Already);
        }
        self.audited(
            &mut tx,
            actor,
            &mark,
            "backfill",
            &name,
            Some(schedule.to_string()),
        )
        .await?;
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(Backfilled::Added)
    }

    /// Whether `job`'s row, read in `tx` and locked until it ends (SQLite's write transaction
    /// holds the whole file), still has the fingerprint `planned`. Read as [`Store::job`] reads
    /// it: a row holding text that is not UTF-8 again as bytes.
    pub(super) async fn still_as_planned(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        job: &str,
        planned: &str,
    ) -> Result<bool> {
        let lock = match self.dialect {
            Dialect::Sqlite => "",
            Dialect::Postgres | Dialect::Mysql => " FOR UPDATE",
        };
        let read = |bytes: bool| {
            let cols = dialect::job_columns(self.dialect, bytes);
            self.dialect.render(&format!(
                "SELECT {cols} FROM cron_table WHERE name = ?{lock}"
            ))
        };
        let plain = sqlx::query(AssertSqlSafe(read(false)))
            .bind(job.to_string())
            .fetch_all(&mut **tx)
            .await;
        let (rows, bytes) = match plain {
            Ok(rows) => (rows, false),
            Err(sqlx::Error::Decode(_)) if self.dialect != Dialect::Postgres => {
                let rows = sqlx::query(AssertSqlSafe(read(true)))
                    .bind(job.to_string())
                    .fetch_all(&mut **tx)
                    .await
                    .map_err(sql_err!(self, "read the backfilled job"))?;
                (rows, true)
            }
            Err(e) => return Err(sql_err!(self, "read the backfilled job")(e)),
        };
        Ok(claim::decode_rows(&rows, bytes)
            .pop()
            .is_some_and(|row| crate::model::job_edit::fingerprint(&row) == planned))
    }
}

/// What [`Store::add_backfill`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backfilled {
    /// The slot's row was made.
    Added,
    /// It existed already (queued or done).
    Already,
    /// The job's row is no longer as planned: nothing was made.
    Changed,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_patterns() {
        assert_eq!(backfill_name("etl", 1_000), "etl#backfill-1000");
        assert_eq!(like_literal("a_b%c!d"), "a!_b!%c!!d");
    }
}
