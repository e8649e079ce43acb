//! What a server's own settings mean for sqlcron, for `doctor`: MySQL/MariaDB's binary log.

use super::{Dialect, Result, Store, StoreError};

impl Store {
    /// MySQL/MariaDB: the binary log's format when the server writes one (`None` when it does
    /// not, or on another database). A `STATEMENT` log cannot hold writes made at READ
    /// COMMITTED, and its replicas stop at sqlcron's first insert of a job, audit row or lock
    /// request (docs/src/how-to/production-databases.md).
    pub async fn binlog_format(&self) -> Result<Option<String>> {
        if self.dialect != Dialect::Mysql {
            return Ok(None);
        }
        sqlx::query_scalar::<_, Option<String>>(
            "SELECT IF(@@log_bin = 1, CAST(@@binlog_format AS CHAR), NULL)",
        )
        .fetch_one(&self.db)
        .await
        .map_err(sql_err!(self, "read the binary log's format"))
    }
}
