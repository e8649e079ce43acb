//! PostgreSQL through PgBouncer in transaction pooling mode (Debian's `pgbouncer`, started by
//! the test in front of a throwaway server), with `[database] direct_url` for migrations and
//! LISTEN. PgBouncer keeps two server connections for every client, so consecutive transactions
//! of one node run on different server connections: a prepared statement or a session setting
//! that outlived its transaction would be found missing, or another client's, at once.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use sqlcron::store::Store;

use crate::outage::{ThrowawayPostgres, lines};
use crate::run_record::{
    assert_each_run_started_once, ended, latest_starter, recording_job, started_by, starts,
};
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
        crate::util::chown_if_root(dir.path(), "postgres");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_through_pgbouncer_in_transaction_mode_run_every_slot_once() {
    let pg = ThrowawayPostgres::start();
    let mut bouncer = PgBouncer::start(pg.port, 2);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let record = |name: &str, schedule: &str| recording_job(name, schedule, &out);
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

    // With the tick jobs paused the nodes are idle (their next look 30 s away while wake-ups
    // work); a manual run must start at once: the NOTIFY reaches the nodes' LISTEN on
    // direct_url. Every command here goes through the pooler too.
    let cli_config = dir.path().join("cli.toml");
    std::fs::write(&cli_config, config("cli")).unwrap();
    let cli = |args: &[&str]| {
        let out = sqlcron(&[&["--config", cli_config.to_str().unwrap()][..], args].concat());
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    };
    cli(&["pause", "tick-a"]);
    cli(&["pause", "tick-b"]);
    eventually(Duration::from_secs(20), "the nodes idle", || async {
        let n = lines(&out).len();
        tokio::time::sleep(Duration::from_secs(2)).await;
        (lines(&out).len() == n && ended(&out) * 2 == lines(&out).len()).then_some(())
    })
    .await;
    let asked = Instant::now();
    cli(&["run", "manual"]);
    let waited = eventually(Duration::from_secs(40), "the manual run", || async {
        lines(&out)
            .iter()
            .any(|l| l.starts_with("start manual"))
            .then(|| asked.elapsed())
    })
    .await;
    assert!(
        waited < Duration::from_secs(5),
        "the manual run waited {waited:?}: no wake-up reached the idle nodes"
    );
    cli(&["resume", "tick-a"]);
    cli(&["resume", "tick-b"]);

    // PgBouncer is killed while runs go on, and started again two seconds later.
    bouncer.kill();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let starts_before = starts(&out);
    bouncer.up();
    let back = Instant::now();
    let resumed = eventually(
        Duration::from_secs(40),
        "a start after the restart",
        || async { (starts(&out) > starts_before).then(|| back.elapsed()) },
    )
    .await;
    println!("runs resumed {resumed:?} after PgBouncer came back");

    // The node that made the latest start is killed (SIGKILL) mid-run; the other takes over
    // through the pooler.
    let before = ended(&out);
    eventually(Duration::from_secs(20), "a run in progress", || async {
        (starts(&out) > ended(&out)).then_some(())
    })
    .await;
    let busy = latest_starter(&out);
    let (victim, mut nodes): (Vec<_>, Vec<_>) = nodes.into_iter().partition(|n| n.name == busy);
    victim[0].signal(libc::SIGKILL);
    let killed = Instant::now();
    let other = if busy == "a" { "b" } else { "a" };
    let other_before = started_by(&out, other);
    let takeover = eventually(
        Duration::from_secs(30),
        "a start on the other node",
        || async { (started_by(&out, other) > other_before).then(|| killed.elapsed()) },
    )
    .await;
    println!("the other node started a run {takeover:?} after {busy} was killed");
    eventually(
        Duration::from_secs(40),
        "ten runs after the kill",
        || async { (ended(&out) >= before + 10).then_some(()) },
    )
    .await;
    drop(victim);
    let nodes = std::mem::take(&mut nodes);

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
    let ended_count = assert_each_run_started_once(&out);
    let store = Store::connect(&crate::util::db_url(&pg.url()), 2).unwrap();
    let history = store.history(None, 10_000).await.unwrap();
    let mut recorded: BTreeMap<(String, i64), usize> = BTreeMap::new();
    for r in history.iter().filter(|r| r.outcome == "ok") {
        *recorded.entry((r.job.clone(), r.slot)).or_default() += 1;
    }
    for (key, n) in &recorded {
        assert_eq!(*n, 1, "{key:?} recorded ok {n} times");
    }
    // Every run that ended is in the history: ok, or (the killed node's run that ended but was
    // not released) lost, as the node that took the row over recorded it.
    let accounted: std::collections::BTreeSet<(String, i64)> =
        history.iter().map(|r| (r.job.clone(), r.slot)).collect();
    for l in lines(&out) {
        if let ["end", job, slot, _] = l.split(' ').collect::<Vec<_>>().as_slice() {
            let slot = chrono::DateTime::parse_from_rfc3339(slot)
                .unwrap()
                .timestamp_millis();
            assert!(
                accounted.contains(&(job.to_string(), slot)),
                "{job} {slot} ended but is not in the history"
            );
        }
    }
    assert!(
        recorded.len() + 2 >= ended_count,
        "{} ok of {ended_count}",
        recorded.len()
    );
    store.close().await;
}
