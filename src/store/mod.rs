//! All SQL lives here, behind [`Store`]: one type for the three dialects, with the statements
//! that differ kept in [`dialect`].
//!
//! Every instant is a BIGINT of milliseconds since the Unix epoch, UTC, and every comparison with
//! "now" uses the database server's clock (`{now}` in the statement texts), so clock skew between
//! nodes cannot cause double or missed runs. Every write about a claimed row is fenced by
//! `exec_by = node AND token = claim token`; zero rows updated means the claim was lost, which
//! is an expected outcome ([`Fenced::Lost`]), not an error.
//!
//! The statements run through sqlx's `Any` driver with dialect-specific text: compile-time
//! checked queries can only check against one database at a time, so the conformance suite in
//! `tests/it/store.rs` runs every statement against all three instead.

pub mod dialect;
pub mod locks;

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, AssertSqlSafe, ConnectOptions, Executor, Row};

pub use dialect::Dialect;
use dialect::{JOB_COLUMNS, claim_sql};
pub use locks::{LockRow, LockState};

use crate::job::JobSpec;

/// `next_exec` of a row that cannot run until it is fixed (9999-12-31T23:59:59Z): it stays out
/// of every due scan and costs nothing per poll.
pub const PARKED: i64 = 253_402_300_799_000;

/// A store error: the operation, the dialect and the cause.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{dialect} {op}: {source}")]
    Sql {
        dialect: &'static str,
        op: &'static str,
        #[source]
        source: sqlx::Error,
    },
    #[error("migrating the {dialect} schema: {source}")]
    Migrate {
        dialect: &'static str,
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    #[error("unsupported database URL \"{0}\": use sqlite://, postgres:// or mysql://")]
    Url(String),
    #[error("taking the SQLite migration lock: {0}")]
    Lock(String),
}

impl StoreError {
    /// True for a unique-key violation (a run recorded twice).
    pub fn is_unique_violation(&self) -> bool {
        match self {
            StoreError::Sql {
                source: sqlx::Error::Database(e),
                ..
            } => e.is_unique_violation(),
            _ => false,
        }
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// A row of `cron_table` as a node sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    pub id: i64,
    pub name: String,
    pub schedule: String,
    pub timezone: Option<String>,
    pub command: Option<String>,
    /// JSON array of strings.
    pub argv: Option<String>,
    /// JSON object of strings.
    pub env: Option<String>,
    pub workdir: Option<String>,
    pub enabled: bool,
    pub pool: Option<String>,
    /// Policy columns as stored (NULL: the TOML default).
    pub policy: BTreeMap<&'static str, Option<String>>,
    pub source: String,
    pub next_exec: Option<i64>,
    pub slot: Option<i64>,
    pub attempt: i64,
    pub exec_by: Option<String>,
    pub prev_exec_by: Option<String>,
    pub lease_until: Option<i64>,
    pub token: i64,
    pub run_now: bool,
    pub dirty: bool,
    pub last_status: Option<String>,
    pub last_exit: Option<i64>,
    pub last_start: Option<i64>,
    pub last_end: Option<i64>,
    pub last_node: Option<String>,
    pub error: Option<String>,
    /// When the current claim was taken (database clock).
    pub claimed_at: Option<i64>,
    /// The row waits for its pool (1), or waits to rerun a lost run of `slot`/`attempt` (2).
    /// The wait does not make its slot missed.
    pub pool_wait: i64,
}

/// Policy columns of `cron_table`, in the order the TOML keys are documented.
pub const POLICY_COLUMNS: [&str; 11] = [
    "misfire",
    "starting_deadline",
    "max_catch_up",
    "retries",
    "retry_backoff",
    "retry_backoff_max",
    "timeout",
    "kill_grace",
    "jitter",
    "on_lease_lost",
    "rerun_lost",
];

fn text_or_int(row: &AnyRow, col: &str) -> std::result::Result<Option<String>, sqlx::Error> {
    if let Ok(v) = row.try_get::<Option<String>, _>(col) {
        return Ok(v);
    }
    Ok(row.try_get::<Option<i64>, _>(col)?.map(|n| n.to_string()))
}

impl JobRow {
    fn from_row(row: &AnyRow) -> std::result::Result<JobRow, sqlx::Error> {
        let mut policy = BTreeMap::new();
        for col in POLICY_COLUMNS {
            policy.insert(col, text_or_int(row, col)?);
        }
        Ok(JobRow {
            id: row.try_get("id")?,
            name: row.try_get("name")?,
            schedule: row.try_get("schedule")?,
            timezone: row.try_get("timezone")?,
            command: row.try_get("command")?,
            argv: row.try_get("argv")?,
            env: row.try_get("env")?,
            workdir: row.try_get("workdir")?,
            enabled: row.try_get::<i64, _>("enabled")? != 0,
            pool: row.try_get("pool")?,
            policy,
            source: row.try_get("source")?,
            next_exec: row.try_get("next_exec")?,
            slot: row.try_get("slot")?,
            attempt: row.try_get("attempt")?,
            exec_by: row.try_get("exec_by")?,
            prev_exec_by: row.try_get("prev_exec_by")?,
            lease_until: row.try_get("lease_until")?,
            token: row.try_get("token")?,
            run_now: row.try_get::<i64, _>("run_now")? != 0,
            dirty: row.try_get::<i64, _>("dirty")? != 0,
            last_status: row.try_get("last_status")?,
            last_exit: row.try_get("last_exit")?,
            last_start: row.try_get("last_start")?,
            last_end: row.try_get("last_end")?,
            last_node: row.try_get("last_node")?,
            error: row.try_get("error")?,
            claimed_at: row.try_get("claimed_at")?,
            pool_wait: row.try_get("pool_wait")?,
        })
    }
}

/// What one cheap look at the table found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peek {
    /// The database clock.
    pub now: i64,
    /// The earliest `next_exec` of an enabled row (a due time or a lease end).
    pub next_due: Option<i64>,
    /// Some row has no `next_exec` yet (inserted or changed with SQL).
    pub pending_prepare: bool,
    /// The name of the row with the earliest `next_exec` (for the status line).
    pub next_name: Option<String>,
}

/// The result of a write fenced by a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    Done,
    /// Another node holds the row now (or it was deleted): nothing was written.
    Lost,
}

/// How a claimed row is released.
#[derive(Debug, Clone)]
pub struct Release {
    pub slot: i64,
    pub attempts: u32,
    pub next_exec: i64,
    /// Clear `run_now` (this was the manual run).
    pub clear_run_now: bool,
    /// `last_status` etc.; `None` when the release did not follow a run.
    pub outcome: Option<RunResult>,
}

/// The end of one run, for `cron_table.last_*` and `cron_runs`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    /// ok, failed, timeout, lost.
    pub outcome: &'static str,
    pub exit_code: Option<i64>,
    pub signal: Option<i64>,
    pub started: i64,
    pub output: String,
    pub message: Option<String>,
}

/// The identity of one run in `cron_runs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunKey {
    pub job: String,
    pub slot: i64,
    pub attempt: u32,
}

/// One row of `cron_runs`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HistoryRow {
    pub job: String,
    pub slot: i64,
    pub attempt: i64,
    pub node: Option<String>,
    pub token: Option<i64>,
    pub started: Option<i64>,
    pub ended: Option<i64>,
    pub outcome: String,
    pub exit_code: Option<i64>,
    pub signal: Option<i64>,
    pub output: Option<String>,
    pub skipped_count: Option<i64>,
    pub skipped_last: Option<i64>,
    pub message: Option<String>,
}

/// One row of `cron_nodes`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NodeRow {
    pub name: String,
    pub host: Option<String>,
    pub pid: Option<i64>,
    pub version: Option<String>,
    pub started: Option<i64>,
    pub last_seen: Option<i64>,
    pub stopped: Option<i64>,
    pub toml_jobs: Option<String>,
}

/// What a TOML apply changed (or would change, with `dry_run`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ApplyReport {
    pub created: Vec<String>,
    pub updated: Vec<String>,
    pub removed: Vec<String>,
    /// TOML jobs whose name belongs to a job created with SQL: left alone.
    pub conflicts: Vec<String>,
}

/// The database a node works with.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    dialect: Dialect,
    /// The URL as given (for the SQLite file path).
    url: String,
    sql: std::sync::Arc<Statements>,
}

/// Statement texts rendered for one dialect once, at connect.
#[derive(Debug)]
struct Statements {
    claim: String,
    claim_read: String,
    peek: String,
    to_prepare: String,
    prepared: String,
    invalid: String,
    start_run: String,
    run_by_token: String,
    release: String,
    finish_run: String,
    /// PostgreSQL: the history update and the release in one statement (a data-modifying
    /// `WITH`), so one round trip and one commit end a run.
    finish_and_release: Option<String>,
    lost_run: String,
    summary: String,
    node_upsert: String,
    node_seen: String,
    node_stopped: String,
    shutdown_release: String,
}

/// Releases a claimed row, fenced by node and token. Parameters: manual (twice, see
/// [`Store::release`]), next_exec, slot, attempts, outcome, has_outcome + exit code, has_outcome +
/// start, has_outcome, has_outcome + node, then id, node, token.
const RELEASE: &str = "UPDATE cron_table SET \
       next_exec = CASE WHEN dirty = 1 THEN NULL \
                        WHEN run_now = 1 AND ? = 0 THEN {now} ELSE ? END, \
       run_now = CASE WHEN ? = 1 THEN 0 ELSE run_now END, \
       dirty = 0, pool_wait = 0, exec_by = NULL, prev_exec_by = NULL, lease_until = NULL, claim_id = NULL, \
       slot = ?, attempt = ?, \
       last_status = COALESCE(?, last_status), last_exit = CASE WHEN ? = 1 THEN ? ELSE last_exit END, \
       last_start = CASE WHEN ? = 1 THEN ? ELSE last_start END, \
       last_end = CASE WHEN ? = 1 THEN {now} ELSE last_end END, \
       last_node = CASE WHEN ? = 1 THEN ? ELSE last_node END \
     WHERE id = ? AND exec_by = ? AND token = ?";

/// Writes a run's outcome to the history. Parameters: outcome, exit code, signal, output,
/// message, then job, slot, attempt, token.
const FINISH_RUN: &str = "UPDATE cron_runs SET ended = {now}, outcome = ?, exit_code = ?, \
     exit_signal = ?, output = ?, message = ? \
     WHERE job_name = ? AND slot = ? AND attempt = ? AND token = ? AND outcome = 'running'";

fn statements(d: Dialect) -> Statements {
    let (ins, conflict) = d.insert_ignore();
    let node_upsert = match d {
        Dialect::Mysql => "INSERT INTO cron_nodes (name, host, pid, version, started, last_seen, stopped, toml_jobs) \
             VALUES (?, ?, ?, ?, {now}, {now}, NULL, ?) ON DUPLICATE KEY UPDATE host = VALUES(host), \
             pid = VALUES(pid), version = VALUES(version), started = VALUES(started), \
             last_seen = VALUES(last_seen), stopped = NULL, toml_jobs = VALUES(toml_jobs)"
            .to_string(),
        _ => "INSERT INTO cron_nodes (name, host, pid, version, started, last_seen, stopped, toml_jobs) \
             VALUES (?, ?, ?, ?, {now}, {now}, NULL, ?) ON CONFLICT (name) DO UPDATE SET host = excluded.host, \
             pid = excluded.pid, version = excluded.version, started = excluded.started, \
             last_seen = excluded.last_seen, stopped = NULL, toml_jobs = excluded.toml_jobs"
            .to_string(),
    };
    Statements {
        claim: claim_sql(d),
        claim_read: d.render(&format!(
            "SELECT {JOB_COLUMNS}, {{now}} AS db_now FROM cron_table WHERE claim_id = ?"
        )),
        peek: d.render(
            "SELECT {now} AS db_now, \
             (SELECT next_exec FROM cron_table WHERE enabled = 1 AND next_exec IS NOT NULL \
              ORDER BY next_exec LIMIT 1) AS next_due, \
             CASE WHEN EXISTS (SELECT 1 FROM cron_table WHERE next_exec IS NULL) THEN 1 ELSE 0 END AS pending, \
             (SELECT name FROM cron_table WHERE enabled = 1 AND next_exec IS NOT NULL \
              ORDER BY next_exec LIMIT 1) AS next_name",
        ),
        to_prepare: d.render(&format!(
            "SELECT {JOB_COLUMNS} FROM cron_table WHERE next_exec IS NULL ORDER BY id LIMIT ?"
        )),
        prepared: d.render(
            "UPDATE cron_table SET slot = ?, attempt = 0, next_exec = ?, error = NULL, dirty = 0 \
             WHERE id = ? AND next_exec IS NULL",
        ),
        invalid: d.render(
            "UPDATE cron_table SET error = ?, next_exec = ?, slot = NULL, dirty = 0 \
             WHERE id = ? AND next_exec IS NULL",
        ),
        start_run: d.render(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, outcome) \
             SELECT name, ?, ?, ?, token, {now}, 'running' FROM cron_table \
             WHERE id = ? AND exec_by = ? AND token = ?",
        ),
        run_by_token: d.render(
            "SELECT slot, attempt, outcome FROM cron_runs WHERE job_name = ? AND token = ? \
             ORDER BY id DESC LIMIT 1",
        ),
        release: d.render(RELEASE),
        finish_run: d.render(FINISH_RUN),
        finish_and_release: (d == Dialect::Postgres)
            .then(|| d.render(&format!("WITH finished AS ({FINISH_RUN}) {RELEASE}"))),
        lost_run: d.render(
            "UPDATE cron_runs SET ended = {now}, outcome = 'lost', message = ? \
             WHERE job_name = ? AND slot = ? AND attempt = ? AND outcome = 'running'",
        ),
        summary: d.render(&format!(
            "{ins} INTO cron_runs (job_name, slot, attempt, node, started, ended, outcome, \
             skipped_count, skipped_last, message) \
             VALUES (?, ?, ?, ?, {{now}}, {{now}}, ?, ?, ?, ?){conflict}"
        )),
        node_upsert: d.render(&node_upsert),
        node_seen: d.render("UPDATE cron_nodes SET last_seen = {now}, stopped = NULL WHERE name = ?"),
        node_stopped: d.render("UPDATE cron_nodes SET last_seen = {now}, stopped = {now} WHERE name = ?"),
        shutdown_release: d.render(
            "UPDATE cron_table SET next_exec = {now}, lease_until = {now} \
             WHERE id = ? AND exec_by = ? AND token = ?",
        ),
    }
}

macro_rules! sql_err {
    ($self:expr, $op:expr) => {
        |source| StoreError::Sql {
            dialect: $self.dialect.name(),
            op: $op,
            source,
        }
    };
}

static MIGRATOR_SQLITE: sqlx::migrate::Migrator = sqlx::migrate!("migrations/sqlite");
static MIGRATOR_POSTGRES: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");
static MIGRATOR_MYSQL: sqlx::migrate::Migrator = sqlx::migrate!("migrations/mysql");

impl Store {
    /// Connects (lazily: the first statement opens the first connection, so a daemon can start
    /// while the database is down).
    pub fn connect(url: &str, max_connections: u32) -> Result<Store> {
        sqlx::any::install_default_drivers();
        let dialect = Dialect::from_url(url).ok_or_else(|| StoreError::Url(url.to_string()))?;
        let mut url = url.to_string();
        if dialect == Dialect::Sqlite && !url.contains("mode=") {
            url.push_str(if url.contains('?') {
                "&mode=rwc"
            } else {
                "?mode=rwc"
            });
        }
        if dialect == Dialect::Mysql && url.starts_with("mariadb:") {
            url = url.replacen("mariadb:", "mysql:", 1);
        }
        let options = AnyConnectOptions::from_str(&url)
            .map_err(|source| StoreError::Sql {
                dialect: dialect.name(),
                op: "parse URL",
                source,
            })?
            .log_statements(tracing::log::LevelFilter::Trace)
            .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(2));
        // SQLite serialises writes anyway; more connections only cost memory.
        let max_connections = if dialect == Dialect::Sqlite {
            max_connections.min(4)
        } else {
            max_connections
        };
        let pool = AnyPoolOptions::new()
            .max_connections(max_connections)
            .min_connections(0)
            .acquire_timeout(Duration::from_secs(5))
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    match dialect {
                        Dialect::Sqlite => {
                            conn.execute("PRAGMA journal_mode = WAL").await?;
                            conn.execute("PRAGMA busy_timeout = 5000").await?;
                            conn.execute("PRAGMA synchronous = NORMAL").await?;
                            // 1 MiB of page cache per connection: the hot rows are few.
                            conn.execute("PRAGMA cache_size = -1024").await?;
                        }
                        Dialect::Mysql => {
                            conn.execute("SET time_zone = '+00:00'").await?;
                        }
                        Dialect::Postgres => {}
                    }
                    Ok(())
                })
            })
            .connect_lazy_with(options);
        Ok(Store {
            pool,
            dialect,
            url: url.clone(),
            sql: std::sync::Arc::new(statements(dialect)),
        })
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    fn pool(&self) -> &AnyPool {
        &self.pool
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
        match self.dialect {
            Dialect::Postgres => MIGRATOR_POSTGRES.run(&self.pool).await.map_err(err),
            Dialect::Mysql => {
                let mut conn = self
                    .pool
                    .acquire()
                    .await
                    .map_err(sql_err!(self, "connect for migration"))?;
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
                let lock = match sqlite_path(&self.url) {
                    Some(path) => Some(
                        tokio::task::spawn_blocking(move || lock_file(&path))
                            .await
                            .map_err(|e| StoreError::Lock(e.to_string()))?
                            .map_err(|e| StoreError::Lock(e.to_string()))?,
                    ),
                    None => None,
                };
                let result = MIGRATOR_SQLITE.run(&self.pool).await.map_err(err);
                drop(lock);
                result
            }
        }
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The database clock.
    pub async fn now(&self) -> Result<i64> {
        let row = sqlx::query(AssertSqlSafe(self.dialect.render("SELECT {now} AS db_now")))
            .fetch_one(&self.pool)
            .await
            .map_err(sql_err!(self, "read clock"))?;
        row.try_get("db_now").map_err(sql_err!(self, "read clock"))
    }

    /// One cheap, index-backed look: the clock, the earliest due time and whether rows wait for
    /// preparation. This is the only statement an idle node sends per poll.
    pub async fn peek(&self) -> Result<Peek> {
        let row = sqlx::query(AssertSqlSafe(self.sql.peek.clone()))
            .fetch_one(&self.pool)
            .await
            .map_err(sql_err!(self, "peek"))?;
        Ok(Peek {
            now: row.try_get("db_now").map_err(sql_err!(self, "peek"))?,
            next_due: row.try_get("next_due").map_err(sql_err!(self, "peek"))?,
            pending_prepare: row
                .try_get::<i64, _>("pending")
                .map_err(sql_err!(self, "peek"))?
                != 0,
            next_name: row.try_get("next_name").map_err(sql_err!(self, "peek"))?,
        })
    }

    /// Rows without a `next_exec` (new or changed with SQL), oldest first.
    pub async fn rows_to_prepare(&self, limit: i64) -> Result<Vec<JobRow>> {
        let rows = sqlx::query(AssertSqlSafe(self.sql.to_prepare.clone()))
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(sql_err!(self, "select rows to prepare"))?;
        rows.iter()
            .map(JobRow::from_row)
            .collect::<std::result::Result<_, _>>()
            .map_err(sql_err!(self, "decode row"))
    }

    /// Gives a prepared row its first slot. False if another node did it first.
    pub async fn set_prepared(&self, id: i64, slot: i64, next_exec: i64) -> Result<bool> {
        let done = sqlx::query(AssertSqlSafe(self.sql.prepared.clone()))
            .bind(slot)
            .bind(next_exec)
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(sql_err!(self, "prepare row"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Parks an unusable row with the reason in `error`. False if another node did it first.
    pub async fn set_invalid(&self, id: i64, error: &str) -> Result<bool> {
        let done = sqlx::query(AssertSqlSafe(self.sql.invalid.clone()))
            .bind(error.to_string())
            .bind(PARKED)
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(sql_err!(self, "mark row invalid"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Parks a row whose definition cannot run, with the reason, until it is changed.
    pub async fn park(&self, id: i64, error: &str) -> Result<()> {
        sqlx::query(AssertSqlSafe(self.dialect.render(
            "UPDATE cron_table SET error = ?, next_exec = ? WHERE id = ?",
        )))
        .bind(error.to_string())
        .bind(PARKED)
        .bind(id)
        .execute(&self.pool)
        .await
        .map_err(sql_err!(self, "park row"))?;
        Ok(())
    }

    /// Claims up to `limit` due rows for `node` with a lease of `lease`. Returns the database
    /// clock at the claim and the rows, with their new token and their previous holder in
    /// `prev_exec_by` (set when a lease expired without a release).
    pub async fn claim(
        &self,
        node: &str,
        limit: usize,
        lease: Duration,
    ) -> Result<(Option<i64>, Vec<JobRow>)> {
        let lease_ms = lease.as_millis() as i64;
        let rows = if self.dialect.has_returning() {
            sqlx::query(AssertSqlSafe(self.sql.claim.clone()))
                .bind(node.to_string())
                .bind(lease_ms)
                .bind(lease_ms)
                .bind(limit as i64)
                .fetch_all(&self.pool)
                .await
                .map_err(sql_err!(self, "claim"))?
        } else {
            let claim_id = new_claim_id(node);
            let marked = sqlx::query(AssertSqlSafe(self.sql.claim.clone()))
                .bind(node.to_string())
                .bind(lease_ms)
                .bind(lease_ms)
                .bind(claim_id.clone())
                .bind(limit as i64)
                .execute(&self.pool)
                .await
                .map_err(sql_err!(self, "claim"))?;
            if marked.rows_affected() == 0 {
                return Ok((None, vec![]));
            }
            sqlx::query(AssertSqlSafe(self.sql.claim_read.clone()))
                .bind(claim_id)
                .fetch_all(&self.pool)
                .await
                .map_err(sql_err!(self, "read claimed rows"))?
        };
        let now = match rows.first() {
            Some(r) => Some(r.try_get("db_now").map_err(sql_err!(self, "claim"))?),
            None => None,
        };
        let jobs = rows
            .iter()
            .map(JobRow::from_row)
            .collect::<std::result::Result<_, _>>()
            .map_err(sql_err!(self, "decode claimed row"))?;
        Ok((now, jobs))
    }

    /// Records the start of a run in `cron_runs`, fenced by the claim: one statement that
    /// inserts nothing if the claim is no longer ours. A second record of the same (job, slot,
    /// attempt) is refused by the database's unique key.
    pub async fn start_run(&self, id: i64, node: &str, token: i64, key: &RunKey) -> Result<Fenced> {
        let done = sqlx::query(AssertSqlSafe(self.sql.start_run.clone()))
            .bind(key.slot)
            .bind(i64::from(key.attempt))
            .bind(node.to_string())
            .bind(id)
            .bind(node.to_string())
            .bind(token)
            .execute(&self.pool)
            .await
            .map_err(sql_err!(self, "record run start"))?;
        Ok(if done.rows_affected() == 1 {
            Fenced::Done
        } else {
            Fenced::Lost
        })
    }

    /// Records the starts of several runs in one statement, each fenced by its claim (row id
    /// and token); see [`Store::start_run`]. Returns, per run, whether it was recorded. A
    /// unique-key violation fails the whole statement: the caller then goes one by one.
    pub async fn start_runs(&self, node: &str, runs: &[(i64, i64, &RunKey)]) -> Result<Vec<bool>> {
        if let [(id, token, key)] = runs {
            return Ok(vec![
                self.start_run(*id, node, *token, key).await? == Fenced::Done,
            ]);
        }
        let values = vec!["SELECT ? AS id, ? AS token, ? AS slot, ? AS attempt"; runs.len()]
            .join(" UNION ALL ");
        let text = self.dialect.render(&format!(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, outcome) \
             SELECT c.name, v.slot, v.attempt, ?, c.token, {{now}}, 'running' \
             FROM cron_table c JOIN ({values}) v ON c.id = v.id AND c.token = v.token \
             WHERE c.exec_by = ?"
        ));
        // Placeholders in the order of the text: the node, the runs, the node again.
        let mut q = sqlx::query(AssertSqlSafe(text)).bind(node.to_string());
        for (id, token, key) in runs {
            q = q
                .bind(*id)
                .bind(*token)
                .bind(key.slot)
                .bind(i64::from(key.attempt));
        }
        let done = q
            .bind(node.to_string())
            .execute(&self.pool)
            .await
            .map_err(sql_err!(self, "record run starts"))?;
        if done.rows_affected() as usize == runs.len() {
            return Ok(vec![true; runs.len()]);
        }
        // Some claims were lost in between (rare): look up which runs were recorded.
        let mut started = Vec::with_capacity(runs.len());
        for (_, token, key) in runs {
            let run = self.run_by_token(&key.job, *token).await?;
            started.push(
                run.is_some_and(|(slot, attempt, _)| slot == key.slot && attempt == key.attempt),
            );
        }
        Ok(started)
    }

    /// The run started under a claim token: (slot, attempt, outcome), if any. A node taking over
    /// an expired claim looks up the run of the previous token to know what was lost.
    pub async fn run_by_token(&self, job: &str, token: i64) -> Result<Option<(i64, u32, String)>> {
        let row = sqlx::query(AssertSqlSafe(self.sql.run_by_token.clone()))
            .bind(job.to_string())
            .bind(token)
            .fetch_optional(&self.pool)
            .await
            .map_err(sql_err!(self, "read run by token"))?;
        row.map(|r| -> std::result::Result<_, sqlx::Error> {
            let attempt: i64 = r.try_get("attempt")?;
            Ok((
                r.try_get("slot")?,
                attempt.max(0) as u32,
                r.try_get("outcome")?,
            ))
        })
        .transpose()
        .map_err(sql_err!(self, "read run by token"))
    }

    /// Extends the leases of the runs this node still supervises, in one statement. Returns
    /// the ids whose claim is lost (no longer ours).
    pub async fn extend(
        &self,
        node: &str,
        held: &[(i64, i64)],
        lease: Duration,
    ) -> Result<Vec<i64>> {
        if held.is_empty() {
            return Ok(vec![]);
        }
        let pairs = vec!["(id = ? AND token = ?)"; held.len()].join(" OR ");
        let text = self.dialect.render(&format!(
            "UPDATE cron_table SET lease_until = {{now}} + ?, next_exec = {{now}} + ? \
             WHERE exec_by = ? AND ({pairs})"
        ));
        let lease_ms = lease.as_millis() as i64;
        let mut q = sqlx::query(AssertSqlSafe(text))
            .bind(lease_ms)
            .bind(lease_ms)
            .bind(node.to_string());
        for (id, token) in held {
            q = q.bind(*id).bind(*token);
        }
        let done = q
            .execute(&self.pool)
            .await
            .map_err(sql_err!(self, "extend leases"))?;
        if done.rows_affected() as usize == held.len() {
            return Ok(vec![]);
        }
        // Some claims are gone: find which.
        let ids = vec!["?"; held.len()].join(", ");
        let text = self.dialect.render(&format!(
            "SELECT id, token, exec_by FROM cron_table WHERE id IN ({ids})"
        ));
        let mut q = sqlx::query(AssertSqlSafe(text));
        for (id, _) in held {
            q = q.bind(*id);
        }
        let rows = q
            .fetch_all(&self.pool)
            .await
            .map_err(sql_err!(self, "check leases"))?;
        let mut still: std::collections::HashSet<i64> = Default::default();
        for r in &rows {
            let id: i64 = r.try_get("id").map_err(sql_err!(self, "check leases"))?;
            let token: i64 = r.try_get("token").map_err(sql_err!(self, "check leases"))?;
            let by: Option<String> = r
                .try_get("exec_by")
                .map_err(sql_err!(self, "check leases"))?;
            if by.as_deref() == Some(node) && held.contains(&(id, token)) {
                still.insert(id);
            }
        }
        Ok(held
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| !still.contains(id))
            .collect())
    }

    /// Releases a claimed row (fenced) and, after a run, writes its outcome to the history.
    ///
    /// On PostgreSQL one statement does both. Elsewhere two, history first: if the node dies
    /// between them, the row's lease expires and the next holder finds the run's outcome by
    /// token instead of rerunning it.
    pub async fn release(
        &self,
        id: i64,
        node: &str,
        token: i64,
        release: &Release,
        run: Option<&RunKey>,
    ) -> Result<Fenced> {
        type Query<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>;
        let bind_finish = |q: Query<'static>, key: &RunKey, outcome: &RunResult| {
            q.bind(outcome.outcome.to_string())
                .bind(outcome.exit_code)
                .bind(outcome.signal)
                .bind(outcome.output.clone())
                .bind(outcome.message.clone())
                .bind(key.job.clone())
                .bind(key.slot)
                .bind(i64::from(key.attempt))
                .bind(token)
        };
        let finished = run.zip(release.outcome.as_ref());
        let q = match (finished, &self.sql.finish_and_release) {
            (Some((key, outcome)), Some(both)) => {
                bind_finish(sqlx::query(AssertSqlSafe(both.clone())), key, outcome)
            }
            (Some((key, outcome)), None) => {
                bind_finish(
                    sqlx::query(AssertSqlSafe(self.sql.finish_run.clone())),
                    key,
                    outcome,
                )
                .execute(&self.pool)
                .await
                .map_err(sql_err!(self, "record run end"))?;
                sqlx::query(AssertSqlSafe(self.sql.release.clone()))
            }
            (None, _) => sqlx::query(AssertSqlSafe(self.sql.release.clone())),
        };
        let manual = i64::from(release.clear_run_now);
        let has_outcome = i64::from(release.outcome.is_some());
        let updated = q
            .bind(manual)
            .bind(release.next_exec)
            .bind(manual)
            .bind(release.slot)
            .bind(i64::from(release.attempts))
            .bind(release.outcome.as_ref().map(|o| o.outcome.to_string()))
            .bind(has_outcome)
            .bind(release.outcome.as_ref().and_then(|o| o.exit_code))
            .bind(has_outcome)
            .bind(release.outcome.as_ref().map(|o| o.started))
            .bind(has_outcome)
            .bind(has_outcome)
            .bind(node.to_string())
            .bind(id)
            .bind(node.to_string())
            .bind(token)
            .execute(&self.pool)
            .await
            .map_err(sql_err!(self, "release"))?;
        Ok(if updated.rows_affected() == 1 {
            Fenced::Done
        } else {
            Fenced::Lost
        })
    }

    /// Marks a run as lost in the history (a node died or lost its lease while it ran).
    pub async fn record_lost(&self, key: &RunKey, message: &str) -> Result<()> {
        sqlx::query(AssertSqlSafe(self.sql.lost_run.clone()))
            .bind(message.to_string())
            .bind(key.job.clone())
            .bind(key.slot)
            .bind(i64::from(key.attempt))
            .execute(&self.pool)
            .await
            .map_err(sql_err!(self, "record lost run"))?;
        Ok(())
    }

    /// A history line that is not a run: `skipped` (a summary of missed slots) or `abandoned`
    /// (retries given up). Recorded once; a repeat is ignored.
    #[allow(clippy::too_many_arguments)]
    pub async fn record_summary(
        &self,
        job: &str,
        slot: i64,
        attempt: u32,
        node: &str,
        outcome: &str,
        count: Option<i64>,
        last: Option<i64>,
        message: &str,
    ) -> Result<()> {
        sqlx::query(AssertSqlSafe(self.sql.summary.clone()))
            .bind(job.to_string())
            .bind(slot)
            .bind(i64::from(attempt))
            .bind(node.to_string())
            .bind(outcome.to_string())
            .bind(count)
            .bind(last)
            .bind(message.to_string())
            .execute(&self.pool)
            .await
            .map_err(sql_err!(self, "record history summary"))?;
        Ok(())
    }

    /// At shutdown: end the lease of a row whose run was stopped, so that another node takes
    /// it over at once (by its `rerun_lost` policy) instead of waiting for the lease.
    pub async fn release_for_takeover(&self, id: i64, node: &str, token: i64) -> Result<Fenced> {
        let done = sqlx::query(AssertSqlSafe(self.sql.shutdown_release.clone()))
            .bind(id)
            .bind(node.to_string())
            .bind(token)
            .execute(&self.pool)
            .await
            .map_err(sql_err!(self, "release for takeover"))?;
        Ok(if done.rows_affected() == 1 {
            Fenced::Done
        } else {
            Fenced::Lost
        })
    }

    /// Registers this daemon in `cron_nodes`.
    pub async fn register_node(
        &self,
        name: &str,
        host: &str,
        pid: u32,
        toml_jobs: &str,
    ) -> Result<()> {
        sqlx::query(AssertSqlSafe(self.sql.node_upsert.clone()))
            .bind(name.to_string())
            .bind(host.to_string())
            .bind(i64::from(pid))
            .bind(env!("CARGO_PKG_VERSION").to_string())
            .bind(toml_jobs.to_string())
            .execute(&self.pool)
            .await
            .map_err(sql_err!(self, "register node"))?;
        Ok(())
    }

    /// Refreshes this node's `last_seen` (heartbeat).
    pub async fn node_seen(&self, name: &str) -> Result<()> {
        self.node_touch(name, &self.sql.node_seen, "node heartbeat")
            .await
    }

    /// Records that this node stopped.
    pub async fn node_stopped(&self, name: &str) -> Result<()> {
        self.node_touch(name, &self.sql.node_stopped, "node stop")
            .await
    }

    async fn node_touch(&self, name: &str, statement: &str, op: &'static str) -> Result<()> {
        sqlx::query(AssertSqlSafe(statement.to_string()))
            .bind(name.to_string())
            .execute(&self.pool)
            .await
            .map_err(sql_err!(self, op))?;
        Ok(())
    }

    pub async fn nodes(&self) -> Result<Vec<NodeRow>> {
        let rows = sqlx::query(
            "SELECT name, host, pid, version, started, last_seen, stopped, toml_jobs FROM cron_nodes ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(sql_err!(self, "list nodes"))?;
        rows.iter()
            .map(|r| {
                Ok(NodeRow {
                    name: r.try_get("name")?,
                    host: r.try_get("host")?,
                    pid: r.try_get("pid")?,
                    version: r.try_get("version")?,
                    started: r.try_get("started")?,
                    last_seen: r.try_get("last_seen")?,
                    stopped: r.try_get("stopped")?,
                    toml_jobs: r.try_get("toml_jobs")?,
                })
            })
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(sql_err!(self, "decode node"))
    }

    /// Every job row, by name.
    pub async fn jobs(&self) -> Result<Vec<JobRow>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {JOB_COLUMNS} FROM cron_table ORDER BY name"
        )))
        .fetch_all(&self.pool)
        .await
        .map_err(sql_err!(self, "list jobs"))?;
        rows.iter()
            .map(JobRow::from_row)
            .collect::<std::result::Result<_, _>>()
            .map_err(sql_err!(self, "decode row"))
    }

    pub async fn job(&self, name: &str) -> Result<Option<JobRow>> {
        let row = sqlx::query(AssertSqlSafe(self.dialect.render(&format!(
            "SELECT {JOB_COLUMNS} FROM cron_table WHERE name = ?"
        ))))
        .bind(name.to_string())
        .fetch_optional(&self.pool)
        .await
        .map_err(sql_err!(self, "read job"))?;
        row.as_ref()
            .map(JobRow::from_row)
            .transpose()
            .map_err(sql_err!(self, "decode row"))
    }

    /// The history, newest first, optionally of one job.
    pub async fn history(&self, job: Option<&str>, limit: i64) -> Result<Vec<HistoryRow>> {
        let cols = "job_name, slot, attempt, node, token, started, ended, outcome, exit_code, \
                    exit_signal, output, skipped_count, skipped_last, message";
        let text = match job {
            Some(_) => {
                format!("SELECT {cols} FROM cron_runs WHERE job_name = ? ORDER BY id DESC LIMIT ?")
            }
            None => format!("SELECT {cols} FROM cron_runs ORDER BY id DESC LIMIT ?"),
        };
        let mut q = sqlx::query(AssertSqlSafe(self.dialect.render(&text)));
        if let Some(j) = job {
            q = q.bind(j.to_string());
        }
        let rows = q
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(sql_err!(self, "read history"))?;
        rows.iter()
            .map(|r| {
                Ok(HistoryRow {
                    job: r.try_get("job_name")?,
                    slot: r.try_get("slot")?,
                    attempt: r.try_get("attempt")?,
                    node: r.try_get("node")?,
                    token: r.try_get("token")?,
                    started: r.try_get("started")?,
                    ended: r.try_get("ended")?,
                    outcome: r.try_get("outcome")?,
                    exit_code: r.try_get("exit_code")?,
                    signal: r.try_get("exit_signal")?,
                    output: r.try_get("output")?,
                    skipped_count: r.try_get("skipped_count")?,
                    skipped_last: r.try_get("skipped_last")?,
                    message: r.try_get("message")?,
                })
            })
            .collect::<std::result::Result<_, sqlx::Error>>()
            .map_err(sql_err!(self, "decode history"))
    }

    /// `pause` / `resume`. False if there is no such job.
    pub async fn set_enabled(&self, name: &str, enabled: bool) -> Result<bool> {
        let done = sqlx::query(AssertSqlSafe(
            self.dialect
                .render("UPDATE cron_table SET enabled = ? WHERE name = ?"),
        ))
        .bind(i64::from(enabled))
        .bind(name.to_string())
        .execute(&self.pool)
        .await
        .map_err(sql_err!(self, "set enabled"))?;
        Ok(done.rows_affected() == 1)
    }

    /// `run JOB`: one extra run as soon as possible. An idle row becomes due now; a running one
    /// runs again right after it is released.
    pub async fn request_run(&self, name: &str) -> Result<bool> {
        let done = sqlx::query(AssertSqlSafe(self.dialect.render(
            "UPDATE cron_table SET run_now = 1, \
             next_exec = CASE WHEN exec_by IS NULL AND next_exec IS NOT NULL AND next_exec < ? THEN {now} ELSE next_exec END \
             WHERE name = ?",
        )))
        .bind(PARKED)
        .bind(name.to_string())
        .execute(&self.pool)
        .await
        .map_err(sql_err!(self, "request run"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Applies the TOML's jobs: creates and updates `source = 'toml'` rows, removes TOML rows no
    /// longer in the file, and never touches rows created with SQL. With `dry_run`, only reports.
    pub async fn apply_toml(&self, jobs: &[JobSpec], dry_run: bool) -> Result<ApplyReport> {
        let existing = sqlx::query("SELECT name, source, toml_hash FROM cron_table")
            .fetch_all(&self.pool)
            .await
            .map_err(sql_err!(self, "read jobs for apply"))?;
        let mut rows: BTreeMap<String, (String, Option<String>)> = BTreeMap::new();
        for r in &existing {
            let name: String = r.try_get("name").map_err(sql_err!(self, "apply"))?;
            let source: String = r.try_get("source").map_err(sql_err!(self, "apply"))?;
            let hash: Option<String> = r.try_get("toml_hash").map_err(sql_err!(self, "apply"))?;
            rows.insert(name, (source, hash));
        }
        let mut report = ApplyReport::default();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(sql_err!(self, "begin apply"))?;
        for job in jobs {
            let hash = job_hash(job);
            let values = job_values(job);
            match rows.get(&job.name) {
                Some((source, _)) if source != "toml" => report.conflicts.push(job.name.clone()),
                Some((_, Some(h))) if *h == hash => {}
                Some(_) => {
                    report.updated.push(job.name.clone());
                    if !dry_run {
                        let sets = JOB_VALUE_COLUMNS
                            .iter()
                            .map(|c| format!("{c} = ?"))
                            .collect::<Vec<_>>()
                            .join(", ");
                        let text = self.dialect.render(&format!(
                            "UPDATE cron_table SET {sets}, toml_hash = ? WHERE name = ? AND source = 'toml'"
                        ));
                        let mut q = sqlx::query(AssertSqlSafe(text));
                        for v in &values {
                            q = bind_value(q, v);
                        }
                        q.bind(hash)
                            .bind(job.name.clone())
                            .execute(&mut *tx)
                            .await
                            .map_err(sql_err!(self, "update TOML job"))?;
                    }
                }
                None => {
                    report.created.push(job.name.clone());
                    if !dry_run {
                        let cols = JOB_VALUE_COLUMNS.join(", ");
                        let marks = vec!["?"; JOB_VALUE_COLUMNS.len()].join(", ");
                        let text = self.dialect.render(&format!(
                            "INSERT INTO cron_table (name, {cols}, source, toml_hash) VALUES (?, {marks}, 'toml', ?)"
                        ));
                        let mut q = sqlx::query(AssertSqlSafe(text)).bind(job.name.clone());
                        for v in &values {
                            q = bind_value(q, v);
                        }
                        q.bind(hash)
                            .execute(&mut *tx)
                            .await
                            .map_err(sql_err!(self, "create TOML job"))?;
                    }
                }
            }
        }
        let wanted: std::collections::HashSet<&str> =
            jobs.iter().map(|j| j.name.as_str()).collect();
        for (name, (source, _)) in &rows {
            if source == "toml" && !wanted.contains(name.as_str()) {
                report.removed.push(name.clone());
                if !dry_run {
                    sqlx::query(AssertSqlSafe(self.dialect.render(
                        "DELETE FROM cron_table WHERE name = ? AND source = 'toml'",
                    )))
                    .bind(name.clone())
                    .execute(&mut *tx)
                    .await
                    .map_err(sql_err!(self, "remove TOML job"))?;
                }
            }
        }
        tx.commit().await.map_err(sql_err!(self, "commit apply"))?;
        Ok(report)
    }

    /// Runs arbitrary SQL (tests and `sqlcron` maintenance only).
    pub async fn execute_raw(&self, sql: &str) -> Result<u64> {
        let done = sqlx::query(AssertSqlSafe(sql.to_string()))
            .execute(&self.pool)
            .await
            .map_err(sql_err!(self, "execute"))?;
        Ok(done.rows_affected())
    }

    /// Runs a query returning one integer (tests and benchmarks).
    pub async fn scalar_i64(&self, sql: &str) -> Result<Option<i64>> {
        self.scalar(sql).await
    }

    /// Runs a query returning one value of any type the driver decodes (tests and benchmarks).
    pub async fn scalar<T>(&self, sql: &str) -> Result<Option<T>>
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any>,
    {
        let row = sqlx::query(AssertSqlSafe(sql.to_string()))
            .fetch_one(&self.pool)
            .await
            .map_err(sql_err!(self, "query"))?;
        row.try_get(0).map_err(sql_err!(self, "query"))
    }
}

/// Columns a TOML apply writes (after `name`).
const JOB_VALUE_COLUMNS: [&str; 20] = [
    "schedule",
    "timezone",
    "command",
    "argv",
    "env",
    "workdir",
    "enabled",
    "pool",
    "misfire",
    "starting_deadline",
    "max_catch_up",
    "retries",
    "retry_backoff",
    "retry_backoff_max",
    "timeout",
    "kill_grace",
    "jitter",
    "on_lease_lost",
    "rerun_lost",
    "error",
];

enum Value {
    Text(Option<String>),
    Int(Option<i64>),
}

fn bind_value<'q>(
    q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>,
    v: &Value,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments> {
    match v {
        Value::Text(t) => q.bind(t.clone()),
        Value::Int(i) => q.bind(*i),
    }
}

fn job_values(job: &JobSpec) -> Vec<Value> {
    use crate::job::format_duration as fd;
    let o = &job.overrides;
    let env = (!job.env.is_empty()).then(|| serde_json::to_string(&job.env).unwrap_or_default());
    vec![
        Value::Text(Some(job.schedule.clone())),
        Value::Text(job.timezone.clone()),
        Value::Text(job.command.clone()),
        Value::Text(
            job.argv
                .as_ref()
                .map(|a| serde_json::to_string(a).unwrap_or_default()),
        ),
        Value::Text(env),
        Value::Text(job.workdir.clone()),
        Value::Int(Some(i64::from(job.enabled))),
        Value::Text(job.pool.clone()),
        Value::Text(o.misfire.map(|m| m.as_str().to_string())),
        Value::Text(o.starting_deadline.map(fd)),
        Value::Int(o.max_catch_up.map(i64::from)),
        Value::Int(o.retries.map(i64::from)),
        Value::Text(o.retry_backoff.map(fd)),
        Value::Text(o.retry_backoff_max.map(fd)),
        Value::Text(o.timeout.map(fd)),
        Value::Text(o.kill_grace.map(fd)),
        Value::Text(o.jitter.map(fd)),
        Value::Text(o.on_lease_lost.map(|l| {
            match l {
                crate::job::OnLeaseLost::Kill => "kill",
                crate::job::OnLeaseLost::Ignore => "ignore",
            }
            .to_string()
        })),
        Value::Int(o.rerun_lost.map(i64::from)),
        Value::Text(None),
    ]
}

/// A stable fingerprint of a TOML job definition (FNV-1a, hex), used to skip unchanged jobs on
/// apply and to detect nodes whose files disagree.
pub fn job_hash(job: &JobSpec) -> String {
    let text = format!("{job:?}");
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The database file of a `sqlite://PATH?options` URL; `None` for in-memory databases.
fn sqlite_path(url: &str) -> Option<std::path::PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next()?;
    if path.is_empty() || path.contains(":memory:") {
        return None;
    }
    Some(std::path::PathBuf::from(path))
}

/// An exclusive advisory lock on `<path>.migrate.lock`, released when the file is closed.
fn lock_file(db: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    if let Some(dir) = db.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    let mut name = db.as_os_str().to_owned();
    name.push(".migrate.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(std::path::PathBuf::from(name))?;
    // SAFETY: flock on a file descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

fn new_claim_id(node: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let r: u64 = rand::random();
    let short: String = node.chars().take(20).collect();
    format!("{short}-{:x}-{n:x}-{r:016x}", std::process::id())
}
