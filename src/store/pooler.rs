//! Statements through a transaction-mode connection pooler (PgBouncer `pool_mode =
//! transaction`), or straight on the pool.
//!
//! Such a pooler hands the server connection to another client at the end of every
//! transaction, and a statement that runs outside a transaction ends one at each protocol
//! `Sync`. sqlx prepares a statement (Parse, Sync) and then runs it (Bind, Execute, Sync): on a
//! pooler the two halves may reach different server connections, and a named statement left
//! on one of them collides with another client's of the same name. Session settings (`SET`)
//! would stay on whichever server connection ran them.
//!
//! So with `[database] direct_url` set (see docs/databases.md), every statement the store sends
//! through the pooler runs in a transaction of its own, which keeps both halves on one server
//! connection; the transaction's first statement sets the timeouts for it alone (`SET LOCAL`)
//! and drops the prepared statements earlier clients left there (`DEALLOCATE ALL`), and the
//! connection caches none (`statement-cache-capacity=0`). A statement that ran on its own
//! before is one transaction now too, so nothing commits differently. Migrations (sqlx's
//! advisory lock) and LISTEN use `direct_url`.

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use sqlx::any::{Any, AnyQueryResult, AnyRow, AnyStatement, AnyTypeInfo};
use sqlx::{AnyPool, AssertSqlSafe, Either, Execute, Executor, SqlStr};

/// The pool the store's statements run on.
#[derive(Debug, Clone)]
pub(crate) struct Db {
    pub pool: AnyPool,
    /// Through a transaction-mode pooler: the statement that begins each statement's
    /// transaction. `None`: straight on the pool.
    pub begin: Option<std::sync::Arc<str>>,
    /// Whether the node is quiet: its statements then wait briefly for a connection on its
    /// way back rather than open another (`quiet.rs`).
    pub quiet: super::quiet::Quiet,
}

/// What begins a transaction through the pooler: the timeouts for this transaction, and no
/// prepared statements left on the server connection by earlier clients.
pub(crate) fn begin_statement(timeout_ms: Option<u64>) -> String {
    let mut sql = String::from("BEGIN");
    if let Some(ms) = timeout_ms {
        sql.push_str(&format!(
            "; SET LOCAL statement_timeout = {ms}; SET LOCAL lock_timeout = {ms}"
        ));
    }
    sql.push_str("; DEALLOCATE ALL");
    sql
}

/// `url` with sqlx's statement cache turned off (each host of a PostgreSQL URL).
pub(crate) fn without_statement_cache(url: &str) -> String {
    let (base, fragment) = match url.split_once('#') {
        Some((b, f)) => (b, Some(f)),
        None => (url, None),
    };
    let sep = if base.contains('?') { '&' } else { '?' };
    let mut out = format!("{base}{sep}statement-cache-capacity=0");
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    out
}

impl Db {
    /// Begins a transaction that will write: through the pooler with the timeouts set for it.
    pub async fn begin_with(
        &self,
        plain: &'static str,
    ) -> Result<sqlx::Transaction<'static, Any>, sqlx::Error> {
        self.quiet.settle(&self.pool).await;
        match &self.begin {
            Some(begin) => self.pool.begin_with(AssertSqlSafe(begin.to_string())).await,
            None if plain == "BEGIN" => self.pool.begin().await,
            None => self.pool.begin_with(plain).await,
        }
    }
}

impl<'p> Executor<'p> for &'_ Db {
    type Database = Any;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<AnyQueryResult, AnyRow>, sqlx::Error>>
    where
        E: 'q + Execute<'q, Any>,
    {
        let quiet = self.quiet.get().then(|| self.quiet.clone());
        let Some(begin) = self.begin.clone() else {
            let Some(quiet) = quiet else {
                return self.pool.fetch_many(query);
            };
            let pool = self.pool.clone();
            let settled = async move {
                quiet.settle(&pool).await;
                pool.fetch_many(query)
            };
            return futures_util::stream::once(settled).flatten().boxed();
        };
        let pool = self.pool.clone();
        // The results are gathered before the commit: a row is only handed on once the
        // transaction that read or wrote it has committed.
        let all = async move {
            if let Some(quiet) = quiet {
                quiet.settle(&pool).await;
            }
            let mut tx = pool.begin_with(AssertSqlSafe(begin.to_string())).await?;
            let results: Vec<_> = tx.fetch_many(query).try_collect().await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(futures_util::stream::iter(results.into_iter().map(Ok)))
        };
        futures_util::stream::once(all).try_flatten().boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<AnyRow>, sqlx::Error>>
    where
        E: 'q + Execute<'q, Any>,
    {
        let quiet = self.quiet.get().then(|| self.quiet.clone());
        let Some(begin) = self.begin.clone() else {
            let Some(quiet) = quiet else {
                return self.pool.fetch_optional(query);
            };
            let pool = self.pool.clone();
            return Box::pin(async move {
                quiet.settle(&pool).await;
                pool.fetch_optional(query).await
            });
        };
        let pool = self.pool.clone();
        Box::pin(async move {
            if let Some(quiet) = quiet {
                quiet.settle(&pool).await;
            }
            let mut tx = pool.begin_with(AssertSqlSafe(begin.to_string())).await?;
            let row = tx.fetch_optional(query).await?;
            tx.commit().await?;
            Ok(row)
        })
    }

    fn prepare_with<'e>(
        self,
        sql: SqlStr,
        parameters: &'e [AnyTypeInfo],
    ) -> BoxFuture<'e, Result<AnyStatement, sqlx::Error>>
    where
        'p: 'e,
    {
        self.pool.prepare_with(sql, parameters)
    }

    fn describe<'e>(self, sql: SqlStr) -> BoxFuture<'e, Result<sqlx::Describe<Any>, sqlx::Error>>
    where
        'p: 'e,
    {
        self.pool.describe(sql)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_begin_statement_sets_timeouts_for_the_transaction_only() {
        assert_eq!(begin_statement(None), "BEGIN; DEALLOCATE ALL");
        assert_eq!(
            begin_statement(Some(2500)),
            "BEGIN; SET LOCAL statement_timeout = 2500; SET LOCAL lock_timeout = 2500; \
             DEALLOCATE ALL"
        );
    }

    #[test]
    fn the_statement_cache_is_turned_off_in_the_url() {
        assert_eq!(
            without_statement_cache("postgres://u@h:6432/db"),
            "postgres://u@h:6432/db?statement-cache-capacity=0"
        );
        assert_eq!(
            without_statement_cache("postgres://u@h/db?sslmode=disable#x"),
            "postgres://u@h/db?sslmode=disable&statement-cache-capacity=0#x"
        );
    }
}
