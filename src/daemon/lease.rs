//! Keeping leases alive for the claims this node supervises, and stopping trusting them in time.
//!
//! # States of one claimed row, as seen by its holder
//! ```text
//!   claim ──► Held ──(extend ok)──► Held
//!               │
//!               ├─(extend: row no longer ours)─────────────► Lost
//!               ├─(no successful extension within the trust window)──► Lost
//!               └─(process exits)──► releasing (lease still extended) ──► Done | Lost
//! ```
//! A claim is *supervised* from the moment it is claimed until its release is written (or the
//! claim is lost): before the process starts, while it runs, and while its release is retried.
//! The supervision map is keyed by (row id, claim token), and a node never claims a row it
//! still supervises, so two runs of one row can never share an entry.
//!
//! The lease is extended every third of its length, for every supervised claim at once, in one
//! statement. Each successful extension moves the *trust window* to (the moment the attempt
//! started) + 80% of the lease: the node stops trusting its claim before the database could
//! hand it to someone else, even though the exact expiry is decided by the database clock.
//!
//! The window is enforced by time, not by errors: [`trust_watch`] checks every supervised claim
//! every [`TRUST_CHECK`] on its own, so a statement that hangs (a stalled connection, a row
//! lock held by an operator) cannot keep a claim trusted. Every statement also carries a
//! timeout shorter than the window (see `store::connect`), and a run's process is never spawned
//! once its window has passed.
//!
//! # Failures
//! | what happens | what the node does |
//! |---|---|
//! | database slow or down for less than the trust window | keeps running, retries each third of the lease |
//! | database down, or a statement hung, past the trust window | claim lost: `on_lease_lost = "kill"` stops the process group, `"ignore"` lets it finish; nothing more is written for it |
//! | another node took the row (extension matched nothing) | same as above, at once |
//! | the job's process is stuck but alive | the lease is extended: liveness is the process, and `timeout` bounds it |
//! | the process ended but its release cannot be written | the lease is still extended; the release is retried until it lands or the claim is lost |
//! | the daemon's thread (not this one, see `lease_thread.rs`) runs nothing for twice the lease | extensions stop; the claims are lost when their trust windows end |
//! | the node dies | the lease expires; another node takes over by `rerun_lost` |
//! | the node is stopped (SIGTERM) | after `shutdown_grace`, runs are stopped and their leases ended at once |

use super::metrics::Metrics;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::Shared;
use super::lease_thread::Progress;
use crate::exec::runner::StopRequest;
use crate::model::job::OnLeaseLost;
use crate::model::lease::{
    extend_interval, extends_after_stall, quiet_tick, reaper_deadline, trusted_until, window_open,
};
use crate::store::Store;

/// How often the trust windows are checked while a claim is held, independently of any
/// database call (while none is, `model::lease::quiet_tick`).
pub const TRUST_CHECK: Duration = Duration::from_millis(100);
/// The longest wait of the trust watch while no claim is held.
const IDLE_TRUST_CHECK_MAX: Duration = Duration::from_millis(500);

/// Why a claim's supervision ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Interrupt {
    LeaseLost,
    Shutdown,
}

/// One claim this node supervises, from its claim until its release is written.
pub(super) struct Supervised {
    pub job: String,
    /// Until when the claim may be trusted (see the module documentation).
    pub trusted_until: Instant,
    /// Tells the run's process to stop (lease lost, shutdown).
    pub stop: watch::Sender<StopRequest>,
    pub interrupted: Option<Interrupt>,
    pub on_lease_lost: OnLeaseLost,
    /// The process is running (a shutdown stops only those).
    pub running: bool,
    /// The run's process group once spawned (0 otherwise), to refresh its reaper deadline.
    pub pgid: Arc<AtomicI32>,
    /// Someone asked to stop this run (`sqlcron stop`, the dashboard): its process was told to
    /// stop, and its end is recorded `stopped`.
    pub stop_asked: bool,
    /// The run's output as it comes, while its process runs and `[daemon] live_output` is on.
    pub live: Option<crate::daemon::live_output::LiveRun>,
}

impl Supervised {
    /// Whether this claim's row could be due in the database by the end of a claim statement
    /// sent at `now`: the claim is no longer trusted, or its trust window ends within a quarter
    /// of the lease. A trusted claim's lease in the database ends at least a fifth of the lease
    /// after its trust window, and a claim statement returns within its timeout (two fifths of
    /// the lease) — so every other supervised row is certainly not due, and the claim need not
    /// name it. In normal operation the list is empty and the claim statement is the same,
    /// prepared one every time.
    pub fn may_be_due(&self, now: Instant, lease: Duration) -> bool {
        self.interrupted.is_some() || self.trusted_until <= now + lease / 4
    }

    /// Whether the claim may still be trusted at `now`: not interrupted, and its trust window
    /// not yet ended.
    pub fn trusted_at(&self, now: Instant) -> bool {
        self.interrupted.is_none() && window_open(self.trusted_until, now)
    }
}

/// Claims under supervision, by (row id, claim token).
pub(super) type Supervision = Mutex<HashMap<(i64, i64), Supervised>>;

/// Ends a claim's supervision when dropped (the run task ended, whatever way).
pub(super) struct SupervisionGuard {
    pub shared: Arc<Shared>,
    pub key: (i64, i64),
}

impl Drop for SupervisionGuard {
    fn drop(&mut self) {
        self.shared.supervision().remove(&self.key);
        self.shared.wake.notify_one();
    }
}

/// Marks a claim lost and, by its policy, stops its process.
pub(super) fn lose(r: &mut Supervised, token: i64, why: &str, metrics: &Metrics) {
    if r.interrupted.is_some() {
        return;
    }
    r.interrupted = Some(Interrupt::LeaseLost);
    metrics.lease_lost(&r.job);
    match r.on_lease_lost {
        OnLeaseLost::Kill => {
            tracing::error!(job = %r.job, token, reason = why, "lease lost; stopping the job");
            let _ = r.stop.send(StopRequest::Kill);
        }
        OnLeaseLost::Ignore => {
            tracing::error!(job = %r.job, token, reason = why, "lease lost; letting the job finish (on_lease_lost = ignore)");
        }
    }
}

/// Marks a claim lost if its trust window ended by `now` ([`window_open`]), whoever looks
/// first: the trust watch on its timer, the lease loop when an extension comes back, or the
/// daemon's thread at the run's end (the watch's thread may have starved or stopped
/// meanwhile). True if this call marked it lost.
pub(super) fn lose_if_window_ended(
    r: &mut Supervised,
    token: i64,
    now: Instant,
    why: &str,
    metrics: &Metrics,
) -> bool {
    let ended = r.interrupted.is_none() && !window_open(r.trusted_until, now);
    if ended {
        lose(r, token, why, metrics);
    }
    ended
}

/// Extends the leases of every supervised claim every third of the lease, through `store`
/// (a pool of its own on the lease thread, see `lease_thread.rs`), while the daemon's thread
/// shows `progress`.
pub(super) async fn lease_loop(shared: Arc<Shared>, store: Store, progress: Arc<Progress>) {
    let mut failing = false;
    let mut stalled = false;
    loop {
        let lease = shared.config().daemon.lease;
        tokio::time::sleep(extend_interval(lease)).await;
        let quiet = progress.stalled_for();
        if !extends_after_stall(quiet, lease) {
            if !stalled {
                tracing::error!(
                    stalled_for = %humantime::format_duration(Duration::from_secs(quiet.as_secs())),
                    "the daemon's thread has run nothing for twice the lease; its leases are no longer extended (its runs are stopped at the end of their trust window and taken over)"
                );
                stalled = true;
            }
            continue;
        }
        if std::mem::take(&mut stalled) {
            tracing::info!("the daemon's thread runs again");
        }
        let held: Vec<(i64, i64)> = shared
            .supervision()
            .iter()
            .filter(|(_, r)| r.interrupted.is_none())
            .map(|(key, _)| *key)
            .collect();
        if held.is_empty() {
            continue;
        }
        let attempt = Instant::now();
        // Never beside a batch of releases (see `release_batch.rs`): both lock several of this
        // node's rows. Trust counts from before the wait.
        let result = {
            let _writes = shared.releases.exclusive().await;
            store.extend(&shared.node, &held, lease).await
        };
        let landed = Instant::now();
        let mut supervision = shared.supervision();
        match result {
            Ok(found) => {
                let lost = found.lost;
                if failing {
                    tracing::info!("lease extension works again");
                    failing = false;
                }
                for key in &held {
                    let Some(r) = supervision.get_mut(key) else {
                        continue;
                    };
                    if lost.contains(&key.0) {
                        lose(r, key.1, "another node holds the row now", &shared.metrics);
                        continue;
                    }
                    if lose_if_window_ended(
                        r,
                        key.1,
                        landed,
                        "the lease extension came back after the trust window had ended",
                        &shared.metrics,
                    ) {
                        continue;
                    }
                    if found.stopping.contains(&key.0) && !r.stop_asked {
                        r.stop_asked = true;
                        tracing::warn!(job = %r.job, token = key.1, "stop requested: stopping the run");
                        let _ = r.stop.send(StopRequest::Kill);
                    }
                    if r.interrupted.is_none() {
                        r.trusted_until = trusted_until(attempt, lease);
                        let pgid = r.pgid.load(Ordering::SeqCst);
                        if pgid > 0 && r.on_lease_lost == OnLeaseLost::Kill {
                            crate::exec::reaper::refresh(
                                pgid,
                                reaper_deadline(r.trusted_until, lease),
                            );
                        }
                    }
                }
            }
            Err(e) => {
                shared.metrics.database_error(e.kind());
                if !failing {
                    tracing::error!(error = %e, kind = e.kind(), "lease extension failed; runs continue until their trust window ends");
                    failing = true;
                }
            }
        }
    }
}

/// Ends the trust in every claim whose window has passed, on its own timer: no database call
/// can hold it up.
pub(super) async fn trust_watch(shared: Arc<Shared>) {
    loop {
        let now = Instant::now();
        let held = {
            let mut supervision = shared.supervision();
            for (key, r) in supervision.iter_mut() {
                lose_if_window_ended(
                    r,
                    key.1,
                    now,
                    "no lease extension succeeded within the trust window",
                    &shared.metrics,
                );
            }
            !supervision.is_empty()
        };
        // Nothing held: a claim made meanwhile is looked at long before its window can end
        // (at most half a second later, should a reload shorten the lease meanwhile).
        let wait = if held {
            TRUST_CHECK
        } else {
            quiet_tick(shared.config().daemon.lease).min(IDLE_TRUST_CHECK_MAX)
        };
        tokio::time::sleep(wait).await;
    }
}
