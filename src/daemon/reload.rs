//! SIGHUP: the configuration read again and applied, except what needs a restart.

use std::sync::Arc;

use crate::config::Config;

impl super::Daemon {
    pub(super) async fn reload(&self, config: Config) {
        self.shared.manager.reloading();
        let old = self.config();
        if config.database_url != old.database_url || config.node_name != old.node_name {
            tracing::warn!(
                "reload: [database] url and [node] name changes need a restart; keeping the old ones"
            );
        }
        if config.daemon.max_parallel != old.daemon.max_parallel {
            tracing::warn!("reload: [daemon] max_parallel changes need a restart");
        }
        // Signed mode's floors are read at the start only (and a node refuses to start on a
        // file it cannot read): a reload cannot switch the mode.
        if config.security.sql_jobs != old.security.sql_jobs {
            tracing::error!(
                "reload: [security] sql_jobs changes need a restart; the whole file is not applied"
            );
            self.shared.manager.ready();
            return;
        }
        *self
            .shared
            .config
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
        match self.apply_config().await {
            Ok(()) => tracing::info!("configuration reloaded"),
            Err(e) => tracing::error!(error = %e, "reload: applying the TOML jobs failed"),
        }
        self.shared.manager.ready();
    }
}
