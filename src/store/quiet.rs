//! A quiet node's statements on one connection.
//!
//! The pool gives a connection back only after a round trip to the server (sqlx pings each
//! one as it comes back), so a statement sent right after another, by the same loop, finds no
//! idle connection and opens a second one: an idle node's heartbeat (its UPDATE, then now and
//! then its templates) and its pass would keep two connections where one serves. While the node
//! is quiet (it has held no run for half a minute, `daemon/pool_trim.rs`), a statement that
//! finds the pool's connections all out waits up to [`SETTLE_WAIT`] for one to come back
//! before the pool may open another: a fraction of a millisecond for the round trip, where a
//! new PostgreSQL connection costs the server about 17 ms of CPU. A connection really in use
//! (another loop's statement) is waited for no longer than that. A node that claims a run is
//! busy again at once, and its statements never wait.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::AnyPool;

/// How long a quiet node's statement waits for a connection to come back.
pub(crate) const SETTLE_WAIT: Duration = Duration::from_millis(20);

/// Whether the node is quiet, shared by the clones of one store.
#[derive(Debug, Clone, Default)]
pub(crate) struct Quiet(Arc<AtomicBool>);

impl Quiet {
    pub fn set(&self, quiet: bool) {
        self.0.store(quiet, Ordering::Relaxed);
    }

    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// While quiet: waits (up to [`SETTLE_WAIT`]) until the pool has an idle connection or
    /// none at all.
    pub async fn settle(&self, pool: &AnyPool) {
        if !self.get() {
            return;
        }
        let deadline = tokio::time::Instant::now() + SETTLE_WAIT;
        while waits(pool.size(), pool.num_idle()) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Whether a statement of a quiet node waits: every connection the pool holds is out.
fn waits(size: u32, idle: usize) -> bool {
    size > 0 && idle == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_statement_waits_only_while_every_connection_is_out() {
        assert!(!waits(0, 0), "no connection: open one");
        assert!(waits(1, 0), "the one connection on its way back");
        assert!(!waits(1, 1), "an idle one");
        assert!(!waits(2, 1));
    }

    #[test]
    fn clones_share_the_flag() {
        let a = Quiet::default();
        let b = a.clone();
        assert!(!b.get());
        a.set(true);
        assert!(b.get());
    }
}
