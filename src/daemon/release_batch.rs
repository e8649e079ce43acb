//! Runs that end together are released together: one transaction, one commit, for all the
//! releases waiting at that moment (`Store::release_together`). In a burst, thousands of runs
//! end within seconds on each node, and one commit per run was most of the database's work.
//!
//! No timer and no wait: the first release to arrive starts a flush task, which writes what is
//! waiting, then what arrived meanwhile, and so on until nothing waits. A lone release therefore
//! goes alone at once, as before, and batches form only while the database is busy with the
//! previous one. A release that finds itself alone in a batch, or whose batch failed, is written
//! by its own task with the single statement and its retries (`release.rs`): a batch changes
//! how many commits carry the writes, never what is written or how a failure is read back.

use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::store::{Fenced, Release, ReleaseOf, RunKey, Store, StoreError};

/// Most releases in one transaction: bounds how long its row locks are held.
const MOST: usize = 64;

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
}

/// The node's queue of releases; shared by the run tasks.
#[derive(Default, Clone)]
pub(super) struct Releases {
    queue: Arc<Mutex<Queue>>,
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
    /// Hands the release of row `id` (claim `token`) to the batch being formed. `Some`: what
    /// writing it alone answered, or its own fenced result in a batch that landed. `None`: its
    /// batch failed and wrote nothing; the caller writes it alone, with its retries.
    pub(super) async fn submit(
        &self,
        store: &Store,
        node: &str,
        id: i64,
        token: i64,
        release: &Release,
        run: Option<&RunKey>,
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
            !std::mem::replace(&mut q.flushing, true)
        };
        if start {
            tokio::spawn(self.clone().flush(store.clone(), node.to_string()));
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

    /// Writes what waits, in batches of at most [`MOST`], until nothing waits.
    async fn flush(self, store: Store, node: String) {
        let mut guard = FlushGuard {
            releases: self.clone(),
            finished: false,
        };
        loop {
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
