//! The lease extension and the trust watch (`lease.rs`) on a thread of their own, with a
//! runtime and a pool of their own.
//!
//! The rest of the daemon runs on one thread (`cli/mod.rs`): in a burst, one thread that runs
//! every task costs fewer thread wake-ups per run than a pool of workers handing tasks to each
//! other. But on one thread, anything that blocks it for a while (a slow name-service lookup, a
//! log write to a full pipe) stalls every task there. The lease extension must not stall with
//! them: while a node's runs are alive, their leases are kept, and a claim is trusted only
//! while the extensions land. So the two loops run here, on their own timers, and extend through
//! their own connections (at most [`LEASE_POOL`]), which no burst of starts and releases can
//! hold, and which no other thread's runtime has to drive.
//!
//! What they share with the rest is plain shared state: the supervision map (a mutex held for
//! moments, never across an await), the releases' write lock (`release_batch.rs`), metrics and
//! channels that work across runtimes. A claim whose trust ends is stopped through its run task
//! and, should the main thread be stalled, by the reaper (`exec/reaper.rs`, a process of its
//! own), whose deadline only the extensions here move.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::{Shared, lease};

/// Most connections of the lease thread's pool: one extension at a time, and one more while a
/// broken connection is being replaced.
pub(super) const LEASE_POOL: u32 = 2;

/// The running lease thread; [`Lease::stop`] ends it.
pub(super) struct LeaseThread {
    stop: oneshot::Sender<()>,
    done: oneshot::Receiver<()>,
}

/// Starts the lease extension and the trust watch on a thread of their own. Should the thread
/// or its runtime not start (the system is out of threads), they run as tasks of the caller's
/// runtime with the daemon's pool instead, and the error is logged.
pub(super) fn start(shared: Arc<Shared>) -> Lease {
    let (stop, stop_rx) = oneshot::channel();
    let (done_tx, done) = oneshot::channel();
    let thread_shared = shared.clone();
    let started = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .and_then(|runtime| {
            std::thread::Builder::new()
                .name("lease".into())
                .spawn(move || {
                    runtime.block_on(run(thread_shared, stop_rx));
                    let _ = done_tx.send(());
                })
        });
    match started {
        Ok(_) => Lease::Thread(LeaseThread { stop, done }),
        Err(e) => {
            tracing::error!(error = %e, "no thread for the lease extension; it shares the daemon's");
            Lease::Tasks(vec![
                tokio::spawn(lease::lease_loop(shared.clone(), shared.store.clone())),
                tokio::spawn(lease::trust_watch(shared)),
            ])
        }
    }
}

/// The lease extension, where it runs.
pub(super) enum Lease {
    Thread(LeaseThread),
    Tasks(Vec<tokio::task::JoinHandle<()>>),
}

impl Lease {
    /// Ends the lease extension and the trust watch (every run is released by then) and waits
    /// for the thread to end.
    pub(super) async fn stop(self) {
        match self {
            Lease::Thread(t) => {
                let _ = t.stop.send(());
                let _ = t.done.await;
            }
            Lease::Tasks(tasks) => {
                for t in tasks {
                    t.abort();
                }
            }
        }
    }
}

/// The thread's work: both loops until told to stop (or the daemon's side is dropped).
async fn run(shared: Arc<Shared>, stop: oneshot::Receiver<()>) {
    // Opened here, so that this runtime drives its connections.
    let (store, own) = match shared.store.own_pool(LEASE_POOL) {
        Ok(store) => (store, true),
        Err(e) => {
            tracing::error!(error = %e, "no pool of its own for the lease extension; it shares the daemon's");
            (shared.store.clone(), false)
        }
    };
    tokio::select! {
        _ = lease::lease_loop(shared.clone(), store.clone()) => {}
        _ = lease::trust_watch(shared.clone()) => {}
        _ = stop => {}
    }
    if own {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), store.close()).await;
    }
}
