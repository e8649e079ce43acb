//! Keeping a claim: the lease extension of the runs a node supervises, and the requests to
//! stop a run (`sqlcron stop`, the dashboard) that the extension finds.

use std::time::Duration;

use sqlx::{AssertSqlSafe, Row};

use super::*;

impl Store {
    /// Extends the leases of the runs this node still supervises, in one statement. Returns
    /// the ids whose claim is lost (no longer ours), and those still ours whose run someone
    /// asked to stop (`stop_token` equal to the claim's token): their leases are extended by a
    /// second statement, so that the run is stopped and recorded within a lease of its own.
    pub async fn extend(
        &self,
        node: &str,
        held: &[(i64, i64)],
        lease: Duration,
    ) -> Result<Extended> {
        if held.is_empty() {
            return Ok(Extended::default());
        }
        let extended = self.extend_leases(node, held, lease, true).await?;
        if extended == held.len() {
            return Ok(Extended::default());
        }
        // Some claims are gone, or asked to stop: find which. The list is padded to a power of
        // two, as the extension's pairs are below.
        // Whether this node holds the row is the database's comparison, byte for byte: the
        // holder's name is never read as text (a writer's bytes that are not UTF-8 would fail
        // the whole read in the driver, and with it every run's lease on this node).
        let ids = vec!["?"; held.len().next_power_of_two()].join(", ");
        let mine = match self.dialect {
            Dialect::Mysql => "CAST(exec_by AS BINARY) = CAST(? AS BINARY)",
            Dialect::Postgres | Dialect::Sqlite => "exec_by = ?",
        };
        let text = self.dialect.render(&format!(
            "SELECT id, token, CASE WHEN {mine} THEN 1 ELSE 0 END AS mine, stop_token \
             FROM cron_table WHERE id IN ({ids})"
        ));
        let mut q = sqlx::query(AssertSqlSafe(text)).bind(node.to_string());
        for (id, _) in padded(held) {
            q = q.bind(id);
        }
        let rows = q
            .fetch_all(&self.db)
            .await
            .map_err(sql_err!(self, "check leases"))?;
        let mut still: std::collections::HashSet<i64> = Default::default();
        let mut stopping = vec![];
        for r in &rows {
            let decode = || -> std::result::Result<_, sqlx::Error> {
                Ok((
                    r.try_get::<i64, _>("id")?,
                    r.try_get::<i64, _>("token")?,
                    r.try_get::<i64, _>("mine")?,
                    r.try_get::<Option<i64>, _>("stop_token")?,
                ))
            };
            let (id, token, mine, stop) = decode().map_err(sql_err!(self, "check leases"))?;
            if mine == 1 && held.contains(&(id, token)) {
                still.insert(id);
                if stop == Some(token) {
                    stopping.push((id, token));
                }
            }
        }
        if !stopping.is_empty() {
            self.extend_leases(node, &stopping, lease, false).await?;
        }
        Ok(Extended {
            lost: held
                .iter()
                .map(|(id, _)| *id)
                .filter(|id| !still.contains(id))
                .collect(),
            stopping: stopping.into_iter().map(|(id, _)| id).collect(),
        })
    }

    /// One statement extending the leases of `held`; with `unless_stopping`, not those asked
    /// to stop. How many rows it changed (MySQL counts only rows whose values changed).
    async fn extend_leases(
        &self,
        node: &str,
        held: &[(i64, i64)],
        lease: Duration,
        unless_stopping: bool,
    ) -> Result<usize> {
        // Padded to a power of two by repeating the last pair: each length is a statement of
        // its own in every connection's statement cache, and on SQLite the prepared statements
        // live in the daemon's memory for as long as the connection, which is the daemon's
        // life. Sixteen held runs make five texts rather than sixteen. A repeated pair matches
        // no other row, so the count of rows changed is the held runs' (a made-up filler such
        // as (-1, -1) would be matched by a row a database writer plants with that id).
        let pairs = vec!["(id = ? AND token = ?)"; held.len().next_power_of_two()].join(" OR ");
        let stop = if unless_stopping {
            " AND (stop_token IS NULL OR stop_token <> token)"
        } else {
            ""
        };
        let text = self.dialect.render(&format!(
            "UPDATE cron_table SET lease_until = {{now}} + ?, next_exec = {{now}} + ? \
             WHERE exec_by = ? AND ({pairs}){stop}"
        ));
        let lease_ms = lease.as_millis() as i64;
        let query = || {
            let mut q = sqlx::query(AssertSqlSafe(text.clone()))
                .bind(lease_ms)
                .bind(lease_ms)
                .bind(node.to_string());
            for (id, token) in padded(held) {
                q = q.bind(id).bind(token);
            }
            q
        };
        let done = match query().execute(&self.db).await {
            // A pooled connection used within the last second is handed out unchecked (see
            // `Store::open`): one that broke meanwhile (a server restart, a failover) fails
            // here, and the extension is sent once more at once, on another connection,
            // rather than a third of a lease later. Setting the lease again is harmless.
            Err(sqlx::Error::Io(e)) => {
                tracing::debug!(error = %e, "lease extension on a broken connection; once more");
                query().execute(&self.db).await
            }
            other => other,
        }
        .map_err(sql_err!(self, "extend leases"))?;
        Ok(done.rows_affected() as usize)
    }

    /// Asks the node holding `name`'s claim to stop its run (`sqlcron stop`, the dashboard):
    /// the claim's token goes to `stop_token`, audited as `stop`. With `seen`, only the claim
    /// of that token (the run a confirmation page showed: the next slot's run, started since,
    /// is not stopped for it). False when the job does not exist or nothing (or another claim)
    /// holds it.
    pub async fn request_stop(&self, name: &str, seen: Option<i64>, actor: &Actor) -> Result<bool> {
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        let mark = self.mark(&mut tx, actor, "stop", None).await?;
        let fence = if seen.is_some() { " AND token = ?" } else { "" };
        let mut q = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "UPDATE cron_table SET stop_token = token, changed_by = ? \
             WHERE name = ? AND exec_by IS NOT NULL AND lease_until > {{now}}{fence}",
        ))))
        .bind(mark.clone())
        .bind(name.to_string());
        if let Some(token) = seen {
            q = q.bind(token);
        }
        let done = q
            .execute(&mut *tx)
            .await
            .map_err(sql_err!(self, "request a stop"))?;
        if done.rows_affected() != 1 {
            return Ok(false);
        }
        self.audited(&mut tx, actor, &mark, "stop", name, None)
            .await?;
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(true)
    }
}

/// `held`, then its last pair repeated up to the next power of two (`held` is not empty).
fn padded(held: &[(i64, i64)]) -> impl Iterator<Item = (i64, i64)> + '_ {
    let len = held.len().next_power_of_two();
    let last = held.last().copied().unwrap_or_default();
    held.iter()
        .copied()
        .chain(std::iter::repeat_n(last, len - held.len()))
}
