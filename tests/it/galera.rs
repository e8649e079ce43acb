//! MariaDB Galera: a three-node cluster of the test's own on loopback (Debian's `galera-4`,
//! mariadb-install-db in temporary directories, rsync state transfers), three sqlcron nodes each
//! on a different Galera node. Every Galera node takes writes; conflicting claims on two nodes
//! end in certification failures (deadlock errors), which must never count as runs. One Galera
//! node is killed while jobs run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sqlcron::store::Store;

use crate::run_record::{
    assert_each_run_started_once, latest_starter, recording_job, runs, started_by,
};
use crate::util::{DaemonProcess, eventually, free_port, node_config};

fn tool(name: &str) -> PathBuf {
    ["/usr/bin", "/usr/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!("{name} is required: apt-get install mariadb-server galera-4 rsync")
        })
}

const PROVIDER: &str = "/usr/lib/galera/libgalera_smm.so";

struct GaleraNode {
    port: u16,
    group: u16,
    ist: u16,
    sst: u16,
    server: Option<Child>,
}

/// Three MariaDB servers forming one Galera cluster, listening on 127.0.0.1 only.
pub struct ThrowawayGalera {
    dir: tempfile::TempDir,
    nodes: Vec<GaleraNode>,
}

impl ThrowawayGalera {
    pub fn start() -> ThrowawayGalera {
        assert!(
            Path::new(PROVIDER).exists(),
            "{PROVIDER} is required: apt-get install galera-4"
        );
        let dir = tempfile::Builder::new()
            .prefix("sqlcron-galera")
            .tempdir()
            .unwrap();
        let nodes = (0..3)
            .map(|_| GaleraNode {
                port: free_port(),
                group: free_port(),
                ist: free_port(),
                sst: free_port(),
                server: None,
            })
            .collect();
        let mut g = ThrowawayGalera { dir, nodes };
        // The servers run as `mysql` (as packaged): the rsync daemon of a state transfer
        // started by root would drop to `nobody`, who cannot write the data directory.
        for i in 0..3 {
            let home = g.home(i);
            // A temporary directory of each server's own: servers (and their bootstraps) that
            // share /tmp collide on temporary table files when tests run at once.
            std::fs::create_dir_all(home.join("tmp")).unwrap();
            crate::util::chown_if_root(g.dir.path(), "mysql");
            let out = Command::new(tool("mariadb-install-db"))
                .arg("--no-defaults")
                .arg(format!("--datadir={}", home.join("data").display()))
                .arg(format!("--tmpdir={}", home.join("tmp").display()))
                .args([
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                    "--user=mysql",
                ])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "mariadb-install-db: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        crate::util::chown_if_root(g.dir.path(), "mysql");
        g.up(0, true);
        g.wait_synced(0, 1);
        g.up(1, false);
        g.up(2, false);
        for i in 0..3 {
            g.wait_synced(i, 3);
        }
        g
    }

    fn home(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("n{i}"))
    }

    fn up(&mut self, i: usize, bootstrap: bool) {
        let home = self.home(i);
        let n = &self.nodes[i];
        let members: Vec<String> = self
            .nodes
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.group))
            .collect();
        let mut cmd = Command::new(tool("mariadbd"));
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", home.join("data").display()))
            .arg(format!("--socket={}", home.join("sock").display()))
            .arg(format!("--pid-file={}", home.join("pid").display()))
            .arg(format!("--log-error={}", home.join("err.log").display()))
            .arg(format!("--tmpdir={}", home.join("tmp").display()))
            .arg(format!("--port={}", n.port))
            .args([
                "--bind-address=127.0.0.1",
                "--user=mysql",
                "--binlog-format=ROW",
                "--innodb-autoinc-lock-mode=2",
                "--innodb-flush-log-at-trx-commit=2",
                "--wsrep-on=ON",
                "--wsrep-cluster-name=sqlcron-test",
                "--wsrep-sst-method=rsync",
            ])
            .arg(format!("--wsrep-provider={PROVIDER}"))
            .arg(format!(
                "--wsrep-cluster-address=gcomm://{}",
                members.join(",")
            ))
            .arg(format!("--wsrep-node-address=127.0.0.1:{}", n.group))
            .arg(format!("--wsrep-node-name=g{i}"))
            .arg(format!(
                "--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{};\
                 ist.recv_addr=127.0.0.1:{};gcache.size=64M",
                n.group, n.ist
            ))
            .arg(format!("--wsrep-sst-receive-address=127.0.0.1:{}", n.sst));
        if bootstrap {
            cmd.arg("--wsrep-new-cluster");
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.nodes[i].server = Some(child);
    }

    /// Runs SQL on node `i` with the `mariadb` client; its output, or `None` on failure.
    fn sql(&self, i: usize, sql: &str) -> Option<String> {
        let out = Command::new(tool("mariadb"))
            .args(["-h", "127.0.0.1", "-u", "root", "-N", "-B"])
            .arg(format!("-P{}", self.nodes[i].port))
            .args(["-e", sql])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn wait_synced(&self, i: usize, size: usize) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let state = self.sql(
                i,
                "SELECT GROUP_CONCAT(VARIABLE_VALUE ORDER BY VARIABLE_NAME) FROM \
                 information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN \
                 ('WSREP_CLUSTER_SIZE', 'WSREP_LOCAL_STATE_COMMENT')",
            );
            if state.as_deref() == Some(&format!("{size},Synced")) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "Galera node {i} not synced in a cluster of {size} (state {state:?}):\n{}",
                std::fs::read_to_string(self.home(i).join("err.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Kills node `i` (SIGKILL), as a crash would.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn url(&self, i: usize) -> String {
        format!("mysql://root@127.0.0.1:{}/sqlcron", self.nodes[i].port)
    }
}

impl Drop for ThrowawayGalera {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_on_three_galera_nodes_run_every_slot_once_through_a_node_crash() {
    let mut galera = ThrowawayGalera::start();
    galera
        .sql(0, "CREATE DATABASE sqlcron")
        .expect("creating the database");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let jobs: String = (0..4)
        .map(|j| recording_job(&format!("tick-{j}"), "@every 1s", &out))
        .collect();
    // All three start at once, each on its own Galera node: their migrations race across the
    // cluster.
    let nodes: Vec<DaemonProcess> = ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(i, n)| DaemonProcess::start(dir.path(), n, &node_config(&galera.url(i), n, &jobs)))
        .collect();
    // Three Galera nodes joining by state transfer and three daemons racing their migrations
    // take well under a minute on an idle machine; a cold build beside the suite can triple it.
    let deadline = Instant::now() + Duration::from_secs(240);
    while runs(&out).1 < 20 {
        if Instant::now() > deadline {
            let tails: Vec<String> = nodes
                .iter()
                .map(|n| {
                    let log = n.log_text();
                    let lines: Vec<&str> = log.lines().collect();
                    let from = lines.len().saturating_sub(25);
                    format!("--- {} ---\n{}", n.name, lines[from..].join("\n"))
                })
                .collect();
            panic!(
                "twenty runs not reached in 240 s ({} ended):\n{}",
                runs(&out).1,
                tails.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The Galera node of the sqlcron node that made the latest start dies while that node runs
    // jobs: it loses its database, its runs their lease.
    let names = ["a", "b", "c"];
    let busy = latest_starter(&out);
    let victim = names.iter().position(|n| *n == busy).unwrap();
    let others = |out: &Path| -> usize {
        names
            .iter()
            .filter(|n| **n != busy)
            .map(|n| started_by(out, n))
            .sum()
    };
    let others_before = others(&out);
    let ended_before = runs(&out).1;
    let fault = Instant::now();
    galera.kill(victim);
    // The survivors agree on the cluster's new membership first (Galera's suspect and
    // inactive timeouts, 5 s and 15 s): writes may wait that long on a loaded machine.
    let gap = eventually(
        Duration::from_secs(60),
        "a start on another node after the crash",
        || async { (others(&out) > others_before).then(|| fault.elapsed()) },
    )
    .await;
    eventually(
        Duration::from_secs(120),
        "twenty runs after the crash",
        || async { (runs(&out).1 >= ended_before + 20).then_some(()) },
    )
    .await;
    let logs: Vec<String> = nodes.iter().map(|n| n.log_text()).collect();
    for n in nodes {
        // The busy node has had no database since the crash: it is killed, not waited for.
        if n.name != busy {
            let log = n.log_text();
            assert!(n.stop().success(), "{log}");
        }
    }
    let all = logs.join("\n---\n");
    let conflicts = all.matches("deadlock").count();
    println!(
        "Galera: gap from the crash of {busy}'s Galera node to the first start elsewhere {gap:?}; \
         deadlock (certification) errors logged: {conflicts}; runs by a/b/c: {}/{}/{}",
        started_by(&out, "a"),
        started_by(&out, "b"),
        started_by(&out, "c")
    );
    assert!(
        all.contains("Galera node Synced in a cluster of 3"),
        "each node reports the cluster at start:\n{all}"
    );

    // Every (job, slot, attempt) started once; a run cut short by the crash may run again as a
    // later attempt (the lease rules), never as the same one.
    assert_each_run_started_once(&out);
    // The surviving nodes' history holds each slot's success at most once.
    // A survivor may still be settling the cluster's new membership when the test reads it: a
    // failed read is retried (and shown), never taken for a wrong history.
    let store = Store::connect(&crate::util::db_url(&galera.url((victim + 1) % 3)), 2).unwrap();
    let history = eventually(
        Duration::from_secs(60),
        "the survivors' history",
        || async {
            match store.history(None, 10_000).await {
                Ok(h) => Some(h),
                Err(e) => {
                    eprintln!("reading the history from a surviving Galera node: {e}");
                    None
                }
            }
        },
    )
    .await;
    let mut recorded: BTreeMap<(String, i64), usize> = BTreeMap::new();
    for r in history.iter().filter(|r| r.outcome == "ok") {
        *recorded.entry((r.job.clone(), r.slot)).or_default() += 1;
    }
    for (key, n) in &recorded {
        assert_eq!(*n, 1, "{key:?} recorded ok {n} times");
    }
    assert!(recorded.len() >= 40, "{} runs recorded", recorded.len());
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_racing_on_three_galera_nodes_take_each_row_once() {
    let galera = ThrowawayGalera::start();
    galera
        .sql(0, "CREATE DATABASE sqlcron")
        .expect("creating the database");
    let admin = Store::connect(&crate::util::db_url(&galera.url(0)), 1).unwrap();
    admin.migrate().await.unwrap();
    let rows = 90;
    let values: Vec<String> = (0..rows)
        .map(|i| format!("('j{i}', '* * * * *', 'true')"))
        .collect();
    admin
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command) VALUES {}",
            values.join(", ")
        ))
        .await
        .unwrap();
    let now = admin.now().await.unwrap();
    admin
        .execute_raw(&format!(
            "UPDATE cron_table SET next_exec = {0}, slot = {0}",
            now - 1000
        ))
        .await
        .unwrap();
    admin.close().await;
    // Two claimers on each Galera node, each taking up to 7 rows per round: claims of the same
    // rows on different nodes conflict at commit (certification), and the loser's claim fails.
    let mut handles = Vec::new();
    for c in 0..6 {
        let store = Store::connect(&crate::util::db_url(&galera.url(c % 3)), 2).unwrap();
        handles.push(tokio::spawn(async move {
            let (mut got, mut conflicts) = (Vec::new(), 0);
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut empty_rounds = 0;
            while empty_rounds < 5 && Instant::now() < deadline {
                match store
                    .claim(&format!("node{c}"), 7, Duration::from_secs(60))
                    .await
                {
                    Ok((_, rows)) if rows.is_empty() => empty_rounds += 1,
                    Ok((_, rows)) => {
                        got.extend(rows.into_iter().map(|r| (r.name, format!("node{c}"))))
                    }
                    // A certification conflict, or (on a loaded machine) a lock wait or statement
                    // past its limit: the daemon retries both at its next poll, and so does this.
                    Err(e) if matches!(e.kind(), "deadlock" | "timeout") => conflicts += 1,
                    Err(e) => panic!("claim failed otherwise than by a conflict: {e}"),
                }
            }
            store.close().await;
            (got, conflicts)
        }));
    }
    let (mut all, mut conflicts) = (Vec::new(), 0);
    for h in handles {
        let (got, c) = h.await.unwrap();
        all.extend(got);
        conflicts += c;
    }
    println!("Galera claim race: {conflicts} certification conflicts, retried");
    let claimed: BTreeMap<String, String> = all.iter().cloned().collect();
    assert_eq!(all.len(), claimed.len(), "a row was claimed twice");
    assert_eq!(claimed.len(), rows, "every row is claimed");
    // Each row's claim is the one the cluster kept: on another node than the claimer's, its
    // holder is the claimer that was told it got the row. Galera applies a commit on the other
    // nodes after certifying it, so this read waits for every commit before it (as sqlcron's own
    // sessions do).
    let held: BTreeMap<String, String> = galera
        .sql(
            1,
            "SET SESSION wsrep_sync_wait = 1; SELECT name, exec_by FROM sqlcron.cron_table",
        )
        .expect("reading the claims")
        .lines()
        .map(|l| {
            let (name, by) = l.split_once('\t').unwrap();
            (name.to_string(), by.to_string())
        })
        .collect();
    assert_eq!(held, claimed);
}
