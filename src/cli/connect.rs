//! Opening the store for a command: the database, through a pooler when `direct_url` is set,
//! a replica for the reading commands when `read_url` is set, and never a new SQLite file for a
//! command that only reads.

use std::time::Duration;

use crate::config::Config;
use crate::store::Store;

use super::{Failure, database_file};

pub(super) async fn connect(config: &Config) -> Result<Store, Failure> {
    connect_with(config, 4, None).map_err(|e| Failure::usage(e.to_string()))
}

/// The store for `[database] url`: through a transaction-mode pooler when `direct_url` is set.
pub(super) fn connect_with(
    config: &Config,
    pool_size: u32,
    statement_timeout: Option<Duration>,
) -> Result<Store, crate::store::StoreError> {
    match &config.database_direct_url {
        Some(direct) => {
            Store::connect_pooled(&config.database_url, direct, pool_size, statement_timeout)
        }
        None => Store::connect_with(&config.database_url, pool_size, statement_timeout),
    }
}

/// The store the reading commands (`status`, `history`, `explain`) use: `[database] read_url`
/// when set (a replica: any server that answers, a standby too), else the database itself.
pub(super) async fn connect_read(config: &Config) -> Result<Store, Failure> {
    match &config.database_read_url {
        Some(url) => {
            if let Some(p) = database_file::missing(url) {
                return Err(Failure::runtime(format!("{} ({})", p.message, p.fix)));
            }
            Store::connect_reader(url, 4).map_err(|e| Failure::usage(e.to_string()))
        }
        None => connect_existing(config).await,
    }
}

/// The store for a command that only reads: never creates a SQLite file, and names the owner
/// of one it cannot open (exit 1).
pub(super) async fn connect_existing(config: &Config) -> Result<Store, Failure> {
    if let Some(p) = database_file::missing(&config.database_url)
        .or_else(|| database_file::unopenable(&config.database_url))
    {
        return Err(Failure::runtime(format!("{} ({})", p.message, p.fix)));
    }
    connect(config).await
}
