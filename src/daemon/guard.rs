//! `sqlcron lock` and `sqlcron sem`: run a command while holding a cluster-wide named lock or
//! one of N places of a semaphore, like flock(1) across hosts.
//!
//! The hold is a lease in the database (see `store/locks.rs`), extended every third of its length
//! while the command runs, fenced by the request id (exported as `SQLCRON_FENCING_TOKEN`), and
//! freed by expiry if this process dies. Waiters are served first come, first served; they poll
//! with a growing interval (never faster than every 50 ms, never slower than a third of the lease)
//! and a waiter that dies stops extending its place and drops out of the queue. On PostgreSQL a
//! request leaving the queue names the first one still waiting in `NOTIFY sqlcron_lock`, and
//! exactly that waiter looks at once (see `store/wake.rs`); the polls stay the safety net.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::exec::reaper;
use crate::exec::runner::{self, Program, RunSpec, StopRequest};
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
    let held = match acquire(store, p, &mut interrupts).await? {
        Acquired::Holding(held) => held,
        Acquired::Busy => return Ok(EXIT_BUSY),
        Acquired::Interrupted => return Ok(130),
    };
    let id = held.id;
    let status = hold_and_run(store, p, held, argv, &mut interrupts).await;
    let _ = store.lock_release(id).await;
    status
}

/// A request that holds: its fencing token, and when the statement that took the hold was sent.
/// The lease in the database began no earlier than `since`, so the trust window is counted from
/// there, not from when the command starts (a stall between the two would otherwise let this
/// holder run past its lease, beside the next one).
/// Made only by [`acquire`], and spent by [`hold_and_run`].
#[derive(Debug, PartialEq, Eq)]
pub struct Held {
    id: i64,
    since: Instant,
}

impl Held {
    /// The fencing token.
    pub fn id(&self) -> i64 {
        self.id
    }
}

/// How waiting for a lock ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Acquired {
    /// Holding (release it with `Store::lock_release(held.id())`).
    Holding(Held),
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
    interrupts.listen(store).await;
    let mut id = store
        .lock_enqueue(&p.name, p.size, &p.owner, &p.host, p.pid, p.lease)
        .await?;
    let mut delay = POLL_MIN;
    let mut max_delay = (p.lease / 3).min(POLL_MAX);
    let mut polls = 0u32;
    let mut was_next = false;
    let since = loop {
        let attempt = Instant::now();
        match store.lock_try_acquire(id, &p.name, p.size, p.lease).await {
            Ok(LockState::Holding) => break attempt,
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
        match interrupts.wait(sleep, id).await {
            Woke::Signal => {
                let _ = store.lock_release(id).await;
                return Ok(Acquired::Interrupted);
            }
            Woke::NextInLine => {
                // Handed over: look now; the next wait starts short again.
                delay = POLL_NEXT_MIN;
                continue;
            }
            Woke::Timer => {}
        }
        delay = (delay.mul_f32(1.5)).min(max_delay);
    };
    tracing::debug!(lock = %p.name, token = id, "holding");
    // Record holders whose lease ran out before us (as "expired"), then hold.
    let _ = store.lock_reap(&p.name).await;
    Ok(Acquired::Holding(Held { id, since }))
}

/// First and longest pause between two looks at the queue while waiting.
const POLL_MIN: Duration = Duration::from_millis(50);
const POLL_MAX: Duration = Duration::from_secs(1);
/// The same for the request next in line.
const POLL_NEXT_MIN: Duration = Duration::from_millis(10);
const POLL_NEXT_MAX: Duration = Duration::from_millis(250);

/// Why a wait ended.
enum Woke {
    Timer,
    Signal,
    NextInLine,
}

/// What a waiting request reacts to besides its polls: SIGINT and SIGTERM to this process
/// (registered once so none is missed between waits) and, on PostgreSQL, the notification that
/// it is next in line (its LISTEN connection opened at the first wait and kept for the next).
pub struct Interrupts {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
    /// `None`: not tried yet; `Some(None)`: none (another database, or it failed).
    hand_over: Option<Option<crate::store::wake::LockWakeups>>,
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
            hand_over: None,
        }
    }

    /// Opens the hand-over listener once (PostgreSQL); a failure means polling only.
    async fn listen(&mut self, store: &Store) {
        if self.hand_over.is_none() {
            self.hand_over = Some(store.lock_wakeups().await.unwrap_or_else(|e| {
                tracing::debug!(error = %e, "no lock hand-over notifications; polling");
                None
            }));
        }
    }

    /// Sleeps for `sleep`, or less: until a signal, or until request `id` is named next in
    /// line. A listener that fails is dropped (polling goes on).
    async fn wait(&mut self, sleep: Duration, id: i64) -> Woke {
        let Interrupts {
            int,
            term,
            hand_over,
        } = self;
        let signal = async {
            match (int, term) {
                (Some(int), Some(term)) => {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                _ => std::future::pending().await,
            }
        };
        let named = async {
            match hand_over {
                Some(Some(l)) => l.wait_for(id).await.is_ok(),
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(sleep) => Woke::Timer,
            _ = signal => Woke::Signal,
            ok = named => {
                if ok {
                    Woke::NextInLine
                } else {
                    self.hand_over = Some(None);
                    Woke::Timer
                }
            }
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

/// Runs the command while holding: the same process handling as a job's (its own process group,
/// registered with the reaper under a deadline, stopped as a whole) and the same trust window
/// (`daemon::lease`), enforced by a timer, not by an error coming back.
/// A hold whose trust window has already ended (the process stalled after taking it, or the
/// look for expired holders took that long) runs nothing and returns [`EXIT_LOST`].
pub async fn hold_and_run(
    store: &Store,
    p: &GuardParams,
    held: Held,
    argv: &[String],
    interrupts: &mut Interrupts,
) -> Result<i32, GuardError> {
    let id = held.id;
    let mut trusted_until = crate::model::lease::trusted_until(held.since, p.lease);
    // A hold older than a tenth of its lease (a stall after taking it) is extended before the
    // command starts, so that a window still open is renewed rather than left to stop the
    // command just started, and a hold found gone starts nothing.
    // (When that extension fails, the loop's first one is made as the command starts.)
    let mut extend_at_start = false;
    if held.since.elapsed() >= p.lease / 10 {
        let attempt = Instant::now();
        match store.lock_extend(id, p.lease).await {
            Ok(true) if crate::model::lease::window_open(trusted_until, Instant::now()) => {
                trusted_until = crate::model::lease::trusted_until(attempt, p.lease);
            }
            Ok(_) => {
                tracing::error!(lock = %p.name, token = id, "lock lost before the command could start (expired or broken); not starting the command");
                return Ok(EXIT_LOST);
            }
            Err(e) => {
                tracing::warn!(lock = %p.name, error = %e, "extending the lock failed");
                extend_at_start = true;
            }
        }
    }
    if !crate::model::lease::window_open(trusted_until, Instant::now()) {
        tracing::error!(lock = %p.name, token = id, "lock no longer trusted (its lease may have ended before the command could start); not starting the command");
        return Ok(EXIT_LOST);
    }
    let pgid = Arc::new(AtomicI32::new(0));
    let spec = RunSpec {
        job: format!("lock {}", p.name),
        program: Program::Argv(argv.to_vec()),
        env: vec![
            ("SQLCRON_FENCING_TOKEN".into(), id.to_string()),
            ("SQLCRON_LOCK".into(), p.name.clone()),
        ],
        workdir: None,
        timeout: Duration::from_secs(100 * 365 * 24 * 3600),
        kill_grace: KILL_GRACE,
        output_tail: 0,
        log_lines: 0,
        log_bytes: 0,
        reaper_deadline: Some(crate::model::lease::reaper_deadline(trusted_until, p.lease)),
        pgid: pgid.clone(),
        inherit_io: true,
        // The caller's environment, as flock(1) passes it, less the daemon's secrets.
        clear_env: false,
        account: None,
        limits: Default::default(),
        live: None,
    };
    let (stop_tx, stop_rx) = watch::channel(StopRequest::None);
    let run = runner::run(&spec, stop_rx);
    tokio::pin!(run);
    let mut extend = tokio::time::interval(crate::model::lease::extend_interval(p.lease));
    if !extend_at_start {
        extend.tick().await;
    }
    let mut lost = false;
    loop {
        tokio::select! {
            outcome = &mut run => {
                let outcome = outcome.map_err(|e| GuardError::Spawn {
                    program: argv[0].clone(),
                    source: e.source,
                })?;
                if lost {
                    return Ok(EXIT_LOST);
                }
                return Ok(outcome
                    .exit_code
                    .unwrap_or_else(|| 128 + outcome.signal.unwrap_or(0)));
            }
            _ = extend.tick(), if !lost => {
                let attempt = Instant::now();
                match store.lock_extend(id, p.lease).await {
                    Ok(true) if !crate::model::lease::window_open(trusted_until, Instant::now()) => {
                        tracing::error!(lock = %p.name, token = id, "lock no longer trusted (the extension came back after the trust window had ended); stopping the command");
                        lost = true;
                        let _ = stop_tx.send(StopRequest::Kill);
                    }
                    Ok(true) => {
                        trusted_until = crate::model::lease::trusted_until(attempt, p.lease);
                        let group = pgid.load(Ordering::SeqCst);
                        if group > 0 {
                            reaper::refresh(group, crate::model::lease::reaper_deadline(trusted_until, p.lease));
                        }
                    }
                    Ok(false) => {
                        tracing::error!(lock = %p.name, token = id, "lock lost (expired or broken); stopping the command");
                        lost = true;
                        let _ = stop_tx.send(StopRequest::Kill);
                    }
                    Err(e) => tracing::warn!(lock = %p.name, error = %e, "extending the lock failed"),
                }
            }
            _ = tokio::time::sleep_until(trusted_until.into()), if !lost => {
                tracing::error!(lock = %p.name, token = id, "lock no longer trusted (no extension within the trust window); stopping the command");
                lost = true;
                let _ = stop_tx.send(StopRequest::Kill);
            }
            _ = interrupts.recv() => {
                // Pass it on to the whole group and keep holding until the command is gone.
                let _ = stop_tx.send(StopRequest::Kill);
            }
        }
    }
}

/// Between SIGTERM and SIGKILL when a guarded command is stopped.
const KILL_GRACE: Duration = Duration::from_secs(5);
