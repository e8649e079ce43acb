//! Talking to systemd: the sd_notify protocol (READY, STATUS, WATCHDOG, RELOADING, STOPPING).
//! Every call is a no-op when the process is not a notify service (`$NOTIFY_SOCKET` unset), and
//! failures to send are ignored: systemd integration must never take the daemon down.

use sd_notify::NotifyState;

fn send(states: &[NotifyState]) {
    let _ = sd_notify::notify(states);
}

/// Startup finished (or a reload finished): migrations applied, database reachable.
pub fn ready() {
    send(&[NotifyState::Ready]);
}

/// A SIGHUP reload begins; [`ready`] ends it.
pub fn reloading() {
    let now = monotonic_usec();
    send(&[NotifyState::Reloading, NotifyState::MonotonicUsec(now)]);
}

/// The shutdown begins.
pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

/// One line for `systemctl status`.
pub fn status(line: &str) {
    send(&[NotifyState::Status(line)]);
}

/// Whether systemd expects watchdog pings from this process.
pub fn watchdog_enabled() -> bool {
    watchdog_interval().is_some()
}

/// How often the poll loop passes at least when systemd expects watchdog pings: a third of the
/// watchdog timeout (`WatchdogSec=`), so a healthy idle loop never misses one.
pub fn watchdog_interval() -> Option<std::time::Duration> {
    static INTERVAL: std::sync::OnceLock<Option<std::time::Duration>> = std::sync::OnceLock::new();
    *INTERVAL.get_or_init(|| sd_notify::watchdog_enabled().map(|t| t / 3))
}

/// A watchdog ping. Sent by the poll loop after every pass, never by a timer of its own, so
/// that a wedged loop lets systemd restart the daemon.
pub fn watchdog() {
    if watchdog_enabled() {
        send(&[NotifyState::Watchdog]);
    }
}

fn monotonic_usec() -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    i128::from(ts.tv_sec) * 1_000_000 + i128::from(ts.tv_nsec) / 1_000
}

/// Whether this process is a systemd service (`$INVOCATION_ID` is set for service processes):
/// its control group then ends every job with it.
pub fn under_systemd() -> bool {
    std::env::var_os("INVOCATION_ID").is_some()
}

/// The daemon's service manager under systemd (a no-op elsewhere, as every call above).
pub struct Systemd;

impl crate::daemon::notify::ServiceManager for Systemd {
    fn ready(&self) {
        ready();
    }
    fn reloading(&self) {
        reloading();
    }
    fn stopping(&self) {
        stopping();
    }
    fn status(&self, line: &str) {
        status(line);
    }
    fn watchdog(&self) {
        watchdog();
    }
    fn watchdog_interval(&self) -> Option<std::time::Duration> {
        watchdog_interval()
    }
}
