//! The threads that serve what the host reads (the dashboard and its API, `/metrics` and
//! `/healthz`), apart from the run path's.
//!
//! The daemon runs its claims, starts, releases and housekeeping on one thread (a
//! current-thread runtime) and its lease extension on another (`daemon/lease_thread.rs`). A
//! page, an API call or a scrape runs on neither: the listeners live on a runtime of their own
//! with [`WORKERS`] worker threads and at most [`BLOCKING`] blocking ones, started here. So a
//! request that computes for a long time (every slot of a per-second job since 1970, say) can
//! hold at most this runtime's threads, never the one that claims and starts the node's jobs.
//!
//! The threads also run at a lower CPU priority ([`NICE`]): on a machine whose cores are all
//! busy serving pages, the kernel still gives the run path's threads the CPU first. Each
//! request's own work is bounded as well (ranges clamped, a deadline on every answer, see
//! `web/mod.rs`); the separate threads are what holds when a bound is missed.

use std::future::Future;

/// Worker threads of the listeners' runtime: one request that computes does not hold the
/// others up.
pub const WORKERS: usize = 2;
/// Blocking threads of the listeners' runtime (file reads of the users file and the like).
pub const BLOCKING: usize = 2;
/// How much nicer than the daemon the listeners' threads run (`setpriority`, per thread).
pub const NICE: i32 = 10;
/// The name of the listeners' threads, as `top -H` and `/proc/PID/task/*/comm` show it.
pub const THREAD_NAME: &str = "sqlcron-web";

/// The listeners' runtime; dropped or [`ServiceRuntime::shutdown`], it ends every listener.
pub struct ServiceRuntime {
    runtime: Option<tokio::runtime::Runtime>,
}

impl ServiceRuntime {
    /// Starts the runtime's threads. Errors only when the system has no thread left to give.
    pub fn start() -> std::io::Result<ServiceRuntime> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKERS)
            .max_blocking_threads(BLOCKING)
            .thread_name(THREAD_NAME)
            .on_thread_start(lower_priority)
            .enable_all()
            .build()?;
        Ok(ServiceRuntime {
            runtime: Some(runtime),
        })
    }

    /// Runs `task` on the listeners' threads.
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if let Some(runtime) = &self.runtime {
            runtime.spawn(task);
        }
    }

    /// Ends every listener without waiting for its requests (callable from async code, unlike
    /// dropping a runtime).
    pub fn shutdown(mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for ServiceRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Lowers the calling thread's CPU priority by [`NICE`]. Linux keeps a nice value per thread;
/// a failure (a container that forbids it) only leaves the thread at the daemon's priority.
fn lower_priority() {
    // SAFETY: gettid and setpriority take and return plain integers; the thread id is the
    // caller's own.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        let now = libc::getpriority(libc::PRIO_PROCESS, tid);
        libc::setpriority(libc::PRIO_PROCESS, tid, (now + NICE).min(19));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The listeners' tasks run on threads of their own, named, and at a lower priority than
    /// the thread that started them.
    #[test]
    fn tasks_run_on_their_own_nicer_threads() {
        let caller = std::thread::current().id();
        // SAFETY: plain integer calls about this thread.
        let mine = unsafe {
            libc::getpriority(
                libc::PRIO_PROCESS,
                libc::syscall(libc::SYS_gettid) as libc::id_t,
            )
        };
        let rt = ServiceRuntime::start().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        rt.spawn(async move {
            let t = std::thread::current();
            // SAFETY: as above.
            let nice = unsafe {
                libc::getpriority(
                    libc::PRIO_PROCESS,
                    libc::syscall(libc::SYS_gettid) as libc::id_t,
                )
            };
            let _ = tx.send((t.id(), t.name().map(str::to_string), nice));
        });
        let (id, name, nice) = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        assert_ne!(id, caller);
        assert_eq!(name.as_deref(), Some(THREAD_NAME));
        assert_eq!(nice, (mine + NICE).min(19));
        rt.shutdown();
    }
}
