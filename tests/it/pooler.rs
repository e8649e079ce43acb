//! PostgreSQL through PgBouncer in transaction pooling mode (Debian's `pgbouncer`, started by
//! the test in front of a throwaway server), with `[database] direct_url` for migrations and
//! LISTEN. PgBouncer keeps two server connections for every client, so consecutive transactions
//! of one node run on different server connections: a prepared statement or a session setting
//! that outlived its transaction would be found missing, or another client's, at once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use sqlcron::store::Store;

use crate::outage::{ThrowawayPostgres, lines};
use crate::util::{DaemonProcess, eventually, free_port, node_config, sqlcron, stderr};

/// A PgBouncer of the test's own, in transaction pooling mode, listening on 127.0.0.1.
pub struct PgBouncer {
    dir: tempfile::TempDir,
    pub port: u16,
    child: Option<Child>,
}

fn pgbouncer_bin() -> PathBuf {
    ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("pgbouncer is required for the pooler tests: apt-get install pgbouncer")
}

impl PgBouncer {
    /// Starts PgBouncer in front of the server on `server_port` (database `postgres`, user
    /// `postgres`, trust), with `server_connections` server connections at most.
    pub fn start(server_port: u16, server_connections: u32) -> PgBouncer {
        let dir = tempfile::Builder::new()
            .prefix("sqlcron-pgbouncer")
            .tempdir()
            .unwrap();
        let port = free_port();
        let d = dir.path().display();
        std::fs::write(dir.path().join("users.txt"), "\"postgres\" \"\"\n").unwrap();
        std::fs::write(
            dir.path().join("pgbouncer.ini"),
            format!(
                "[databases]\npostgres = host=127.0.0.1 port={server_port} dbname=postgres\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
                 unix_socket_dir =\nauth_type = trust\nauth_file = {d}/users.txt\n\
                 pool_mode = transaction\ndefault_pool_size = {server_connections}\n\
                 max_client_conn = 200\nignore_startup_parameters = extra_float_digits\n\
                 logfile = {d}/pgbouncer.log\n"
            ),
        )
        .unwrap();
        // PgBouncer refuses to run as root; `-u` switches user, keeping the process.
        if unsafe { libc::geteuid() } == 0 {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(status.success());
        }
        let mut b = PgBouncer {
            dir,
            port,
            child: None,
        };
        b.up();
        b
    }

    /// Starts the process and waits until it accepts connections.
    pub fn up(&mut self) {
        let mut cmd = Command::new(pgbouncer_bin());
        if unsafe { libc::geteuid() } == 0 {
            cmd.args(["-u", "postgres"]);
        }
        let child = cmd
            .arg(self.dir.path().join("pgbouncer.ini"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting pgbouncer");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "pgbouncer did not listen:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills the process (SIGKILL): every client and server connection drops at once.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `start SLOT ATTEMPT` lines counted by (job, slot, attempt), and the (job, slot) that ended.
fn runs(path: &Path) -> (BTreeMap<(String, String, String), usize>, usize) {
    let mut started = BTreeMap::new();
    let mut ended = 0;
    for l in lines(path) {
        let f: Vec<&str> = l.split(' ').collect();
        match f.as_slice() {
            ["start", job, slot, attempt] => {
                *started
                    .entry((job.to_string(), slot.to_string(), attempt.to_string()))
                    .or_default() += 1;
            }
            ["end", ..] => ended += 1,
            _ => panic!("unexpected line {l:?}"),
        }
    }
    (started, ended)
}

/// Panics when two runs of one job overlap: a start while the job's previous run has not
/// written its end.
fn assert_no_overlap(path: &Path) {
    let mut open = std::collections::BTreeSet::new();
    for l in lines(path) {
        let f: Vec<&str> = l.split(' ').collect();
        match f.as_slice() {
            ["start", job, ..] => assert!(open.insert(job.to_string()), "{job} overlaps: {l}"),
            ["end", job, ..] => {
                open.remove(*job);
            }
            _ => {}
        }
    }
}

fn ended(path: &Path) -> usize {
    runs(path).1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_through_pgbouncer_in_transaction_mode_run_every_slot_once() {
    let pg = ThrowawayPostgres::start();
    let mut bouncer = PgBouncer::start(pg.port, 2);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let record = |name: &str, schedule: &str| {
        format!(
            "[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\n\
             command = \"echo start $SQLCRON_JOB $SQLCRON_SLOT $SQLCRON_ATTEMPT >> {0}; \
             sleep 0.3; echo end $SQLCRON_JOB $SQLCRON_SLOT >> {0}\"\n",
            out.display()
        )
    };
    let jobs = format!(
        "{}{}{}",
        record("tick-a", "@every 1s"),
        record("tick-b", "@every 1s"),
        // Runs only when asked: a `sqlcron run` must reach the nodes through LISTEN.
        record("manual", "@at 2099-01-01T00:00:00Z"),
    );
    let config = |name: &str| {
        node_config(&bouncer.url(), name, &jobs).replacen(
            "[node]",
            &format!("direct_url = \"{}\"\n[node]", pg.url()),
            1,
        )
    };
    // Both nodes start at once against an empty database: the migration lock (a session's
    // advisory lock) must hold on the direct connection.
    let nodes: Vec<DaemonProcess> = ["a", "b"]
        .iter()
        .map(|n| DaemonProcess::start(dir.path(), n, &config(n)))
        .collect();
    eventually(Duration::from_secs(40), "ten runs", || async {
        (ended(&out) >= 10).then_some(())
    })
    .await;

    // A manual run starts at once: the NOTIFY reaches the nodes' LISTEN on direct_url (the
    // idle look while wake-ups work is 30 s).
    let cli_config = dir.path().join("cli.toml");
    std::fs::write(&cli_config, config("cli")).unwrap();
    let asked = Instant::now();
    let out_run = sqlcron(&["--config", cli_config.to_str().unwrap(), "run", "manual"]);
    assert!(out_run.status.success(), "{}", stderr(&out_run));
    let waited = eventually(Duration::from_secs(20), "the manual run", || async {
        lines(&out)
            .iter()
            .any(|l| l.starts_with("start manual"))
            .then(|| asked.elapsed())
    })
    .await;
    assert!(
        waited < Duration::from_secs(10),
        "the manual run waited {waited:?}: no wake-up reached the nodes"
    );

    // PgBouncer is killed while runs go on, and started again two seconds later.
    let before = ended(&out);
    bouncer.kill();
    tokio::time::sleep(Duration::from_secs(2)).await;
    bouncer.up();
    let back = Instant::now();
    eventually(
        Duration::from_secs(40),
        "ten runs after the restart",
        || async { (ended(&out) >= before + 10).then_some(()) },
    )
    .await;
    println!(
        "runs resumed {:?} after PgBouncer came back",
        back.elapsed()
    );

    let logs: Vec<String> = nodes.iter().map(|n| n.log_text()).collect();
    for n in nodes {
        let log = n.log_text();
        assert!(n.stop().success(), "{log}");
    }
    let all = logs.join("\n---\n");
    assert!(all.contains("wake-ups on"), "{all}");
    assert!(!all.contains("wake-ups failed"), "{all}");
    assert!(
        !all.contains("prepared statement"),
        "no statement outlived its transaction:\n{all}"
    );

    // Every (job, slot, attempt) started once; every run that ended is in the history once.
    assert_no_overlap(&out);
    let (started, ended_count) = runs(&out);
    for ((job, slot, attempt), n) in &started {
        assert_eq!(
            *n, 1,
            "{job} slot {slot} attempt {attempt} started {n} times"
        );
    }
    let store = Store::connect(&pg.url(), 2).unwrap();
    let history = store.history(None, 10_000).await.unwrap();
    let mut recorded: BTreeMap<(String, i64), usize> = BTreeMap::new();
    for r in history.iter().filter(|r| r.outcome == "ok") {
        *recorded.entry((r.job.clone(), r.slot)).or_default() += 1;
    }
    for (key, n) in &recorded {
        assert_eq!(*n, 1, "{key:?} recorded ok {n} times");
    }
    assert_eq!(
        recorded.len(),
        ended_count,
        "every run that ended is recorded ok once"
    );
    store.close().await;
}
