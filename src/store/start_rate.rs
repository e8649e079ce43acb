//! `cron_start_rate`: the start-rate budgets every node shares (the arithmetic is in
//! `model/start_rate.rs`). A take reads the budget's clock and moves it forward with a
//! compare-and-set; no lock is held between the two, and a take that lost the race reads again.

use std::collections::BTreeMap;

use sqlx::{AssertSqlSafe, Row};

use super::{Fenced, PoolWait, Result, Store, StoreError, dialect, text_column, text_lossy};
use crate::model::start_rate::{Grant, Rate};

/// One budget as the database has it.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub name: String,
    pub rate: Rate,
    /// The budget's clock (microseconds, database time).
    pub tat: i64,
}

/// How many times a take reads again after losing the compare-and-set to another node.
const TAKE_TRIES: usize = 20;

fn budget(r: &sqlx::any::AnyRow) -> std::result::Result<Budget, sqlx::Error> {
    let burst: i64 = r.try_get("burst")?;
    Ok(Budget {
        name: text_column(r, "name")
            .ok()
            .flatten()
            .ok_or_else(|| sqlx::Error::Decode("the name is not UTF-8 text".into()))?,
        rate: Rate {
            per_second: r.try_get("per_second")?,
            burst: burst.clamp(1, u32::MAX.into()) as u32,
        },
        tat: r.try_get("tat")?,
    })
}

/// A budget row as the node obeys it, or `None` with a warning when SQL wrote something it
/// cannot read or a rate that is not a positive number: that budget is not applied (the others
/// are), rather than every claim failing.
fn usable(r: &sqlx::any::AnyRow) -> Option<Budget> {
    match budget(r) {
        Ok(b) if b.rate.per_second.is_finite() && b.rate.per_second > 0.0 => Some(b),
        Ok(b) => {
            let key = format!("start rate: {} {}", b.name, b.rate.per_second);
            if let Some(held) = super::say_again(&key) {
                tracing::warn!(budget = %b.name, per_second = b.rate.per_second, held_back = held, "cron_start_rate: the rate must be a positive number; this budget is not applied");
            }
            None
        }
        Err(e) => {
            let name = text_lossy(r, "name").ok().flatten().unwrap_or_default();
            if let Some(held) = super::say_again(&format!("start rate: {name}: {e}")) {
                tracing::warn!(budget = %name, error = %e, held_back = held, "cron_start_rate: a row that cannot be read; this budget is not applied");
            }
            None
        }
    }
}

impl Store {
    /// Writes the budgets a file sets (their clocks kept) and removes those it sets to 0.
    pub async fn apply_start_rates(&self, rates: &BTreeMap<String, Option<Rate>>) -> Result<()> {
        let upsert = self.dialect.render(&format!(
            "INSERT INTO cron_start_rate (name, per_second, burst, tat) VALUES (?, ?, ?, 0){}",
            self.dialect
                // `name` too: on MySQL a row made with SQL whose name differs only by trailing
                // spaces (`cluster `) is this one to the key, and is given the file's name, which
                // the nodes look the budget up by.
                .on_conflict_update("name", &["name", "per_second", "burst"])
        ));
        for (name, rate) in rates {
            let done = match rate {
                Some(rate) => {
                    sqlx::query(AssertSqlSafe(upsert.clone()))
                        .bind(name.clone())
                        .bind(rate.per_second)
                        .bind(i64::from(rate.burst))
                        .execute(&self.db)
                        .await
                }
                None => {
                    sqlx::query(AssertSqlSafe(
                        self.dialect
                            .render("DELETE FROM cron_start_rate WHERE name = ?"),
                    ))
                    .bind(name.clone())
                    .execute(&self.db)
                    .await
                }
            };
            done.map_err(sql_err!(self, "write start rate"))?;
        }
        Ok(())
    }

    /// Every budget, and the database time of the read (milliseconds).
    pub async fn start_rates(&self) -> Result<(i64, Vec<Budget>)> {
        // Read as bytes when a name is not UTF-8 (SQLite, MariaDB): that budget is not applied,
        // and every claim is not held up by it.
        let (rows, _) = self
            .read_rows_text_or_bytes(
                "read start rates",
                |bytes| {
                    let cols = dialect::select_list(
                        self.dialect,
                        &["name"],
                        &["per_second", "burst", "tat"],
                        bytes,
                    );
                    self.dialect.render(&format!(
                        "SELECT {cols}, {{now}} AS db_now FROM cron_start_rate \
                         ORDER BY cron_start_rate.name"
                    ))
                },
                |q| q,
            )
            .await?;
        let budgets = rows.iter().filter_map(usable).collect();
        let now = match rows.first() {
            Some(r) => r
                .try_get("db_now")
                .map_err(sql_err!(self, "read start rates"))?,
            None => self.now().await?,
        };
        Ok((now, budgets))
    }

    /// Takes up to `want` starts from the budget `name`: the database time of the take and
    /// what was taken, or `None` when there is no such budget (no limit).
    pub async fn take_starts(&self, name: &str, want: usize) -> Result<Option<(i64, Grant)>> {
        let read = self.dialect.render(
            "SELECT name, per_second, burst, tat, {now} AS db_now FROM cron_start_rate WHERE name = ?",
        );
        let write = self
            .dialect
            .render("UPDATE cron_start_rate SET tat = ? WHERE name = ? AND tat = ?");
        for _ in 0..TAKE_TRIES {
            let Some(row) = sqlx::query(AssertSqlSafe(read.clone()))
                .bind(name.to_string())
                .fetch_optional(&self.db)
                .await
                .map_err(sql_err!(self, "read start rate"))?
            else {
                return Ok(None);
            };
            let Some(b) = usable(&row) else {
                return Ok(None);
            };
            let now: i64 = row
                .try_get("db_now")
                .map_err(sql_err!(self, "read start rate"))?;
            let grant = b.rate.take(b.tat, now, want);
            if grant.waits_ms.is_empty() {
                return Ok(Some((now, grant)));
            }
            let done = sqlx::query(AssertSqlSafe(write.clone()))
                .bind(grant.tat)
                .bind(name.to_string())
                .bind(b.tat)
                .execute(&self.db)
                .await
                .map_err(sql_err!(self, "take starts"));
            match done {
                Ok(done) if done.rows_affected() == 1 => return Ok(Some((now, grant))),
                Ok(_) => {}
                // Another node's take won (Galera reports the lost race as a deadlock).
                Err(e) if e.kind() == "deadlock" => {}
                Err(e) => return Err(e),
            }
        }
        // Twenty nodes in a row took starts between this node's read and its write: it takes
        // none this time (its rows go back, in their turn).
        let now = self.now().await?;
        Ok(Some((
            now,
            Grant {
                waits_ms: vec![],
                tat: 0,
                next_room_ms: now,
                interval_ms: 1,
            },
        )))
    }

    /// Hands a claimed row that did not get a start from the budget back, unrun, fenced by its
    /// claim: due again at `next_exec` (its slot, so that it keeps its place among the oldest),
    /// the wait not counted against its slot's misfire threshold when `held_on_time` (the slot
    /// was not yet missed when the rate first held it).
    ///
    /// A row `taken_over` from another node goes back as it was before the takeover: claimed
    /// by that node (`prev_exec_by`) without a lease, so that the next claim is a takeover again
    /// and accounts for the run that node may have started ([`Store::previous_run`] finds it
    /// below the new token); an edit made meanwhile is left for the release of that run.
    pub async fn give_back(
        &self,
        id: i64,
        node: &str,
        token: i64,
        next_exec: i64,
        held_on_time: bool,
        taken_over: bool,
    ) -> Result<Fenced> {
        // A row edited with SQL while claimed is prepared again (as a release does), and a wait
        // counts as the rate's only for a slot not yet past the default misfire threshold when
        // first held (an older one keeps the misfire policy).
        let text = match taken_over {
            false => {
                "UPDATE cron_table SET next_exec = CASE WHEN dirty = 1 THEN NULL ELSE ? END, \
                 dirty = 0, \
                 pool_wait = CASE WHEN pool_wait = 0 AND ? = 1 THEN ? ELSE pool_wait END, \
                 exec_by = NULL, lease_until = NULL, claim_id = NULL \
                 WHERE id = ? AND exec_by = ? AND token = ? AND prev_exec_by IS NULL"
            }
            true => {
                "UPDATE cron_table SET next_exec = ?, \
                 pool_wait = CASE WHEN pool_wait = 0 AND ? = 1 THEN ? ELSE pool_wait END, \
                 exec_by = prev_exec_by, lease_until = NULL, claim_id = NULL \
                 WHERE id = ? AND exec_by = ? AND token = ? AND prev_exec_by IS NOT NULL"
            }
        };
        let done = sqlx::query(AssertSqlSafe(self.dialect.render(text)))
            .bind(next_exec)
            .bind(i64::from(held_on_time))
            .bind(PoolWait::Waiting.as_column())
            .bind(id)
            .bind(node.to_string())
            .bind(token)
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, "give back a claim"))?;
        Ok(Fenced::from_rows(done.rows_affected()))
    }
}
