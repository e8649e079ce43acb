//! Runs that end together are released together: one transaction, one commit, for all the
//! releases waiting at that moment (`Store::release_together`). In a burst, thousands of runs
//! end within seconds on each node, and one commit per run was most of the database's work.
//!
//! The first release to arrive starts a flush task, which writes what is waiting, then what
//! arrived meanwhile, and so on until nothing waits. Before each batch it gathers: while other
//! runs of the node are still going and fewer than [`ENOUGH`] releases wait, it waits for them
//! for at most [`GATHER`] (see [`keep_gathering`]). A lone run (nothing else going) is released
//! at once, as before; in a burst, runs that end within a few milliseconds of each other share
//! a commit, and the slots they free are claimed again by one pass of the poll loop rather than
//! one pass each. A release that finds itself alone in a batch, or whose batch failed, is written
//! by its own task with the single statement and its retries (`release.rs`): a batch changes
//! how many commits carry the writes, never what is written or how a failure is read back.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};

use crate::store::{Fenced, Release, ReleaseOf, RunKey, Store, StoreError};

/// Most releases in one transaction: bounds how long its row locks are held.
const MOST: usize = 64;

/// The longest a batch waits for more releases to join it. A run's end (`cron_runs.ended`, by
/// the database clock at the release) may be recorded up to this much later than its process
/// ended; its lease, seconds long, is not at stake.
pub(super) const GATHER: Duration = Duration::from_millis(10);

/// Releases waiting that make a batch worth writing without gathering more.
pub(super) const ENOUGH: usize = 16;

/// Whether a batch about to be written waits for more releases: `waiting` are waiting, `going`
/// runs of the node are not yet released (those waiting included), and the batch has waited
/// `waited` so far. It waits only for a batch that has begun (nothing waiting: the flush ends)
/// and only while runs it could take are still going.
pub(super) fn keep_gathering(waiting: usize, going: usize, waited: Duration) -> bool {
    waiting > 0 && waiting < going && waiting < ENOUGH && waited < GATHER
}

/// A release waiting for the flush task; `done` gets its result, or `None`: write it alone.
struct Waiting {
    id: i64,
    token: i64,
    release: Release,
    run: Option<RunKey>,
    done: oneshot::Sender<Option<Result<Fenced, StoreError>>>,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    /// A flush task is running: it will take what is pushed now.
    flushing: bool,
    /// The runs of the node not yet released, as the latest release to arrive counted them.
    going: usize,
}

/// The node's queue of releases; shared by the run tasks.
#[derive(Default, Clone)]
pub(super) struct Releases {
    queue: Arc<Mutex<Queue>>,
    /// Told when a release arrives: a gathering flush looks again.
    arrived: Arc<Notify>,
    /// Held while a batch's transaction runs, and by the lease extension while its statement
    /// runs ([`Releases::exclusive`]): both write several of this node's rows, and in different
    /// orders they could each hold a row the other waits for.
    writes: Arc<tokio::sync::Mutex<()>>,
}

/// Answers every release still waiting when a flush task ends without finishing (a panic, or
/// its runtime shutting down): each is then written alone, and the next release starts a flush
/// of its own.
struct FlushGuard {
    releases: Releases,
    finished: bool,
}

impl Drop for FlushGuard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut q = self.releases.lock();
        q.flushing = false;
        for w in q.waiting.drain(..) {
            let _ = w.done.send(None);
        }
    }
}

impl Releases {
    /// Hands the release of row `id` (claim `token`) to the batch being formed; `going` is how
    /// many runs of the node are not yet released, this one included. `Some`: what writing it
    /// alone answered, or its own fenced result in a batch that landed. `None`: its batch
    /// failed and wrote nothing; the caller writes it alone, with its retries.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn submit(
        &self,
        store: &Store,
        metrics: &Arc<super::metrics::Metrics>,
        node: &str,
        id: i64,
        token: i64,
        release: &Release,
        run: Option<&RunKey>,
        going: usize,
    ) -> Option<Result<Fenced, StoreError>> {
        let (done, result) = oneshot::channel();
        let start = {
            let mut q = self.lock();
            q.waiting.push(Waiting {
                id,
                token,
                release: release.clone(),
                run: run.cloned(),
                done,
            });
            q.going = going;
            !std::mem::replace(&mut q.flushing, true)
        };
        self.arrived.notify_one();
        if start {
            tokio::spawn(
                self.clone()
                    .flush(store.clone(), metrics.clone(), node.to_string()),
            );
        }
        result.await.ok().flatten()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until no batch of releases is being written and keeps others from starting while
    /// the guard lives: for the lease extension's statement (see [`Releases::writes`]).
    pub(super) async fn exclusive(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.writes.lock().await
    }

    /// Waits while [`keep_gathering`] says so: until enough releases wait, every run going
    /// waits, or [`GATHER`] has passed.
    async fn gather(&self) {
        let began = tokio::time::Instant::now();
        loop {
            let arrived = self.arrived.notified();
            {
                let q = self.lock();
                if !keep_gathering(q.waiting.len(), q.going, began.elapsed()) {
                    return;
                }
            }
            if tokio::time::timeout_at(began + GATHER, arrived)
                .await
                .is_err()
            {
                return;
            }
        }
    }

    /// Writes what waits, in batches of at most [`MOST`], until nothing waits.
    async fn flush(self, store: Store, metrics: Arc<super::metrics::Metrics>, node: String) {
        let mut guard = FlushGuard {
            releases: self.clone(),
            finished: false,
        };
        loop {
            self.gather().await;
            let batch: Vec<Waiting> = {
                let mut q = self.lock();
                if q.waiting.is_empty() {
                    q.flushing = false;
                    guard.finished = true;
                    return;
                }
                let n = q.waiting.len().min(MOST);
                q.waiting.drain(..n).collect()
            };
            if let [w] = batch.as_slice() {
                // Alone: the single statement, written here so that what arrives meanwhile
                // gathers into the next batch; its answer, error included, goes to its task.
                let written = store
                    .release(w.id, &node, w.token, &w.release, w.run.as_ref())
                    .await;
                if let Some(w) = batch.into_iter().next() {
                    let _ = w.done.send(Some(written));
                }
                continue;
            }
            let of: Vec<ReleaseOf<'_>> = batch
                .iter()
                .map(|w| ReleaseOf {
                    id: w.id,
                    token: w.token,
                    release: &w.release,
                    run: w.run.as_ref(),
                })
                .collect();
            let written = {
                let _writes = self.exclusive().await;
                store.release_together(&node, &of).await
            };
            drop(of);
            match written {
                // One result per release, in order (a waiter left without one writes alone).
                Ok(fenced) => {
                    for (w, f) in batch.into_iter().zip(fenced) {
                        let _ = w.done.send(Some(Ok(f)));
                    }
                }
                Err(e) => {
                    // A broken connection here may be a failover, whose read-back must not be
                    // missed when each release then lands alone on the new server.
                    metrics.failover_hint(e.kind());
                    tracing::warn!(error = %e, runs = batch.len(), "releasing runs together failed (nothing written); releasing each alone");
                    for w in batch {
                        let _ = w.done.send(None);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(releases: &Releases) -> oneshot::Receiver<Option<Result<Fenced, StoreError>>> {
        let (done, rx) = oneshot::channel();
        let mut q = releases.lock();
        q.waiting.push(Waiting {
            id: 1,
            token: 1,
            release: Release {
                slot: 0,
                attempts: 0,
                next_exec: 0,
                clear_run_now: false,
                outcome: None,
            },
            run: None,
            done,
        });
        q.flushing = true;
        rx
    }

    #[test]
    fn a_batch_gathers_only_while_runs_it_could_take_are_going() {
        let ms = Duration::from_millis;
        // A lone run, or every run going already waiting: written at once.
        assert!(!keep_gathering(1, 1, ms(0)));
        assert!(!keep_gathering(5, 5, ms(0)));
        // Others still going: it waits, but not past GATHER nor beyond ENOUGH.
        assert!(keep_gathering(1, 16, ms(0)));
        assert!(keep_gathering(3, 16, GATHER - ms(1)));
        assert!(!keep_gathering(3, 16, GATHER));
        assert!(!keep_gathering(ENOUGH, 40, ms(0)));
        // Nothing waiting: nothing to gather for (the flush ends).
        assert!(!keep_gathering(0, 16, ms(0)));
    }

    #[tokio::test]
    async fn a_lone_release_is_not_held_back() {
        use futures_util::FutureExt;
        let releases = Releases::default();
        let _rx = waiting(&releases);
        releases.lock().going = 1;
        assert!(
            releases.gather().now_or_never().is_some(),
            "nothing else going: the batch is written at once"
        );
    }

    #[tokio::test]
    async fn a_batch_waits_for_the_runs_still_going_and_goes_when_they_are_in() {
        use futures_util::FutureExt;
        let releases = Releases::default();
        let _first = waiting(&releases);
        releases.lock().going = 2;
        let mut gathering = Box::pin(releases.gather());
        assert!(
            (&mut gathering).now_or_never().is_none(),
            "one of two runs in: it waits"
        );
        let _second = waiting(&releases);
        releases.arrived.notify_one();
        // The second one in: it goes well before GATHER runs out (the bound is only a
        // backstop against a hang; the assertion is on which branch ended the wait).
        tokio::time::timeout(GATHER * 100, gathering)
            .await
            .expect("gathering ends");
        let q = releases.lock();
        assert_eq!(q.waiting.len(), 2);
        assert!(!keep_gathering(q.waiting.len(), q.going, Duration::ZERO));
    }

    #[test]
    fn a_flush_that_ends_early_answers_every_waiting_release_and_lets_the_next_start() {
        let releases = Releases::default();
        let mut rx = waiting(&releases);
        drop(FlushGuard {
            releases: releases.clone(),
            finished: false,
        });
        assert!(
            matches!(rx.try_recv(), Ok(None)),
            "answered: write it alone"
        );
        let q = releases.lock();
        assert!(!q.flushing, "the next release starts a flush of its own");
        assert!(q.waiting.is_empty());
    }

    #[test]
    fn a_finished_flush_leaves_the_queue_to_the_next_one() {
        let releases = Releases::default();
        let mut rx = waiting(&releases);
        drop(FlushGuard {
            releases: releases.clone(),
            finished: true,
        });
        assert!(rx.try_recv().is_err(), "not answered by the guard");
        assert!(releases.lock().flushing);
    }
}
