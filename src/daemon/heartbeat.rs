//! The node's heartbeat, every [`super::HEARTBEAT_INTERVAL`]: `cron_nodes.last_seen`, which is
//! how the cluster tells a live node from a dead one, and then this node's host-local copies,
//! read again only when the audit trail moved (`every_node.rs`).

use crate::config::Config;

use super::Daemon;

impl Daemon {
    /// The node's heartbeat: `cron_nodes.last_seen` and its host-local copies. (The count of
    /// live nodes for `/metrics` comes with each peek.)
    pub(super) async fn heartbeat(&self, config: &Config) {
        let local_now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let audit_mark = match self
            .shared
            .store
            .node_seen(&self.shared.node, local_now)
            .await
        {
            // MySQL's heartbeat returns none: the last peek's (at most a poll interval old).
            Ok(mark) => mark.or_else(|| {
                Some(
                    self.shared
                        .peeked_audit_mark
                        .load(std::sync::atomic::Ordering::Relaxed),
                )
                .filter(|m| *m != 0)
            }),
            Err(e) => {
                tracing::warn!(error = %e, "node heartbeat failed");
                self.shared.metrics.database_error(e.kind());
                None
            }
        };
        if let Err(e) = self.shared.sync_copies_if_changed(config, audit_mark).await {
            tracing::warn!(error = %e, "host-local jobs not synced");
        }
        self.shared.clone().learn_generations_beside(config);
    }
}
