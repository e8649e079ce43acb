//! The claim path: peek, prepare, claim, start and takeover (the release is `release.rs`). Every write about
//! a claimed row is fenced by `exec_by = node AND token = claim token`.

use std::time::Duration;

use sqlx::any::AnyRow;
use sqlx::{AssertSqlSafe, Row};

use super::*;

impl Store {
    /// One cheap, index-backed look: the clock, the earliest due time among the rows `node` may
    /// run (`placements`: the placement values it matches; rows with another or a value it has
    /// not read yet are left out), whether
    /// rows wait for preparation, how many placement values exist and whether the node is
    /// drained; for the event delivery, the earliest event due; and, with `alive`, how many
    /// nodes are alive. This is the only statement an idle node sends per poll, besides its
    /// heartbeat.
    pub async fn peek(&self, node: &str, placements: &[String], alive: bool) -> Result<Peek> {
        let text = match (placements.len(), alive) {
            (0, true) => self.sql.peek_alive.clone(),
            (0, false) => self.sql.peek.clone(),
            (n, alive) => peek_sql(self.dialect, n, alive),
        };
        let mut q = sqlx::query(AssertSqlSafe(text));
        for _ in 0..peek_placement_uses(self.dialect) {
            for p in placements {
                q = q.bind(p.clone());
            }
        }
        let row = q
            .bind(node.to_string())
            .fetch_one(&self.db)
            .await
            .map_err(sql_err!(self, "peek"))?;
        let (next_due, next_name) = if self.dialect == Dialect::Mysql {
            let both = text_lossy(&row, "next_due_name").map_err(sql_err!(self, "peek"))?;
            match both.as_deref().map(split_due_name) {
                None => (None, None),
                Some(Some((due, name))) => (Some(due), Some(name)),
                Some(None) => {
                    let what = format!("the earliest due row came back as {both:?}");
                    return Err(sql_err!(self, "peek")(sqlx::Error::Decode(what.into())));
                }
            }
        } else {
            (
                row.try_get("next_due").map_err(sql_err!(self, "peek"))?,
                text_lossy(&row, "next_name").map_err(sql_err!(self, "peek"))?,
            )
        };
        Ok(Peek {
            now: row.try_get("db_now").map_err(sql_err!(self, "peek"))?,
            next_due,
            pending_prepare: row
                .try_get::<i64, _>("pending")
                .map_err(sql_err!(self, "peek"))?
                != 0,
            next_name,
            placements: row.try_get("placements").map_err(sql_err!(self, "peek"))?,
            templates: row.try_get("templates").map_err(sql_err!(self, "peek"))?,
            drain: row
                .try_get::<Option<i64>, _>("drain")
                .map_err(sql_err!(self, "peek"))?
                .is_some_and(|d| d != 0),
            next_event: row.try_get("next_event").map_err(sql_err!(self, "peek"))?,
            alive: row.try_get("alive").map_err(sql_err!(self, "peek"))?,
            audit_mark: if self.dialect == Dialect::Mysql {
                row.try_get("audit_mark").map_err(sql_err!(self, "peek"))?
            } else {
                None
            },
        })
    }

    /// Rows without a `next_exec` (new or changed with SQL), oldest first.
    pub async fn rows_to_prepare(&self, limit: i64) -> Result<Vec<JobRow>> {
        let (rows, bytes) = self
            .read_rows_text_or_bytes(
                "select rows to prepare",
                |bytes| match bytes {
                    false => self.sql.to_prepare.clone(),
                    true => self
                        .dialect
                        .render(&to_prepare_sql(&job_columns_as_bytes(self.dialect))),
                },
                |q| q.bind(limit),
            )
            .await?;
        Ok(decode_rows(&rows, bytes))
    }

    /// Gives a prepared row its first slot. False if another node did it first.
    pub async fn set_prepared(&self, id: i64, slot: i64, next_exec: i64) -> Result<bool> {
        let done = sqlx::query(AssertSqlSafe(self.sql.prepared.clone()))
            .bind(slot)
            .bind(next_exec)
            .bind(id)
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, "prepare row"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Parks an unusable row with the reason in `error`. False if another node did it first, or
    /// if the row's `signature` is no longer the one read with it (it is then read again).
    /// `signature` `None`: no such check, for a row that cannot run whatever its signature (a
    /// value that could not be read, the signature's own perhaps, which no fence could name).
    pub async fn set_invalid(
        &self,
        id: i64,
        signature: Option<Option<&str>>,
        error: &str,
    ) -> Result<bool> {
        let q = match signature {
            Some(signature) => sqlx::query(AssertSqlSafe(self.sql.invalid.clone()))
                .bind(error.to_string())
                .bind(PARKED)
                .bind(id)
                .bind(signature.map(str::to_string))
                .bind(signature.map(str::to_string)),
            None => sqlx::query(AssertSqlSafe(self.dialect.render(
                "UPDATE cron_table SET error = ?, next_exec = ?, slot = NULL, dirty = 0 \
                 WHERE id = ? AND next_exec IS NULL",
            )))
            .bind(error.to_string())
            .bind(PARKED)
            .bind(id),
        };
        let done = q
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, "mark row invalid"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Releases a claimed row that cannot run and parks it with the reason in `error`, in one
    /// statement fenced by the claim. The row keeps its slot and attempts; a change to any of its
    /// definition or policy columns un-parks it (the schema's trigger clears `next_exec`).
    pub async fn park(&self, id: i64, node: &str, token: i64, error: &str) -> Result<Fenced> {
        let done = sqlx::query(AssertSqlSafe(self.sql.park.clone()))
            .bind(self.dialect.storable_text(error, MESSAGE_MAX).into_owned())
            .bind(PARKED)
            .bind(id)
            .bind(node.to_string())
            .bind(token)
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, "park row"))?;
        Ok(Fenced::from_rows(done.rows_affected()))
    }

    /// Claims up to `limit` due rows without a placement for `node` with a lease of `lease`.
    /// Returns the database clock at the claim and the rows, with their new token and their
    /// previous holder in `prev_exec_by` (set when a lease expired without a release).
    pub async fn claim(
        &self,
        node: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<(Option<i64>, Vec<JobRow>)> {
        self.claim_excluding(node, limit, lease, &[], &[]).await
    }

    /// [`Store::claim`], leaving out the rows in `supervised`: a node never claims a row whose
    /// earlier run it still supervises (its lease may have run out during a stall, but its
    /// process is still being watched, and a second run would overlap it); and taking, besides the
    /// rows without a placement, only those whose placement is one of `placements` (the values
    /// the node matches).
    pub async fn claim_excluding(
        &self,
        node: &str,
        limit: usize,
        lease: Duration,
        supervised: &[i64],
        placements: &[String],
    ) -> Result<(Option<i64>, Vec<JobRow>)> {
        let lease_ms = lease.as_millis() as i64;
        // The rows left out are padded to a power of two (with id -1, no row's): a handful of
        // statement texts to prepare per connection, not one per count.
        let excluded = if supervised.is_empty() {
            0
        } else {
            supervised.len().next_power_of_two()
        };
        let text = if excluded == 0 && placements.is_empty() {
            self.sql.claim.clone()
        } else {
            claim_sql(self.dialect, excluded, placements.len())
        };
        // SQLite's claim returns its text columns as bytes (`claim_sql`).
        let (rows, bytes) = if self.dialect.has_returning() {
            let mut q = sqlx::query(AssertSqlSafe(text))
                .bind(node.to_string())
                .bind(lease_ms)
                .bind(lease_ms);
            for id in padded(supervised, excluded) {
                q = q.bind(id);
            }
            for p in placements {
                q = q.bind(p.clone());
            }
            let rows = q
                .bind(node.to_string())
                .bind(limit as i64)
                .fetch_all(&self.db)
                .await
                .map_err(sql_err!(self, "claim"))?;
            (rows, self.dialect == Dialect::Sqlite)
        } else {
            let claim_id = new_claim_id(node);
            let mut q = sqlx::query(AssertSqlSafe(text))
                .bind(node.to_string())
                .bind(lease_ms)
                .bind(lease_ms)
                .bind(claim_id.clone());
            for id in padded(supervised, excluded) {
                q = q.bind(id);
            }
            for p in placements {
                q = q.bind(p.clone());
            }
            let marked = q
                .bind(node.to_string())
                .bind(limit as i64)
                .execute(&self.db)
                .await
                .map_err(sql_err!(self, "claim"))?;
            if marked.rows_affected() == 0 {
                return Ok((None, vec![]));
            }
            self.read_rows_text_or_bytes(
                "read claimed rows",
                |bytes| match bytes {
                    false => self.sql.claim_read.clone(),
                    true => self
                        .dialect
                        .render(&claim_read_sql(&job_columns_as_bytes(self.dialect))),
                },
                |q| q.bind(claim_id.clone()),
            )
            .await?
        };
        let now = match rows.first() {
            Some(r) => Some(r.try_get("db_now").map_err(sql_err!(self, "claim"))?),
            None => None,
        };
        Ok((now, decode_rows(&rows, bytes)))
    }

    /// Records the start of a run in `cron_runs`, fenced by the claim: one statement that
    /// inserts nothing if the claim is no longer ours.
    ///
    /// Idempotent: when the record of this (job, slot, attempt) exists already, the token that
    /// wrote it decides. Ours means an earlier try of this very call committed and its reply was
    /// lost: [`Fenced::Done`]. Another token means another claim started this run:
    /// [`Fenced::Conflict`]. A unique-key violation alone never proves the work was done.
    pub async fn start_run(&self, id: i64, node: &str, token: i64, key: &RunKey) -> Result<Fenced> {
        self.start_run_held(id, node, token, key, None).await
    }

    /// [`Store::start_run`] of a run that waited `held_ms` for the start rate after its claim
    /// (recorded with the run, for `explain`).
    pub async fn start_run_held(
        &self,
        id: i64,
        node: &str,
        token: i64,
        key: &RunKey,
        held_ms: Option<i64>,
    ) -> Result<Fenced> {
        let done = sqlx::query(AssertSqlSafe(self.sql.start_run.clone()))
            .bind(key.slot)
            .bind(i64::from(key.attempt))
            .bind(node.to_string())
            .bind(held_ms)
            .bind(id)
            .bind(node.to_string())
            .bind(token)
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, "record run start"));
        match done {
            Ok(done) => Ok(Fenced::from_rows(done.rows_affected())),
            // A violation of another key than the run's (a primary key a writer planted the
            // next ids of) is no record of this run: reported, not taken for another claim's.
            Err(e) if e.is_unique_violation() => match self.run_record_token(key).await? {
                Some(Some(t)) if t == token => Ok(Fenced::Done),
                Some(_) => Ok(Fenced::Conflict),
                None => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    /// The claim token that recorded the run `key`, if a run record exists (`None` also for a
    /// summary line, which has no token).
    pub async fn run_token(&self, key: &RunKey) -> Result<Option<i64>> {
        Ok(self.run_record_token(key).await?.flatten())
    }

    /// The token of the run record `key`: `None` when there is no such record, `Some(None)` for
    /// one without a token (a summary line).
    async fn run_record_token(&self, key: &RunKey) -> Result<Option<Option<i64>>> {
        let row = sqlx::query(AssertSqlSafe(self.sql.run_token.clone()))
            .bind(key.job.clone())
            .bind(key.slot)
            .bind(i64::from(key.attempt))
            .fetch_optional(&self.db)
            .await
            .map_err(sql_err!(self, "read run token"))?;
        row.map(|r| {
            r.try_get::<Option<i64>, _>("token")
                .map_err(sql_err!(self, "read run token"))
        })
        .transpose()
    }

    /// Records the starts of several runs in one statement, each fenced by its claim (row id
    /// and token); see [`Store::start_run`]. Returns, per run, whether it was recorded. A
    /// unique-key violation fails the whole statement: the caller then goes one by one.
    pub async fn start_runs(&self, node: &str, runs: &[(i64, i64, &RunKey)]) -> Result<Vec<bool>> {
        if let [(id, token, key)] = runs {
            return Ok(vec![
                self.start_run(*id, node, *token, key).await? == Fenced::Done,
            ]);
        }
        // Padded to a power of two with rows that match no claim (id -1): a handful of
        // statement texts to prepare per connection, not one per batch size.
        let rows = runs.len().next_power_of_two();
        let values =
            vec!["SELECT ? AS id, ? AS token, ? AS slot, ? AS attempt"; rows].join(" UNION ALL ");
        let text = self.dialect.render(&format!(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, outcome) \
             SELECT c.name, v.slot, v.attempt, ?, c.token, {{now}}, 'running' \
             FROM cron_table c JOIN ({values}) v ON c.id = v.id AND c.token = v.token \
             WHERE c.exec_by = ?"
        ));
        // Placeholders in the order of the text: the node, the runs, the node again.
        let mut q = sqlx::query(AssertSqlSafe(text)).bind(node.to_string());
        for (id, token, key) in runs {
            q = q
                .bind(*id)
                .bind(*token)
                .bind(key.slot)
                .bind(i64::from(key.attempt));
        }
        for _ in runs.len()..rows {
            q = q.bind(-1i64).bind(-1i64).bind(0i64).bind(0i64);
        }
        let done = q
            .bind(node.to_string())
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, "record run starts"))?;
        if done.rows_affected() as usize == runs.len() {
            return Ok(vec![true; runs.len()]);
        }
        // Some claims were lost in between (rare): look up which runs were recorded.
        let mut started = Vec::with_capacity(runs.len());
        for (_, token, key) in runs {
            started.push(self.run_token(key).await? == Some(*token));
        }
        Ok(started)
    }

    /// The newest run record written under a claim older than `below_token`: what a node taking
    /// over an unreleased claim must account for (see `policy::account_previous`). Found by
    /// token order, not by `token - 1`: in a chain of takeovers the previous holders may have
    /// started nothing.
    ///
    /// With none below, the highest above: a token a writer set to the limit wraps (2^62, then
    /// 1), and the run at 2^62 is the one before the run at 1.
    pub async fn previous_run(&self, job: &str, below_token: i64) -> Result<Option<PreviousRun>> {
        let mut row = None;
        for sql in [&self.sql.previous_run, &self.sql.previous_run_wrapped] {
            row = sqlx::query(AssertSqlSafe(sql.clone()))
                .bind(job.to_string())
                .bind(below_token)
                .fetch_optional(&self.db)
                .await
                .map_err(sql_err!(self, "read previous run"))?;
            if row.is_some() {
                break;
            }
        }
        row.map(|r| -> std::result::Result<_, sqlx::Error> {
            let attempt: i64 = r.try_get("attempt")?;
            let outcome = super::text_lossy(&r, "outcome")?.unwrap_or_default();
            Ok(PreviousRun {
                slot: r.try_get("slot")?,
                attempt: attempt.clamp(0, u32::MAX.into()) as u32,
                outcome: Outcome::parse(&outcome),
                token: r.try_get("token")?,
            })
        })
        .transpose()
        .map_err(sql_err!(self, "read previous run"))
    }

    /// The attempt an HTTP job's `Idempotency-Key` names for attempt `attempt` of `slot`: one
    /// more than the earlier attempts that ended (every outcome but `lost`). A rerun of a run
    /// lost with its node thus repeats the lost run's key: the receiver may have seen it.
    pub async fn key_attempt(&self, job: &str, slot: i64, attempt: u32) -> Result<u32> {
        if attempt <= 1 {
            return Ok(attempt);
        }
        let ended: i64 = sqlx::query_scalar(AssertSqlSafe(self.dialect.render(
            "SELECT COUNT(*) FROM cron_runs \
             WHERE job_name = ? AND slot = ? AND attempt < ? AND outcome <> 'lost'",
        )))
        .bind(job.to_string())
        .bind(slot)
        .bind(i64::from(attempt))
        .fetch_one(&self.db)
        .await
        .map_err(sql_err!(self, "count earlier attempts"))?;
        Ok(u32::try_from(ended).unwrap_or(0) + 1)
    }

    /// Marks a run as lost in the history (a node died or lost its lease while it ran).
    pub async fn record_lost(&self, key: &RunKey, message: &str) -> Result<()> {
        sqlx::query(AssertSqlSafe(self.sql.lost_run.clone()))
            .bind(message.to_string())
            .bind(key.job.clone())
            .bind(key.slot)
            .bind(i64::from(key.attempt))
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, "record lost run"))?;
        Ok(())
    }

    /// A history line that is not a run: `skipped` (a summary of missed slots) or `abandoned`
    /// (retries given up). Recorded once; a repeat is ignored.
    #[allow(clippy::too_many_arguments)]
    pub async fn record_summary(
        &self,
        job: &str,
        slot: i64,
        attempt: u32,
        node: &str,
        outcome: Outcome,
        count: Option<i64>,
        last: Option<i64>,
        message: &str,
    ) -> Result<()> {
        sqlx::query(AssertSqlSafe(self.sql.summary.clone()))
            .bind(job.to_string())
            .bind(slot)
            .bind(i64::from(attempt))
            .bind(node.to_string())
            .bind(outcome.as_str().to_string())
            .bind(count)
            .bind(last)
            .bind(message.to_string())
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, "record history summary"))?;
        Ok(())
    }

    /// Moves a claimed row to `slot` with no attempt made, fenced by node and token: done before
    /// a run of another slot than the row's starts.
    pub async fn advance_slot(&self, id: i64, node: &str, token: i64, slot: i64) -> Result<Fenced> {
        let done = sqlx::query(AssertSqlSafe(self.dialect.render(
            "UPDATE cron_table SET slot = ?, attempt = 0 WHERE id = ? AND exec_by = ? AND token = ?",
        )))
        .bind(slot)
        .bind(id)
        .bind(node.to_string())
        .bind(token)
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "advance to the slot to run"))?;
        Ok(Fenced::from_rows(done.rows_affected()))
    }

    /// Ends the lease of a claimed row now (`lease_until` and `next_exec`), fenced by node and
    /// token, so that another node takes it over at once instead of waiting for the lease: at
    /// shutdown, for a run stopped or not started, and for a start refused because another
    /// token's record of the run exists.
    pub async fn release_for_takeover(&self, id: i64, node: &str, token: i64) -> Result<Fenced> {
        let done = sqlx::query(AssertSqlSafe(self.sql.shutdown_release.clone()))
            .bind(id)
            .bind(node.to_string())
            .bind(token)
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, "release for takeover"))?;
        Ok(Fenced::from_rows(done.rows_affected()))
    }
}

fn new_claim_id(node: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let r: u64 = rand::random();
    let short: String = node.chars().take(20).collect();
    format!("{short}-{:x}-{n:x}-{r:016x}", std::process::id())
}

/// A query of the `Any` driver, its values bound.
pub(super) type AnyQuery = sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments>;

impl Store {
    /// A read of rows (of `cron_table`, or of another table a writer fills): `sql` its text (with `true`, each text column read as
    /// bytes: [`dialect::as_bytes`]), `bind` binding its values. When the driver cannot decode
    /// a row of it (text that is not UTF-8: SQLite keeps any bytes as text, MariaDB accepts
    /// encoded surrogates), the whole read fails in the driver; it is made again as bytes, each
    /// value then checked on its own, so that only that row is parked with the reason. Returns
    /// the rows and whether they were read as bytes (for [`decode_rows`]).
    pub(super) async fn read_rows_text_or_bytes(
        &self,
        op: &'static str,
        sql: impl Fn(bool) -> String,
        bind: impl Fn(AnyQuery) -> AnyQuery,
    ) -> Result<(Vec<AnyRow>, bool)> {
        let plain = bind(sqlx::query(AssertSqlSafe(sql(false))))
            .fetch_all(&self.db)
            .await;
        match plain {
            Ok(rows) => Ok((rows, false)),
            Err(sqlx::Error::Decode(e)) if self.dialect != Dialect::Postgres => {
                if let Some(held) = super::say_again(&format!("{op}: {e}")) {
                    tracing::warn!(statement = op, error = %e, held_back = held, "a row holds text that is not UTF-8; read again as bytes");
                }
                let rows = bind(sqlx::query(AssertSqlSafe(sql(true))))
                    .fetch_all(&self.db)
                    .await
                    .map_err(sql_err!(self, op))?;
                Ok((rows, true))
            }
            Err(e) => Err(sql_err!(self, op)(e)),
        }
    }
}

/// Decodes rows one at a time (`bytes`: their text columns read as bytes): a row of the wrong
/// shape becomes a [`JobRow`] with its `decode_error` set (and is parked by the daemon); only a
/// row whose identity cannot be read is left out, with an error in the log.
pub(super) fn decode_rows(rows: &[AnyRow], bytes: bool) -> Vec<JobRow> {
    rows.iter()
        .filter_map(|r| match JobRow::from_row(r, bytes) {
            Ok(row) => Some(row),
            Err(e) => {
                if let Some(held) = super::say_again(&format!("row: {e}")) {
                    tracing::error!(error = %e, held_back = held, "cron_table row cannot be read; left alone");
                }
                None
            }
        })
        .collect()
}

/// `ids`, then -1 (no row's id) up to `len`.
fn padded(ids: &[i64], len: usize) -> impl Iterator<Item = i64> + '_ {
    ids.iter()
        .copied()
        .chain(std::iter::repeat_n(-1, len.saturating_sub(ids.len())))
}
