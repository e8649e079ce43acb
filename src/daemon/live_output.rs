//! A long run's output as it comes: every `[daemon] live_output` (5 s by default), the output
//! so far of each run of this node that has run that long and printed since is stored in its
//! `running` record, so that any node's dashboard (and `sqlcron history`) can follow it. Short
//! runs (a midnight burst) write nothing more than before. Each write is fenced by the record's
//! key, token and `running` outcome, so it can never touch a finished record: the release
//! writes the final output, and a late write matches nothing.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::exec::output_tail::SharedTail;

use super::Shared;

/// What the loop needs of a running run: its record's key and its output's tail.
#[derive(Debug)]
pub(crate) struct LiveRun {
    pub slot: i64,
    pub attempt: u32,
    pub tail: SharedTail,
    /// Bytes of output the last stored copy covered.
    pub stored: u64,
    pub since: Instant,
}

/// A run whose output may be due: supervision key, job, slot, attempt, bytes stored, tail.
type Taken = ((i64, i64), String, i64, u32, u64, SharedTail);

/// One write to do: the supervision key, the record's key and the text.
struct Due {
    key: (i64, i64),
    job: String,
    slot: i64,
    attempt: u32,
    pushed: u64,
    text: String,
}

pub(super) async fn live_output_loop(shared: Arc<Shared>) {
    loop {
        let every = shared.config().daemon.live_output;
        if every.is_zero() {
            // Off: look again after a reload may have turned it on.
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            continue;
        }
        tokio::time::sleep(every).await;
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        // The tails are taken under the supervision lock (an Arc each) and copied after it,
        // so the lease extension never waits for a copy of a run's output.
        let taken: Vec<Taken> = {
            let sup = shared.supervision();
            sup.iter()
                .filter_map(|(key, r)| {
                    let live = r.live.as_ref()?;
                    (r.running && r.interrupted.is_none() && live.since.elapsed() >= every).then(
                        || {
                            (
                                *key,
                                r.job.clone(),
                                live.slot,
                                live.attempt,
                                live.stored,
                                live.tail.clone(),
                            )
                        },
                    )
                })
                .collect()
        };
        let due: Vec<Due> = taken
            .into_iter()
            .filter_map(|(key, job, slot, attempt, stored, tail)| {
                let tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                (tail.pushed() != stored).then(|| Due {
                    key,
                    job,
                    slot,
                    attempt,
                    pushed: tail.pushed(),
                    text: tail.text(),
                })
            })
            .collect();
        for d in due {
            match shared
                .store
                .store_live_output(&d.job, d.slot, d.attempt, d.key.1, &d.text)
                .await
            {
                // Not written (the record ended, or is not this token's): tried again next time.
                Ok(false) => {}
                Ok(true) => {
                    if let Some(live) = shared
                        .supervision()
                        .get_mut(&d.key)
                        .and_then(|r| r.live.as_mut())
                    {
                        live.stored = d.pushed;
                    }
                }
                Err(e) => {
                    tracing::debug!(job = %d.job, error = %e, "could not store the output so far (the run's end stores it)");
                }
            }
        }
    }
}
