//! The daemon's own threads ahead of its jobs on a busy CPU.
//!
//! A node at `max_parallel` with short jobs keeps every core busy with them. Its own thread
//! (claims, start records, starting processes, releases) and its lease thread then wait for a
//! core behind the jobs they started: the scheduler gives a thread the same share as each
//! process it competes with, so that with sixteen jobs running the daemon's thread gets a
//! seventeenth of a core, starts the next runs late, and leaves places empty
//! (docs/benchmarks.md, "The daemon's threads ahead of its jobs"). The daemon therefore lowers
//! the nice value of its own threads by [`BOOST`] where it may (root, or `CAP_SYS_NICE`, or an
//! `RLIMIT_NICE` that allows it), and gives each job's process the nice value the daemon was
//! started with: a job runs at the priority it always had (the unit's
//! `Nice=`, or that of the shell that started the daemon), only the daemon's own work goes
//! first. Where it may not, everything stays as it was and the daemon says so once.
//!
//! On Linux the nice value belongs to a thread, and a new thread or process starts with its
//! creator's: the threads the daemon's thread creates (the lease thread, SQLite's workers, the
//! runtime's blocking threads) and the job reaper share the boost; around each start of a job's
//! process the daemon's thread steps back to the nice value it was started with
//! ([`while_as_started`]), so the job inherits that. Measured, starting the processes from
//! other threads instead (so that the daemon's thread never waits for a child's `exec`) broke up
//! the batches of claims and releases and doubled the statements per run on PostgreSQL.

use std::sync::OnceLock;

/// Nice levels the daemon's threads run ahead of its jobs: each level is about a quarter more
/// CPU weight, so five give the daemon's thread about three times the share of one job.
pub const BOOST: i32 = 5;

/// The nice value the daemon was started with: what its jobs get.
static STARTED_WITH: OnceLock<i32> = OnceLock::new();

fn thread_id() -> libc::id_t {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as libc::id_t }
}

/// The calling thread's nice value.
fn nice_of_this_thread() -> std::io::Result<i32> {
    // getpriority may return -1 as a value: errno tells it from a failure.
    // SAFETY: errno is thread-local; getpriority takes plain integers.
    unsafe {
        *libc::__errno_location() = 0;
        let n = libc::getpriority(libc::PRIO_PROCESS, thread_id());
        if n == -1 && *libc::__errno_location() != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n)
    }
}

fn set_nice_of_this_thread(nice: i32) -> std::io::Result<()> {
    // SAFETY: setpriority takes plain integers; it changes only the calling thread.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, thread_id(), nice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// What [`boost_this_thread`] did: the nice value of the daemon's threads, or why they stay
/// where they were.
static OUTCOME: OnceLock<Result<i32, String>> = OnceLock::new();

/// Raises the calling thread (the daemon's, before it creates any other) [`BOOST`] levels
/// above the nice value it has now, which is remembered as the jobs' own.
pub fn boost_this_thread() {
    let _ = OUTCOME.set(boost());
}

fn boost() -> Result<i32, String> {
    let base = nice_of_this_thread().map_err(|e| format!("cannot read the nice value: {e}"))?;
    let _ = STARTED_WITH.set(base);
    let boosted = (base - BOOST).max(-20);
    if boosted == base {
        return Ok(base);
    }
    set_nice_of_this_thread(boosted).map_err(|e| {
        format!("cannot lower the nice value of the daemon's threads from {base} to {boosted}: {e}")
    })?;
    Ok(boosted)
}

/// Logs what [`boost_this_thread`] did, once logging is set up.
pub fn report() {
    match (OUTCOME.get(), STARTED_WITH.get()) {
        (Some(Ok(own)), Some(jobs)) => {
            tracing::debug!(
                nice = own,
                jobs_nice = jobs,
                "the daemon's threads go ahead of its jobs"
            )
        }
        (Some(Err(why)), _) => tracing::info!(
            "{why}: the daemon's threads share the CPU with its jobs at the same priority; in a \
             burst of jobs that keep every core busy, starts and releases wait for a core with them"
        ),
        _ => {}
    }
}

/// Runs `f`, which starts a job's process, with the calling thread at the nice value the daemon
/// was started with, so that the process inherits that; then puts the thread back where it was.
/// Outside a boosted daemon (`sqlcron lock`, tests), or on a thread that is not boosted, only
/// runs `f`.
pub fn while_as_started<T>(f: impl FnOnce() -> T) -> T {
    let Some(&base) = STARTED_WITH.get() else {
        return f();
    };
    let own = match nice_of_this_thread() {
        Ok(own) if own != base => own,
        _ => return f(),
    };
    if let Err(e) = set_nice_of_this_thread(base) {
        // Raising a nice value is always allowed; should it fail anyway, the job would run
        // ahead of others: say so.
        tracing::warn!(error = %e, nice = base, "cannot give a job the daemon's own nice value");
    }
    let out = f();
    if let Err(e) = set_nice_of_this_thread(own) {
        tracing::warn!(error = %e, nice = own, "cannot put the daemon's thread ahead of its jobs again");
    }
    out
}
