//! Cluster-wide named locks and semaphores, on the same lease machinery as jobs.
//!
//! # The semaphore
//! Every holder *and* every waiter of a name has a row in `cron_lock_waiters`, with an id that
//! grows with arrival (first come, first served) and a lease it extends while it lives. The first
//! `size` **live** rows of a name (by id) hold it. A row becomes a holder only after checking that
//! fewer than `size` live rows come before it; that count can only fall later (new rows get larger
//! ids, and an expired lease is never extended again), so check-then-mark is safe without a lock.
//! A dead holder or waiter stops extending; its lease ends and the queue moves on. A holder that
//! cannot extend its lease before 80 % of it has passed must stop its command.
//!
//! Job pools, on the same leases, are in `pools.rs`.

use std::time::Duration;

use sqlx::{AssertSqlSafe, Row};

use super::{Dialect, Result, Store, StoreError};

/// One row of `cron_lock_waiters`, or a summary line of `cron_locks`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LockRow {
    pub name: String,
    /// holding, waiting; or the last release (clean, expired) for an idle lock.
    pub state: String,
    pub owner: Option<String>,
    pub host: Option<String>,
    pub pid: Option<i64>,
    /// When it was acquired (holding) or queued (waiting), or last acquired (idle).
    #[serde(serialize_with = "crate::model::json_time::opt_instant")]
    pub since: Option<i64>,
    /// The lease end (holding, waiting) or the last release (idle).
    #[serde(serialize_with = "crate::model::json_time::opt_instant")]
    pub until: Option<i64>,
    /// The fencing token (the queue id).
    pub token: Option<i64>,
}

/// Where a queued lock request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockState {
    Holding,
    /// Still waiting, behind this many live requests.
    Waiting(u64),
    /// The request's lease ended (it stalled or the database was unreachable too long).
    Lost,
}

/// The state `sqlcron locks` gives a request whose lease ends further off than any holder
/// sets: counted by no contender.
pub const UNCOUNTED: &str = "uncounted";

/// A lease that is live: not ended, and ending no further off than
/// [`crate::model::lease::LEASE_UNOWNED_BEYOND`] (twice the longest lease) from now. One further
/// off was set by no holder: a writer's `lease_until` at the largest number held that lock's
/// queue, or that pool's place, for good. Such a request is taken as ended (reaped, and never
/// extended again).
pub(super) fn live(column: &str) -> String {
    format!(
        "{column} > {{now}} AND {column} <= {{now}} + {}",
        crate::model::lease::LEASE_UNOWNED_BEYOND.as_millis()
    )
}

impl Store {
    fn upsert_lock_summary(&self) -> String {
        let base = "INSERT INTO cron_locks (name, last_owner, last_host, last_pid, last_acquired, \
                    last_released, last_release) VALUES (?, ?, ?, ?, ?, {now}, ?)";
        let tail = match self.dialect() {
            Dialect::Mysql => {
                " ON DUPLICATE KEY UPDATE last_owner = VALUES(last_owner), last_host = VALUES(last_host), \
                 last_pid = VALUES(last_pid), last_acquired = VALUES(last_acquired), \
                 last_released = VALUES(last_released), last_release = VALUES(last_release)"
            }
            _ => {
                " ON CONFLICT (name) DO UPDATE SET last_owner = excluded.last_owner, \
                 last_host = excluded.last_host, last_pid = excluded.last_pid, \
                 last_acquired = excluded.last_acquired, last_released = excluded.last_released, \
                 last_release = excluded.last_release"
            }
        };
        self.dialect().render(&format!("{base}{tail}"))
    }

    /// Queues a request for `name` (with `size` holders). Returns its id, which is also the
    /// fencing token of the hold.
    pub async fn lock_enqueue(
        &self,
        name: &str,
        size: u32,
        owner: &str,
        host: &str,
        pid: u32,
        lease: Duration,
    ) -> Result<i64> {
        let insert = "INSERT INTO cron_lock_waiters (name, size, owner, host, pid, state, \
                      enqueued_at, lease_until) VALUES (?, ?, ?, ?, ?, 'waiting', {now}, {now} + ?)";
        let lease_ms = lease.as_millis() as i64;
        let q = |text: String| {
            sqlx::query(AssertSqlSafe(text))
                .bind(name.to_string())
                .bind(i64::from(size))
                .bind(owner.to_string())
                .bind(host.to_string())
                .bind(i64::from(pid))
                .bind(lease_ms)
        };
        if self.dialect().has_returning() {
            let row = q(self.dialect().render(&format!("{insert} RETURNING id")))
                .fetch_one(&self.db)
                .await
                .map_err(sql_err!(self, "queue lock request"))?;
            row.try_get("id")
                .map_err(sql_err!(self, "queue lock request"))
        } else {
            let done = q(self.dialect().render(insert))
                .execute(&self.db)
                .await
                .map_err(sql_err!(self, "queue lock request"))?;
            done.last_insert_id().ok_or_else(|| StoreError::Sql {
                dialect: self.dialect().name(),
                op: "queue lock request",
                source: sqlx::Error::RowNotFound,
            })
        }
    }

    /// One step of waiting: becomes a holder if fewer than `size` live requests came first,
    /// else extends the waiting request's lease.
    pub async fn lock_try_acquire(
        &self,
        id: i64,
        name: &str,
        size: u32,
        lease: Duration,
    ) -> Result<LockState> {
        let ahead: i64 = sqlx::query(AssertSqlSafe(self.dialect().render(&format!(
            "SELECT COUNT(*) AS n FROM cron_lock_waiters WHERE name = ? AND id < ? AND {}",
            live("lease_until")
        ))))
        .bind(name.to_string())
        .bind(id)
        .fetch_one(&self.db)
        .await
        .map_err(sql_err!(self, "count lock queue"))?
        .try_get("n")
        .map_err(sql_err!(self, "count lock queue"))?;
        let lease_ms = lease.as_millis() as i64;
        if ahead < i64::from(size) {
            let done = sqlx::query(AssertSqlSafe(self.dialect().render(&format!(
                "UPDATE cron_lock_waiters SET state = 'holding', acquired_at = {{now}}, \
                 lease_until = {{now}} + ? WHERE id = ? AND {}",
                live("lease_until")
            ))))
            .bind(lease_ms)
            .bind(id)
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, "take lock"))?;
            return Ok(if done.rows_affected() == 1 {
                LockState::Holding
            } else {
                LockState::Lost
            });
        }
        Ok(if self.lock_extend(id, lease).await? {
            LockState::Waiting(ahead.max(0) as u64)
        } else {
            LockState::Lost
        })
    }

    /// Extends a request's lease if it is still live. False: it expired or was broken (lost).
    pub async fn lock_extend(&self, id: i64, lease: Duration) -> Result<bool> {
        let done = sqlx::query(AssertSqlSafe(self.dialect().render(&format!(
            "UPDATE cron_lock_waiters SET lease_until = {{now}} + ? \
             WHERE id = ? AND {} AND state <> 'broken'",
            live("lease_until")
        ))))
        .bind(lease.as_millis() as i64)
        .bind(id)
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "extend lock"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Ends a request: removes it, and records a clean release if it held the lock.
    pub async fn lock_release(&self, id: i64) -> Result<()> {
        // The text as bytes, shown with replacements (see `lock_reap`).
        let row = sqlx::query(AssertSqlSafe(self.dialect().render(&format!(
            "SELECT {} FROM cron_lock_waiters WHERE id = ?",
            super::dialect::select_list(
                self.dialect(),
                &["name", "owner", "host", "state"],
                &["pid", "acquired_at"],
                true
            )
        ))))
        .bind(id)
        .fetch_optional(&self.db)
        .await
        .map_err(sql_err!(self, "read lock"))?;
        sqlx::query(AssertSqlSafe(
            self.dialect()
                .render("DELETE FROM cron_lock_waiters WHERE id = ?"),
        ))
        .bind(id)
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "release lock"))?;
        if let Some(r) = row {
            let state = super::text_lossy(&r, "state")
                .map_err(sql_err!(self, "read lock"))?
                .unwrap_or_default();
            match state.as_str() {
                "holding" => self.record_lock_release(&r, "clean").await?,
                "broken" => self.record_lock_release(&r, "broken").await?,
                _ => {}
            }
        }
        Ok(())
    }

    /// `sqlcron unlock`: breaks the live holds of `name` (or only the one with fencing token
    /// `token`) and records each in the audit trail, in one transaction. Returns the holds
    /// broken.
    ///
    /// A broken hold is not deleted: it can no longer be extended, so its holder stops its
    /// command at its next extension (within a third of the lease), and the place stays taken
    /// until the lease ends. The next holder therefore never overlaps a holder that is still
    /// running, even one that cannot reach the database to learn of the break.
    pub async fn lock_break(
        &self,
        name: &str,
        token: Option<i64>,
        actor: &crate::model::actor::Actor,
    ) -> Result<Vec<LockRow>> {
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        // The text as bytes, shown with replacements (see `lock_reap`): a holder's owner that is
        // not UTF-8 failed every `sqlcron unlock` of that lock.
        let select = format!(
            "SELECT id, {} FROM cron_lock_waiters \
             WHERE name = ? AND state = 'holding' AND {} ORDER BY id",
            super::dialect::select_list(
                self.dialect(),
                &["name", "owner", "host"],
                &["pid", "acquired_at", "lease_until"],
                true
            ),
            live("lease_until"),
        );
        let rows = sqlx::query(AssertSqlSafe(self.dialect().render(&select)))
            .bind(name.to_string())
            .fetch_all(&mut *tx)
            .await
            .map_err(sql_err!(self, "find lock holders"))?;
        let mut broken = Vec::new();
        for r in &rows {
            let row = LockRow {
                name: super::text_lossy(r, "name")
                    .map_err(sql_err!(self, "find lock holders"))?
                    .unwrap_or_default(),
                state: "broken".into(),
                owner: super::text_lossy(r, "owner")
                    .map_err(sql_err!(self, "find lock holders"))?,
                host: super::text_lossy(r, "host").map_err(sql_err!(self, "find lock holders"))?,
                // Shown as "?" when a writer put text there: the break is by id.
                pid: r.try_get("pid").ok().flatten(),
                since: r.try_get("acquired_at").ok().flatten(),
                until: r.try_get("lease_until").ok().flatten(),
                token: r
                    .try_get("id")
                    .map_err(sql_err!(self, "find lock holders"))?,
            };
            if token.is_some() && row.token != token {
                continue;
            }
            let done = sqlx::query(AssertSqlSafe(self.dialect().render(
                "UPDATE cron_lock_waiters SET state = 'broken' WHERE id = ? AND state = 'holding'",
            )))
            .bind(row.token)
            .execute(&mut *tx)
            .await
            .map_err(sql_err!(self, "break lock"))?;
            if done.rows_affected() != 1 {
                continue;
            }
            let detail = format!(
                "token {} held by {} on {} pid {}",
                row.token.unwrap_or_default(),
                row.owner.as_deref().unwrap_or("?"),
                row.host.as_deref().unwrap_or("?"),
                row.pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into())
            );
            self.audit_in(&mut *tx, actor, "lock_break", name, Some(detail))
                .await?;
            broken.push(row);
        }
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(broken)
    }

    async fn record_lock_release(&self, r: &sqlx::any::AnyRow, how: &str) -> Result<()> {
        let get_s = |c: &str| super::text_lossy(r, c);
        let name: String = get_s("name")
            .map_err(sql_err!(self, "read lock"))?
            .unwrap_or_default();
        sqlx::query(AssertSqlSafe(self.upsert_lock_summary()))
            .bind(name)
            .bind(get_s("owner").map_err(sql_err!(self, "read lock"))?)
            .bind(get_s("host").map_err(sql_err!(self, "read lock"))?)
            // None where a writer put text (SQLite): the release is recorded all the same.
            .bind(r.try_get::<Option<i64>, _>("pid").ok().flatten())
            .bind(r.try_get::<Option<i64>, _>("acquired_at").ok().flatten())
            .bind(how.to_string())
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, "record lock release"))?;
        Ok(())
    }

    /// Removes requests of `name` whose lease ended, recording expired holds. Returns how many.
    pub async fn lock_reap(&self, name: &str) -> Result<usize> {
        // The text as bytes, shown with replacements: an owner or host that is not UTF-8
        // (written with SQL on SQLite or MariaDB) failed this read, and every `sqlcron lock` of
        // that name at its start, for good (the request it could not read was never reaped).
        let rows = sqlx::query(AssertSqlSafe(self.dialect().render(&format!(
            "SELECT id, name, {} FROM cron_lock_waiters \
             WHERE name = ? AND NOT ({})",
            super::dialect::select_list(
                self.dialect(),
                &["owner", "host", "state"],
                &["pid", "acquired_at"],
                true
            ),
            live("lease_until")
        ))))
        .bind(name.to_string())
        .fetch_all(&self.db)
        .await
        .map_err(sql_err!(self, "find expired locks"))?;
        for r in &rows {
            let id: i64 = r
                .try_get("id")
                .map_err(sql_err!(self, "find expired locks"))?;
            let state = super::text_lossy(r, "state")
                .map_err(sql_err!(self, "find expired locks"))?
                .unwrap_or_default();
            let deleted = sqlx::query(AssertSqlSafe(self.dialect().render(&format!(
                "DELETE FROM cron_lock_waiters WHERE id = ? AND NOT ({})",
                live("lease_until")
            ))))
            .bind(id)
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, "reap lock"))?;
            if deleted.rows_affected() == 1 {
                match state.as_str() {
                    "holding" => self.record_lock_release(r, "expired").await?,
                    "broken" => self.record_lock_release(r, "broken").await?,
                    _ => {}
                }
            }
        }
        Ok(rows.len())
    }

    /// Holders and waiters of every lock, then idle locks with their last release.
    pub async fn locks(&self) -> Result<Vec<LockRow>> {
        self.locks_bounded(i64::MAX).await
    }

    /// As [`Store::locks`], with at most `limit` holders and waiters and `limit` idle names
    /// (the most recently released of them): what a page can show.
    pub async fn locks_bounded(&self, limit: i64) -> Result<Vec<LockRow>> {
        // The text as bytes, shown with replacements (see `lock_reap`); a row whose numbers
        // cannot be read is left out. A lease further off than any holder sets (see [`live`])
        // is listed as `uncounted`: no contender counts it (an older release's `--lease`
        // above 1h, or a writer's), and an operator looking for such leases finds it here.
        let live = sqlx::query(AssertSqlSafe(self.dialect().render(&format!(
            "SELECT id, CASE WHEN {} THEN 1 ELSE 0 END AS counted, {} FROM cron_lock_waiters \
             WHERE lease_until > {{now}} ORDER BY cron_lock_waiters.name, id LIMIT ?",
            live("lease_until"),
            super::dialect::select_list(
                self.dialect(),
                &["name", "owner", "host", "state"],
                &["pid", "enqueued_at", "acquired_at", "lease_until"],
                true
            )
        ))))
        .bind(limit)
        .fetch_all(&self.db)
        .await
        .map_err(sql_err!(self, "list locks"))?;
        let mut out = Vec::new();
        let mut busy = std::collections::HashSet::new();
        for r in &live {
            let text = |c: &str| super::text_lossy(r, c);
            let decode = || -> std::result::Result<LockRow, sqlx::Error> {
                let state = match r.try_get::<i64, _>("counted")? {
                    0 => UNCOUNTED.to_string(),
                    _ => text("state")?.unwrap_or_default(),
                };
                Ok(LockRow {
                    name: text("name")?.unwrap_or_default(),
                    since: if state == "holding" {
                        r.try_get("acquired_at")?
                    } else {
                        r.try_get("enqueued_at")?
                    },
                    state,
                    owner: text("owner")?,
                    host: text("host")?,
                    pid: r.try_get("pid")?,
                    until: r.try_get("lease_until")?,
                    token: r.try_get("id")?,
                })
            };
            let Ok(row) = decode() else { continue };
            busy.insert(row.name.clone());
            out.push(row);
        }
        let mut idle = sqlx::query(AssertSqlSafe(self.dialect().render(&format!(
            "SELECT {} FROM cron_locks ORDER BY cron_locks.last_released DESC, cron_locks.name \
             LIMIT ?",
            super::dialect::select_list(
                self.dialect(),
                &["name", "last_owner", "last_host", "last_release"],
                &["last_pid", "last_acquired", "last_released"],
                true
            )
        ))))
        .bind(limit)
        .fetch_all(&self.db)
        .await
        .map_err(sql_err!(self, "list locks"))?;
        idle.sort_by_cached_key(|r| super::text_lossy(r, "name").ok().flatten());
        for r in &idle {
            let text = |c: &str| super::text_lossy(r, c);
            let decode = || -> std::result::Result<LockRow, sqlx::Error> {
                Ok(LockRow {
                    name: text("name")?.unwrap_or_default(),
                    state: format!(
                        "free (last release {})",
                        text("last_release")?.unwrap_or_default()
                    ),
                    owner: text("last_owner")?,
                    host: text("last_host")?,
                    pid: r.try_get("last_pid")?,
                    since: r.try_get("last_acquired")?,
                    until: r.try_get("last_released")?,
                    token: None,
                })
            };
            let Ok(row) = decode() else { continue };
            if !busy.contains(&row.name) {
                out.push(row);
            }
        }
        Ok(out)
    }
}
