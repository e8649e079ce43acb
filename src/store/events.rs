//! Alert events (`cron_events`); the dead-man's switch's state is in `watches.rs`.
//!
//! An event is made once: its `dedupe` key is unique (a history record raises each kind once; a
//! silence raises one alert per last success), so a scan that reads a record twice, or two nodes
//! that both scan it, make one row. It is delivered under a lease like a run: a claim sets
//! `state = 'sending'`, this node and a new token, and `next_try` to the end of the lease; the
//! end of the delivery is written only under that token. A node that dies while sending leaves
//! the event to be claimed again when the lease ends, with the same id (the receiver's
//! idempotency key).

use sqlx::{AssertSqlSafe, Row};

use super::*;
use crate::model::alerts::Record;

/// An event to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    pub dedupe: String,
    pub job: String,
    pub kind: String,
    pub run_id: Option<i64>,
    /// The hook as stored (`Hook::encode`); empty when no hook is set (recorded only).
    pub hook: String,
    pub payload: String,
}

/// An event this node claimed for delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventClaim {
    pub id: i64,
    pub job: String,
    pub kind: String,
    pub created: i64,
    pub hook: String,
    pub payload: String,
    pub tries: i64,
    pub token: i64,
    pub node: String,
    /// The database clock at the claim.
    pub now: i64,
}

/// How a delivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    Sent,
    /// Failed; try again at `next_try_ms` from now.
    Retry {
        error: String,
        after_ms: i64,
    },
    /// Failed for good (given up, or no hook can be run).
    GaveUp {
        error: String,
    },
}

/// One row of `cron_events`, for `sqlcron events`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EventRow {
    pub id: i64,
    pub job: String,
    pub kind: String,
    pub run_id: Option<i64>,
    #[serde(serialize_with = "crate::model::json_time::instant")]
    pub created: i64,
    pub state: String,
    pub tries: i64,
    pub node: Option<String>,
    #[serde(serialize_with = "crate::model::json_time::opt_instant")]
    pub sent: Option<i64>,
    pub error: Option<String>,
    /// What the event says beyond its kind (a `lost_record`: the run and why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A `lost_record` event's payload as (the node that reported it, what it says).
fn lost_detail(payload: &str) -> Option<(String, String)> {
    let v: serde_json::Value = serde_json::from_str(payload).ok()?;
    let text = |k: &str| v[k].as_str().map(str::to_string).unwrap_or_default();
    Some((
        text("node"),
        format!(
            "slot {} attempt {} token {}: {}",
            text("slot"),
            v["attempt"],
            v["token"],
            text("why")
        ),
    ))
}

const RECORD_COLUMNS: &str = "id, job_name, slot, attempt, node, started, ended, outcome, \
    exit_code, exit_signal, output, skipped_count, message";

/// A run record as the alert scan pages through them: its keys (`id`, `ended`) as they are;
/// a record whose other numbers cannot be read (text a writer put there, on SQLite) is kept
/// with the outcome [`UNREADABLE`](super::run_reads::UNREADABLE), which raises no event, so
/// that the scan pages past it (left out, a batch of such records stopped the scan there).
fn record(r: &sqlx::any::AnyRow) -> std::result::Result<Record, sqlx::Error> {
    let text = |col: &str| text_lossy(r, col);
    let numbers = super::run_reads::lenient_numbers(
        r,
        [
            "slot",
            "attempt",
            "started",
            "exit_code",
            "exit_signal",
            "skipped_count",
        ],
    );
    let [slot, attempt, started, exit_code, signal, skipped_count] = numbers.values;
    let id = r.try_get("id")?;
    let outcome = match numbers.unreadable {
        true => super::run_reads::unreadable(id),
        false => text("outcome")?.unwrap_or_default(),
    };
    Ok(Record {
        id,
        job: text("job_name")?.unwrap_or_default(),
        slot: slot.unwrap_or_default(),
        attempt: attempt.unwrap_or_default(),
        node: text("node")?,
        started,
        ended: r.try_get("ended")?,
        outcome,
        exit_code,
        signal,
        output: text("output")?,
        skipped_count,
        message: text("message")?,
    })
}

impl Store {
    /// The scan position kept with a duty (`cron_duties.position`).
    /// `None` too for a position that is not a whole number (text or a REAL a writer put
    /// there, on SQLite): it failed every round of the scan, for good.
    pub async fn duty_position(&self, name: &str) -> Result<Option<i64>> {
        let row = sqlx::query(AssertSqlSafe(
            self.dialect
                .render("SELECT position FROM cron_duties WHERE name = ?"),
        ))
        .bind(name.to_string())
        .fetch_optional(&self.db)
        .await
        .map_err(sql_err!(self, "read scan position"))?;
        Ok(row.and_then(|r| r.try_get::<Option<i64>, _>("position").ok().flatten()))
    }

    /// Moves a held duty's scan position; `false` when the duty was lost.
    pub async fn set_duty_position(&self, duty: &Duty, position: i64) -> Result<bool> {
        let done = sqlx::query(AssertSqlSafe(self.dialect.render(
            "UPDATE cron_duties SET position = ? WHERE name = ? AND node = ? AND token = ?",
        )))
        .bind(position)
        .bind(duty.name.clone())
        .bind(duty.node.clone())
        .bind(duty.token)
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "move scan position"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Up to `limit` ended history records after `(ended, id)` in `(ended, id)` order, from
    /// `ended >= from` (through the `ended` index).
    pub async fn ended_records(
        &self,
        from: i64,
        after: (i64, i64),
        limit: i64,
    ) -> Result<Vec<Record>> {
        // On SQLite only whole numbers: a REAL `ended` a writer put there compares as a number
        // but cannot be read as one, and a batch the scan could not read to its end stopped it
        // there (text orders after every number, so it is passed over at the end).
        let whole = match self.dialect {
            Dialect::Sqlite => " AND typeof(ended) = 'integer'",
            _ => "",
        };
        self.read_runs(
            "scan ended runs",
            RECORD_COLUMNS,
            &format!(
                "SELECT {{cols}} FROM cron_runs WHERE ended >= ? AND ended >= ?{whole} \
                 AND (ended > ? OR id > ?) ORDER BY cron_runs.ended, cron_runs.id LIMIT ?"
            ),
            |q| {
                q.bind(from)
                    .bind(after.0)
                    .bind(after.0)
                    .bind(after.1)
                    .bind(limit)
            },
            record,
        )
        .await
    }

    /// Up to `limit` of `job`'s records with an id below `before`, newest first.
    pub async fn records_before(&self, job: &str, before: i64, limit: i64) -> Result<Vec<Record>> {
        self.read_runs(
            "read earlier runs",
            RECORD_COLUMNS,
            "SELECT {cols} FROM cron_runs WHERE job_name = ? AND id < ? \
             ORDER BY cron_runs.id DESC LIMIT ?",
            |q| q.bind(job.to_string()).bind(before).bind(limit),
            record,
        )
        .await
    }

    /// Records an event unless one with its dedupe key exists; true if this call made it.
    pub async fn event_create(&self, e: &NewEvent) -> Result<bool> {
        let (ins, conflict) = self.dialect.insert_ignore();
        // Without a hook the event is only recorded (the dead-man's switch, for the metric and
        // `sqlcron events`); with one it is due for delivery at once.
        let (state, next_try) = if e.hook.is_empty() {
            ("recorded", "NULL")
        } else {
            ("pending", "{now}")
        };
        let done = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "{ins} INTO cron_events (dedupe, job_name, kind, run_id, created, hook, payload, \
             state, next_try) VALUES (?, ?, ?, ?, {{now}}, ?, ?, '{state}', {next_try}){conflict}"
        ))))
        .bind(e.dedupe.clone())
        .bind(e.job.clone())
        .bind(e.kind.clone())
        .bind(e.run_id)
        .bind(e.hook.clone())
        .bind(e.payload.clone())
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "record event"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Ids of up to `limit` events whose delivery is due (pending, or sending under a lease
    /// that ended), oldest first.
    pub async fn events_due(&self, limit: i64) -> Result<Vec<i64>> {
        sqlx::query_scalar(AssertSqlSafe(self.dialect.render(
            "SELECT id FROM cron_events WHERE next_try <= {now} ORDER BY next_try, id LIMIT ?",
        )))
        .bind(limit)
        .fetch_all(&self.db)
        .await
        .map_err(sql_err!(self, "find due events"))
    }

    /// Claims event `id` for `lease_ms` if its delivery is due; `None` when another node has it.
    pub async fn event_claim(
        &self,
        id: i64,
        node: &str,
        lease_ms: i64,
    ) -> Result<Option<EventClaim>> {
        let took = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "UPDATE cron_events SET state = 'sending', node = ?, token = {}, \
             tries = CASE WHEN tries < {} THEN tries + 1 ELSE tries END, next_try = {{now}} + ? \
             WHERE id = ? AND state IN ('pending', 'sending') AND next_try <= {{now}}",
            dialect::next_token("token"),
            dialect::TOKEN_WRAP
        ))))
        .bind(node.to_string())
        .bind(lease_ms)
        .bind(id)
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "claim event"))?;
        if took.rows_affected() != 1 {
            return Ok(None);
        }
        // The claim's token first, alone (a number the claim itself wrote): whatever else the
        // row holds, every later write about this claim is fenced by it.
        let token = sqlx::query_scalar::<_, i64>(AssertSqlSafe(self.dialect.render(
            "SELECT token FROM cron_events WHERE id = ? AND node = ? AND state = 'sending'",
        )))
        .bind(id)
        .bind(node.to_string())
        .fetch_optional(&self.db)
        .await
        .map_err(sql_err!(self, "claim event"))?;
        let Some(token) = token else { return Ok(None) };
        let row = sqlx::query(AssertSqlSafe(self.dialect.render(
            "SELECT id, job_name, kind, created, hook, payload, tries, token, node, \
             {now} AS db_now FROM cron_events \
             WHERE id = ? AND node = ? AND token = ? AND state = 'sending'",
        )))
        .bind(id)
        .bind(node.to_string())
        .bind(token)
        .fetch_optional(&self.db)
        .await;
        let row = match row {
            Ok(row) => row,
            Err(sqlx::Error::Decode(e)) => {
                return self.event_unreadable(id, node, token, &e).await;
            }
            Err(e) => return Err(sql_err!(self, "claim event")(e)),
        };
        let Some(r) = row else { return Ok(None) };
        let claim = (|| -> std::result::Result<EventClaim, sqlx::Error> {
            Ok(EventClaim {
                id: r.try_get("id")?,
                job: r.try_get("job_name")?,
                kind: r.try_get("kind")?,
                created: r.try_get("created")?,
                hook: r.try_get("hook")?,
                payload: r.try_get("payload")?,
                tries: r.try_get("tries")?,
                token: r.try_get("token")?,
                node: r.try_get("node")?,
                now: r.try_get("db_now")?,
            })
        })();
        match claim {
            Ok(claim) => Ok(Some(claim)),
            Err(e) => self.event_unreadable(id, node, token, &e).await,
        }
    }

    /// An event this node claimed but cannot read (text that is not UTF-8, or a value of
    /// another type, written with SQL): it is not delivered, but recorded `failed` with the
    /// reason, rather than claimed again at the end of every lease. Fenced by the claim's
    /// `token`: a later claim of the event (this node's lease ended, the row was mended and
    /// claimed again) is not recorded failed by this one.
    async fn event_unreadable(
        &self,
        id: i64,
        node: &str,
        token: i64,
        e: &(dyn std::fmt::Display + Sync),
    ) -> Result<Option<EventClaim>> {
        let error = format!("the event cannot be read: {e}");
        tracing::warn!(event = id, error = %error, "an event that cannot be read; recorded failed");
        sqlx::query(AssertSqlSafe(self.dialect.render(
            "UPDATE cron_events SET state = 'failed', next_try = NULL, error = ? \
             WHERE id = ? AND node = ? AND token = ? AND state = 'sending'",
        )))
        .bind(error)
        .bind(id)
        .bind(node.to_string())
        .bind(token)
        .execute(&self.db)
        .await
        .map_err(sql_err!(self, "claim event"))?;
        Ok(None)
    }

    /// Writes how a claimed delivery ended, under the claim's token; `false` when the claim was
    /// lost (its lease ended and another node claimed the event).
    pub async fn event_finish(&self, claim: &EventClaim, how: &Delivered) -> Result<bool> {
        let (state, next, sent, error) = match how {
            Delivered::Sent => ("sent", "NULL", "{now}", None),
            Delivered::Retry { error, .. } => ("pending", "{now} + ?", "NULL", Some(error)),
            Delivered::GaveUp { error } => ("failed", "NULL", "NULL", Some(error)),
        };
        let mut q = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "UPDATE cron_events SET state = ?, next_try = {next}, sent = {sent}, error = ? \
             WHERE id = ? AND node = ? AND token = ? AND state = 'sending'"
        ))))
        .bind(state);
        if let Delivered::Retry { after_ms, .. } = how {
            q = q.bind(*after_ms);
        }
        let done = q
            .bind(error.cloned())
            .bind(claim.id)
            .bind(claim.node.clone())
            .bind(claim.token)
            .execute(&self.db)
            .await
            .map_err(sql_err!(self, "end event delivery"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Delivers a failed event again: it is pending from now, its tries counted afresh and its
    /// `[alerts] give_up_after` window started anew (`created` is now), and the request is in
    /// the audit trail, in one transaction. False unless the event exists and
    /// failed (one being delivered, or delivered, is left alone).
    pub async fn event_retry(&self, id: i64, actor: &crate::model::actor::Actor) -> Result<bool> {
        let mut tx = self.begin_write().await.map_err(sql_err!(self, "begin"))?;
        let job: Option<String> = sqlx::query_scalar(AssertSqlSafe(
            self.dialect
                .render("SELECT job_name FROM cron_events WHERE id = ? AND state = 'failed'"),
        ))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(sql_err!(self, "read event"))?;
        let Some(job) = job else { return Ok(false) };
        sqlx::query(AssertSqlSafe(self.dialect.render(
            "UPDATE cron_events SET state = 'pending', next_try = {now}, tries = 0, error = NULL, \
             created = {now} WHERE id = ? AND state = 'failed'",
        )))
        .bind(id)
        .execute(&mut *tx)
        .await
        .map_err(sql_err!(self, "retry event"))?;
        self.audit_in(
            &mut *tx,
            actor,
            "event_retry",
            &job,
            Some(format!("event {id}")),
        )
        .await?;
        tx.commit().await.map_err(sql_err!(self, "commit"))?;
        Ok(true)
    }

    /// The newest `limit` events, of one job or all, newest first.
    pub async fn events(&self, job: Option<&str>, limit: i64) -> Result<Vec<EventRow>> {
        let filter = if job.is_some() {
            "WHERE job_name = ?"
        } else {
            ""
        };
        // Read as bytes when some text is not UTF-8 (written with SQL on SQLite or MariaDB):
        // shown with replacements; an event whose numbers cannot be read is left out.
        let (rows, _) = self
            .read_rows_text_or_bytes(
                "read events",
                |bytes| {
                    let cols = dialect::select_list(
                        self.dialect,
                        &["job_name", "kind", "state", "node", "error"],
                        &["id", "run_id", "created", "tries", "sent"],
                        bytes,
                    );
                    let payload = match bytes {
                        true => dialect::bytes_of(self.dialect, "payload"),
                        false => "payload".to_string(),
                    };
                    self.dialect.render(&format!(
                        "SELECT {cols}, CASE WHEN kind = 'lost_record' THEN {payload} END AS lost \
                         FROM cron_events {filter} ORDER BY cron_events.id DESC LIMIT ?"
                    ))
                },
                |q| match job {
                    Some(j) => q.bind(j.to_string()).bind(limit),
                    None => q.bind(limit),
                },
            )
            .await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let text = |c: &str| text_lossy(r, c).ok().flatten();
                let lost = text("lost");
                let lost = lost.as_deref().and_then(lost_detail);
                Some(EventRow {
                    id: r.try_get("id").ok()?,
                    job: text("job_name").unwrap_or_default(),
                    kind: text("kind").unwrap_or_default(),
                    run_id: r.try_get("run_id").ok()?,
                    created: r.try_get("created").ok()?,
                    state: text("state").unwrap_or_default(),
                    tries: r.try_get("tries").ok()?,
                    node: text("node").or_else(|| lost.as_ref().map(|l| l.0.clone())),
                    sent: r.try_get("sent").ok()?,
                    error: text("error"),
                    detail: lost.map(|l| l.1),
                })
            })
            .collect())
    }

    /// Whether any job row has its own alert settings.
    pub async fn any_job_alerts(&self) -> Result<bool> {
        let one: Option<i64> =
            sqlx::query_scalar("SELECT id FROM cron_table WHERE alerts IS NOT NULL LIMIT 1")
                .fetch_optional(&self.db)
                .await
                .map_err(sql_err!(self, "look for alerts"))?;
        Ok(one.is_some())
    }
}
