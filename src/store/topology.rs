//! Which server a node talks to: a PostgreSQL URL may name several hosts, as libpq accepts it
//! (`postgres://user@h1:5432,h2:5432/db?target_session_attrs=read-write`), tried in order; and
//! a node that writes must talk to a server that accepts writes. sqlx's URL parser takes one
//! host, so the list is split here into one URL per host, and the pool is pointed at the host
//! chosen (`Pool::set_connect_options`). See docs/databases.md.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::any::AnyConnectOptions;
use sqlx::{AnyConnection, AnyPool, Connection, Row};

pub use crate::model::database_url::{Hosts, Target};

/// How long a node waits for one host of a list before trying the next.
pub const HOST_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The statement that tells whether the server accepts writes (one row, one integer column:
/// 1 when it does not).
pub const READ_ONLY_CHECK: &str = "SELECT CASE WHEN pg_is_in_recovery() \
     OR current_setting('transaction_read_only') = 'on' THEN 1 ELSE 0 END AS ro";

/// The message of a connection refused because its server does not accept writes.
pub const READ_ONLY_SERVER: &str = "the server does not accept writes (a standby in recovery, or \
     default_transaction_read_only is on); looking for one that does";

/// Where a PostgreSQL pool points, and when it last changed server (connections opened before
/// are dropped when next taken from the pool).
#[derive(Debug)]
pub struct Topology {
    pub hosts: Hosts,
    pub target: Target,
    options: Vec<AnyConnectOptions>,
    current: AtomicUsize,
    /// When the pool was last pointed anew (also after a read-only answer on the same host).
    switched: Mutex<Instant>,
    /// A selection is under way (one at a time).
    selecting: AtomicBool,
    /// The last selection found no usable server.
    failing: AtomicBool,
    /// When the last selection ended (they are spaced by [`SELECT_SPACING`]).
    last_selection: Mutex<Option<Instant>>,
    /// The pools that follow this choice (a store's, and the lease extension's of the same
    /// node, `Store::own_pool`): a change of server points them all anew.
    pools: Mutex<Vec<AnyPool>>,
}

/// The least time between two selections of a server.
const SELECT_SPACING: Duration = Duration::from_millis(500);

/// How long a selection that finds no usable server goes on looking by itself.
const KEEP_LOOKING: Duration = Duration::from_secs(60);

impl Topology {
    pub fn new(hosts: Hosts, target: Target, options: Vec<AnyConnectOptions>) -> Topology {
        Topology {
            hosts,
            target,
            options,
            current: AtomicUsize::new(0),
            switched: Mutex::new(Instant::now()),
            selecting: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            last_selection: Mutex::new(None),
            pools: Mutex::new(Vec::new()),
        }
    }

    /// `pool` follows this choice from now on, starting with the host chosen now (under the
    /// same lock as a change of host, so that a change under way cannot pass it by).
    pub fn follow(&self, pool: &AnyPool) {
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        pool.set_connect_options(self.options[self.current.load(Ordering::SeqCst)].clone());
        pools.push(pool.clone());
    }

    /// The URL of the host the pool points at.
    pub fn current_url(&self) -> &str {
        &self.hosts.urls[self.current.load(Ordering::SeqCst)]
    }

    pub fn current_name(&self) -> &str {
        &self.hosts.names[self.current.load(Ordering::SeqCst)]
    }

    fn mark_switched(&self) {
        *self.switched.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// Whether a pooled connection of `age` was opened before the pool last changed server.
    pub fn is_stale(&self, age: Duration) -> bool {
        let since = self
            .switched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed();
        age > since
    }

    /// Whether `e` says the server does not take writes (then its pooled connections must go),
    /// or, with several hosts, that it is gone (then another host may serve).
    pub fn calls_for_selection(&self, e: &sqlx::Error) -> bool {
        let several = self.hosts.urls.len() > 1;
        match e {
            sqlx::Error::Database(d) => {
                match d
                    .code()
                    .map(|c| c.into_owned())
                    .unwrap_or_default()
                    .as_str()
                {
                    // read_only_sql_transaction
                    "25006" => true,
                    // admin_shutdown, crash_shutdown, cannot_connect_now
                    "57P01" | "57P02" | "57P03" => several,
                    _ => false,
                }
            }
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Protocol(_) => several,
            _ => false,
        }
    }

    /// Starts choosing a server in the background unless a choice is under way (one made within
    /// [`SELECT_SPACING`] is followed by this one at that spacing). Every pool that follows
    /// this choice is pointed anew.
    pub fn select_soon(self: &Arc<Self>) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.selecting.swap(true, Ordering::SeqCst) {
            return;
        }
        // A call within [`SELECT_SPACING`] of the last selection is not dropped but made at
        // its end: the last one may have looked while the old server was still going down
        // (answering a probe between its first refusals and its exit), and the next error
        // might otherwise only come with a pool's acquire timeout.
        let wait = self
            .last_selection
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map_or(Duration::ZERO, |t| {
                SELECT_SPACING.saturating_sub(t.elapsed())
            });
        let me = self.clone();
        handle.spawn(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            // While no server is usable (the old primary gone, the new one not promoted yet),
            // look again every [`SELECT_SPACING`] until one is, rather than waiting for the
            // next statement to fail (a pool's acquire timeout, 5 s): a node follows a
            // promotion within half a second. Given up after [`KEEP_LOOKING`]; the next error
            // starts it again.
            let began = Instant::now();
            loop {
                me.select().await;
                if !me.failing.load(Ordering::SeqCst) || began.elapsed() > KEEP_LOOKING {
                    break;
                }
                tokio::time::sleep(SELECT_SPACING).await;
            }
            *me.last_selection.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            me.selecting.store(false, Ordering::SeqCst);
        });
    }

    /// Logs the end of a selection: a change of server, or the first of a run of failures (the
    /// ones after it at debug level, until a server is usable again).
    fn report(&self, failed: Option<String>) {
        let was_failing = self.failing.swap(failed.is_some(), Ordering::SeqCst);
        match (failed, was_failing) {
            (Some(why), false) => {
                tracing::error!(servers = %why, "no database server usable now; trying again")
            }
            (Some(why), true) => tracing::debug!(servers = %why, "still no database server usable"),
            (None, true) => {
                tracing::info!(server = %self.current_name(), "database server usable again")
            }
            (None, false) => {}
        }
    }

    /// Tries the hosts in order (each within [`HOST_CONNECT_TIMEOUT`]) and points the pools at
    /// the first that answers and, for [`Target::ReadWrite`], accepts writes. Connections to the
    /// old server are dropped as they come back to the pool.
    async fn select(&self) {
        let was = self.current.load(Ordering::SeqCst);
        // The fault that called for this makes every pooled connection suspect: all are
        // dropped as they come back (a read-only answer on the one host, too).
        self.mark_switched();
        let mut why = Vec::new();
        for (i, options) in self.options.iter().enumerate() {
            match probe(options, self.target).await {
                Ok(()) => {
                    self.mark_switched();
                    if i != was {
                        let pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
                        self.current.store(i, Ordering::SeqCst);
                        for other in pools.iter() {
                            other.set_connect_options(options.clone());
                        }
                        drop(pools);
                        tracing::warn!(
                            server = %self.hosts.names[i],
                            was = %self.hosts.names[was],
                            "database server changed"
                        );
                    }
                    self.report(None);
                    return;
                }
                Err(e) => why.push(format!("{}: {e}", self.hosts.names[i])),
            }
        }
        self.report(Some(why.join("; ")));
    }
}

/// Connects to one host and checks it (within [`HOST_CONNECT_TIMEOUT`]).
async fn probe(options: &AnyConnectOptions, target: Target) -> Result<(), String> {
    let attempt = async {
        let mut conn = AnyConnection::connect_with(options)
            .await
            .map_err(|e| e.to_string())?;
        if target == Target::ReadWrite {
            // A simple query: no prepared statement, which a pooler could not keep.
            let ro: i32 = sqlx::Executor::fetch_one(&mut conn, READ_ONLY_CHECK)
                .await
                .and_then(|row| row.try_get(0))
                .map_err(|e| e.to_string())?;
            if ro != 0 {
                let _ = conn.close().await;
                return Err(
                    "does not accept writes (in recovery, or default_transaction_read_only is on)"
                        .into(),
                );
            }
        }
        let _ = conn.close().await;
        Ok(())
    };
    tokio::time::timeout(HOST_CONNECT_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {HOST_CONNECT_TIMEOUT:?}")))
}
