//! A run's process stopped before its `exec` would hold the daemon's thread: found and killed.
//!
//! `clone_spawn` suspends the thread that starts a run until the new process has called
//! `exec` (it shares the daemon's memory until then). A process switched to the job's account
//! may be signalled by that account's other processes from its `setuid` on, and a `SIGSTOP`
//! that lands before its `exec` would stop it there, and the daemon's thread with it, for as
//! long as nobody sends `SIGCONT`: a local user could halt every run of the node. This thread
//! looks, once a second while a start is under way, at each start older than a second: one
//! whose process is stopped is killed (by its pidfd, which names no other process), and the
//! start fails with "stopped or hung before it could start". A process that is merely slow to get a
//! core is left alone for ten seconds; one that has not reached its `exec` by then (its set-up
//! hangs: a working directory on a mount that does not answer) is killed too. With nothing
//! under way the thread sleeps until the next start.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a start may be under way before its process is looked at.
const LOOK_AFTER: Duration = Duration::from_secs(1);
/// How long a start may take whatever its state: a set-up that hangs (a working directory on a
/// mount that does not answer, a control group file that blocks) is killed after this.
const HUNG_AFTER: Duration = Duration::from_secs(10);

/// One start under way: the pidfd the kernel writes when the process is created
/// (`CLONE_PIDFD`, -1 before), and whether this watch killed it.
pub struct Start {
    pub pidfd: AtomicI32,
    pub killed: AtomicBool,
    since: Instant,
}

struct Watch {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    starts: Vec<Arc<Start>>,
    /// The thread waits for a start (it had nothing to watch): the next start wakes it, at most
    /// once a second, not once per start.
    idle: bool,
}

fn watch() -> &'static Watch {
    static WATCH: OnceLock<&'static Watch> = OnceLock::new();
    WATCH.get_or_init(|| {
        let w: &'static Watch = Box::leak(Box::new(Watch {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        }));
        let spawned = std::thread::Builder::new()
            .name("spawn-watch".into())
            .spawn(move || run(w));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "no thread to watch the starts of runs");
        }
        w
    })
}

/// Registers a start; [`end`] it once `clone` has returned.
pub fn begin() -> Arc<Start> {
    let start = Arc::new(Start {
        pidfd: AtomicI32::new(-1),
        killed: AtomicBool::new(false),
        since: Instant::now(),
    });
    let w = watch();
    let mut state = w.state.lock().unwrap_or_else(|e| e.into_inner());
    if state.idle {
        state.idle = false;
        w.wake.notify_one();
    }
    state.starts.push(start.clone());
    start
}

/// The start is over (its process has called `exec` or exited): no longer watched.
pub fn end(start: &Arc<Start>) {
    let w = watch();
    w.state
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .starts
        .retain(|s| !Arc::ptr_eq(s, start));
}

fn run(w: &'static Watch) {
    let mut state = w.state.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if state.starts.is_empty() {
            state.idle = true;
            while state.idle {
                state = w.wake.wait(state).unwrap_or_else(|e| e.into_inner());
            }
        }
        // A start is (or was just) under way: look again in a second, whatever starts meanwhile.
        state = w
            .wake
            .wait_timeout(state, LOOK_AFTER)
            .unwrap_or_else(|e| e.into_inner())
            .0;
        let now = Instant::now();
        for s in &state.starts {
            if now.duration_since(s.since) < LOOK_AFTER || s.killed.load(Ordering::SeqCst) {
                continue;
            }
            let fd = s.pidfd.load(Ordering::SeqCst);
            if fd >= 0 && (now.duration_since(s.since) >= HUNG_AFTER || stopped(fd)) {
                // SAFETY: pidfd_send_signal on a pidfd the start still holds open (the
                // starting thread closes it only after `end`, which needs this lock).
                let rc = unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        fd,
                        libc::SIGKILL,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    )
                };
                if rc == 0 {
                    s.killed.store(true, Ordering::SeqCst);
                }
            }
        }
    }
}

/// Whether the process of `pidfd` is stopped (or stopped by a tracer).
fn stopped(pidfd: i32) -> bool {
    let pid = std::fs::read_to_string(format!("/proc/self/fdinfo/{pidfd}"))
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("Pid:"))
                .and_then(|p| p.trim().parse::<i32>().ok())
        });
    let Some(pid) = pid.filter(|&p| p > 0) else {
        return false;
    };
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_string))
        })
        .is_some_and(|state| state == "T" || state == "t")
}
