//! `sqlcron lock` and `sqlcron sem`: run a command while holding a cluster-wide named lock or
//! one of N places of a semaphore, like flock(1) across hosts.
//!
//! The hold is a lease in the database (see `store/locks.rs`), extended every third of its length
//! while the command runs, fenced by the request id (exported as `SQLCRON_FENCING_TOKEN`), and
//! freed by expiry if this process dies. Waiters are served first come, first served; they poll
//! with a growing interval (never faster than every 50 ms, never slower than a third of the lease)
//! and a waiter that dies stops extending its place and drops out of the queue.

use std::time::{Duration, Instant};

use tokio::process::Command;

use crate::store::{LockState, Store, StoreError};

/// Exit status when the lock is busy and `--wait` ran out (sysexits EX_TEMPFAIL).
pub const EXIT_BUSY: i32 = 75;
/// Exit status when the hold was lost while the command ran (it was stopped).
pub const EXIT_LOST: i32 = 1;

/// What to hold.
#[derive(Debug, Clone)]
pub struct GuardParams {
    pub name: String,
    /// Holders allowed at once (1 for a lock).
    pub size: u32,
    pub lease: Duration,
    /// `None`: wait as long as it takes; `Some(0)`: try once.
    pub wait: Option<Duration>,
    /// Node name, host and pid, recorded for `sqlcron locks`.
    pub owner: String,
    pub host: String,
    pub pid: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
}

/// Waits for the lock (or gives up with [`EXIT_BUSY`]), runs `argv`, releases, and returns the
/// exit status to leave with: the command's, 128 + signal, [`EXIT_BUSY`] or [`EXIT_LOST`].
pub async fn run_guarded(
    store: &Store,
    p: &GuardParams,
    argv: &[String],
) -> Result<i32, GuardError> {
    let mut interrupts = Interrupts::new();
    let id = match acquire(store, p, &mut interrupts).await? {
        Acquired::Holding(id) => id,
        Acquired::Busy => return Ok(EXIT_BUSY),
        Acquired::Interrupted => return Ok(130),
    };
    let status = hold_and_run(store, p, id, argv, &mut interrupts).await;
    let _ = store.lock_release(id).await;
    status
}

/// How waiting for a lock ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// Holding, with this fencing token (release it with `Store::lock_release`).
    Holding(i64),
    /// `wait` ran out; the request was withdrawn.
    Busy,
    /// SIGINT or SIGTERM while waiting; the request was withdrawn.
    Interrupted,
}

/// Queues for the lock and waits until it is held, `wait` runs out or a signal comes.
pub async fn acquire(
    store: &Store,
    p: &GuardParams,
    interrupts: &mut Interrupts,
) -> Result<Acquired, GuardError> {
    let started = Instant::now();
    store.lock_reap(&p.name).await?;
    let mut id = store
        .lock_enqueue(&p.name, p.size, &p.owner, &p.host, p.pid, p.lease)
        .await?;
    let mut delay = POLL_MIN;
    let mut max_delay = (p.lease / 3).min(POLL_MAX);
    let mut polls = 0u32;
    let mut was_next = false;
    loop {
        match store.lock_try_acquire(id, &p.name, p.size, p.lease).await {
            Ok(LockState::Holding) => break,
            Ok(LockState::Waiting(ahead)) => {
                // The request next in line looks often, so a release is noticed quickly; the
                // others back off further. Only one request per free place polls fast.
                let next = ahead <= u64::from(p.size);
                if next && !was_next {
                    delay = POLL_NEXT_MIN;
                }
                max_delay = if next { POLL_NEXT_MAX } else { POLL_MAX }.min(p.lease / 3);
                was_next = next;
            }
            Ok(LockState::Lost) => {
                // Our place expired (we stalled, or the database was away): queue again.
                tracing::warn!(lock = %p.name, "place in the queue expired; queueing again");
                id = store
                    .lock_enqueue(&p.name, p.size, &p.owner, &p.host, p.pid, p.lease)
                    .await?;
            }
            Err(e) => tracing::warn!(lock = %p.name, error = %e, "lock request failed; retrying"),
        }
        let waited = started.elapsed();
        if p.wait.is_some_and(|w| waited >= w) {
            let _ = store.lock_release(id).await;
            return Ok(Acquired::Busy);
        }
        polls += 1;
        if polls.is_multiple_of(8) {
            let _ = store.lock_reap(&p.name).await;
        }
        let mut sleep = delay;
        if let Some(w) = p.wait {
            sleep = sleep.min(w.saturating_sub(waited));
        }
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = interrupts.recv() => {
                let _ = store.lock_release(id).await;
                return Ok(Acquired::Interrupted);
            }
        }
        delay = (delay.mul_f32(1.5)).min(max_delay);
    }
    tracing::debug!(lock = %p.name, token = id, "holding");
    // Record holders whose lease ran out before us (as "expired"), then hold.
    let _ = store.lock_reap(&p.name).await;
    Ok(Acquired::Holding(id))
}

/// First and longest pause between two looks at the queue while waiting.
const POLL_MIN: Duration = Duration::from_millis(50);
const POLL_MAX: Duration = Duration::from_secs(1);
/// The same for the request next in line.
const POLL_NEXT_MIN: Duration = Duration::from_millis(10);
const POLL_NEXT_MAX: Duration = Duration::from_millis(250);

/// SIGINT and SIGTERM to this process, registered once so none is missed between waits.
pub struct Interrupts {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
}

impl Default for Interrupts {
    fn default() -> Self {
        Interrupts::new()
    }
}

impl Interrupts {
    pub fn new() -> Interrupts {
        use tokio::signal::unix::{SignalKind, signal};
        Interrupts {
            int: signal(SignalKind::interrupt()).ok(),
            term: signal(SignalKind::terminate()).ok(),
        }
    }

    async fn recv(&mut self) {
        match (&mut self.int, &mut self.term) {
            (Some(int), Some(term)) => {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            }
            _ => std::future::pending().await,
        }
    }
}

async fn hold_and_run(
    store: &Store,
    p: &GuardParams,
    id: i64,
    argv: &[String],
    interrupts: &mut Interrupts,
) -> Result<i32, GuardError> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env("SQLCRON_FENCING_TOKEN", id.to_string())
        .env("SQLCRON_LOCK", &p.name)
        .kill_on_drop(true);
    // SAFETY: prctl is async-signal-safe; the command must not outlive this holder.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|source| GuardError::Spawn {
        program: argv[0].clone(),
        source,
    })?;
    let pid = child.id().map(|p| p as i32);
    let mut extend = tokio::time::interval(p.lease / 3);
    extend.tick().await;
    let mut trusted_until = Instant::now() + p.lease.mul_f64(0.8);
    let signal_child = |sig: i32| {
        if let Some(pid) = pid {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(pid, sig);
            }
        }
    };
    loop {
        tokio::select! {
            status = child.wait() => {
                use std::os::unix::process::ExitStatusExt;
                let status = status.map_err(|source| GuardError::Spawn { program: argv[0].clone(), source })?;
                return Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)));
            }
            _ = extend.tick() => {
                let attempt = Instant::now();
                let lost = match store.lock_extend(id, p.lease).await {
                    Ok(true) => { trusted_until = attempt + p.lease.mul_f64(0.8); false }
                    Ok(false) => true,
                    Err(e) => {
                        tracing::warn!(lock = %p.name, error = %e, "extending the lock failed");
                        Instant::now() >= trusted_until
                    }
                };
                if lost {
                    tracing::error!(lock = %p.name, token = id, "lock lost; stopping the command");
                    signal_child(libc::SIGTERM);
                    if tokio::time::timeout(Duration::from_secs(5), child.wait()).await.is_err() {
                        signal_child(libc::SIGKILL);
                        let _ = child.wait().await;
                    }
                    return Ok(EXIT_LOST);
                }
            }
            _ = interrupts.recv() => {
                // Pass it on and keep holding until the command is gone.
                signal_child(libc::SIGTERM);
            }
        }
    }
}
