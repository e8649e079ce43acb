//! One daemon per node name on a database. A second daemon started with the name of a live node
//! (a copied configuration, a cloned VM) would claim as that node: its runs, leases and
//! heartbeats would be taken for the other's, and `status` would show whichever wrote last. At
//! start, before it registers, a daemon reads the name's row: when another daemon has been seen
//! under that name within the liveness window (`NODE_ALIVE_WINDOW_MS`, by the database's clock)
//! and has not stopped, it refuses to start, naming the holder's host and PID.
//!
//! The holder is taken to be gone (and the name free) when it is this host's and its PID no
//! longer runs, or is this very process: a daemon killed with SIGKILL and restarted at once by
//! systemd takes its name back without waiting for the window to pass.
//!
//! What it does not catch: two daemons started with one name within a heartbeat of each other,
//! before either has registered (a check at start, not a lock). docs/daemon.md says so.

use crate::store::{Result, Store};

/// Who holds `name` when it is not this process: "HOST (pid PID), seen Ns ago".
pub async fn held_elsewhere(store: &Store, name: &str, host: &str) -> Result<Option<String>> {
    let (now, nodes) = tokio::try_join!(store.now(), store.nodes())?;
    let Some(row) = nodes.into_iter().find(|n| n.name == name) else {
        return Ok(None);
    };
    if !row.alive(now) {
        return Ok(None);
    }
    let their_host = row.host.clone().unwrap_or_default();
    let pid = row.pid.unwrap_or(0);
    if their_host == host
        && (pid == i64::from(std::process::id())
            || !i32::try_from(pid).is_ok_and(|p| p > 0 && crate::exec::orphans::running(p)))
    {
        return Ok(None);
    }
    let ago = row.last_seen.map_or(0, |s| (now - s).max(0) / 1000);
    Ok(Some(format!("{their_host} (pid {pid}), seen {ago}s ago")))
}
