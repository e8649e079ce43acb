//! The lease extension and the trust watch (`lease.rs`) on a thread of their own, with a
//! runtime and a pool of their own.
//!
//! The rest of the daemon runs on one thread (`cli/mod.rs`): in a burst, one thread that runs
//! every task costs fewer thread wake-ups per run than a pool of workers handing tasks to each
//! other. But on one thread, anything that blocks it for a while (a slow name-service lookup, a
//! log write to a full pipe) stalls every task there. The lease extension must not stall with
//! them for a short while: the runs are alive, and their claims should not be lost to a
//! stall of a few seconds. So the two loops run here, on their own timers, and extend through
//! their own connections (at most [`LEASE_POOL`]), which no burst of starts and releases can
//! hold, and which no other thread's runtime has to drive. One is open before any claim and
//! kept while the node runs jobs: a run's first extension must not wait to connect. A node
//! long quiet gives it back (`lease_connection.rs`, whose requests this thread answers).
//!
//! Nor may the extension outlive the daemon's thread for long: while that thread runs nothing,
//! no job is stopped at its `timeout` or on `sqlcron stop`. The daemon's thread marks its
//! progress ([`Progress`], every `model::lease::quiet_tick`); once it has run nothing for twice
//! the lease (`model::lease::stall_limit`), the extensions stop, the trust windows end, and
//! the reaper (`exec/reaper.rs`, a process of its own) stops the runs, whose rows another node
//! then takes over. A stall while a batch of releases is being written holds the batch's locks, which the
//! extension waits for: then the claims are lost at the end of their trust window.
//!
//! What the loops share with the rest is plain shared state: the supervision map (a mutex held
//! for moments, never across an await), the releases' write lock (`release_batch.rs`), metrics
//! and channels that work across runtimes. Should the thread fail (a panic), the daemon exits
//! at once: its leases would otherwise go unextended while it went on claiming.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::{Shared, lease, lease_connection};

/// Most connections of the lease thread's pool: one extension at a time, and one more while a
/// broken connection is being replaced.
pub(super) const LEASE_POOL: u32 = 2;

/// The exit status of a daemon whose lease thread failed (`EX_SOFTWARE`).
const LEASE_THREAD_FAILED: i32 = 70;

/// When the daemon's thread last ran a task of its own (its beat).
pub(super) struct Progress {
    since: Instant,
    /// Milliseconds from `since` to the last beat.
    last: AtomicU64,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            since: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    fn beat(&self) {
        self.last
            .store(self.since.elapsed().as_millis() as u64, Ordering::SeqCst);
    }

    /// How long the daemon's thread has run nothing (up to a beat for a thread that is fine).
    pub(super) fn stalled_for(&self) -> Duration {
        self.since
            .elapsed()
            .saturating_sub(Duration::from_millis(self.last.load(Ordering::SeqCst)))
    }
}

/// The lease extension, where it runs; [`Lease::stop`] ends it.
pub(super) enum Lease {
    Thread {
        stop: oneshot::Sender<()>,
        done: oneshot::Receiver<()>,
        beat: tokio::task::JoinHandle<()>,
    },
    Tasks(Vec<tokio::task::JoinHandle<()>>),
}

/// Starts the lease extension and the trust watch on a thread of their own, and the beat of the
/// caller's (the daemon's) thread. Should the thread or its runtime not start (the system is out
/// of threads), they run as tasks of the caller's runtime with the daemon's pool instead, and
/// the error is logged.
pub(super) fn start(shared: Arc<Shared>) -> Lease {
    let progress = Arc::new(Progress::new());
    let (stop, stop_rx) = oneshot::channel();
    let (done_tx, done) = oneshot::channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (requests, requests_rx) = tokio::sync::mpsc::unbounded_channel();
    let thread_shared = shared.clone();
    let thread_progress = progress.clone();
    let spawned = std::thread::Builder::new()
        .name("lease".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let _ = ready_tx.send(Ok(()));
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                runtime.block_on(run(thread_shared, thread_progress, stop_rx, requests_rx))
            }));
            if ran.is_err() {
                tracing::error!("the lease thread failed; the daemon exits (its runs are stopped by the reaper and taken over)");
                std::process::exit(LEASE_THREAD_FAILED);
            }
            let _ = done_tx.send(());
        });
    // The thread only builds its runtime before it answers: a moment.
    let started = spawned.and_then(|_| {
        ready_rx
            .recv()
            .unwrap_or_else(|_| Err(std::io::Error::other("the lease thread ended at once")))
    });
    let beat = tokio::spawn(beat(progress.clone(), shared.clone()));
    match started {
        Ok(()) => {
            shared.lease_connection.attach(requests);
            Lease::Thread { stop, done, beat }
        }
        Err(e) => {
            tracing::error!(error = %e, "no thread for the lease extension; it shares the daemon's");
            Lease::Tasks(vec![
                beat,
                tokio::spawn(lease::lease_loop(
                    shared.clone(),
                    shared.store.clone(),
                    progress,
                )),
                tokio::spawn(lease::trust_watch(shared)),
            ])
        }
    }
}

impl Lease {
    /// Ends the lease extension and the trust watch (every run is released by then) and waits
    /// for the thread to end.
    pub(super) async fn stop(self) {
        match self {
            Lease::Thread { stop, done, beat } => {
                let _ = stop.send(());
                // The thread closes its pool within a second of the stop; a stop must end
                // whatever that pool does.
                if tokio::time::timeout(Duration::from_secs(5), done)
                    .await
                    .is_err()
                {
                    tracing::warn!(
                        "the lease thread did not end within 5s of the stop; exiting without it"
                    );
                }
                beat.abort();
            }
            Lease::Tasks(tasks) => {
                for t in tasks {
                    t.abort();
                }
            }
        }
    }
}

/// The daemon's thread marks its progress, every `model::lease::quiet_tick` of the lease.
async fn beat(progress: Arc<Progress>, shared: Arc<Shared>) {
    loop {
        progress.beat();
        tokio::time::sleep(crate::model::lease::quiet_tick(
            shared.config().daemon.lease,
        ))
        .await;
    }
}

/// The thread's work: both loops until told to stop (or the daemon's side is dropped).
async fn run(
    shared: Arc<Shared>,
    progress: Arc<Progress>,
    stop: oneshot::Receiver<()>,
    requests: tokio::sync::mpsc::UnboundedReceiver<lease_connection::Request>,
) {
    // Opened here, so that this runtime drives its connections.
    let (store, own) = match shared.store.own_pool(LEASE_POOL) {
        Ok(Some(store)) => {
            shared.lease_connection.watch(store.clone());
            (store, true)
        }
        Ok(None) => (shared.store.clone(), false),
        Err(e) => {
            tracing::error!(error = %e, "no pool of its own for the lease extension; it shares the daemon's");
            (shared.store.clone(), false)
        }
    };
    tokio::select! {
        _ = lease::lease_loop(shared.clone(), store.clone(), progress) => {}
        _ = lease::trust_watch(shared.clone()) => {}
        _ = lease_connection::serve(store.clone(), own, requests) => {}
        _ = stop => {}
    }
    if own {
        let _ = tokio::time::timeout(Duration::from_secs(1), store.close()).await;
    }
}
