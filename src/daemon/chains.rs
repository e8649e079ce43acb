//! Job chains (`after`): every node looks for finished runs of the upstreams every few seconds,
//! and at once when it has just finished a run of one, and makes a trigger row
//! (`job#after-<run id>`) for each run that matches. The trigger row is a one-off with the job's
//! definition: it runs once through the usual claim, lease and takeover, so the chained run is
//! exactly once however many nodes saw the upstream run, and whatever happened to the node that
//! ran it (its run is in the history: any node finds it).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Shared;
use crate::model::chains::{
    After, Upstream, set_by_no_node, trigger_name, triggered_job, triggers,
};
use crate::store::StoreError;
use crate::store::chains::{Advance, ChainRow, NewTrigger};

/// The longest a node waits between two looks for finished upstream runs while some row names
/// upstreams.
const LOOK_EVERY: Duration = Duration::from_secs(5);
/// ... and while none does (a row made with SQL that names upstreams is seen within this; its
/// chain starts at its upstreams' next run).
const LOOK_IDLE: Duration = Duration::from_secs(30);
/// Upstream runs read per upstream and look.
const RUNS_PER_LOOK: i64 = 200;
pub(super) async fn chain_loop(shared: Arc<Shared>) {
    loop {
        let config = shared.config();
        let chained = !shared.upstreams.lock().unwrap().is_empty()
            || config.jobs.iter().any(|j| !j.after.is_empty());
        let every = if chained {
            config.daemon.poll_interval.min(LOOK_EVERY)
        } else {
            // Drawn anew each time: the idle look does not keep meeting the others on the pool.
            super::pool_trim::apart_now(LOOK_IDLE)
        };
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shared.chains_wake.notified() => {}
        }
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        if let Err(e) = look(&shared).await {
            tracing::warn!(error = %e, "could not look for finished upstream runs");
            shared.metrics.database_error(e.kind());
        }
    }
}

impl Shared {
    /// A run of `job` ended here: if a chain waits for it, look now.
    pub(super) fn upstream_finished(&self, job: &str) {
        let job = triggered_job(job).unwrap_or(job);
        if self.upstreams.lock().unwrap().contains(job) {
            self.chains_wake.notify_one();
        }
    }
}

/// One look at every row that names upstreams.
async fn look(shared: &Shared) -> Result<(), StoreError> {
    let rows = shared.store.chain_rows().await?;
    let mut names = HashSet::new();
    let mut chains = vec![];
    for row in rows {
        let parsed = serde_json::from_str(&row.after)
            .ok()
            .and_then(|v| crate::model::chains::from_json(&v).ok());
        if let Some(after) = parsed {
            names.extend(after.iter().map(|a| a.job.clone()));
            chains.push((row, after));
        }
    }
    *shared.upstreams.lock().unwrap() = names;
    if chains.is_empty() {
        return Ok(());
    }
    let now = shared.store.now().await?;
    for (row, after) in chains {
        // One row's failure (a database error, a name the database refuses) leaves the others
        // to be followed.
        if let Err(e) = follow(shared, &row, &after, now).await {
            tracing::warn!(job = %row.name, error = %e, "could not follow the job's upstreams");
            shared.metrics.database_error(e.kind());
        }
    }
    Ok(())
}

/// Moves one row's cursor over its upstreams' new runs, making a trigger row for each that
/// matches. Stops at the first cursor another node moved first: that node is on it.
async fn follow(
    shared: &Shared,
    row: &ChainRow,
    after: &[After],
    now: i64,
) -> Result<(), StoreError> {
    let store = &shared.store;
    let actor = crate::exec::account::this_process(Some(&format!("daemon {}", shared.node)));
    let mut old = row.cursor.clone();
    let parsed = old
        .as_deref()
        .map(serde_json::from_str::<BTreeMap<String, i64>>);
    if let Some(Err(e)) = &parsed
        && let Some(held) = crate::store::say_again(&format!("chain position: {}", row.name))
    {
        tracing::warn!(job = %row.name, error = %e, held_back = held, "a chain's position that cannot be read (a writer's); each upstream starts again as a new one");
    }
    let mut cursor = parsed.and_then(Result::ok).unwrap_or_default();
    // An upstream no longer named is forgotten (named again, it starts afresh); a new upstream
    // starts at its latest run: the runs before the chain existed do not count (one still
    // going above every finished one counts when it ends: `Store::chain_start`).
    let before = cursor.len();
    cursor.retain(|job, _| after.iter().any(|a| &a.job == job));
    let mut fresh = cursor.len() != before;
    let mut started = HashSet::new();
    for a in after {
        if !cursor.contains_key(&a.job) {
            cursor.insert(a.job.clone(), store.chain_start(&a.job).await?);
            started.insert(a.job.as_str());
            fresh = true;
        }
    }
    // A position below 0 or past every run record was set by no node (a writer's SQL, a
    // history whose ids started again, as MySQL's `TRUNCATE` does, or retention that pruned
    // every record after it): past every record, no run ever came after it and the chain
    // waited for good, silently; below 0, every run of the history was looked at again. Set
    // where a new upstream starts, but never past the newest record read with the position
    // (a run that ended since is followed), with a warning once the move is written. A
    // position within the records is the chain's own: one past the upstream's last run means
    // its runs were pruned, and the next run's id is above it.
    let mut moved = vec![];
    for a in after {
        let at = cursor[&a.job];
        // The newest record's id that could not be read checks below 0 only.
        let no_node = row
            .newest_run
            .map_or(at < 0, |newest| set_by_no_node(at, newest));
        if started.contains(a.job.as_str()) || !no_node {
            continue;
        }
        let start = store.chain_start(&a.job).await?;
        let start = row.newest_run.map_or(start, |newest| start.min(newest));
        moved.push((a.job.as_str(), at, start));
        cursor.insert(a.job.clone(), start);
        fresh = true;
    }
    let text = |c: &BTreeMap<String, i64>| serde_json::to_string(c).unwrap_or_default();
    if fresh {
        let new = text(&cursor);
        if store
            .advance_chain(&row.name, old.as_deref(), &new, None, &actor)
            .await?
            == Advance::Lost
        {
            return Ok(());
        }
        old = Some(new);
        for (upstream, at, start) in moved {
            if let Some(held) =
                crate::store::say_again(&format!("chain position: {} {upstream}", row.name))
            {
                tracing::warn!(job = %row.name, upstream = %upstream, cursor = at, last_run_id = start, held_back = held, "a chain's position below 0 or past every run record (a writer's, ids that started again, or every later record pruned); set where a new upstream starts (runs before it trigger nothing)");
            }
        }
    }
    for a in after {
        let from = cursor[&a.job];
        let runs = store.upstream_runs(&a.job, from, RUNS_PER_LOOK).await?;
        let (found, end) = triggers(a, &runs, from, now);
        for t in found {
            cursor.insert(a.job.clone(), t.run.id);
            let new = text(&cursor);
            let ended = t.run.ended.unwrap_or(now);
            let at = chrono::DateTime::from_timestamp(ended / 1000, 0)
                .unwrap_or_default()
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            // A paused job lets its triggers pass.
            let trigger = row.enabled.then(|| NewTrigger {
                name: trigger_name(&row.name, t.run.id),
                schedule: format!("@at {at}"),
                starting_deadline: a.within.map_or_else(
                    || crate::store::backfill::BACKFILL_DEADLINE.to_string(),
                    crate::model::duration::format_duration,
                ),
                upstream: Upstream::of(&t.run).to_json(),
            });
            let advance = store
                .advance_chain(&row.name, old.as_deref(), &new, trigger.as_ref(), &actor)
                .await?;
            if advance == Advance::Lost {
                return Ok(());
            }
            old = Some(new);
            match &trigger {
                Some(tr) if advance == Advance::Taken => {
                    tracing::warn!(job = %row.name, upstream = %a.job, run_id = t.run.id, row = %tr.name, "chained run not made: a row that is not this chain's trigger holds its name; the chain goes on with the next runs");
                }
                Some(tr) => {
                    tracing::info!(job = %row.name, upstream = %a.job, run_id = t.run.id, outcome = %t.run.outcome, row = %tr.name, "chained run made")
                }
                None => {
                    tracing::info!(job = %row.name, upstream = %a.job, run_id = t.run.id, "chained run let pass: the job is paused")
                }
            }
        }
        if end > cursor[&a.job] {
            cursor.insert(a.job.clone(), end);
            let new = text(&cursor);
            if store
                .advance_chain(&row.name, old.as_deref(), &new, None, &actor)
                .await?
                == Advance::Lost
            {
                return Ok(());
            }
            old = Some(new);
        }
    }
    Ok(())
}
