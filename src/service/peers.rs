//! How many connections one client address may hold on a listener of the node (the dashboard,
//! `/metrics`): a client that opens connections and sends nothing can otherwise take every
//! place and keep the listener from anyone else, re-opening each one as the header timeout
//! closes it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Open connections by client address, each address at most `limit`.
pub struct PerPeer {
    limit: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place in its client's share, given back when dropped.
pub struct Share(Arc<PerPeer>, IpAddr);

impl PerPeer {
    pub fn new(limit: usize) -> Arc<PerPeer> {
        Arc::new(PerPeer {
            limit,
            open: Mutex::default(),
        })
    }

    /// A place for one more connection of `peer`, or `None` when it holds its share.
    pub fn take(self: &Arc<Self>, peer: IpAddr) -> Option<Share> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(peer).or_default();
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(Share(self.clone(), peer))
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut open = self.0.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_holds_at_most_its_share() {
        let peers = PerPeer::new(2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let first = peers.take(a).unwrap();
        let _second = peers.take(a).unwrap();
        assert!(peers.take(a).is_none());
        assert!(peers.take(b).is_some());
        drop(first);
        assert!(peers.take(a).is_some());
    }
}
