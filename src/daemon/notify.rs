//! What the daemon tells the service manager that runs it: ready, reloading, stopping, a status
//! line, and the watchdog's pings. The daemon only knows this trait; `service/systemd.rs`
//! implements it with sd_notify, and a daemon built without one ([`Silent`], in tests and
//! benchmarks) tells nobody.

use std::time::Duration;

/// The service manager's side of the daemon's life. Every call must be cheap and must never
/// fail the daemon: a manager that cannot be reached is ignored.
pub trait ServiceManager: Send + Sync {
    /// Startup (or a reload) finished: migrations applied, database reachable.
    fn ready(&self);
    /// A reload (SIGHUP) begins; [`ServiceManager::ready`] ends it.
    fn reloading(&self);
    /// The shutdown begins.
    fn stopping(&self);
    /// One line for the manager's status view (`systemctl status`).
    fn status(&self, line: &str);
    /// A watchdog ping: sent by the poll loop after every pass, never by a timer of its own, so
    /// that a wedged loop lets the manager restart the daemon.
    fn watchdog(&self);
    /// How often the poll loop must pass at least, when the manager expects watchdog pings.
    fn watchdog_interval(&self) -> Option<Duration>;
}

/// No service manager: every call does nothing.
pub struct Silent;

impl ServiceManager for Silent {
    fn ready(&self) {}
    fn reloading(&self) {}
    fn stopping(&self) {}
    fn status(&self, _line: &str) {}
    fn watchdog(&self) {}
    fn watchdog_interval(&self) -> Option<Duration> {
        None
    }
}
