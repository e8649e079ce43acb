//! A running run's output so far (see `daemon::live_output`).

use sqlx::AssertSqlSafe;

use super::*;

impl Store {
    /// Stores `output` in the `running` record of (job, slot, attempt) written with `token`;
    /// false when there is no such running record (it ended, or another token wrote it).
    pub async fn store_live_output(
        &self,
        job: &str,
        slot: i64,
        attempt: u32,
        token: i64,
        output: &str,
    ) -> Result<bool> {
        let text = self
            .dialect
            .storable_text(output, self.dialect.output_max());
        let done = sqlx::query(AssertSqlSafe(self.dialect.render(
            "UPDATE cron_runs SET output = ? \
             WHERE job_name = ? AND slot = ? AND attempt = ? AND token = ? AND outcome = 'running'",
        )))
        .bind(text.into_owned())
        .bind(job.to_string())
        .bind(slot)
        .bind(i64::from(attempt))
        .bind(token)
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "store the output so far"))?;
        Ok(done.rows_affected() == 1)
    }
}
