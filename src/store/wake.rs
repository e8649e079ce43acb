//! Wake-ups: a node learns at once that the table changed, instead of at its next poll.
//!
//! - PostgreSQL: `LISTEN sqlcron_wake`; triggers (migration `0010_wakeups.sql`) send `NOTIFY`
//!   when a row is inserted, becomes due or claimable (a release, `sqlcron run`, a schedule
//!   changed with SQL, a freed pool place) or a node's drain flag changes.
//! - SQLite (one host): inotify on the database's directory; every committed write touches the
//!   database file or its write-ahead log, whoever made it (a daemon, the CLI, `sqlite3`).
//! - MySQL/MariaDB: none; nodes poll.
//!
//! A wake-up only makes the node look at the table sooner: a lost one costs one poll, never a
//! run.

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::str::FromStr;

use super::*;

/// The PostgreSQL channel the triggers notify.
pub const WAKE_CHANNEL: &str = "sqlcron_wake";
/// The channel naming the lock request next in line (payload: its id).
pub const LOCK_CHANNEL: &str = "sqlcron_lock";

/// A lock waiter's wake-ups (PostgreSQL): notifications naming the request next in line.
pub struct LockWakeups(Box<sqlx::postgres::PgListener>);

impl LockWakeups {
    /// Waits until a notification names request `id` (others are for other waiters). An error
    /// means the connection failed: the caller drops this and polls.
    pub async fn wait_for(&mut self, id: i64) -> std::io::Result<()> {
        let want = id.to_string();
        loop {
            match self.0.try_recv().await {
                Ok(Some(n)) if n.payload() == want => return Ok(()),
                Ok(Some(_)) => {}
                Ok(None) => return Err(std::io::Error::other("LISTEN connection lost")),
                Err(e) => return Err(std::io::Error::other(e)),
            }
        }
    }
}

/// What [`Wakeups::next`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// Something changed: look at the table.
    Changed,
    /// The source was lost (the LISTEN connection dropped): changes may have been missed.
    Lost,
}

/// A node's source of wake-ups.
pub struct Wakeups {
    source: Source,
}

enum Source {
    Postgres(Box<sqlx::postgres::PgListener>),
    Sqlite(Inotify),
}

impl Wakeups {
    /// Waits for the next change.
    pub async fn next(&mut self) -> std::io::Result<Wake> {
        match &mut self.source {
            Source::Postgres(l) => match l.try_recv().await {
                Ok(Some(_)) => Ok(Wake::Changed),
                Ok(None) => Ok(Wake::Lost),
                Err(e) => Err(std::io::Error::other(e)),
            },
            Source::Sqlite(i) => i.next().await.map(|()| Wake::Changed),
        }
    }

    /// How it listens, for the log.
    pub fn describe(&self) -> &'static str {
        match self.source {
            Source::Postgres(_) => "PostgreSQL LISTEN sqlcron_wake",
            Source::Sqlite(_) => "inotify on the SQLite database",
        }
    }
}

impl Store {
    /// A lock waiter's wake-ups: `None` but on PostgreSQL. One connection of its own, kept by
    /// the caller across acquisitions.
    pub async fn lock_wakeups(&self) -> Result<Option<LockWakeups>> {
        if self.dialect != Dialect::Postgres {
            return Ok(None);
        }
        let listener = self.pg_listener("sqlcron-lock", LOCK_CHANNEL).await?;
        Ok(Some(LockWakeups(Box::new(listener))))
    }

    /// A PostgreSQL connection of its own (outside the pool, named `application_name` in
    /// `pg_stat_activity`) listening on `channel`.
    async fn pg_listener(
        &self,
        application_name: &str,
        channel: &str,
    ) -> Result<sqlx::postgres::PgListener> {
        let err = |source| StoreError::Sql {
            dialect: self.dialect.name(),
            op: "listen",
            source,
        };
        // LISTEN is a session's: through a transaction-mode pooler it needs `direct_url`.
        let url = match &self.direct {
            Some(direct) => direct.current_url(),
            None => self.current_url(),
        };
        let options = sqlx::postgres::PgConnectOptions::from_str(url)
            .map_err(err)?
            .application_name(application_name);
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(std::time::Duration::from_secs(5))
            .connect_lazy_with(options);
        let mut listener = sqlx::postgres::PgListener::connect_with(&pool)
            .await
            .map_err(err)?;
        listener.listen(channel).await.map_err(err)?;
        let ports = match &self.direct {
            Some(direct) => direct.url.server_ports(),
            None => self.url.server_ports(),
        };
        for &port in ports {
            super::keepalive::enable_for_peer_port(port);
        }
        Ok(listener)
    }

    /// Starts listening for changes; `None` on MySQL/MariaDB (polling only). On PostgreSQL
    /// this opens one connection of its own, named `sqlcron-wake <node>` in
    /// `pg_stat_activity`.
    pub async fn wakeups(&self, node: &str) -> Result<Option<Wakeups>> {
        match self.dialect {
            Dialect::Mysql => Ok(None),
            Dialect::Postgres => {
                let listener = self
                    .pg_listener(&format!("sqlcron-wake {node}"), WAKE_CHANNEL)
                    .await?;
                Ok(Some(Wakeups {
                    source: Source::Postgres(Box::new(listener)),
                }))
            }
            Dialect::Sqlite => {
                let path = self
                    .url
                    .sqlite_path()
                    .map(std::path::Path::to_path_buf)
                    .ok_or_else(|| StoreError::Url(self.url.redacted()))?;
                let watch = Inotify::new(&path)
                    .map_err(|e| StoreError::Lock(format!("watching {}: {e}", path.display())))?;
                Ok(Some(Wakeups {
                    source: Source::Sqlite(watch),
                }))
            }
        }
    }
}

/// inotify on the directory of an SQLite database, reporting writes to the database and its
/// `-wal` / `-journal` files (the directory, because the log is created and removed).
struct Inotify {
    fd: tokio::io::unix::AsyncFd<OwnedFd>,
    name: OsString,
}

impl Inotify {
    fn new(db: &Path) -> std::io::Result<Inotify> {
        let dir = match db.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = db
            .file_name()
            .ok_or_else(|| std::io::Error::other("the database path names no file"))?
            .to_os_string();
        // SAFETY: plain system calls; the descriptor is owned by `OwnedFd` at once.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let c = CString::new(dir.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
        let mask = libc::IN_MODIFY | libc::IN_CLOSE_WRITE | libc::IN_CREATE | libc::IN_MOVED_TO;
        // SAFETY: `c` is a valid C string for the duration of the call.
        if unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), mask) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a valid descriptor owned by the `AsyncFd` from here on, never closed
        // or replaced while registered.
        let fd = unsafe { tokio::io::unix::AsyncFd::register(fd)? };
        Ok(Inotify { fd, name })
    }

    /// Waits for a write to the database's files.
    async fn next(&mut self) -> std::io::Result<()> {
        let mut buf = [0u8; 4096];
        loop {
            let mut guard = self.fd.readable().await?;
            let read = guard.try_io(|fd| {
                // SAFETY: reads into a buffer we own, of its length.
                let n = unsafe {
                    libc::read(
                        fd.as_raw_fd(),
                        buf.as_mut_ptr().cast::<libc::c_void>(),
                        buf.len(),
                    )
                };
                if n < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match read {
                Ok(Ok(n)) => {
                    if touches(&buf[..n], self.name.as_bytes()) {
                        return Ok(());
                    }
                }
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }
}

/// Whether a buffer of inotify events names the file `name` or one of its companions
/// (`name-wal`, `name-journal`; not `name-shm`, which readers write through shared memory).
fn touches(events: &[u8], name: &[u8]) -> bool {
    const HEADER: usize = 16; // wd, mask, cookie, len: four 32-bit fields
    let mut at = 0;
    while at + HEADER <= events.len() {
        let len = u32::from_ne_bytes(events[at + 12..at + 16].try_into().unwrap_or([0; 4]));
        let start = at + HEADER;
        let end = (start + len as usize).min(events.len());
        let file: &[u8] = &events[start..end];
        let file = &file[..file.iter().position(|b| *b == 0).unwrap_or(file.len())];
        if let Some(rest) = file.strip_prefix(name)
            && (rest.is_empty() || rest == b"-wal" || rest == b"-journal")
        {
            return true;
        }
        at = end;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str) -> Vec<u8> {
        let mut padded = name.as_bytes().to_vec();
        padded.resize(name.len().div_ceil(16) * 16 + 16, 0);
        let mut e = vec![0u8; 12];
        e.extend_from_slice(&(padded.len() as u32).to_ne_bytes());
        e.extend_from_slice(&padded);
        e
    }

    #[test]
    fn only_the_database_and_its_log_wake() {
        let db = b"sqlcron.db";
        assert!(touches(&event("sqlcron.db-wal"), db));
        assert!(touches(&event("sqlcron.db"), db));
        assert!(!touches(&event("sqlcron.db-shm"), db));
        assert!(!touches(&event("other.db-wal"), db));
        let both = [event("x.log"), event("sqlcron.db-journal")].concat();
        assert!(touches(&both, db));
    }
}
