//! History retention: cluster duties (`cron_duties`, one node at a time under a fenced lease)
//! and the small, index-backed deletions of old `cron_runs` and `cron_audit` rows.
//!
//! Every deletion names the rows by primary key and is fenced by the duty's token: a node whose
//! duty lease ran out deletes nothing. The candidates are found with plain reads (no row locks,
//! so a claim never waits for pruning), and the runs of a job whose row is claimed are never
//! candidates: a node taking over an unreleased claim reads that job's newest run record.

use sqlx::{AssertSqlSafe, Row};

use super::*;

/// A duty held by this node: the fence for every write made under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duty {
    pub name: String,
    pub node: String,
    pub token: i64,
}

/// One row of `cron_duties`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DutyRow {
    pub name: String,
    pub node: Option<String>,
    pub token: i64,
    #[serde(serialize_with = "crate::model::json_time::instant")]
    pub lease_until: i64,
    #[serde(serialize_with = "crate::model::json_time::opt_instant")]
    pub last_done: Option<i64>,
    pub last_result: Option<String>,
}

/// A table whose old rows are pruned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pruned {
    Runs,
    Audit,
    /// `cron_events`: alert events whose delivery ended, by age like the runs.
    Events,
}

impl Pruned {
    /// The table's name.
    pub fn table(self) -> &'static str {
        match self {
            Pruned::Runs => "cron_runs",
            Pruned::Audit => "cron_audit",
            Pruned::Events => "cron_events",
        }
    }
}

impl Store {
    /// Takes the duty `name` for `lease_ms` when nobody holds it (its lease ended) or this node
    /// already does; `None` when another node holds it.
    pub async fn duty_take(&self, name: &str, node: &str, lease_ms: i64) -> Result<Option<Duty>> {
        let (ins, conflict) = self.dialect.insert_ignore();
        sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "{ins} INTO cron_duties (name) VALUES (?){conflict}"
        ))))
        .bind(name.to_string())
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "create duty"))?;
        let took = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "UPDATE cron_duties SET node = ?, token = {}, lease_until = {{now}} + ? \
             WHERE name = ? AND (lease_until <= {{now}} OR lease_until > {{now}} + ? OR node = ?)",
            dialect::next_token("token")
        ))))
        .bind(node.to_string())
        .bind(lease_ms)
        .bind(name.to_string())
        // A lease no node's configuration gives (a writer's): the duty is anybody's.
        .bind(crate::model::lease::LEASE_UNOWNED_BEYOND.as_millis() as i64)
        .bind(node.to_string())
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "take duty"))?;
        if took.rows_affected() != 1 {
            return Ok(None);
        }
        let token: Option<i64> = sqlx::query_scalar(AssertSqlSafe(
            self.dialect
                .render("SELECT token FROM cron_duties WHERE name = ? AND node = ?"),
        ))
        .bind(name.to_string())
        .bind(node.to_string())
        .fetch_optional(&self.db)
        .await
        .map_err(sql_err!(self, "take duty"))?;
        Ok(token.map(|token| Duty {
            name: name.to_string(),
            node: node.to_string(),
            token,
        }))
    }

    /// Extends a held duty's lease; `false` when it was lost (another node took it).
    pub async fn duty_extend(&self, duty: &Duty, lease_ms: i64) -> Result<bool> {
        let done = sqlx::query(AssertSqlSafe(self.dialect.render(
            "UPDATE cron_duties SET lease_until = {now} + ? \
             WHERE name = ? AND node = ? AND token = ? AND lease_until > {now}",
        )))
        .bind(lease_ms)
        .bind(duty.name.clone())
        .bind(duty.node.clone())
        .bind(duty.token)
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "extend duty"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Ends a duty's round: records what it did and frees the lease at once.
    pub async fn duty_done(&self, duty: &Duty, result: &str) -> Result<bool> {
        let done = sqlx::query(AssertSqlSafe(self.dialect.render(
            "UPDATE cron_duties SET lease_until = {now}, last_done = {now}, last_result = ? \
             WHERE name = ? AND node = ? AND token = ?",
        )))
        .bind(result.to_string())
        .bind(duty.name.clone())
        .bind(duty.node.clone())
        .bind(duty.token)
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "end duty"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Every duty row, by name.
    pub async fn duties(&self) -> Result<Vec<DutyRow>> {
        let rows = sqlx::query(
            "SELECT name, node, token, lease_until, last_done, last_result FROM cron_duties \
             ORDER BY name",
        )
        .fetch_all(&self.db)
        .await
        .map_err(sql_err!(self, "read duties"))?;
        rows.iter()
            .map(|r| {
                Ok(DutyRow {
                    name: r.try_get("name")?,
                    node: r.try_get("node")?,
                    token: r.try_get("token")?,
                    lease_until: r.try_get("lease_until")?,
                    last_done: r.try_get("last_done")?,
                    last_result: r.try_get("last_result")?,
                })
            })
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(sql_err!(self, "read duties"))
    }

    /// The jobs whose row is claimed now, each with the slot it serves (the runs of that slot
    /// are not pruned).
    pub async fn claimed_jobs(&self) -> Result<std::collections::HashMap<String, i64>> {
        // The name as bytes: one that is not UTF-8 (written with SQL) must not stop the round.
        let name = dialect::bytes_of(self.dialect, "name");
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {name} AS name, slot FROM cron_table WHERE exec_by IS NOT NULL"
        )))
        .fetch_all(&self.db)
        .await
        .map_err(sql_err!(self, "read claimed jobs"))?;
        rows.iter()
            .map(|r| {
                let slot: Option<i64> = r.try_get("slot")?;
                Ok((
                    text_lossy(r, "name")?.unwrap_or_default(),
                    slot.unwrap_or(i64::MIN),
                ))
            })
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(sql_err!(self, "read claimed jobs"))
    }

    /// Up to `limit` of the oldest rows of `table` that ended (runs), were written (audit) or
    /// were made and delivered (events) before `cutoff`: `(id, job, slot)`, oldest first (the
    /// slot for runs only).
    pub async fn prune_candidates_by_age(
        &self,
        table: Pruned,
        cutoff: i64,
        limit: i64,
    ) -> Result<Vec<(i64, Option<String>, Option<i64>)>> {
        // Job names as bytes (see `claimed_jobs`).
        let (run_job, audit_job) = (
            dialect::bytes_of(self.dialect, "job_name"),
            dialect::bytes_of(self.dialect, "job"),
        );
        let text = match table {
            Pruned::Runs => &format!(
                "SELECT id, {run_job} AS job, slot FROM cron_runs WHERE ended < ? \
                 ORDER BY ended LIMIT ?"
            ),
            Pruned::Audit => &format!(
                "SELECT id, {audit_job} AS job FROM cron_audit WHERE at < ? ORDER BY at LIMIT ?"
            ),
            // Only events whose delivery ended (sent, given up, or only recorded).
            Pruned::Events => {
                "SELECT id, NULL AS job FROM cron_events WHERE created < ? AND next_try IS NULL \
                 ORDER BY created LIMIT ?"
            }
        };
        let rows = sqlx::query(AssertSqlSafe(self.dialect.render(text)))
            .bind(cutoff)
            .bind(limit)
            .fetch_all(&self.db)
            .await
            .map_err(sql_err!(self, "find old rows"))?;
        rows.iter()
            .map(|r| {
                let slot = match table {
                    Pruned::Runs => r.try_get("slot")?,
                    _ => None,
                };
                Ok((r.try_get("id")?, text_lossy(r, "job")?, slot))
            })
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(sql_err!(self, "find old rows"))
    }

    /// Up to `limit` jobs whose row's id is above `after`, by id, each `(id, name, boundary)`:
    /// the id of its newest run beyond the `keep` newest (every run with this id or a lower one
    /// is beyond the limit; `None` when it has `keep` runs or fewer). One statement per page,
    /// paged by id: a name written with SQL that is not UTF-8 is read as bytes (shown with
    /// replacements), and could not carry a page on.
    pub async fn run_count_boundaries(
        &self,
        after: i64,
        keep: i64,
        limit: i64,
    ) -> Result<Vec<(i64, String, Option<i64>)>> {
        let name = dialect::bytes_of(self.dialect, "j.name");
        let rows = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "SELECT j.id AS id, {name} AS name, (SELECT r.id FROM cron_runs r \
             WHERE r.job_name = j.name ORDER BY r.id DESC LIMIT 1 OFFSET ?) AS boundary \
             FROM cron_table j WHERE j.id > ? ORDER BY j.id LIMIT ?",
        ))))
        .bind(keep)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.db)
        .await
        .map_err(sql_err!(self, "count runs"))?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("id")?,
                    text_lossy(r, "name")?.unwrap_or_default(),
                    r.try_get("boundary")?,
                ))
            })
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(sql_err!(self, "count runs"))
    }

    /// Up to `limit` of `job`'s ended runs with an id up to `boundary`, oldest first, as
    /// `(id, job, slot)` (what `model::retention::deletable` weighs). A run still going is never
    /// among them.
    pub async fn runs_up_to(
        &self,
        job: &str,
        boundary: i64,
        limit: i64,
    ) -> Result<Vec<(i64, Option<String>, Option<i64>)>> {
        let rows = sqlx::query(AssertSqlSafe(self.dialect.render(
            "SELECT id, slot FROM cron_runs WHERE job_name = ? AND id <= ? AND ended IS NOT NULL \
             ORDER BY id LIMIT ?",
        )))
        .bind(job.to_string())
        .bind(boundary)
        .bind(limit)
        .fetch_all(&self.db)
        .await
        .map_err(sql_err!(self, "find runs beyond the limit"))?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, Some(job.to_string()), r.try_get("slot")?)))
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(sql_err!(self, "find runs beyond the limit"))
    }

    /// Deletes the rows `ids` of `table`, fenced by `duty` (nothing when its lease ended or
    /// another node took it). Returns the number deleted.
    pub async fn prune_rows(&self, table: Pruned, ids: &[i64], duty: &Duty) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        let marks = vec!["?"; ids.len()].join(", ");
        let text = format!(
            "DELETE FROM {} WHERE id IN ({marks}) AND EXISTS (SELECT 1 FROM cron_duties \
             WHERE name = ? AND node = ? AND token = ? AND lease_until > {{now}})",
            table.table()
        );
        // Not kept in the connection's statement cache: each batch's length makes a statement
        // of its own (up to 500), and cached they would fill each connection's cache with
        // statements of hundreds of parameters, one more per round; on SQLite the prepared
        // statements live in the daemon's own memory (the fourth hour's soak,
        // docs/benchmarks.md). Preparing it once a batch costs nothing that matters.
        let mut q = sqlx::query(AssertSqlSafe(self.dialect.render(&text))).persistent(false);
        for id in ids {
            q = q.bind(*id);
        }
        let q = q
            .bind(duty.name.clone())
            .bind(duty.node.clone())
            .bind(duty.token);
        let done = if self.dialect == Dialect::Mysql {
            let mut conn = self
                .db
                .pool
                .acquire()
                .await
                .map_err(sql_err!(self, "prune"))?;
            // InnoDB's default REPEATABLE READ would lock the gaps next to the deleted index
            // entries, where new runs are inserted; the deletion needs no such protection.
            sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
                .execute(&mut *conn)
                .await
                .map_err(sql_err!(self, "prune"))?;
            q.execute(&mut *conn).await
        } else {
            q.execute(&self.db).await
        }
        .map_err(sql_err!(self, "prune"))?;
        Ok(done.rows_affected())
    }

    /// Adds back every value a row uses that is missing from `cron_placements` (a row written
    /// with the triggers off, a writer who deleted values); returns how many.
    pub async fn restore_placements(&self) -> Result<u64> {
        let insert = match self.dialect {
            Dialect::Sqlite => "INSERT OR IGNORE INTO cron_placements (placement)",
            Dialect::Postgres => "INSERT INTO cron_placements (placement)",
            Dialect::Mysql => "INSERT IGNORE INTO cron_placements (placement)",
        };
        let tail = if self.dialect == Dialect::Postgres {
            " ON CONFLICT DO NOTHING"
        } else {
            ""
        };
        // MySQL's key keeps 700 characters: a longer value would go in cut, match no row, be
        // deleted by the pruning and come back cut at each round. Its row is `placed = 0`
        // there (migration `mysql/0032`), claimed by any node and parked.
        let kept = if self.dialect == Dialect::Mysql {
            format!(
                " AND CHAR_LENGTH(t.placement) <= {}",
                crate::model::placement::PLACEMENT_MAX
            )
        } else {
            String::new()
        };
        let restored = sqlx::query(AssertSqlSafe(format!(
            "{insert} SELECT DISTINCT t.placement FROM cron_table t WHERE t.placement IS NOT NULL{kept} \
             AND NOT EXISTS (SELECT 1 FROM cron_placements p WHERE p.placement = t.placement){tail}"
        )))
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "restore placements"))?
        .rows_affected();
        Ok(restored)
    }

    /// Deletes the values of `cron_placements` no row uses, at most `PLACEMENT_BATCHES` batches
    /// a round; returns how many.
    pub async fn prune_placements(&self) -> Result<u64> {
        let (mut deleted, mut after) = (0, None);
        for _ in 0..PLACEMENT_BATCHES {
            let (n, last) = self.delete_unused_placements(after.as_deref()).await?;
            deleted += n;
            // The next batch starts past this one, past any value kept in it (locked by a
            // writer): such values cannot hold up the rest.
            match last {
                Some(last) => after = Some(last),
                None => break,
            }
        }
        Ok(deleted)
    }

    /// Deletes values no row uses among the first `PLACEMENT_BATCH` of them after `after`;
    /// returns how many it deleted and, when the batch was full, the last value it looked at.
    ///
    /// A plain read finds them; a transaction then locks them, skipping any a writer holds (the
    /// triggers lock a value in use while the row that uses it is written: PostgreSQL's
    /// `FOR KEY SHARE`, shared between writers, InnoDB's duplicate check of `INSERT IGNORE`),
    /// reads the rows again with a snapshot taken after the locks (READ COMMITTED, which the
    /// daemon's sessions use), so that a row committed meanwhile is seen, and deletes the rest.
    /// It does not wait for a writer of a value, and a writer that comes after the locks waits
    /// for the commit, then adds the value anew. A single `DELETE ... WHERE NOT EXISTS` read
    /// the rows with the snapshot of its start: it deleted a value a row was being written
    /// with, and the job waited for it, on no node, until the next round. On SQLite
    /// `BEGIN IMMEDIATE` holds off every writer instead (and gives up after `busy_timeout`
    /// while one is open).
    async fn delete_unused_placements(&self, after: Option<&str>) -> Result<(u64, Option<String>)> {
        let err = sql_err!(self, "prune placements");
        // Read as bytes when a value is not UTF-8 (SQLite, MariaDB): such a value is left
        // alone, and the values around it are still pruned.
        let (rows, _) = self
            .read_rows_text_or_bytes(
                "prune placements",
                |bytes| {
                    let col = dialect::columns(self.dialect, &["p.placement"], bytes);
                    self.dialect.render(&format!(
                        "SELECT {col} FROM cron_placements p WHERE NOT EXISTS \
                         (SELECT 1 FROM cron_table t WHERE t.placement = p.placement){} \
                         ORDER BY p.placement LIMIT {PLACEMENT_BATCH}",
                        if after.is_some() {
                            " AND p.placement > ?"
                        } else {
                            ""
                        }
                    ))
                },
                |q| match after {
                    Some(after) => q.bind(after.to_string()),
                    None => q,
                },
            )
            .await?;
        let unused: Vec<String> = rows
            .iter()
            .filter_map(|r| text_column(r, "placement").ok().flatten())
            .collect();
        // The next batch starts past the last value read that can be named; a full batch of
        // values that cannot ends the round.
        let last = unused
            .last()
            .filter(|_| rows.len() == PLACEMENT_BATCH)
            .cloned();
        if unused.is_empty() {
            return Ok((0, None));
        }
        let lock = match self.dialect {
            Dialect::Sqlite => "",
            Dialect::Postgres | Dialect::Mysql => " FOR UPDATE SKIP LOCKED",
        };
        let mut tx = self.begin_write().await.map_err(err)?;
        let marks = |n: usize| vec!["?"; n].join(", ");
        let mut q = sqlx::query_scalar::<_, String>(AssertSqlSafe(self.dialect.render(&format!(
            "SELECT placement FROM cron_placements WHERE placement IN ({}) \
             ORDER BY placement{lock}",
            marks(unused.len())
        ))))
        .persistent(false);
        for p in &unused {
            q = q.bind(p.clone());
        }
        let locked = q.fetch_all(&mut *tx).await.map_err(err)?;
        if locked.is_empty() {
            tx.rollback().await.map_err(err)?;
            return Ok((0, last));
        }
        // The values as `cron_placements` spells them: MySQL's `utf8mb4_bin` ignores trailing
        // spaces, so a row's value may be written with fewer than its entry here.
        let mut q = sqlx::query_scalar::<_, String>(AssertSqlSafe(self.dialect.render(&format!(
            "SELECT p.placement FROM cron_placements p WHERE p.placement IN ({}) \
             AND EXISTS (SELECT 1 FROM cron_table t WHERE t.placement = p.placement)",
            marks(locked.len())
        ))))
        .persistent(false);
        for p in &locked {
            q = q.bind(p.clone());
        }
        let used = q.fetch_all(&mut *tx).await.map_err(err)?;
        let gone: Vec<&String> = locked.iter().filter(|p| !used.contains(p)).collect();
        let mut deleted = 0;
        if !gone.is_empty() {
            // InnoDB's DELETE locks every row it reads, without the latest-version read an
            // UPDATE gets under READ COMMITTED: planned as a scan of the table, it waited for a
            // writer's lock on a value it was not deleting. By the key, it reads only these.
            let delete = match self.dialect {
                Dialect::Mysql => "DELETE p FROM cron_placements p FORCE INDEX (PRIMARY)",
                Dialect::Postgres | Dialect::Sqlite => "DELETE FROM cron_placements",
            };
            let mut q = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
                "{delete} WHERE placement IN ({})",
                marks(gone.len())
            ))))
            .persistent(false);
            for p in gone {
                q = q.bind(p.clone());
            }
            deleted = q.execute(&mut *tx).await.map_err(err)?.rows_affected();
        }
        tx.commit().await.map_err(err)?;
        Ok((deleted, last))
    }
}

/// Placement values checked and deleted per transaction: a flood of unused values is deleted a
/// batch at a time.
const PLACEMENT_BATCH: usize = 500;

/// Batches a round: 10,000 values at most, so that a flood still being written cannot keep the
/// round from the history.
const PLACEMENT_BATCHES: usize = 20;
