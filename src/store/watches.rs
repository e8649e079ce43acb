//! The dead-man's switches' state (`cron_watch`): when each watched job's watch began, its
//! last success, and the silence last alerted (see `daemon/alerting.rs`).

use sqlx::{AssertSqlSafe, Row};

use super::*;
use crate::model::alerts::WATCH_CLOCK_SLACK_MS;

/// One row of `cron_watch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchRow {
    pub job: String,
    pub since: i64,
    pub last_ok: Option<i64>,
    pub fired_for: Option<i64>,
    /// Its numbers could not be read (text or a real where a number goes, written with SQL);
    /// `since` and the rest are then 0 and `None`, and the watch is started again.
    pub unreadable: bool,
}

impl Store {
    /// Every job's dead-man's switch state.
    pub async fn watch_rows(&self) -> Result<Vec<WatchRow>> {
        // Read as bytes when a name is not UTF-8 (written with SQL on SQLite or MariaDB): that
        // watch is left out, as one of no job, and the others go on being checked. A watch
        // whose numbers cannot be read is kept, marked, and started again by the scan (left
        // out, its job's `watch_start` found the row there and did nothing: never checked).
        let (rows, _) = self
            .read_rows_text_or_bytes(
                "read watches",
                |bytes| {
                    let cols = dialect::select_list(
                        self.dialect,
                        &["job_name"],
                        &["since", "last_ok", "fired_for"],
                        bytes,
                    );
                    format!("SELECT {cols} FROM cron_watch")
                },
                |q| q,
            )
            .await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let job = text_column(r, "job_name").ok().flatten()?;
                let numbers = (|| -> std::result::Result<_, sqlx::Error> {
                    Ok((
                        r.try_get("since")?,
                        r.try_get("last_ok")?,
                        r.try_get("fired_for")?,
                    ))
                })();
                Some(match numbers {
                    Ok((since, last_ok, fired_for)) => WatchRow {
                        job,
                        since,
                        last_ok,
                        fired_for,
                        unreadable: false,
                    },
                    Err(_) => WatchRow {
                        job,
                        since: 0,
                        last_ok: None,
                        fired_for: None,
                        unreadable: true,
                    },
                })
            })
            .collect())
    }

    /// Starts watching `job` again now (a watch whose state no node wrote), with its newest
    /// kept success as its last one.
    pub async fn watch_restart(&self, job: &str) -> Result<()> {
        sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "UPDATE cron_watch SET since = {{now}}, fired_for = NULL, last_ok = ({}) \
             WHERE job_name = ?",
            self.last_success_sql()
        ))))
        .bind(job.to_string())
        .bind(job.to_string())
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "start watch again"))?;
        Ok(())
    }

    /// The newest kept success of the job bound to it: ended by the clock and a minute at
    /// most, and on SQLite a whole number (a real there is a number no read takes as one).
    fn last_success_sql(&self) -> String {
        let whole = match self.dialect {
            Dialect::Sqlite => " AND typeof(ended) = 'integer'",
            _ => "",
        };
        format!(
            "SELECT MAX(ended) FROM cron_runs WHERE job_name = ? AND outcome = 'ok' \
             AND ended <= {{now}} + {WATCH_CLOCK_SLACK_MS}{whole}"
        )
    }

    /// Starts watching `job` now, with its newest kept success as its last one.
    pub async fn watch_start(&self, job: &str) -> Result<()> {
        let (ins, conflict) = self.dialect.insert_ignore();
        sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "{ins} INTO cron_watch (job_name, since, last_ok) SELECT ?, {{now}}, \
             ({}){conflict}",
            self.last_success_sql()
        ))))
        .bind(job.to_string())
        .bind(job.to_string())
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "start watch"))?;
        Ok(())
    }

    /// Notes a success of a watched job (never moves `last_ok` back, nor past the clock and a
    /// minute: a record a writer ended in the future silenced the job's dead-man's switch; the
    /// minute is for a record another server of a Galera cluster ended by a clock ahead).
    pub async fn watch_ok(&self, job: &str, ended: i64) -> Result<()> {
        sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "UPDATE cron_watch SET last_ok = ? WHERE job_name = ? AND (last_ok IS NULL OR last_ok < ?) \
             AND ? <= {{now}} + {WATCH_CLOCK_SLACK_MS}",
        ))))
        .bind(ended)
        .bind(job.to_string())
        .bind(ended)
        .bind(ended)
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "note success"))?;
        Ok(())
    }

    /// Notes that the silence since `baseline` was alerted.
    pub async fn watch_fired(&self, job: &str, baseline: i64) -> Result<()> {
        sqlx::query(AssertSqlSafe(
            self.dialect
                .render("UPDATE cron_watch SET fired_for = ? WHERE job_name = ?"),
        ))
        .bind(baseline)
        .bind(job.to_string())
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "note alert"))?;
        Ok(())
    }
}
