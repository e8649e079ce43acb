//! Giving back what a busy spell opened: once the node has held no run for [`QUIET_FOR`], each
//! heartbeat closes the pool's idle connections beyond [`KEEP`]. A run counts whether or not a
//! heartbeat saw it held: one that began and ended between two heartbeats (a burst of short
//! jobs) makes the node busy all the same, or the connections that burst opened would be closed
//! and opened again at the next. The lease extension's own connection is kept longer, thirty
//! leases (`model::lease::lease_connection_kept`), and opened again before the next claim
//! (`lease_connection.rs`): a run's first extension must not wait to connect.
//!
//! The pool cannot do this alone: it hands out its idle connections in turn, so a node that
//! polls uses every connection it holds now and then, and none is ever idle for the pool's own
//! idle timeout. Nor is a short lifetime the answer (it was): each new PostgreSQL connection
//! costs the server about 17 ms of CPU, and a fleet of idle nodes replacing two connections
//! every two minutes kept its server busy with little else (docs/fleet.md).
//!
//! [`KEEP`] is one: an idle node's pass and heartbeat are one loop, one statement after another,
//! and its other loops look seldom (the idle chain look every 30 s, the alert scan's check every
//! minute while no job has alerts, the pruning duty and the deliveries when there is something
//! to do), each drawn anew within a fifth of its period ([`apart`]) so that they seldom meet.
//! Two statements in a row would still take two connections (the pool has the first back only
//! after a round trip): a quiet node's statements wait for it instead (`store/quiet.rs`). When
//! two loops do meet, the second connection is closed at the next heartbeat; the fleet
//! benchmark counts those as new connections a second (docs/fleet.md).

use std::time::{Duration, Instant};

use super::Shared;

/// Connections an idle node keeps in its pool.
pub(super) const KEEP: u32 = 1;
/// How long a node has held no run before it gives connections back.
pub(super) const QUIET_FOR: Duration = crate::store::IDLE_TIMEOUT;

/// Whether a node whose last run ended (or was last seen held) at `busy_at` gives back
/// connections at `now`.
fn gives_back(now: Instant, busy_at: Instant) -> bool {
    now.saturating_duration_since(busy_at) >= QUIET_FOR
}

/// Whether the node was busy since the last heartbeat: it holds a run now, or took one into
/// supervision since (`taken` runs in all, `seen` at the last heartbeat).
fn was_busy(holds: bool, taken: u64, seen: u64) -> bool {
    holds || taken != seen
}

/// When the node last held a run, as its heartbeats saw it.
pub(super) struct PoolTrim {
    busy_at: Instant,
    /// [`Shared::supervised_total`] at the last heartbeat.
    seen: u64,
}

impl PoolTrim {
    pub(super) fn new(now: Instant) -> PoolTrim {
        PoolTrim {
            busy_at: now,
            seen: 0,
        }
    }

    /// With each heartbeat: notes whether the node held a run since the last one, and gives
    /// back what its pool no longer needs once it has been quiet for [`QUIET_FOR`].
    pub(super) async fn after_heartbeat(&mut self, shared: &Shared, now: Instant) {
        let taken = shared
            .supervised_total
            .load(std::sync::atomic::Ordering::Relaxed);
        let busy = was_busy(!shared.supervision().is_empty(), taken, self.seen);
        self.seen = taken;
        if busy {
            self.busy_at = now;
            shared.store.set_quiet(false);
            return;
        }
        if !gives_back(now, self.busy_at) {
            return;
        }
        let lease = shared.config().daemon.lease;
        if now.saturating_duration_since(self.busy_at)
            >= crate::model::lease::lease_connection_kept(lease)
            && shared.supervision().is_empty()
            && shared.lease_connection.give_back()
        {
            tracing::debug!(
                "the node has long held no run: its lease extension's connection goes back"
            );
        }
        // Quiet: the node's statements wait for its one connection (`store/quiet.rs`).
        shared.store.set_quiet(true);
        let closed = shared.store.trim_idle(KEEP).await;
        if closed > 0 {
            tracing::debug!(closed, "idle pooled connections closed");
        }
    }
}

/// `period` drawn anew within ±20 % (at `draw`, from 0 to 1), for the loops that look at the
/// table beside the pass (the chain look, the alert scan, the pruning duty): loops of the same
/// period started together would otherwise meet on the pool at each look, and the second
/// connection their meeting opens would be closed at the next heartbeat, opened again at the
/// next meeting. Drawn anew each time, they drift apart and seldom meet.
pub(super) fn apart(period: Duration, draw: f64) -> Duration {
    period.mul_f64(0.8 + 0.4 * draw.clamp(0.0, 1.0))
}

/// [`apart`] with a random draw.
pub(super) fn apart_now(period: Duration) -> Duration {
    apart(period, rand::random::<f64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_go_back_only_after_a_quiet_spell() {
        let busy = Instant::now();
        assert!(!gives_back(busy, busy), "a run just held");
        assert!(!gives_back(
            busy + QUIET_FOR - Duration::from_millis(1),
            busy
        ));
        assert!(gives_back(busy + QUIET_FOR, busy));
        assert!(
            !gives_back(busy, busy + Duration::from_secs(1)),
            "no panic on a clock step"
        );
    }

    #[test]
    fn a_run_between_two_heartbeats_counts_as_busy() {
        assert!(was_busy(true, 3, 3), "a run held now");
        assert!(
            was_busy(false, 4, 3),
            "a run that began and ended since the last heartbeat"
        );
        assert!(!was_busy(false, 4, 4), "nothing since");
    }

    #[test]
    fn loops_look_within_a_fifth_of_their_period() {
        let period = Duration::from_secs(30);
        assert_eq!(apart(period, 0.0), Duration::from_secs(24));
        assert_eq!(apart(period, 0.5), period);
        assert_eq!(apart(period, 1.0), Duration::from_secs(36));
        assert_eq!(
            apart(period, 7.0),
            Duration::from_secs(36),
            "a draw out of range"
        );
        let drawn = apart_now(period);
        assert!((Duration::from_secs(24)..=Duration::from_secs(36)).contains(&drawn));
    }
}
