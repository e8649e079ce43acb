//! A backfill's plan and its queueing, shared by `sqlcron backfill` and the dashboard: every
//! slot of a job in a past range that has no successful run yet, oldest first, each queued once
//! as a one-off row (`backfill.rs`).

use chrono::{DateTime, SecondsFormat, Utc};

use super::backfill::{Backfilled, backfill_name};
use super::{JobRow, Store};
use crate::model::actor::Actor;
use crate::schedule::Schedule;

/// The most slots one backfill considers: a wider range is refused (narrow it).
pub const MAX_SLOTS: usize = 10_000;

/// What a backfill of a range would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Every slot of the schedule in the range.
    pub slots: usize,
    /// Of those, the ones that already ran successfully.
    pub done: usize,
    /// The slots to queue, oldest first (at most `max`).
    pub todo: Vec<i64>,
}

/// Why a backfill cannot be planned: a sentence for the user.
pub type Refusal = String;

/// The plan for `row` over `[from, to]` (ms), at `now` (the database's clock).
///
/// # Errors
/// A refusal when the job runs on every node, the range is reversed, in the future or holds more
/// than [`MAX_SLOTS`] slots; the store's error as text.
pub async fn plan(
    store: &Store,
    row: &JobRow,
    schedule: &Schedule,
    (from, to): (i64, i64),
    now: i64,
    max: Option<usize>,
) -> Result<Plan, Refusal> {
    if row.run_on.as_deref() == Some("every_node") {
        return Err(format!(
            "{}: runs on every node; backfill one node's copy ({}@NODE)",
            row.name, row.name
        ));
    }
    if to < from {
        return Err("the end of the range is before its start".into());
    }
    if to > now {
        return Err("the range ends in the future: backfill runs past slots only".into());
    }
    let start = DateTime::<Utc>::from_timestamp_millis(from - 1)
        .ok_or_else(|| "the start of the range is out of range".to_string())?;
    let mut slots = vec![];
    for t in schedule.iter_after(start) {
        let ms = t.timestamp_millis();
        if ms > to {
            break;
        }
        if slots.len() == MAX_SLOTS {
            return Err(format!(
                "more than {MAX_SLOTS} slots in the range: narrow it"
            ));
        }
        slots.push(ms);
    }
    let done = store
        .successful_slots(&row.name, from, to)
        .await
        .map_err(|e| e.to_string())?;
    let todo = slots
        .iter()
        .copied()
        .filter(|s| !done.contains(s))
        .take(max.unwrap_or(usize::MAX))
        .collect();
    Ok(Plan {
        slots: slots.len(),
        done: slots.iter().filter(|s| done.contains(s)).count(),
        todo,
    })
}

/// One queued slot: its instant, the one-off row's name, and whether this call made it (false:
/// it was queued already).
pub struct Queued {
    pub slot: i64,
    pub name: String,
    pub created: bool,
}

/// What [`queue`] did: the slots it went through, and whether it stopped because the job's row
/// changed since `row` was read (the slots after were not queued).
pub struct Queueing {
    pub queued: Vec<Queued>,
    pub changed: bool,
}

/// Queues each slot of `todo` as a one-off row of `row`'s definition, audited as `actor`; a
/// slot queued before is left as it is. Each insert checks that the job's row is still `row`
/// (its fingerprint): at the first change, nothing more is queued.
///
/// # Errors
/// The store's error; the slots before it stay queued (queueing again skips them).
pub async fn queue(
    store: &Store,
    row: &JobRow,
    todo: &[i64],
    actor: &Actor,
) -> super::Result<Queueing> {
    let planned = crate::model::job_edit::fingerprint(row);
    let mut queued = Vec::with_capacity(todo.len());
    for &slot in todo {
        let done = store
            .add_backfill(
                &row.name,
                slot,
                &format!("@at {}", rfc3339(slot)),
                row.pool.as_deref(),
                actor,
                &planned,
            )
            .await?;
        if done == Backfilled::Changed {
            return Ok(Queueing {
                queued,
                changed: true,
            });
        }
        queued.push(Queued {
            slot,
            name: backfill_name(&row.name, slot),
            created: done == Backfilled::Added,
        });
    }
    Ok(Queueing {
        queued,
        changed: false,
    })
}

/// `ms` as RFC 3339 in UTC, to the second.
pub fn rfc3339(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Secs, true)
}
