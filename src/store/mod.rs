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
pub mod rows;

use std::time::Duration;

use sqlx::{AssertSqlSafe, Row};

pub use crate::model::database_url::{DatabaseUrl, Dialect};
use dialect::{
    JOB_COLUMNS, claim_read_sql, claim_sql, job_columns_as_bytes, peek_placement_uses, peek_sql,
    split_due_name, to_prepare_sql,
};
pub use rows::*;

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
    #[error("database URL \"{url}\": {why}")]
    Hosts { url: String, why: String },
    #[error("taking the SQLite migration lock: {0}")]
    Lock(String),
    /// A Galera node that cannot serve sqlcron (galera.rs says why).
    #[error("{0}")]
    Galera(String),
    /// A batch written together that did not write what it locked (rolled back).
    #[error("writing a batch: {0}")]
    Batch(String),
    /// A write made only on the row as it was read found it changed by another writer: made
    /// again from a fresh read ([`StoreError::lost_a_race`]).
    #[error("{0}")]
    Raced(String),
    /// The schema has migrations that remove or change what this build reads: a node older
    /// than the schema's `oldest_reader` (docs/upgrades.md).
    #[error(
        "the database's schema is at migration {applied} and needs a sqlcron that knows migration \
         {needs} or later; this sqlcron knows up to {knows}: upgrade sqlcron on this node (the \
         schema cannot be taken back)"
    )]
    SchemaTooNew {
        applied: i64,
        needs: i64,
        knows: i64,
    },
}

impl StoreError {
    /// What kind of failure this is, for the log: `deadlock`, `timeout` (a statement or lock
    /// wait ran past its limit), `unreachable` (no connection, or it broke), `read-only` (the
    /// server takes no writes: a standby, or fenced), `refused` (the database answered with an
    /// error about the statement or its values) or `other`.
    pub fn kind(&self) -> &'static str {
        let StoreError::Sql { source, .. } = self else {
            return "other";
        };
        kind_of(source)
    }

    /// The database refused the statement for its content (not a connection problem, a
    /// timeout or a deadlock): trying the same values again would fail again.
    pub fn is_refused(&self) -> bool {
        self.kind() == "refused" && !self.is_unique_violation()
    }

    /// True for a unique-key violation (a run recorded twice).
    /// A write that lost a race with another node's same write and may be made again from a
    /// fresh read: a unique-key violation, or a deadlock (which is how Galera reports a
    /// certification conflict).
    pub fn lost_a_race(&self) -> bool {
        matches!(self, StoreError::Raced(_))
            || self.is_unique_violation()
            || self.kind() == "deadlock"
    }

    /// No connection came from the pool in time: the pool does not say why
    /// ([`Store::connect_error`] asks the server).
    pub fn is_pool_timeout(&self) -> bool {
        matches!(
            self,
            StoreError::Sql {
                source: sqlx::Error::PoolTimedOut,
                ..
            }
        )
    }

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

/// [`StoreError::kind`] of a driver's error.
fn kind_of(source: &sqlx::Error) -> &'static str {
    match source {
        sqlx::Error::Database(e) => {
            let code = e.code().map(|c| c.into_owned()).unwrap_or_default();
            let msg = e.message().to_ascii_lowercase();
            if code == "40P01" || code == "40001" || msg.contains("deadlock") {
                // Galera's certification conflicts are reported as deadlocks too.
                "deadlock"
            } else if code == "08S01"
                || msg.contains("wsrep")
                || matches!(code.as_str(), "57P01" | "57P02" | "57P03")
            {
                // 57P0x: PostgreSQL shutting down or starting up; the connection goes.
                // A Galera node cut off from the cluster's primary component, or still
                // joining: "WSREP has not yet prepared node for application use".
                "unreachable"
            } else if code == "25006"
                || msg.contains("with the --read-only option")
                || msg.contains("running in read-only mode")
                || msg.contains("in a read only transaction")
            {
                // A standby, or a server fenced read-only (MySQL's `--read-only`, 1290;
                // `innodb_read_only`, 1836; a READ ONLY transaction, 1792): another server
                // may be the primary now.
                "read-only"
            } else if code == "57014"
                || code == "55P03"
                || code == "70100"
                || msg.contains("lock wait timeout")
                || msg.contains("execution time exceeded")
                || msg.contains("statement timeout")
                || msg.contains("query execution was interrupted")
                || msg.contains("database is locked")
                || msg.contains("database table is locked")
            {
                "timeout"
            } else {
                "refused"
            }
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => "unreachable",
        _ => "other",
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// The database a node works with.
#[derive(Debug, Clone)]
pub struct Store {
    /// The pool, and whether statements go through a transaction-mode pooler (`pooler.rs`).
    db: pooler::Db,
    /// `[database] direct_url`: the server itself, behind the pooler, for migrations and
    /// LISTEN.
    direct: Option<std::sync::Arc<Store>>,
    dialect: Dialect,
    /// The URL as configured (the SQLite file path, messages).
    url: DatabaseUrl,
    /// The URL handed to the driver (SQLite: `mode=rwc` added; MariaDB: the `mysql:` scheme).
    driver_url: String,
    sql: std::sync::Arc<Statements>,
    /// PostgreSQL: the hosts of the URL and the one in use (see `topology.rs`).
    topology: Option<std::sync::Arc<topology::Topology>>,
    /// When the server last said it takes no writes or has left its cluster: the connections
    /// opened before are closed, not used again (see `connect.rs`).
    suspect: std::sync::Arc<connect::Suspect>,
    /// How the pool was opened, for [`Store::own_pool`].
    opened: connect::Opened,
}

/// Statement texts rendered for one dialect once, at connect.
#[derive(Debug)]
struct Statements {
    claim: String,
    claim_read: String,
    peek: String,
    peek_alive: String,
    to_prepare: String,
    prepared: String,
    invalid: String,
    start_run: String,
    run_token: String,
    previous_run: String,
    /// The highest token above: the previous run when the token wrapped (see
    /// `dialect::next_token`).
    previous_run_wrapped: String,
    park: String,
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

/// A pooled connection idle this long is pinged before it is used again (see `Store::open`).
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

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
    let node_upsert = format!(
        "INSERT INTO cron_nodes (name, host, pid, version, started, last_seen, stopped, toml_jobs, \
         tags) VALUES (?, ?, ?, ?, {{now}}, {{now}}, NULL, ?, ?){}",
        d.on_conflict_update(
            "name",
            &[
                "host",
                "pid",
                "version",
                "started",
                "last_seen",
                "stopped",
                "toml_jobs",
                "tags"
            ]
        )
    );
    let whole = match d {
        Dialect::Sqlite => {
            " AND typeof(token) = 'integer' AND typeof(slot) = 'integer' \
             AND typeof(attempt) = 'integer'"
        }
        _ => "",
    };
    // The outcome as bytes where a writer may put text that is not UTF-8 (the driver failed
    // the whole read; the takeover left its claim for good): read with replacements.
    let outcome = dialect::as_bytes(d, ["outcome"]);
    Statements {
        claim: claim_sql(d, 0, 0),
        claim_read: d.render(&claim_read_sql(JOB_COLUMNS)),
        peek: peek_sql(d, 0, false),
        peek_alive: peek_sql(d, 0, true),
        to_prepare: d.render(&to_prepare_sql(JOB_COLUMNS)),
        prepared: d.render(
            // The fencing token never goes down for a job name: a row deleted and created again
            // continues above the highest token its history holds.
            // Only tokens the claims counted to (`dialect::TOKEN_COUNTED`): a record a writer
            // gave one near the wrap would otherwise set every re-prepared row there, and the
            // claims after the wrap would count the tokens of its history again. A negative
            // token (a writer's) with no record below the bound becomes 0: it was set to NULL,
            // the column refused it, and every node's tick failed on that row.
            &format!(
                "UPDATE cron_table SET slot = ?, attempt = 0, next_exec = ?, error = NULL, \
                 dirty = 0, token = CASE WHEN token >= COALESCE((SELECT MAX(r.token) \
                 FROM cron_runs r WHERE r.job_name = cron_table.name AND r.token < {w}), 0) \
                 THEN token ELSE COALESCE((SELECT MAX(r.token) FROM cron_runs r \
                 WHERE r.job_name = cron_table.name AND r.token < {w}), 0) END \
                 WHERE id = ? AND next_exec IS NULL",
                w = dialect::TOKEN_COUNTED
            ),
        ),
        // Fenced by the signature read with the row too: a row signed between the read and
        // this park (its signature's unpark trigger fires only on a parked row) must not be
        // parked for the signature it no longer lacks; it is read again instead.
        invalid: d.render(
            "UPDATE cron_table SET error = ?, next_exec = ?, slot = NULL, dirty = 0 \
             WHERE id = ? AND next_exec IS NULL \
             AND (signature = ? OR (signature IS NULL AND ? IS NULL))",
        ),
        start_run: d.render(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, outcome, \
             rate_held_ms) \
             SELECT name, ?, ?, ?, token, {now}, 'running', ? FROM cron_table \
             WHERE id = ? AND exec_by = ? AND token = ?",
        ),
        run_token: d
            .render("SELECT token FROM cron_runs WHERE job_name = ? AND slot = ? AND attempt = ?"),
        // Whole numbers only: SQLite keeps a writer's text or real there, orders text above
        // every number, and the row then read fails (the takeover left the claim for good).
        previous_run: d.render(&format!(
            "SELECT slot, attempt, {outcome}, token FROM cron_runs \
             WHERE job_name = ? AND token < ?{whole} ORDER BY token DESC, id DESC LIMIT 1",
        )),
        previous_run_wrapped: d.render(&format!(
            "SELECT slot, attempt, {outcome}, token FROM cron_runs \
             WHERE job_name = ? AND token > ? AND token >= {c} AND token <= {w}{whole} \
             ORDER BY token DESC, id DESC LIMIT 1",
            c = dialect::TOKEN_COUNTED,
            w = dialect::TOKEN_WRAP
        )),
        park: d.render(
            "UPDATE cron_table SET error = ?, next_exec = ?, exec_by = NULL, prev_exec_by = NULL, \
             lease_until = NULL, claim_id = NULL, dirty = 0, pool_wait = 0 \
             WHERE id = ? AND exec_by = ? AND token = ?",
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
        // PostgreSQL and SQLite also return the newest audit-trail row's id (see
        // `Store::node_seen`); MySQL has no RETURNING for an UPDATE.
        node_seen: d.render(&format!(
            "UPDATE cron_nodes SET last_seen = {{now}}, stopped = NULL, clock_offset = ? - {{now}} \
             WHERE name = ?{}",
            if d == Dialect::Mysql {
                ""
            } else {
                " RETURNING (SELECT MAX(id) FROM cron_audit) AS audit_mark"
            }
        )),
        node_stopped: d
            .render("UPDATE cron_nodes SET last_seen = {now}, stopped = {now} WHERE name = ?"),
        shutdown_release: d.render(
            "UPDATE cron_table SET next_exec = {now}, lease_until = {now} \
             WHERE id = ? AND exec_by = ? AND token = ?",
        ),
    }
}

/// Runs `apply` (a read and a write transaction of a file's definitions) again, up to three
/// more times, while it loses a race with another node applying the same file
/// ([`StoreError::lost_a_race`]): the next read finds what the other node wrote.
pub(super) async fn again_after_a_lost_race<T, F, Fut>(what: &str, mut apply: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut tries = 0;
    loop {
        match apply().await {
            Err(e) if e.lost_a_race() && tries < 3 => {
                tries += 1;
                tracing::debug!(error = %e, "another node applied {what} of this file at the same time; applying again");
            }
            done => return done,
        }
    }
}

macro_rules! sql_err {
    ($self:expr, $op:expr) => {
        |source| {
            $self.noticed(&source);
            StoreError::Sql {
                dialect: $self.dialect.name(),
                op: $op,
                source,
            }
        }
    };
}

mod admin;
pub mod apply;
mod audit;
pub mod backfill;
pub mod backfill_plan;
pub mod calendars;
pub mod certificate;
pub mod chains;
mod claim;
mod connect;
mod drift;
mod events;
pub mod every_node;
mod galera;
pub mod job_edit;
pub mod job_search;
mod keepalive;
mod lease;
mod live_output;
pub mod locks;
mod migrate;
pub mod one_off;
mod placement_values;
mod pooler;
mod pools;
mod quiet;
mod release;
mod release_rows;
pub mod resume;
mod retention;
mod run_reads;
mod run_requests;
pub mod run_search;
mod server_settings;
mod sqlite_plans;
pub mod start_rate;
pub mod topology;
pub mod wake;
mod watches;
pub mod web;

use crate::model::actor::Actor;
pub use apply::job_hash;
pub use audit::AuditRow;
pub use connect::{IDLE_TIMEOUT, sqlite_heap_bytes};
pub use drift::{Drift, drift};
pub use events::{Delivered, EventClaim, EventRow, NewEvent};
pub use keepalive::for_each_socket_to;
pub use locks::{LockRow, LockState};
pub use placement_values::PlacementValues;
pub use release::ReleaseOf;
pub use retention::{Duty, DutyRow, Pruned};
pub use run_requests::RunAsk;
pub use watches::WatchRow;

/// Whether to write the warning `key` now: a row a writer left that cannot be read is read again
/// at every tick or scan, and its warning is written the first time, then at most every ten
/// minutes (`Some` with the times it was held back; see
/// [`crate::model::repeated_warnings`]).
pub(crate) fn say_again(key: &str) -> Option<u64> {
    use crate::model::repeated_warnings::RepeatedWarnings;
    static SAID: std::sync::OnceLock<std::sync::Mutex<RepeatedWarnings>> =
        std::sync::OnceLock::new();
    SAID.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .say(key, std::time::Instant::now())
}

impl Store {
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Called with every database error: one that says the server is gone or takes no writes
    /// makes a PostgreSQL store choose its server again (in the background, see
    /// `topology.rs`). A server's answer that it takes no writes or has left its cluster (a
    /// Galera node cut off, a server fenced read-only) makes every connection open now suspect:
    /// each is closed as it comes back, and the next are opened anew, through whatever a
    /// load balancer in front now chooses.
    fn noticed(&self, e: &sqlx::Error) {
        // Not a unique-key violation, whose text quotes a row's value (a job named `wsrep`).
        if let sqlx::Error::Database(d) = e
            && !d.is_unique_violation()
            && matches!(kind_of(e), "unreachable" | "read-only")
        {
            self.suspect.mark();
        }
        if let Some(t) = &self.topology
            && t.calls_for_selection(e)
        {
            t.select_soon();
        }
    }

    /// The URL of the server in use (PostgreSQL: the host the pool points at now).
    fn current_url(&self) -> &str {
        self.topology
            .as_ref()
            .map_or(self.driver_url.as_str(), |t| t.current_url())
    }

    /// `host:port` of the PostgreSQL server in use, for logs; `None` on the other databases.
    pub fn server_name(&self) -> Option<String> {
        self.topology.as_ref().map(|t| t.current_name().to_string())
    }

    /// Begins a transaction that will write. On SQLite it takes the write lock at once
    /// (`BEGIN IMMEDIATE`): a deferred transaction that reads and then writes cannot wait for
    /// another writer (its snapshot is stale, so SQLite answers "database is locked" at once,
    /// whatever `busy_timeout` says), while an immediate one waits up to `busy_timeout`.
    async fn begin_write(
        &self,
    ) -> std::result::Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
        match self.dialect {
            Dialect::Sqlite => self.db.begin_with("BEGIN IMMEDIATE").await,
            _ => self.db.begin_with("BEGIN").await,
        }
    }

    /// A connection taken from the pool and kept until the value is dropped: in tests, one that
    /// never comes back.
    #[cfg(test)]
    pub(crate) async fn lend_connection(&self) -> sqlx::pool::PoolConnection<sqlx::Any> {
        self.db.pool.acquire().await.unwrap()
    }

    pub async fn close(&self) {
        self.db.pool.close().await;
        if let Some(direct) = &self.direct {
            direct.db.pool.close().await;
        }
    }

    /// The database clock.
    pub async fn now(&self) -> Result<i64> {
        let row = sqlx::query(AssertSqlSafe(self.dialect.render("SELECT {now} AS db_now")))
            .fetch_one(&self.db)
            .await
            .map_err(sql_err!(self, "read clock"))?;
        row.try_get("db_now").map_err(sql_err!(self, "read clock"))
    }
}
