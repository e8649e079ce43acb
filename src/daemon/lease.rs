//! Keeping leases alive for the runs this node supervises.
//!
//! # States of one claimed row, as seen by its holder
//! ```text
//!   claim ──► Held ──(extend ok)──► Held
//!               │
//!               ├─(extend: row no longer ours)────────────► Lost
//!               ├─(extend fails; trust window runs out)───► Lost
//!               └─(process exits)──► release (fenced) ──► Done | Lost
//! ```
//! The lease is extended every third of its length, for every live run at once, in one
//! statement. Each successful extension moves the *trust window* to (the moment the attempt
//! started) + 80% of the lease: the node stops trusting its claim before the database could
//! hand it to someone else, even though the exact expiry is decided by the database clock.
//!
//! # Failures
//! | what happens | what the node does |
//! |---|---|
//! | database slow or down for less than the trust window | keeps running, retries each third of the lease |
//! | database down past the trust window | run is lost: `on_lease_lost = "kill"` stops the process group, `"ignore"` lets it finish; nothing more is written for it |
//! | another node took the row (extension matched nothing) | same as above, at once |
//! | the job's process is stuck but alive | the lease is extended: liveness is the process, and `timeout` bounds it |
//! | the node dies | the lease expires; another node takes over by `rerun_lost` |
//! | the node is stopped (SIGTERM) | after `shutdown_grace`, runs are stopped and their leases ended at once |

use std::time::{Duration, Instant};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_window_ends_before_the_lease() {
        let t0 = Instant::now();
        let lease = Duration::from_secs(10);
        assert_eq!(trusted_until(t0, lease), t0 + Duration::from_secs(8));
        assert_eq!(extend_interval(lease), Duration::from_nanos(3_333_333_333));
        assert!(extend_interval(lease) * 2 < lease.mul_f64(TRUST_FRACTION));
    }
}
