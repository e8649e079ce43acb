//! Housekeeping: pruning the history under `[history]`, by one node of the cluster at a time.
//!
//! Every node tries to take the `history` duty every `prune_interval` (the first time one poll
//! interval after start). The holder deletes in batches of [`BATCH`] rows, each batch one
//! statement fenced by the duty's token, and extends the duty between batches; a pause after
//! each batch leaves the database to the claims. What it removed is logged, counted in the
//! metrics and recorded in `cron_duties.last_result`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Shared;
use crate::model::retention::{BATCH, Pruned, cutoff, deletable};
use crate::store::{Duty, Pruned as Table, Store, StoreError};

/// The pruning duty's name in `cron_duties`.
pub const HISTORY_DUTY: &str = "history";
/// Pause after each deleted batch.
const BATCH_PAUSE: Duration = Duration::from_millis(10);

/// Why a round ended early.
enum Halt {
    /// The duty's lease was lost or the node is stopping: nothing more may be deleted.
    Lost,
    Db(StoreError),
}

impl From<StoreError> for Halt {
    fn from(e: StoreError) -> Halt {
        Halt::Db(e)
    }
}

pub(super) async fn housekeeping_loop(shared: Arc<Shared>) {
    let mut wait = shared.config().daemon.poll_interval;
    loop {
        tokio::time::sleep(super::pool_trim::apart_now(wait)).await;
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        // Every node, duty or not: what a round of runs (outputs of up to a MiB, on several
        // threads' arenas) left free in the allocator goes back to the system.
        let _ = tokio::task::spawn_blocking(super::heap::trim).await;
        let config = shared.config();
        wait = config.history.prune_interval;
        let lease_ms = config.daemon.lease.as_millis() as i64;
        let duty = match shared
            .store
            .duty_take(HISTORY_DUTY, &shared.node, lease_ms)
            .await
        {
            Ok(Some(duty)) => duty,
            Ok(None) => {
                tracing::debug!("history pruning: another node holds the duty");
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not take the history pruning duty");
                shared.metrics.database_error(e.kind());
                continue;
            }
        };
        let mut pruned = Pruned::default();
        let ended = prune(&shared, &duty, lease_ms, &mut pruned).await;
        if pruned != Pruned::default() {
            tracing::info!(%pruned, "history pruned");
        }
        match ended {
            Ok(()) => {
                if let Err(e) = shared.store.duty_done(&duty, &pruned.to_string()).await {
                    tracing::warn!(error = %e, "could not record the pruning round");
                }
                tracing::debug!("history pruning round done");
            }
            Err(Halt::Lost) => tracing::info!("history pruning stopped: the duty was lost"),
            Err(Halt::Db(e)) => {
                tracing::warn!(error = %e, "history pruning stopped by a database error");
                shared.metrics.database_error(e.kind());
            }
        }
    }
}

/// One round under `duty`: runs by age, runs by count per job, audit rows by age.
async fn prune(
    shared: &Shared,
    duty: &Duty,
    lease_ms: i64,
    pruned: &mut Pruned,
) -> Result<(), Halt> {
    let store = &shared.store;
    let history = shared.config().history.clone();
    // First: a value in use that went missing keeps its jobs from every node (a node claims a
    // placed row only with its value) until it is back, and a round may stop early below.
    // Neither failure stops the round's pruning, nor the other.
    match store.restore_placements().await {
        Ok(restored) if restored > 0 => {
            tracing::info!(restored, "placement values in use were missing; added back");
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(error = %e, "could not add back the placement values in use; pruning goes on");
            shared.metrics.database_error(e.kind());
        }
    }
    match store.prune_placements().await {
        Ok(deleted) => pruned.placements += deleted,
        Err(e) => {
            tracing::warn!(error = %e, "could not tidy the placement values; pruning goes on");
            shared.metrics.database_error(e.kind());
        }
    }
    let now = store.now().await?;
    if let Some(cut) = cutoff(now, history.keep) {
        loop {
            let candidates = store
                .prune_candidates_by_age(Table::Runs, cut, BATCH)
                .await?;
            let ids = deletable(&candidates, &store.claimed_jobs().await?);
            let n = delete(shared, duty, lease_ms, Table::Runs, &ids).await?;
            pruned.runs_by_age += n;
            if n == 0 || (candidates.len() as i64) < BATCH {
                break;
            }
        }
    }
    if let Some(keep) = history.keep_runs {
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        // Jobs a page at a time, each page one statement: a table of thousands of jobs costs
        // a few statements per round, not one per job.
        let mut after = i64::MIN;
        loop {
            let page = store.run_count_boundaries(after, keep, BATCH).await?;
            for (_, job, boundary) in &page {
                let Some(boundary) = *boundary else { continue };
                // A claimed job keeps only its current slot's runs (as by age): a job claimed
                // most of the time (long runs, a wait on a lock) is held to its count too.
                loop {
                    let candidates = store.runs_up_to(job, boundary, BATCH).await?;
                    let ids = deletable(&candidates, &store.claimed_jobs().await?);
                    let n = delete(shared, duty, lease_ms, Table::Runs, &ids).await?;
                    pruned.runs_by_count += n;
                    if n == 0 || (candidates.len() as i64) < BATCH {
                        break;
                    }
                }
            }
            match page.last() {
                Some((id, _, _)) if page.len() as i64 == BATCH => after = *id,
                _ => break,
            }
            tokio::time::sleep(BATCH_PAUSE).await;
        }
    }
    for (table, keep) in [
        (Table::Audit, history.keep_audit),
        (Table::Events, history.keep),
    ] {
        let Some(cut) = cutoff(now, keep) else {
            continue;
        };
        loop {
            let candidates = store.prune_candidates_by_age(table, cut, BATCH).await?;
            let ids: Vec<i64> = candidates.iter().map(|(id, _, _)| *id).collect();
            let n = delete(shared, duty, lease_ms, table, &ids).await?;
            match table {
                Table::Events => pruned.events += n,
                _ => pruned.audit += n,
            }
            if n == 0 || (candidates.len() as i64) < BATCH {
                break;
            }
        }
    }
    if let Some(cut) = cutoff(now, history.keep) {
        let actor = crate::exec::account::this_process(Some(&format!(
            "daemon {}",
            shared.config().node_name
        )));
        let removed = store.remove_done_one_offs(cut, &actor).await?;
        for name in &removed {
            tracing::info!(job = %name, "one-off job done and past [history] keep; removed");
        }
        pruned.one_offs += removed.len() as u64;
    }
    Ok(())
}

/// Deletes one batch under the duty, then extends it and pauses.
async fn delete(
    shared: &Shared,
    duty: &Duty,
    lease_ms: i64,
    table: Table,
    ids: &[i64],
) -> Result<u64, Halt> {
    let store: &Store = &shared.store;
    let n = store.prune_rows(table, ids, duty).await?;
    if n > 0 {
        shared.metrics.pruned(table.table(), n);
    }
    if shared.stopping.load(Ordering::SeqCst) || !store.duty_extend(duty, lease_ms).await? {
        return Err(Halt::Lost);
    }
    tokio::time::sleep(BATCH_PAUSE).await;
    Ok(n)
}
