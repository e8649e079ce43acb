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

use crate::store::{Fenced, Release, ReleaseOf, RunKey, Store};

/// Most releases in one transaction: bounds how long its row locks are held.
const MOST: usize = 64;

/// A release waiting for the flush task; `done` gets its result, or `None`: write it alone.
struct Waiting {
    id: i64,
    token: i64,
    release: Release,
    run: Option<RunKey>,
    done: oneshot::Sender<Option<Fenced>>,
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
}

impl Releases {
    /// Hands the release of row `id` (claim `token`) to the batch being formed. `Some`: it was
    /// written, with its own fenced result. `None`: its write failed (a batch that fails writes
    /// nothing); the caller writes it alone, with its retries.
    pub(super) async fn submit(
        &self,
        store: &Store,
        node: &str,
        id: i64,
        token: i64,
        release: &Release,
        run: Option<&RunKey>,
    ) -> Option<Fenced> {
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

    /// Writes what waits, in batches of at most [`MOST`], until nothing waits.
    async fn flush(self, store: Store, node: String) {
        loop {
            let batch: Vec<Waiting> = {
                let mut q = self.lock();
                if q.waiting.is_empty() {
                    q.flushing = false;
                    return;
                }
                let n = q.waiting.len().min(MOST);
                q.waiting.drain(..n).collect()
            };
            if let [w] = batch.as_slice() {
                // Alone: the single statement, written here so that what arrives meanwhile
                // gathers into the next batch. A failure goes back to its own task.
                let written = store
                    .release(w.id, &node, w.token, &w.release, w.run.as_ref())
                    .await
                    .ok();
                for w in batch {
                    let _ = w.done.send(written);
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
            let written = store.release_together(&node, &of).await;
            drop(of);
            match written {
                // One result per release, in order (a waiter left without one writes alone).
                Ok(fenced) => {
                    for (w, f) in batch.into_iter().zip(fenced) {
                        let _ = w.done.send(Some(f));
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
