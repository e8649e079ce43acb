//! Opening a store: the pool and its connections' settings (statement timeouts, keepalive, the
//! check that a server takes writes, the ping of a connection idle for a while), the hosts of a
//! PostgreSQL URL, a transaction-mode pooler in front, and a second pool to the same database.

use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, Executor, Row};

use super::*;

/// The settings a pool was opened with, besides its URL and size.
#[derive(Debug, Clone, Copy)]
pub(super) struct Opened {
    pub(super) statement_timeout: Option<Duration>,
    pub(super) target: topology::Target,
    pub(super) pooled: bool,
}

/// A pooled connection unused this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// A pooled connection is closed when it is given back this long after it was opened, and a new
/// one is opened only when one is wanted: a bound on how long one server process serves one
/// connection. Not what gives back what a busy spell opened: the pool hands out its idle
/// connections in turn, so a node that polls keeps every one of them in use, and the daemon
/// closes the ones beyond its loops' needs once it has been quiet a while
/// ([`Store::trim_idle`], daemon/pool_trim.rs). A new PostgreSQL connection costs the server
/// about 17 ms of CPU before it has served anything (a process, its catalog caches, the
/// statements prepared anew): at two minutes this lifetime was most of an idle fleet's load on
/// its server (docs/fleet.md).
pub const MAX_LIFETIME: Duration = Duration::from_secs(30 * 60);

/// [`MAX_LIFETIME`] give or take a sixth, drawn per pool: connections a burst opened on many
/// nodes at once do not all end, and reconnect, at the same moment.
fn max_lifetime() -> Duration {
    MAX_LIFETIME.mul_f64(rand::random_range(5.0 / 6.0..7.0 / 6.0))
}

/// When a server last answered, on one of a pool's connections, that it takes no writes or has
/// left its cluster (`StoreError::kind` `read-only`, or `unreachable` in the server's own
/// words: a Galera node cut off, a PostgreSQL shutting down). Every connection opened before
/// that is closed as it comes back rather than used again, so that a node reconnects, through
/// whatever a load balancer in front now chooses, at once rather than at the end of
/// [`MAX_LIFETIME`]. Shared by a store's pools (its lease pool too).
#[derive(Debug, Default)]
pub(super) struct Suspect(std::sync::Mutex<Option<std::time::Instant>>);

/// Marks at most this often: a server that stays read-only, or an error whose text a database
/// writer chose, does not make a node reconnect with every failed statement.
const MARK_SPACING: Duration = Duration::from_secs(30);

impl Suspect {
    pub(super) fn mark(&self) {
        let mut last = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let now = std::time::Instant::now();
        if takes_mark(*last, now) {
            *last = Some(now);
        }
    }

    /// Whether a connection of `age` was opened before the last mark.
    fn is_stale(&self, age: Duration) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|at| opened_before(age, at.elapsed()))
    }
}

/// Whether a mark at `now` is taken, the last one having been at `last`.
fn takes_mark(last: Option<std::time::Instant>, now: std::time::Instant) -> bool {
    last.is_none_or(|at| now.saturating_duration_since(at) >= MARK_SPACING)
}

/// Whether a connection of `age` was opened before a moment `since` ago.
fn opened_before(age: Duration, since: Duration) -> bool {
    age > since
}

impl Store {
    /// Connects (lazily: the first statement opens the first connection, so a daemon can start
    /// while the database is down), with no statement timeout: for the command line and tests.
    pub fn connect(url: &DatabaseUrl, max_connections: u32) -> Result<Store> {
        Self::connect_with(url, max_connections, None)
    }

    /// Connects with a timeout on every statement and lock wait: PostgreSQL `statement_timeout`
    /// and `lock_timeout`, MariaDB `max_statement_time` (MySQL `max_execution_time`, which
    /// bounds reads only) and `innodb_lock_wait_timeout` (whole seconds, at least 1), SQLite
    /// `busy_timeout`. The daemon sets it below its trust window, so that a stalled statement
    /// returns an error while its claim is still trusted. Migrations run without it.
    pub fn connect_with(
        url: &DatabaseUrl,
        max_connections: u32,
        statement_timeout: Option<Duration>,
    ) -> Result<Store> {
        Self::open(
            url,
            max_connections,
            statement_timeout,
            topology::Target::ReadWrite,
            false,
        )
    }

    /// Connects the daemon through a transaction-mode pooler (`url`, PgBouncer with `pool_mode =
    /// transaction`), with `direct_url` (the server itself) for migrations and LISTEN: see
    /// `pooler.rs` and docs/databases.md. PostgreSQL only.
    pub fn connect_pooled(
        url: &DatabaseUrl,
        direct_url: &DatabaseUrl,
        max_connections: u32,
        statement_timeout: Option<Duration>,
    ) -> Result<Store> {
        let mut store = Self::open(
            url,
            max_connections,
            statement_timeout,
            topology::Target::ReadWrite,
            true,
        )?;
        if store.dialect != Dialect::Postgres || direct_url.dialect() != Dialect::Postgres {
            return Err(StoreError::Hosts {
                url: direct_url.redacted(),
                why: "[database] direct_url is for PostgreSQL behind a transaction-mode pooler"
                    .into(),
            });
        }
        // Migrations and the LISTEN connections only: two connections at most.
        store.direct = Some(std::sync::Arc::new(Self::open(
            direct_url,
            2,
            None,
            topology::Target::ReadWrite,
            false,
        )?));
        Ok(store)
    }

    /// Connects for reading only (`[database] read_url`): on PostgreSQL any server that
    /// answers will do, a standby too, unless the URL's `target_session_attrs` says otherwise.
    pub fn connect_reader(url: &DatabaseUrl, max_connections: u32) -> Result<Store> {
        Self::open(url, max_connections, None, topology::Target::Any, false)
    }

    fn open(
        configured: &DatabaseUrl,
        max_connections: u32,
        statement_timeout: Option<Duration>,
        default_target: topology::Target,
        pooled: bool,
    ) -> Result<Store> {
        Self::open_on(
            configured,
            max_connections,
            statement_timeout,
            default_target,
            pooled,
            None,
            false,
        )
    }

    /// [`Store::open`], beside `beside` when given: on its hosts' choice (PostgreSQL), so that
    /// the new pool points where that choice points and follows it when it changes, and
    /// sharing its [`Suspect`] mark. With `keep`, its connections are kept however long idle,
    /// until [`Store::trim_idle`] closes them (a pool whose user decides when it is done).
    fn open_on(
        configured: &DatabaseUrl,
        max_connections: u32,
        statement_timeout: Option<Duration>,
        default_target: topology::Target,
        pooled: bool,
        beside: Option<&Store>,
        keep: bool,
    ) -> Result<Store> {
        let timeout_ms = statement_timeout.map(|t| t.as_millis().max(1) as u64);
        sqlx::any::install_default_drivers();
        let dialect = configured.dialect();
        if dialect == Dialect::Sqlite {
            super::sqlite_plans::hold_plans();
        }
        if let Some(path) = configured.sqlite_path() {
            migrate::create_private(path)
                .map_err(|e| StoreError::Lock(format!("creating {}: {e}", path.display())))?;
        }
        let mut url = configured.secret_text().to_string();
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
        let parse = |url: &str| {
            AnyConnectOptions::from_str(url)
                .map_err(|source| StoreError::Sql {
                    dialect: dialect.name(),
                    op: "parse URL",
                    source,
                })
                .map(|o| {
                    o.log_statements(tracing::log::LevelFilter::Trace)
                        .log_slow_statements(
                            tracing::log::LevelFilter::Warn,
                            Duration::from_secs(2),
                        )
                })
        };
        let fresh = beside.is_none();
        let suspect = beside.map_or_else(Default::default, |s| s.suspect.clone());
        let topology = if let Some(s) = beside {
            s.topology.clone()
        } else if dialect == Dialect::Postgres {
            let mut hosts = configured.hosts().clone();
            if pooled {
                for u in &mut hosts.urls {
                    *u = pooler::without_statement_cache(u);
                }
            }
            let options = hosts
                .urls
                .iter()
                .map(|u| parse(u))
                .collect::<Result<Vec<_>>>()?;
            let target = hosts.target.unwrap_or(default_target);
            Some(std::sync::Arc::new(topology::Topology::new(
                hosts, target, options,
            )))
        } else {
            None
        };
        let options = match &topology {
            Some(t) => parse(t.current_url())?,
            None => parse(&url)?,
        };
        let check_writable = topology
            .as_ref()
            .is_some_and(|t| t.target == topology::Target::ReadWrite);
        // Weak: the choice holds its pools (to point them all anew), not the other way round.
        let stale = topology.as_ref().map(std::sync::Arc::downgrade);
        let chooser = stale.clone();
        let suspected = std::sync::Arc::downgrade(&suspect);
        let ports = std::sync::Arc::new(configured.server_ports().to_vec());
        // SQLite serialises writes anyway; more connections only cost memory.
        let max_connections = if dialect == Dialect::Sqlite {
            max_connections.min(4)
        } else {
            max_connections
        };
        // A SQLite database's connections cost no server anything: they are kept (an in-memory
        // database lives only as long as its connections; a file's page caches would be built
        // anew with every new connection, and its memory churned, for nothing).
        let recycled = !(keep || dialect == Dialect::Sqlite);
        // And a daemon's SQLite pools (the ones with a statement timeout; a command's pool
        // stays lazy) open all of them at once: a node's descriptors and page caches are then
        // what they will be for as long as it runs, rather than filling to the same bound
        // whenever a busy minute first needs a third connection (the long soak's verdict).
        let eager = dialect == Dialect::Sqlite && statement_timeout.is_some();
        let pool = AnyPoolOptions::new()
            .max_connections(max_connections)
            .min_connections(if eager { max_connections } else { 0 })
            .acquire_timeout(Duration::from_secs(5))
            // An idle node gives back what a busy minute opened (see the constants).
            .idle_timeout(recycled.then_some(IDLE_TIMEOUT))
            .max_lifetime(recycled.then(max_lifetime))
            .after_connect(move |conn, _meta| {
                let ports = ports.clone();
                let chooser = chooser.clone();
                Box::pin(async move {
                    // Through a pooler the timeouts are set per transaction instead.
                    let session_timeout = if pooled { None } else { timeout_ms };
                    for setting in dialect.session_setup(session_timeout) {
                        let tried = conn.execute(AssertSqlSafe(setting.sql)).await;
                        match (tried, setting.otherwise) {
                            (Ok(_), _) => {}
                            (Err(_), Some(other)) => {
                                conn.execute(AssertSqlSafe(other)).await?;
                            }
                            (Err(e), None) => return Err(e),
                        }
                    }
                    for port in ports.iter() {
                        keepalive::enable_for_peer_port(*port);
                    }
                    // A server that does not take writes (a standby, the old primary after a
                    // split) is refused here, so that the pool never hands one out.
                    if check_writable {
                        // Without parameters: one simple query, no prepared statement (which a
                        // transaction-mode pooler could not keep).
                        let ro: i32 = conn
                            .fetch_one(topology::READ_ONLY_CHECK)
                            .await?
                            .try_get(0)?;
                        if ro != 0 {
                            // Look for the server that does at once: the pool goes on trying
                            // to connect until its acquire timeout, and a change of server
                            // points its next try there (a standby first in the list, a
                            // primary demoted by a failover).
                            if let Some(t) = chooser.as_ref().and_then(std::sync::Weak::upgrade)
                                && t.hosts.urls.len() > 1
                            {
                                t.select_soon();
                            }
                            return Err(sqlx::Error::Protocol(topology::READ_ONLY_SERVER.into()));
                        }
                    }
                    Ok(())
                })
            })
            // A connection is checked with a round trip (a ping) before use only when it sat
            // idle for a while: one used moments ago is alive, and pinging it before every
            // statement doubled the round trips of a busy node. A connection that broke in
            // between fails its statement, which is retried like any other failed write.
            .test_before_acquire(false)
            // Connections opened before the pool changed server, or before its server said it
            // takes no writes or has left its cluster, are dropped, not used.
            .before_acquire(move |conn, meta| {
                let topology = stale.as_ref().and_then(std::sync::Weak::upgrade);
                let keep = topology.as_ref().is_none_or(|t| !t.is_stale(meta.age))
                    && suspected
                        .upgrade()
                        .is_none_or(|s: std::sync::Arc<Suspect>| !s.is_stale(meta.age));
                Box::pin(async move {
                    if !keep {
                        return Ok(false);
                    }
                    if meta.idle_for >= PING_IF_IDLE_FOR {
                        // A failed ping closes the connection without a goodbye. The pool
                        // then connects anew, to the same host, and says nothing of a refusal
                        // until its acquire timeout: with several hosts, look for the server
                        // now (the primary gone in a failover).
                        if let Err(e) = sqlx::Connection::ping(conn).await {
                            if let Some(t) = topology.filter(|t| t.hosts.urls.len() > 1) {
                                t.select_soon();
                            }
                            return Err(e);
                        }
                    }
                    Ok(true)
                })
            })
            .connect_lazy_with(options);
        if let Some(t) = &topology {
            t.follow(&pool);
            // A list of hosts is looked at once at the start, in the background: the first
            // host may be down or a standby, and the pool would otherwise wait out its acquire
            // timeout on it before anything looked further (every CLI command after a failover
            // that left the primary on a later host).
            if fresh && t.hosts.urls.len() > 1 {
                t.select_soon();
            }
        }
        Ok(Store {
            db: pooler::Db {
                pool,
                begin: pooled.then(|| pooler::begin_statement(timeout_ms).into()),
                quiet: Default::default(),
            },
            direct: None,
            dialect,
            url: configured.clone(),
            driver_url: url,
            sql: std::sync::Arc::new(statements(dialect)),
            topology,
            suspect,
            opened: Opened {
                statement_timeout,
                target: default_target,
                pooled,
            },
        })
    }

    /// The same database with a pool of its own of at most `max_connections`, opened with the
    /// same settings (statement timeout, pooler, hosts) but kept however long idle (no new
    /// connection to wait for when a run needs its first extension): for work that must not
    /// wait for this pool's connections, nor be driven by the runtime that drives them (the
    /// daemon's lease extension, `daemon/lease_thread.rs`). Its connections are opened by the
    /// runtime this is called on, when first used. On PostgreSQL with several hosts both pools
    /// share one choice of server: a change of server that either pool's errors call for moves
    /// both, so that a node never extends its leases on one server while it claims and releases
    /// on another. Both share the [`Suspect`] mark too.
    ///
    /// `None` for an in-memory SQLite database, which exists only in its own connections: use
    /// this store then (SQLite's connections run on threads of their own, whatever runtime
    /// asks). The new store has no `direct_url` pool (migrations and LISTEN are not its work).
    pub fn own_pool(&self, max_connections: u32) -> Result<Option<Store>> {
        if self.dialect == Dialect::Sqlite && self.url.sqlite_path().is_none() {
            return Ok(None);
        }
        Self::open_on(
            &self.url,
            max_connections,
            self.opened.statement_timeout,
            self.opened.target,
            self.opened.pooled,
            Some(self),
            true,
        )
        .map(Some)
    }

    /// Closes idle connections of the pool until it holds at most `keep`, and says how many it
    /// closed. Only idle ones: a connection in use is never taken, nor waited for. A SQLite
    /// pool, whose connections are kept for the daemon's life, is left as it is.
    pub async fn trim_idle(&self, keep: u32) -> u32 {
        if self.dialect == Dialect::Sqlite {
            return 0;
        }
        let mut closed = 0;
        while self.db.pool.size() > keep {
            let Some(conn) = self.db.pool.try_acquire() else {
                break;
            };
            // A connection that fails to say goodbye is gone all the same.
            let _ = conn.close().await;
            closed += 1;
        }
        closed
    }

    /// Has the pool hold a working connection, kept idle in it: one in use is working; an idle
    /// one is taken (the pool pings one idle for a second or more, and replaces it if it broke);
    /// with none, one is opened. Says whether a connection was opened. The pool's wait bounds it
    /// (a refused or unanswered connect is an error after 5 s).
    pub async fn open_one(&self) -> std::result::Result<bool, sqlx::Error> {
        let (size, idle) = (self.db.pool.size(), self.db.pool.num_idle());
        if size > 0 && idle == 0 {
            return Ok(false);
        }
        // Back to the pool, idle, when dropped.
        self.db.pool.acquire().await.map(|_| size == 0)
    }

    /// Whether the node is quiet: its statements then wait briefly for a connection on its
    /// way back rather than open another (`quiet.rs`). A SQLite pool, which keeps its
    /// connections, is never quiet.
    pub fn set_quiet(&self, quiet: bool) {
        if self.dialect != Dialect::Sqlite {
            self.db.quiet.set(quiet);
        }
    }

    /// The connections this store's pool holds now: (open, of which idle).
    pub fn pool_size(&self) -> (u32, usize) {
        (self.db.pool.size(), self.db.pool.num_idle())
    }

    /// Why a new connection to the server fails now, in the server's words (`None`: one
    /// opened, or SQLite). A pool that cannot connect says only that it timed out; a node
    /// waiting for its database logs this beside it ("too many clients already", a password
    /// refused, a refused port).
    pub async fn connect_error(&self) -> Option<String> {
        use sqlx::ConnectOptions;
        if self.dialect == Dialect::Sqlite {
            return None;
        }
        let options = self.db.pool.connect_options();
        match tokio::time::timeout(topology::HOST_CONNECT_TIMEOUT, options.connect()).await {
            Err(_) => Some(format!(
                "the server did not answer in {} s",
                topology::HOST_CONNECT_TIMEOUT.as_secs()
            )),
            Ok(Err(e)) => Some(e.to_string()),
            Ok(Ok(conn)) => {
                let _ = sqlx::Connection::close(conn).await;
                None
            }
        }
    }
}

/// The bytes SQLite's allocator holds in this process now (its page caches, prepared
/// statements and parsed schemas): what the SQLite connections cost beyond the daemon's own
/// memory. 0 before any SQLite connection.
pub fn sqlite_heap_bytes() -> i64 {
    // SAFETY: sqlite3_memory_used takes no argument and only reads SQLite's memory counter
    // (thread-safe in the threadsafe build sqlx links).
    unsafe { libsqlite3_sys::sqlite3_memory_used() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_opened_before_the_mark_is_stale() {
        let s = Duration::from_secs;
        assert!(
            opened_before(s(10), s(3)),
            "opened 10 s ago, marked 3 s ago"
        );
        assert!(!opened_before(s(2), s(3)), "opened after the mark");
        assert!(
            !Suspect::default().is_stale(s(3600)),
            "no mark: nothing is stale"
        );
        let marked = Suspect::default();
        marked.mark();
        assert!(marked.is_stale(s(1)));
        assert!(!marked.is_stale(Duration::ZERO));
        // A second mark within the spacing is not taken: a connection opened since stays.
        let at = std::time::Instant::now();
        assert!(takes_mark(None, at));
        assert!(!takes_mark(
            Some(at),
            at + MARK_SPACING - Duration::from_millis(1)
        ));
        assert!(takes_mark(Some(at), at + MARK_SPACING));
    }
}
