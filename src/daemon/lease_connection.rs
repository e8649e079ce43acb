//! The lease extension's connection: given back when the node has long been quiet, opened again
//! before its next claim.
//!
//! The lease thread (`lease_thread.rs`) extends through a pool of its own, whose connection is
//! kept however long idle: a run's first extension must not have to connect (a refusal in a
//! burst or a failover, which the pool tries for 5 s, would cost the run its claim). Kept for
//! the daemon's life, though, it is one connection more for every node that ever ran a job,
//! and a fleet's server pays for each (docs/fleet.md). So, once the node has held no run for
//! `model::lease::lease_connection_kept` (thirty leases: five minutes at the default lease), the
//! heartbeat gives it back, and the next claim first has the lease thread open it again and
//! claims nothing until it is open. A claim more than a lease after the connection was last
//! opened or confirmed has it confirmed first: taken from the pool, an idle connection is
//! pinged, and one that broke (an outage, a failover) is replaced. A refused connection then
//! costs the node its claims for a while (it logs a warning once, counts the error, and looks
//! again a second later; its heartbeat and the rest go on, its pool being well), never the
//! claim of a run just taken. A node whose jobs come every few minutes keeps the connection;
//! one whose jobs come hourly connects once an hour, a few milliseconds before its claim.
//!
//! Both decisions are taken on the daemon's loop, one after the other (the heartbeat and the
//! pass, `daemon/mod.rs`), and a give-back needs a node that supervises no run: a claim is
//! never made between the connection's give-back and its opening. The lease thread handles
//! both requests in the order they were sent. Where there is nothing to give back (SQLite's
//! connections are kept; a lease extension without a pool of its own) opening answers at once.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::store::{Dialect, Store, StoreError};

/// How long a claim waits for the lease thread to open its connection: the pool's own wait (5 s)
/// and a margin.
const OPEN_WAIT: Duration = Duration::from_secs(8);

/// What the daemon's loop asks of the lease thread.
pub(super) enum Request {
    /// Open a connection unless one is open; the answer says whether one was opened.
    Open(oneshot::Sender<Result<bool, sqlx::Error>>),
    /// Close the pool's idle connections.
    GiveBack,
}

/// The daemon's side: whether the lease thread's connection is open, and the way to ask.
#[derive(Default)]
pub(super) struct LeaseConnection {
    requests: Mutex<Option<mpsc::UnboundedSender<Request>>>,
    /// The lease thread's own store, whose pool's size is read here (a count, safe from any
    /// thread): a pool that lost its connection has it opened again before the next claim.
    store: Mutex<Option<Store>>,
    /// When the lease thread last opened or confirmed the connection (`None`: never, or given
    /// back since): a claim more than a lease after that has it confirmed again (an idle
    /// connection is pinged as it is taken, so one that a failover or a broken network left
    /// dead is replaced before the claim).
    checked: Mutex<Option<Instant>>,
    /// Opening failed, and has not worked since (logged once per spell).
    failing: AtomicBool,
}

impl LeaseConnection {
    /// The lease thread started: requests go to it from now on.
    pub(super) fn attach(&self, requests: mpsc::UnboundedSender<Request>) {
        *self.requests.lock().unwrap() = Some(requests);
    }

    /// The lease thread has a pool of its own: its size is looked at before each claim.
    pub(super) fn watch(&self, store: Store) {
        *self.store.lock().unwrap() = Some(store);
    }

    /// Whether a claim may go ahead without asking: the connection was opened, not given back
    /// since, confirmed within the last lease, and its pool still holds it.
    fn is_open(&self, lease: Duration) -> bool {
        self.checked
            .lock()
            .unwrap()
            .is_some_and(|at| at.elapsed() < lease)
            && self
                .store
                .lock()
                .unwrap()
                .as_ref()
                .is_none_or(|store| store.pool_size().0 > 0)
    }

    fn sender(&self) -> Option<mpsc::UnboundedSender<Request>> {
        self.requests.lock().unwrap().clone()
    }

    /// Before a claim: has the lease thread's connection opened (or confirmed, once a lease
    /// since the last confirmation) unless it is known open; says whether the claim may go
    /// ahead. A failure (the server refuses, or does not answer in time) is counted and logged
    /// once per spell, and the claim is not made.
    pub(super) async fn ensure_open(
        &self,
        dialect: Dialect,
        lease: Duration,
        metrics: &crate::daemon::metrics::Metrics,
    ) -> bool {
        if self.is_open(lease) {
            return true;
        }
        // No lease thread (its extension shares the daemon's pool): nothing to open.
        let Some(requests) = self.sender() else {
            return true;
        };
        let (reply, answer) = oneshot::channel();
        if requests.send(Request::Open(reply)).is_err() {
            // The thread has ended: the daemon is stopping (or exits, see `lease_thread.rs`).
            return true;
        }
        let error = match tokio::time::timeout(OPEN_WAIT, answer).await {
            Ok(Ok(Ok(opened))) => {
                *self.checked.lock().unwrap() = Some(Instant::now());
                if self.failing.swap(false, Ordering::SeqCst) {
                    tracing::info!("the lease extension's connection is open again; claims go on");
                } else if opened {
                    tracing::debug!("the lease extension's connection opened before a claim");
                }
                return true;
            }
            // The thread ended meanwhile (the daemon is stopping).
            Ok(Err(_)) => return true,
            Ok(Ok(Err(e))) => e,
            Err(_) => sqlx::Error::PoolTimedOut,
        };
        let error = StoreError::Sql {
            dialect: dialect.name(),
            op: "opening the lease extension's connection",
            source: error,
        };
        metrics.database_error_counted(error.kind());
        if !self.failing.swap(true, Ordering::SeqCst) {
            tracing::warn!(
                error = %error,
                "the lease extension's connection cannot be opened; nothing is claimed until it can"
            );
        }
        false
    }

    /// The node has long been quiet (it supervises no run): the lease thread closes its
    /// connection, and the next claim opens it first. Says whether it was open.
    pub(super) fn give_back(&self) -> bool {
        let Some(requests) = self.sender() else {
            return false;
        };
        if self.checked.lock().unwrap().take().is_none() {
            return false;
        }
        requests.send(Request::GiveBack).is_ok()
    }
}

/// The lease thread's side: answers the requests, in order, with its own `store` (`own`: a pool
/// of its own; otherwise the daemon's, which it neither opens nor closes). Never ends.
pub(super) async fn serve(store: Store, own: bool, mut requests: mpsc::UnboundedReceiver<Request>) {
    while let Some(request) = requests.recv().await {
        match request {
            Request::Open(reply) => {
                let opened = if own {
                    store.open_one().await
                } else {
                    Ok(false)
                };
                let _ = reply.send(opened);
            }
            Request::GiveBack if own => {
                let closed = store.trim_idle(0).await;
                if closed > 0 {
                    tracing::debug!(
                        closed,
                        "the lease extension's connection closed (the node has long held no run)"
                    );
                }
            }
            Request::GiveBack => {}
        }
    }
    std::future::pending::<()>().await
}
