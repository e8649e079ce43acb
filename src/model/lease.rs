//! The lease's timing rules, shared by the daemon's claims and `sqlcron lock`/`sem`: how often a
//! lease is extended, how long a node trusts it after an extension, when the job reaper steps
//! in, and the timeout of every statement. Pure arithmetic on the node's monotonic clock; the
//! lease itself is decided by the database clock (see `daemon/lease.rs` for the state machine).

use std::time::{Duration, Instant};

/// The longest `[daemon] lease` (and `sqlcron lock --lease`).
pub const LEASE_MAX: Duration = Duration::from_secs(3600);

/// A lease ending later than this from now was set by no holder (a writer's): a duty, a lock
/// request or a pooled row's place under it is anybody's. Twice the longest lease, so that a
/// holder's lease of [`LEASE_MAX`], written by a server whose clock is ahead of the reader's
/// (Galera, a clock stepped back), is never taken for one.
pub const LEASE_UNOWNED_BEYOND: Duration = Duration::from_secs(2 * 3600);

/// Part of the lease a node trusts after a successful extension.
pub const TRUST_FRACTION: f64 = 0.8;
/// How often leases are extended.
pub fn extend_interval(lease: Duration) -> Duration {
    lease / 3
}

/// Until when a claim may be trusted, given when the extension (or the claim) was attempted.
pub fn trusted_until(attempt_started: Instant, lease: Duration) -> Instant {
    attempt_started + lease.mul_f64(TRUST_FRACTION)
}

/// When the job reaper kills a run's process group if the daemon has not refreshed it: a tenth
/// of the lease after the trust window, still before the lease ends. The daemon's own stop
/// (SIGTERM, then SIGKILL after `kill_grace`) comes first when its event loop is alive; this
/// is for when it is not (SIGSTOP, a stalled thread), see `exec/reaper.rs`.
pub fn reaper_deadline(trusted_until: Instant, lease: Duration) -> Instant {
    trusted_until + lease / 10
}

/// Whether a trust window that ends at `trusted_until` is still open at `at`. A window that
/// ended is never opened again: from its end the node no longer counts on the claim, and a
/// tenth of the lease later the job reaper kills the run if nothing moved its deadline. So a
/// successful extension moves the window only if it came back while the window was open, and
/// a run whose end is seen after the window ended is lost, not the job's own failure: a
/// starved or stalled node, whose trust watch had not run yet, would otherwise go on with a
/// run the reaper killed and record it as failed instead of a lost run for the next holder.
pub fn window_open(trusted_until: Instant, at: Instant) -> bool {
    at < trusted_until
}

/// The timeout of every statement: half the trust window (at least 500 ms), so a hung
/// statement returns an error while the claim is still trusted.
pub fn statement_timeout(lease: Duration) -> Duration {
    lease
        .mul_f64(TRUST_FRACTION / 2.0)
        .max(Duration::from_millis(500))
}

/// How long the daemon's thread may run nothing before its lease extension (on a thread of its
/// own) stops extending: twice the lease. A shorter stall (a slow name-service lookup) costs
/// its runs lateness only; a longer one, the claims: the trust window then ends, the reaper
/// stops the runs and another node takes the rows over. A node whose run tasks cannot act
/// (stop a job at its `timeout`, on `sqlcron stop`) must not hold its rows for ever.
pub fn stall_limit(lease: Duration) -> Duration {
    lease * 2
}

/// Whether a lease extension goes ahead, given how long the daemon's thread has run nothing.
pub fn extends_after_stall(stalled: Duration, lease: Duration) -> bool {
    stalled <= stall_limit(lease)
}

/// How often the daemon's thread marks its progress, and how often the trust windows are looked
/// at while the node holds no claim: a tenth of the lease, between 100 ms and a second. Both
/// only need to be fine against the lease (a stall is judged against twice the lease, and a
/// new claim's trust window is eight tenths of it); an idle node so wakes its two threads about
/// twice a second with the default lease, not twenty times.
pub fn quiet_tick(lease: Duration) -> Duration {
    (lease / 10).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

/// How long a node keeps its lease extension's connection after it last held a run: thirty
/// leases (five minutes at the default lease). A node whose jobs come that often keeps it; one
/// that runs a job now and then gives it back, and opens it again before its next claim
/// (`daemon/lease_connection.rs`).
pub fn lease_connection_kept(lease: Duration) -> Duration {
    lease.saturating_mul(30)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extension_that_lands_after_the_window_does_not_reopen_it() {
        let t0 = Instant::now();
        let lease = Duration::from_secs(10);
        let window = trusted_until(t0, lease);
        assert!(window_open(window, t0 + Duration::from_secs(7)));
        assert!(!window_open(window, window));
        // Landed after the reaper's deadline: the run may be dead already.
        assert!(!window_open(window, reaper_deadline(window, lease)));
    }

    #[test]
    fn trust_window_ends_before_the_lease() {
        let t0 = Instant::now();
        let lease = Duration::from_secs(10);
        assert_eq!(trusted_until(t0, lease), t0 + Duration::from_secs(8));
        assert_eq!(extend_interval(lease), Duration::from_nanos(3_333_333_333));
        assert!(extend_interval(lease) * 2 < lease.mul_f64(TRUST_FRACTION));
        assert_eq!(statement_timeout(lease), Duration::from_secs(4));
        assert_eq!(
            statement_timeout(Duration::from_millis(600)),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn extensions_stop_once_the_daemon_thread_stalled_for_twice_the_lease() {
        let lease = Duration::from_secs(10);
        assert!(extends_after_stall(Duration::ZERO, lease));
        assert!(extends_after_stall(Duration::from_secs(20), lease));
        assert!(!extends_after_stall(Duration::from_millis(20_001), lease));
    }

    #[test]
    fn an_idle_node_ticks_a_tenth_of_the_lease_within_bounds() {
        assert_eq!(quiet_tick(Duration::from_secs(10)), Duration::from_secs(1));
        assert_eq!(quiet_tick(Duration::from_secs(60)), Duration::from_secs(1));
        assert_eq!(
            quiet_tick(Duration::from_secs(3)),
            Duration::from_millis(300)
        );
        assert_eq!(
            quiet_tick(Duration::from_millis(500)),
            Duration::from_millis(100)
        );
        for lease in [500, 3_000, 10_000, 60_000].map(Duration::from_millis) {
            assert!(quiet_tick(lease) * 3 < lease.mul_f64(TRUST_FRACTION));
            assert!(quiet_tick(lease) * 3 < stall_limit(lease));
        }
    }

    #[test]
    fn the_lease_connection_is_kept_thirty_leases() {
        assert_eq!(
            lease_connection_kept(Duration::from_secs(10)),
            Duration::from_secs(300)
        );
        assert_eq!(
            lease_connection_kept(Duration::from_secs(1)),
            Duration::from_secs(30)
        );
        assert_eq!(lease_connection_kept(Duration::MAX), Duration::MAX);
    }
}
