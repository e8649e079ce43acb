//! Job pools: a pooled job runs only while fewer than `size` claimed rows of its pool come
//! before it in claim order (claimed_at, id); otherwise the node releases it to wait
//! (`pool_wait`), without counting the wait against the slot's misfire threshold. A row's lease
//! counts as in `locks.rs` ([`super::locks::live`]).

use std::time::Duration;

use sqlx::{AssertSqlSafe, Row};

use super::locks::live;
use super::{Dialect, Result, Store, StoreError};

impl Store {
    /// Writes `[pools]` sizes to `cron_pools` (pools defined only with SQL are left alone).
    pub async fn apply_pools(&self, pools: &std::collections::BTreeMap<String, u32>) -> Result<()> {
        let text = self.dialect().render(&format!(
            "INSERT INTO cron_pools (name, size) VALUES (?, ?){}",
            self.dialect().on_conflict_update("name", &["size"])
        ));
        for (name, size) in pools {
            sqlx::query(AssertSqlSafe(text.clone()))
                .bind(name.clone())
                .bind(i64::from(*size))
                .execute(&self.db)
                .await
                .map_err(sql_err!(self, "write pool"))?;
        }
        Ok(())
    }

    /// Whether a claimed row of `pool` may run now: fewer than the pool's size of live claims
    /// of that pool come before it (claim time, then id). `None` if the pool is not defined.
    pub async fn pool_admit(&self, id: i64, pool: &str, claimed_at: i64) -> Result<Option<bool>> {
        let size: Option<i64> = sqlx::query(AssertSqlSafe(
            self.dialect()
                .render("SELECT size FROM cron_pools WHERE name = ?"),
        ))
        .bind(pool.to_string())
        .fetch_optional(&self.db)
        .await
        .map_err(sql_err!(self, "read pool"))?
        .map(|r| r.try_get("size"))
        .transpose()
        .map_err(sql_err!(self, "read pool"))?;
        let Some(size) = size else { return Ok(None) };
        let ahead: i64 = sqlx::query(AssertSqlSafe(self.dialect().render(&format!(
            "SELECT COUNT(*) AS n FROM cron_table WHERE pool = ? AND exec_by IS NOT NULL \
             AND {} AND id <> ? \
             AND (claimed_at < ? OR (claimed_at = ? AND id < ?))",
            live("lease_until")
        ))))
        .bind(pool.to_string())
        .bind(id)
        .bind(claimed_at)
        .bind(claimed_at)
        .bind(id)
        .fetch_one(&self.db)
        .await
        .map_err(sql_err!(self, "count pool"))?
        .try_get("n")
        .map_err(sql_err!(self, "count pool"))?;
        Ok(Some(ahead < size))
    }

    /// Whether `pool` has a free place now: fewer live claims of it than its size. A row that
    /// has just been deferred for a full pool asks this, for the place may have been freed while
    /// the deferral was being written, after the freeing run looked for waiters and found none.
    pub async fn pool_has_room(&self, pool: &str) -> Result<bool> {
        let row = sqlx::query(AssertSqlSafe(self.dialect().render(&format!(
            "SELECT p.size AS size, (SELECT COUNT(*) FROM cron_table WHERE pool = p.name \
             AND exec_by IS NOT NULL AND {}) AS n FROM cron_pools p WHERE p.name = ?",
            live("lease_until")
        ))))
        .bind(pool.to_string())
        .fetch_optional(&self.db)
        .await
        .map_err(sql_err!(self, "count pool"))?;
        let Some(row) = row else { return Ok(false) };
        let size: i64 = row.try_get("size").map_err(sql_err!(self, "count pool"))?;
        let live: i64 = row.try_get("n").map_err(sql_err!(self, "count pool"))?;
        Ok(live < size)
    }

    /// A run of `pool` ended: the row waiting longest for one of its places (the oldest slot,
    /// then the oldest row: a backfill's rows are made oldest first) becomes due now instead
    /// of at the end of its wait (on PostgreSQL the change also wakes every node). One place
    /// freed, one waiter woken, in order; the others keep waiting. Touches only an unclaimed
    /// waiting row, and only moves its `next_exec` earlier. Returns how many rows (0 or 1).
    pub async fn pool_place_freed(&self, pool: &str) -> Result<u64> {
        let waiting = "pool = ? AND pool_wait <> 0 AND exec_by IS NULL AND enabled = 1 \
                       AND error IS NULL AND next_exec > {now}";
        let text = match self.dialect() {
            // MySQL refuses a subquery on the table an UPDATE writes; its UPDATE takes ORDER
            // BY and LIMIT itself.
            Dialect::Mysql => format!(
                "UPDATE cron_table SET next_exec = {{now}} WHERE {waiting} \
                 ORDER BY slot, id LIMIT 1"
            ),
            // The conditions again on the row itself: on PostgreSQL the subquery reads the
            // statement's snapshot, and a node that claimed the row meanwhile holds its lock;
            // once that claim commits, only the outer conditions are checked again on the row
            // as claimed. Without them a claimed row was made due at once, and its claim was
            // taken over while its run went on (two runs of one slot).
            Dialect::Postgres | Dialect::Sqlite => format!(
                "UPDATE cron_table SET next_exec = {{now}} WHERE id = \
                 (SELECT id FROM cron_table WHERE {waiting} ORDER BY slot, id LIMIT 1) \
                 AND {waiting}"
            ),
        };
        let mut q = sqlx::query(AssertSqlSafe(self.dialect().render(&text))).bind(pool.to_string());
        if self.dialect() != Dialect::Mysql {
            q = q.bind(pool.to_string());
        }
        let done = q
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, "free pool place"))?;
        Ok(done.rows_affected())
    }

    /// Releases a claimed row whose pool is full: it waits `delay` and keeps its slot; the wait
    /// does not count against the slot's misfire threshold. `lost` carries a run the claim took
    /// over (slot, attempt), so the rerun it is owed survives the wait.
    pub async fn defer_for_pool(
        &self,
        id: i64,
        node: &str,
        token: i64,
        delay: Duration,
        lost: Option<(i64, u32)>,
    ) -> Result<super::Fenced> {
        let wait = if lost.is_some() {
            super::PoolWait::OwesRerun
        } else {
            super::PoolWait::Waiting
        };
        let (has_lost, slot, attempt) = match lost {
            Some((slot, attempt)) => (1i64, slot, i64::from(attempt)),
            None => (0, 0, 0),
        };
        let done = sqlx::query(AssertSqlSafe(self.dialect().render(
            "UPDATE cron_table SET next_exec = {now} + ?, pool_wait = ?, \
             slot = CASE WHEN ? = 1 THEN ? ELSE slot END, \
             attempt = CASE WHEN ? = 1 THEN ? ELSE attempt END, \
             exec_by = NULL, lease_until = NULL WHERE id = ? AND exec_by = ? AND token = ?",
        )))
        .bind(delay.as_millis() as i64)
        .bind(wait.as_column())
        .bind(has_lost)
        .bind(slot)
        .bind(has_lost)
        .bind(attempt)
        .bind(id)
        .bind(node.to_string())
        .bind(token)
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "defer for pool"))?;
        Ok(super::Fenced::from_rows(done.rows_affected()))
    }
}
