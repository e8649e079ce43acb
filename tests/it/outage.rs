//! A database that goes away and comes back: a throwaway PostgreSQL server of the test's own
//! (initdb in a temporary directory, on a free port), never the shared one.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::util::{DaemonProcess, eventually, free_port, node_config};

/// A PostgreSQL server in a temporary directory, listening on 127.0.0.1 only.
pub struct ThrowawayPostgres {
    bin: PathBuf,
    pub data: PathBuf,
    pub port: u16,
    /// More `-c name=value` settings for the server (TLS tests).
    pub settings: Vec<String>,
    /// More variables in the server's environment (`LD_PRELOAD` of libfaketime, for a clock
    /// that steps), from the server's next start.
    pub env: Vec<(String, String)>,
    _dir: tempfile::TempDir,
}

fn pg_bin() -> PathBuf {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    candidates.sort();
    candidates
        .into_iter()
        .rev()
        .find(|p| p.join("initdb").exists())
        .expect(
            "PostgreSQL server binaries (initdb, pg_ctl) are required: apt-get install postgresql",
        )
}

/// Runs a PostgreSQL tool as the `postgres` user when we are root (initdb refuses root).
fn as_postgres(bin: &Path, tool: &str, args: &[&str]) -> std::process::Output {
    as_postgres_with(bin, tool, args, &[])
}

/// [`as_postgres`] with more variables in the tool's environment (and the server's it starts).
fn as_postgres_with(
    bin: &Path,
    tool: &str,
    args: &[&str],
    env: &[(String, String)],
) -> std::process::Output {
    let path = bin.join(tool);
    let env = env.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    let out = if unsafe { libc::geteuid() } == 0 {
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(&path)
            .args(args)
            .envs(env)
            .output()
    } else {
        Command::new(&path).args(args).envs(env).output()
    }
    .unwrap_or_else(|e| panic!("running {}: {e}", path.display()));
    assert!(
        out.status.success(),
        "{tool} {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

impl ThrowawayPostgres {
    pub fn start() -> ThrowawayPostgres {
        Self::start_with(|_| vec![])
    }

    /// Starts a server with the settings `settings(dir)` returns (`ssl=on`, ...); `dir` is the
    /// server's own directory, owned by the server's user, where its files may be put first.
    pub fn start_with(settings: impl FnOnce(&Path) -> Vec<String>) -> ThrowawayPostgres {
        let bin = pg_bin();
        let dir = tempfile::Builder::new()
            .prefix("sqlcron-pg")
            .tempdir()
            .unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        let settings = settings(dir.path());
        crate::util::chown_if_root(dir.path(), "postgres");
        as_postgres(
            &bin,
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        let pg = ThrowawayPostgres {
            bin,
            data,
            port: free_port(),
            settings,
            env: vec![],
            _dir: dir,
        };
        pg.up();
        pg
    }

    pub fn up(&self) {
        let mut opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off",
            self.port,
            self.data.display()
        );
        for s in &self.settings {
            opts.push_str(&format!(" -c {s}"));
        }
        let log = self.data.join("server.log");
        as_postgres_with(
            &self.bin,
            "pg_ctl",
            &[
                "-D",
                self.data.to_str().unwrap(),
                "-o",
                &opts,
                "-l",
                log.to_str().unwrap(),
                "-w",
                "start",
            ],
            &self.env,
        );
    }

    pub fn down(&self) {
        self.stop("fast");
    }

    /// Stops the server at once, as a crash would (`pg_ctl -m immediate`).
    pub fn crash(&self) {
        self.stop("immediate");
    }

    fn stop(&self, mode: &str) {
        as_postgres(
            &self.bin,
            "pg_ctl",
            &["-D", self.data.to_str().unwrap(), "-m", mode, "-w", "stop"],
        );
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// A streaming-replication standby of this server (`pg_basebackup -R`), started on a port
    /// of its own.
    pub fn standby(&self) -> ThrowawayPostgres {
        let dir = tempfile::Builder::new()
            .prefix("sqlcron-pg-standby")
            .tempdir()
            .unwrap();
        crate::util::chown_if_root(dir.path(), "postgres");
        let data = dir.path().join("data");
        as_postgres(
            &self.bin,
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-D",
                data.to_str().unwrap(),
                "-R",
                "-X",
                "stream",
                "--no-sync",
            ],
        );
        let pg = ThrowawayPostgres {
            bin: self.bin.clone(),
            data,
            port: free_port(),
            settings: self.settings.clone(),
            env: self.env.clone(),
            _dir: dir,
        };
        pg.up();
        pg
    }

    /// Promotes a standby to primary and waits until it accepts writes.
    pub fn promote(&self) {
        as_postgres(
            &self.bin,
            "pg_ctl",
            &["-D", self.data.to_str().unwrap(), "-w", "promote"],
        );
    }
}

impl Drop for ThrowawayPostgres {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["-D", self.data.to_str().unwrap(), "-m", "immediate", "stop"])
            .output();
    }
}

pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Runs a per-second job against `url`, stops the server with `server(false)` and starts it
/// again with `server(true)`, and checks that the daemon keeps running, reports the outage,
/// resumes, and never runs a slot twice. Returns the daemon's log.
pub async fn daemon_survives_restart(
    url: &str,
    first_runs: Duration,
    resume: Duration,
    mut server: impl FnMut(bool),
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let job = format!(
        "[[job]]\nname = \"beat\"\nschedule = \"* * * * * *\"\ncommand = \"echo $SQLCRON_SLOT >> {}\"\n",
        out.display()
    );
    let mut node = DaemonProcess::start(dir.path(), "n", &node_config(url, "n", &job));
    eventually(first_runs, "runs before the outage", || async {
        (lines(&out).len() >= 2).then_some(())
    })
    .await;
    server(false);
    let before = lines(&out).len();
    // The first pass after the stop may wait for the pool's connection attempts (5 s) before
    // it fails; on a loaded machine (the whole suite on two cores) 10 s was once not enough.
    // The daemon's log goes with a failure: which error the pass met, if any.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !node.log_text().contains("database unreachable") {
        assert!(
            std::time::Instant::now() < deadline,
            "the outage was not reported within 30 s:\n{}",
            node.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        node.child.try_wait().unwrap().is_none(),
        "daemon exited:\n{}",
        node.log_text()
    );
    server(true);
    eventually(resume, "runs after the restart", || async {
        (lines(&out).len() >= before + 2).then_some(())
    })
    .await;
    let log = node.log_text();
    assert!(log.contains("database reachable again"), "{log}");
    let all = lines(&out);
    let unique: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), unique.len(), "a slot ran twice: {all:?}");
    assert!(node.child.try_wait().unwrap().is_none());
    assert!(node.stop().success(), "{log}");
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_restart_daemon_keeps_running_reports_and_resumes() {
    let pg = ThrowawayPostgres::start();
    let log = daemon_survives_restart(
        &pg.url(),
        Duration::from_secs(10),
        Duration::from_secs(20),
        |up| if up { pg.up() } else { pg.down() },
    )
    .await;
    assert_eq!(
        log.matches("database unreachable; retrying").count(),
        1,
        "one report per outage, not one per poll:\n{log}"
    );
}

/// The daemon's connections to the database have TCP keepalive on (sqlx sets none; see
/// `store/keepalive.rs`), as `ss` shows them.
async fn daemon_connections_have_tcp_keepalive(dialect: sqlcron::store::Dialect) {
    let db = crate::util::TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let node = DaemonProcess::start(dir.path(), "k", &node_config(&db.url, "k", ""));
    let port = if dialect == sqlcron::store::Dialect::Postgres {
        5432
    } else {
        3306
    };
    let pid = format!("pid={},", node.pid());
    eventually(
        Duration::from_secs(20),
        "keepalive on every database connection of the daemon",
        || async {
            let out = Command::new("ss")
                .args(["-tnpo", "state", "established"])
                .arg(format!("( dport = :{port} )"))
                .output()
                .expect("ss (iproute2)");
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            let mine: Vec<String> = text
                .lines()
                .filter(|l| l.contains(&pid))
                .map(str::to_string)
                .collect();
            // A socket with data in flight shows its retransmission timer instead: the test
            // waits for a moment when every connection is idle.
            (node.log_text().contains("ready")
                && !mine.is_empty()
                && mine.iter().all(|l| l.contains("timer:(keepalive")))
            .then_some(())
        },
    )
    .await;
    assert!(node.stop().success());
}

mod keepalive {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::daemon_connections_have_tcp_keepalive(sqlcron::store::Dialect::Postgres).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql() {
        super::daemon_connections_have_tcp_keepalive(sqlcron::store::Dialect::Mysql).await
    }
}

/// Every connection the store opens sends without delay (TCP_NODELAY, Nagle's algorithm off).
/// Without it, a new TLS connection to PostgreSQL waited twice for the server's delayed
/// acknowledgement during its handshake (about 90 ms each time: every command line, and the
/// claim of a node that had given its lease extension's connection back); sqlx 0.9.0 had
/// stopped setting it and 0.9.1 sets it again. The store connects through a proxy on a port
/// of its own, so the sockets of this process connected to that port are the store's alone;
/// on PostgreSQL with the shared server's TLS, which the proxy relays.
async fn store_connections_send_without_delay(dialect: sqlcron::store::Dialect) {
    let db = crate::util::TestDb::new(dialect).await;
    let server = match dialect {
        sqlcron::store::Dialect::Postgres => "127.0.0.1:5432",
        _ => "127.0.0.1:3306",
    };
    let proxy = crate::proxy::Proxy::start(server).await;
    let url = db.url.replace(server, &format!("127.0.0.1:{}", proxy.port));
    let store = sqlcron::store::Store::connect(&crate::util::db_url(&url), 2).unwrap();
    store.now().await.unwrap();
    let sockets = sockets_to(proxy.port);
    assert!(
        !sockets.is_empty(),
        "no socket of this process to port {}",
        proxy.port
    );
    for (fd, nodelay) in &sockets {
        assert!(
            nodelay,
            "descriptor {fd} to the database waits to gather small writes"
        );
    }
    store.close().await;
}

/// This process's TCP sockets connected to `port` on the peer side: each descriptor and
/// whether it has TCP_NODELAY.
fn sockets_to(port: u16) -> Vec<(i32, bool)> {
    let mut found = Vec::new();
    sqlcron::store::for_each_socket_to(port, |fd, socket| {
        found.push((fd, socket.tcp_nodelay().unwrap_or(false)));
    });
    found
}

mod nodelay {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        super::store_connections_send_without_delay(sqlcron::store::Dialect::Postgres).await
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql() {
        super::store_connections_send_without_delay(sqlcron::store::Dialect::Mysql).await
    }
}

/// MySQL/MariaDB: a due row that a transaction left open in a console holds makes each claim
/// run into its timeout. The node reports that as failing statements of kind `timeout`, not as
/// an unreachable database, and its jobs run again once the transaction ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_row_held_in_a_console_is_reported_as_a_timeout_not_as_an_outage() {
    let db = crate::util::TestDb::new(sqlcron::store::Dialect::Mysql).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let job = format!(
        "[[job]]\nname = \"beat\"\nschedule = \"* * * * * *\"\ncommand = \"echo $SQLCRON_SLOT >> {}\"\n",
        out.display()
    );
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command, next_exec, slot) \
             VALUES ('held', '0 0 1 1 *', 'true', 4102444800000, 4102444800000)",
        )
        .await
        .unwrap();
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&db.url, "n", &job));
    eventually(
        Duration::from_secs(15),
        "runs before the console",
        || async { (lines(&out).len() >= 2).then_some(()) },
    )
    .await;
    // The console makes `held` due and leaves its transaction open.
    let pool = sqlx::AnyPool::connect(&db.url).await.unwrap();
    let mut console = pool.begin().await.unwrap();
    let due = sqlcron::store::Dialect::Mysql
        .render("UPDATE cron_table SET next_exec = {now} - 60000 WHERE name = 'held'");
    sqlx::query(sqlx::AssertSqlSafe(due))
        .execute(&mut *console)
        .await
        .unwrap();
    eventually(
        Duration::from_secs(15),
        "the failing claims to be reported",
        || async {
            node.log_text()
                .contains("database statements failing (timeout); retrying with backoff")
                .then_some(())
        },
    )
    .await;
    console.rollback().await.unwrap();
    let before = lines(&out).len();
    eventually(
        Duration::from_secs(20),
        "runs after the console",
        || async { (lines(&out).len() >= before + 2).then_some(()) },
    )
    .await;
    let log = node.log_text();
    assert!(!log.contains("database unreachable"), "{log}");
    assert!(log.contains("database reachable again"), "{log}");
    assert!(node.stop().success(), "{log}");
    pool.close().await;
}
