//! Issue 52 (6): three sqlcron nodes on a PostgreSQL cluster managed by Patroni (Debian's
//! packages: patroni, etcd), on the cluster's multi-host URL, through the faults Patroni is run
//! for: a switchover, the leader's postmaster killed, and etcd stopped for 30 s. With synchronous
//! replication no slot runs twice and none is lost: every second of a per-second job is run once
//! or recorded as skipped. The gap after each fault is printed.
//!
//! The cluster comes from tests/patroni/up.sh (and goes with down.sh). Runs with
//! `SQLCRON_LONG=1` (scripts/test.sh installs the packages then); skipped otherwise.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use sqlcron::store::Store;

use crate::util::{DaemonProcess, alive, eventually, node_config};

/// A cluster made by up.sh, torn down by down.sh when dropped.
struct Cluster {
    vars: BTreeMap<String, String>,
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/patroni")
        .join(name)
}

impl Cluster {
    fn up(sync: bool) -> Cluster {
        let out = Command::new(script("up.sh"))
            .env("SYNC_MODE", if sync { "true" } else { "false" })
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tests/patroni/up.sh failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let vars = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches('\'').to_string()))
            .collect();
        Cluster { vars }
    }

    fn var(&self, key: &str) -> &str {
        self.vars
            .get(key)
            .unwrap_or_else(|| panic!("up.sh printed no {key}: {:?}", self.vars))
    }

    /// The members' names and roles, from `patronictl list`.
    fn members(&self) -> Vec<(String, String)> {
        let out = Command::new("patronictl")
            .args(["-c", self.var("PATRONI1_CONF"), "list", "-f", "json"])
            .output()
            .unwrap();
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        list.as_array()
            .map(|a| {
                a.iter()
                    .map(|m| {
                        (
                            m["Member"].as_str().unwrap_or("").to_string(),
                            m["Role"].as_str().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn leader(&self) -> Option<String> {
        self.members()
            .into_iter()
            .find(|(_, role)| role == "Leader")
            .map(|(name, _)| name)
    }

    fn other(&self, member: &str) -> String {
        if member == "pg1" { "pg2" } else { "pg1" }.to_string()
    }

    /// The postmaster's pid of `member` (its data directory's postmaster.pid).
    fn postmaster(&self, member: &str) -> i32 {
        let pid_file = PathBuf::from(self.var("LAB_DIR"))
            .join(member)
            .join("postmaster.pid");
        std::fs::read_to_string(&pid_file)
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(dir) = self.vars.get("LAB_DIR") {
            let _ = Command::new(script("down.sh")).arg(dir).output();
        }
    }
}

const TICK: &str =
    "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\ncommand = \"echo tick\"\n";

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Waits for `n` runs that started after `since` (ms, this host's clock, which is the
/// cluster's too).
async fn runs_after(store: &Store, since: i64, n: usize, what: &str) {
    eventually(Duration::from_secs(120), what, || async {
        let rows = store.history(Some("tick"), 100_000).await.ok()?;
        let after = rows
            .iter()
            .filter(|r| r.outcome == "ok" && r.started.is_some_and(|s| s > since))
            .count();
        (after >= n).then_some(())
    })
    .await
}

/// The longest time without a run start from `since` on: what a fault there cost.
async fn longest_gap(store: &Store, since: i64) -> Duration {
    let rows = store.history(Some("tick"), 100_000).await.unwrap();
    let mut starts: Vec<i64> = std::iter::once(since)
        .chain(rows.iter().filter_map(|r| r.started).filter(|s| *s > since))
        .collect();
    starts.sort_unstable();
    let gap = starts.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    Duration::from_millis(gap as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patroni_cluster_fails_over_without_a_run_lost_or_doubled() {
    if std::env::var_os("SQLCRON_LONG").is_none_or(|v| v != "1") {
        eprintln!("SKIPPED the Patroni test: SQLCRON_LONG=1 runs it");
        return;
    }
    let cluster = Cluster::up(true);
    let url = cluster.var("PG_URL").to_string();
    let dir = tempfile::tempdir().unwrap();
    let nodes: Vec<DaemonProcess> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| DaemonProcess::start(dir.path(), n, &node_config(&url, n, TICK)))
        .collect();
    let store = Store::connect(&crate::util::db_url(&url), 2).unwrap();
    runs_after(&store, 0, 5, "five runs before any fault").await;
    let mut gaps = Vec::new();

    // A switchover, as for maintenance.
    let leader = cluster.leader().expect("a leader");
    let t = wall_ms();
    let out = Command::new("patronictl")
        .args(["-c", cluster.var("PATRONI1_CONF"), "switchover"])
        .args([
            "--leader",
            &leader,
            "--candidate",
            &cluster.other(&leader),
            "--force",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    runs_after(&store, t, 5, "runs after the switchover").await;
    gaps.push(("switchover", longest_gap(&store, t).await));

    // The leader's postmaster killed: the replica is promoted (primary_start_timeout 0).
    let started = Instant::now();
    let leader = loop {
        // The switchover's old leader rejoins as a replica: wait for two members again.
        let members = cluster.members();
        // Synchronous mode: the replica must be the sync standby again, or the kill would
        // find no member Patroni may promote.
        if members.len() == 2
            && members.iter().any(|(_, r)| r == "Sync Standby")
            && let Some(l) = cluster.leader()
        {
            break l;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "{members:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let t = wall_ms();
    unsafe {
        libc::kill(cluster.postmaster(&leader), libc::SIGKILL);
    }
    runs_after(&store, t, 5, "runs after the leader was killed").await;
    gaps.push(("leader's postmaster killed", longest_gap(&store, t).await));

    // etcd stopped for 30 s: without failsafe_mode the leader demotes itself after its ttl,
    // and takes writes again once etcd is back.
    let etcd = std::fs::read_to_string(PathBuf::from(cluster.var("LAB_DIR")).join("etcd.pid"))
        .unwrap()
        .trim()
        .parse::<i32>()
        .unwrap();
    let t = wall_ms();
    unsafe {
        libc::kill(etcd, libc::SIGTERM);
    }
    // The fault's length, not a wait for an event.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let restarted = Command::new(PathBuf::from(cluster.var("LAB_DIR")).join("etcd-start.sh"))
        .output()
        .unwrap();
    assert!(restarted.status.success());
    runs_after(&store, wall_ms(), 5, "runs after etcd came back").await;
    gaps.push(("etcd stopped for 30 s", longest_gap(&store, t).await));

    let rows = store.history(Some("tick"), 100_000).await.unwrap();
    let runs = crate::environment_faults::every_slot_once(&rows);
    for (fault, gap) in &gaps {
        eprintln!(
            "patroni: {fault}: {:.1} s without a run start",
            gap.as_secs_f64()
        );
    }
    eprintln!("patroni: {runs} slots run, none twice, none unaccounted");
    for n in &nodes {
        assert!(alive(n.pid()), "{} died:\n{}", n.name, n.log_text());
    }
    store.close().await;
    for n in nodes {
        n.stop();
    }
    drop(cluster);
}
