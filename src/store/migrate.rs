//! Creating and upgrading the schema, one migration folder per dialect.

use super::{Dialect, Result, Store, StoreError};

static MIGRATOR_SQLITE: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");
static MIGRATOR_POSTGRES: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");
static MIGRATOR_MYSQL: sqlx::migrate::Migrator = sqlx::migrate!("migrations/mysql");

impl Store {
    /// The schema's version: the newest migration applied to the database (`None`: none, or
    /// no schema at all) and the newest this build knows.
    pub async fn schema_version(&self) -> Result<(Option<i64>, i64)> {
        let latest = match self.dialect {
            Dialect::Sqlite => &MIGRATOR_SQLITE,
            Dialect::Postgres => &MIGRATOR_POSTGRES,
            Dialect::Mysql => &MIGRATOR_MYSQL,
        }
        .iter()
        .map(|m| m.version)
        .max()
        .unwrap_or(0);
        let applied: Option<i64> =
            sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success = TRUE")
                .fetch_one(&self.db)
                .await
                .unwrap_or(None);
        Ok((applied, latest))
    }

    /// How many migrations the database has applied (0: none, or no schema at all).
    pub async fn migrations_applied(&self) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations WHERE success = TRUE")
            .fetch_one(&self.db)
            .await
            .unwrap_or(0)
    }

    /// Whether this connection's user may create tables where the schema lives: what `migrate`
    /// needs for the next upgrade. PostgreSQL asks `has_schema_privilege`; MySQL/MariaDB creates
    /// and drops a probe table; SQLite needs only the file, which `doctor` checks itself.
    /// `Err` names what could not be asked.
    pub async fn can_migrate(&self) -> Result<bool> {
        let store = self.direct.as_deref().unwrap_or(self);
        match store.dialect {
            Dialect::Sqlite => Ok(true),
            Dialect::Postgres => sqlx::query_scalar::<_, bool>(
                "SELECT has_schema_privilege(current_schema(), 'CREATE')",
            )
            .fetch_one(&store.db)
            .await
            .map_err(sql_err!(store, "ask for the CREATE privilege")),
            Dialect::Mysql => {
                let probe = format!("_sqlcron_doctor_probe_{}", std::process::id());
                let mut conn = store
                    .db
                    .pool
                    .acquire()
                    .await
                    .map_err(sql_err!(store, "connect"))?;
                // The name is this module's text and a number: nothing from outside.
                let created =
                    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE TABLE {probe} (x INT)")))
                        .execute(&mut *conn)
                        .await
                        .is_ok();
                if created {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {probe}")))
                        .execute(&mut *conn)
                        .await;
                }
                Ok(created)
            }
        }
    }

    /// Creates or upgrades the schema. Nodes starting at once against an empty database are
    /// serialised: PostgreSQL by sqlx's advisory lock, MySQL/MariaDB by `GET_LOCK` held on the
    /// migrating connection (sqlx's own `GET_LOCK(name, -1)` does not wait on MariaDB), SQLite by
    /// an exclusive `flock` on `<database file>.migrate.lock` (sqlx takes no lock there).
    pub async fn migrate(&self) -> Result<()> {
        let err = |source| StoreError::Migrate {
            dialect: self.dialect.name(),
            source,
        };
        if let Some(direct) = &self.direct {
            // sqlx's advisory lock is a session's: not through a transaction-mode pooler.
            return Box::pin(direct.migrate()).await;
        }
        match self.dialect {
            Dialect::Postgres => {
                let mut conn = self.migration_connection().await?;
                // Migrations may take longer than the daemon's statement timeout; this
                // connection is closed afterwards instead of going back to the pool.
                conn.close_on_drop();
                if self.current_on(&mut conn, &MIGRATOR_POSTGRES).await? {
                    return Ok(());
                }
                sqlx::raw_sql("SET statement_timeout = 0; SET lock_timeout = 0")
                    .execute(&mut *conn)
                    .await
                    .map_err(sql_err!(self, "prepare migration"))?;
                MIGRATOR_POSTGRES.run(&mut *conn).await.map_err(err)
            }
            Dialect::Mysql => {
                let mut conn = self.migration_connection().await?;
                conn.close_on_drop();
                for reset in [
                    "SET SESSION max_statement_time = 0",
                    "SET SESSION max_execution_time = 0",
                    "SET SESSION innodb_lock_wait_timeout = 300",
                ] {
                    // One of the first two exists (MariaDB, MySQL); the other fails.
                    let _ = sqlx::query(reset).execute(&mut *conn).await;
                }
                // A Galera node must serve before anything is written through it.
                let galera = super::galera::state(&mut conn)
                    .await
                    .map_err(sql_err!(self, "read the Galera state"))?;
                if let Some(g) = &galera {
                    let said = super::galera::judge(g).map_err(StoreError::Galera)?;
                    tracing::info!("{said}");
                }
                if self.current_on(&mut conn, &MIGRATOR_MYSQL).await? {
                    return Ok(());
                }
                if galera.is_some() {
                    return self.migrate_galera(&mut conn).await;
                }
                let got: Option<i64> =
                    sqlx::query_scalar("SELECT GET_LOCK('sqlcron.migrate', 300)")
                        .fetch_one(&mut *conn)
                        .await
                        .map_err(sql_err!(self, "lock for migration"))?;
                if got != Some(1) {
                    tracing::warn!("could not take the migration lock in 300 s; migrating anyway");
                }
                let result = MIGRATOR_MYSQL.run(&mut *conn).await.map_err(err);
                let _ = sqlx::query("SELECT RELEASE_LOCK('sqlcron.migrate')")
                    .execute(&mut *conn)
                    .await;
                result
            }
            Dialect::Sqlite => {
                let lock = match self.url.sqlite_path().map(std::path::Path::to_path_buf) {
                    Some(path) => Some(
                        tokio::task::spawn_blocking(move || lock_file(&path))
                            .await
                            .map_err(|e| StoreError::Lock(e.to_string()))?
                            .map_err(|e| StoreError::Lock(e.to_string()))?,
                    ),
                    None => None,
                };
                let mut conn = self.migration_connection().await?;
                let result = match self.current_on(&mut conn, &MIGRATOR_SQLITE).await {
                    Ok(true) => Ok(()),
                    Ok(false) => MIGRATOR_SQLITE.run(&mut *conn).await.map_err(err),
                    Err(e) => Err(e),
                };
                drop(lock);
                result
            }
        }
    }
}

impl Store {
    /// Migrates through a Galera node. `GET_LOCK` is a node's own on Galera, so nodes starting
    /// at once on different Galera nodes would run the same migration together (a DDL of one
    /// failing on the other's, which leaves sqlx's record of that migration half done for
    /// good). The lock here is a row of `sqlcron_migration_lock`, which certification gives to
    /// one node of the cluster at a time; it expires after 10 minutes if its holder died. Reads
    /// wait for the node to have applied what the cluster committed before (`wsrep_sync_wait`),
    /// so the next holder sees the migrations its predecessor recorded.
    async fn migrate_galera(&self, conn: &mut sqlx::pool::PoolConnection<sqlx::Any>) -> Result<()> {
        // This process, told apart from a process of the same id on another host.
        let holder = format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        );
        for setup in [
            "SET SESSION wsrep_sync_wait = 15",
            "CREATE TABLE IF NOT EXISTS sqlcron_migration_lock (name VARCHAR(64) PRIMARY KEY, \
             holder VARCHAR(255) NOT NULL, until BIGINT NOT NULL)",
        ] {
            sqlx::query(setup)
                .execute(&mut **conn)
                .await
                .map_err(sql_err!(self, "prepare the migration lock"))?;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
        loop {
            let _ = sqlx::query(sqlx::AssertSqlSafe(self.dialect.render(
                "DELETE FROM sqlcron_migration_lock WHERE name = 'migrate' AND until < {now}",
            )))
            .execute(&mut **conn)
            .await;
            let taken = sqlx::query(sqlx::AssertSqlSafe(self.dialect.render(
                "INSERT INTO sqlcron_migration_lock (name, holder, until) \
                 VALUES ('migrate', ?, {now} + 600000)",
            )))
            .bind(holder.clone())
            .execute(&mut **conn)
            .await;
            match taken {
                Ok(_) => break,
                Err(e) if std::time::Instant::now() > deadline => {
                    tracing::warn!(error = %e, "could not take the migration lock in 300 s; migrating anyway");
                    break;
                }
                // Held by another node (duplicate key), or lost to it in certification.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(250)).await,
            }
        }
        let result = MIGRATOR_MYSQL
            .run(&mut **conn)
            .await
            .map_err(|source| StoreError::Migrate {
                dialect: self.dialect.name(),
                source,
            });
        let _ =
            sqlx::query("DELETE FROM sqlcron_migration_lock WHERE name = 'migrate' AND holder = ?")
                .bind(holder)
                .execute(&mut **conn)
                .await;
        result
    }
}

impl Store {
    /// A connection of the pool for a migration and its checks.
    async fn migration_connection(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Any>> {
        self.db
            .pool
            .acquire()
            .await
            .map_err(sql_err!(self, "connect for migration"))
    }

    /// Whether the schema on `conn` has every migration of `migrator` applied: then migrating
    /// would change nothing, and is skipped so that a daemon may run under a role that can only
    /// read and write the tables (docs/roles/). Checked on the migrating connection: no second
    /// connection attempt while the database is down.
    ///
    /// A schema newer than this build is used as it is when its `oldest_reader` says this build
    /// can (the newer migrations only added), and refused with [`StoreError::SchemaTooNew`]
    /// when they removed or changed something this build reads (docs/upgrades.md).
    async fn current_on(
        &self,
        conn: &mut sqlx::pool::PoolConnection<sqlx::Any>,
        migrator: &sqlx::migrate::Migrator,
    ) -> Result<bool> {
        let latest = migrator.iter().map(|m| m.version).max().unwrap_or(0);
        // A newer migration that failed half way (MySQL's DDL commits as it goes) counts as
        // newer too: it may have removed something already.
        let applied: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
            .fetch_one(&mut **conn)
            .await
            .unwrap_or(None);
        let Some(applied) = applied.filter(|a| *a >= latest) else {
            return Ok(false);
        };
        if applied == latest {
            // Ours, but did it succeed? sqlx's own run says what to do with a failed one.
            let done: Option<i64> = sqlx::query_scalar(
                "SELECT MAX(version) FROM _sqlx_migrations WHERE success = TRUE",
            )
            .fetch_one(&mut **conn)
            .await
            .unwrap_or(None);
            return Ok(done == Some(latest));
        }
        if applied > latest {
            // Unreadable here is an error, not "anyone may use it": this build knows the table.
            let needs = oldest_reader(conn).await.map_err(sql_err!(
                self,
                "read cron_schema (the runtime role needs SELECT on it: docs/roles/)"
            ))?;
            if needs > latest {
                return Err(StoreError::SchemaTooNew {
                    applied,
                    needs,
                    knows: latest,
                });
            }
            tracing::info!(
                applied,
                knows = latest,
                "the schema is newer than this sqlcron (a rolling upgrade); its newer migrations only add, so this node uses it as it is"
            );
        }
        Ok(true)
    }

    /// The newest migration a sqlcron must know to use this database's schema (`cron_schema`;
    /// 0 when it has no such row). An error when the table cannot be read: a schema older than
    /// migration PostgreSQL 31, MySQL 28, SQLite 26, or a role without SELECT on it.
    pub async fn oldest_reader(&self) -> Result<i64> {
        let mut conn = self
            .db
            .pool
            .acquire()
            .await
            .map_err(sql_err!(self, "connect"))?;
        oldest_reader(&mut conn)
            .await
            .map_err(sql_err!(self, "read cron_schema"))
    }
}

/// `cron_schema`'s `oldest_reader` (0 when there is no such row).
async fn oldest_reader(
    conn: &mut sqlx::pool::PoolConnection<sqlx::Any>,
) -> std::result::Result<i64, sqlx::Error> {
    sqlx::query_scalar::<_, i64>("SELECT value FROM cron_schema WHERE name = 'oldest_reader'")
        .fetch_optional(&mut **conn)
        .await
        .map(|v| v.unwrap_or(0))
}

/// Creates the SQLite database file (and its directory) readable by its owner only, whatever
/// the umask: jobs' commands and output are in it. SQLite gives the `-wal` and `-shm` files the
/// database file's mode. Files and directories that exist already are left as they are.
pub(super) fn create_private(db: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    if let Some(dir) = db.parent()
        && !dir.as_os_str().is_empty()
        && !dir.exists()
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    match std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(db)
    {
        Ok(file) => file.set_permissions(std::fs::Permissions::from_mode(0o600)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// An exclusive advisory lock on `<path>.migrate.lock`, released when the file is closed.
fn lock_file(db: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    create_private(db)?;
    let mut name = db.as_os_str().to_owned();
    name.push(".migrate.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(std::path::PathBuf::from(name))?;
    // SAFETY: flock on a file descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}
