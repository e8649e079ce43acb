//! Issue 52 (7): a rolling upgrade from the previous release (packaging/previous-release, built
//! once by scripts/previous-release.sh) to this checkout, one node at a time the README's way
//! (`drain --wait`, restart on the new binary, `undrain`), while a per-second job, two jobs
//! sharing a pool of one, a chain and a calendar-gated job run, and a lock is taken by both
//! releases' CLIs at once; an old node restarted after the new node's migration comes back.
//! Every slot of the per-second job runs once, the pool's jobs never overlap, the lock is never
//! held twice.
//!
//! Runs when `SQLCRON_PREVIOUS_BIN` names the previous release's binary (`SQLCRON_LONG=1
//! scripts/test.sh` sets it); skipped otherwise, and a failure when `SQLCRON_LONG=1` is set
//! without it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sqlcron::store::{Dialect, Store};

use crate::util::{DaemonProcess, TestDb, alive, eventually, node_config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_on_postgres_loses_and_doubles_nothing() {
    rolling_upgrade(Dialect::Postgres).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_on_mariadb_loses_and_doubles_nothing() {
    rolling_upgrade(Dialect::Mysql).await
}

fn previous_release() -> Option<PathBuf> {
    match std::env::var_os("SQLCRON_PREVIOUS_BIN") {
        Some(p) => Some(PathBuf::from(p)),
        None => {
            assert!(
                std::env::var_os("SQLCRON_LONG").is_none_or(|v| v != "1"),
                "SQLCRON_LONG=1 but SQLCRON_PREVIOUS_BIN is not set (scripts/previous-release.sh builds it)"
            );
            None
        }
    }
}

/// The jobs every node's file holds (the same file on every node, as in production). `dir`
/// holds the pool's and the lock's markers.
fn jobs(dir: &Path) -> String {
    let held = |name: &str| {
        // A marker directory made atomically for the run's length: a second holder at the same
        // time finds it and says so.
        let marker = dir.join(name);
        let overlaps = dir.join("overlaps");
        format!(
            "mkdir {0} 2>/dev/null || echo {name} >> {1}; sleep 0.4; rmdir {0} 2>/dev/null",
            marker.display(),
            overlaps.display()
        )
    };
    format!(
        "[pools]\none = 1\n\
         [[calendar]]\nname = \"far\"\nentries = [\"2031-01-01 Far away\"]\n\
         [[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\ncommand = \"echo tick\"\n\
         [[job]]\nname = \"p1\"\nschedule = \"* * * * * *\"\npool = \"one\"\ncommand = \"{}\"\n\
         [[job]]\nname = \"p2\"\nschedule = \"* * * * * *\"\npool = \"one\"\ncommand = \"{}\"\n\
         [[job]]\nname = \"up\"\nschedule = \"*/3 * * * * *\"\ncommand = \"true\"\n\
         [[job]]\nname = \"down\"\nafter = [\"up\"]\ncommand = \"true\"\n\
         [[job]]\nname = \"gated\"\nschedule = \"*/2 * * * * *\"\ncommand = \"true\"\nskip_on = [\"far\"]\n",
        held("pool-one"),
        held("pool-one"),
    )
}

async fn ok_runs(store: &Store, job: &str) -> usize {
    store
        .history(Some(job), 100_000)
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.outcome == "ok")
        .count()
}

/// How many runs that `up` started of `down` ended ok (each is a row of its own, `down#after-N`).
async fn chained_runs(store: &Store) -> usize {
    store
        .scalar_i64(
            "SELECT COUNT(*) FROM cron_runs WHERE job_name LIKE 'down#after%' AND outcome = 'ok'",
        )
        .await
        .ok()
        .flatten()
        .unwrap_or(0) as usize
}

/// Runs `bin` (a release's CLI) on node `name`'s configuration; panics unless it succeeds.
fn cli(bin: &Path, dir: &Path, name: &str, args: &[&str]) -> String {
    let out = Command::new(bin)
        .arg("--config")
        .arg(dir.join(format!("{name}.toml")))
        .args(args)
        .env_remove("SQLCRON_DATABASE_URL")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} {args:?} on {name}: {}{}",
        bin.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until node `name` is live and runs `version` (a prefix of its recorded version).
async fn live_on(store: &Store, name: &str, version: impl Fn(&str) -> bool) {
    eventually(Duration::from_secs(60), &format!("{name} live"), || async {
        let now = store.now().await.ok()?;
        store
            .nodes()
            .await
            .ok()?
            .iter()
            .any(|n| n.name == name && n.alive(now) && version(n.version.as_deref().unwrap_or("")))
            .then_some(())
    })
    .await;
}

async fn rolling_upgrade(dialect: Dialect) {
    let Some(old) = previous_release() else {
        eprintln!("SKIPPED rolling upgrade: SQLCRON_PREVIOUS_BIN is not set");
        return;
    };
    let new = crate::util::sqlcron_bin();
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let file = jobs(dir.path());
    let config = |name: &str| node_config(&db.url, name, &file);
    let is_new = |v: &str| v == sqlcron::model::VERSION;
    let is_old = |v: &str| v != sqlcron::model::VERSION;
    let mut nodes: Vec<DaemonProcess> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| DaemonProcess::start_binary(&old, dir.path(), n, &config(n)))
        .collect();
    for n in ["n1", "n2", "n3"] {
        live_on(&store, n, is_old).await;
    }
    eventually(
        Duration::from_secs(60),
        "runs on the old release",
        || async {
            (ok_runs(&store, "tick").await >= 5 && chained_runs(&store).await >= 1).then_some(())
        },
    )
    .await;

    for (i, name) in ["n1", "n2", "n3"].iter().enumerate() {
        // The README's way: drain, wait for its runs to end, restart on the new binary, undrain.
        cli(&old, dir.path(), name, &["drain", "--wait"]);
        let exit = nodes.remove(i).stop();
        assert!(exit.success(), "{name} did not stop cleanly: {exit:?}");
        nodes.insert(
            i,
            DaemonProcess::start_binary(&new, dir.path(), name, &config(name)),
        );
        cli(&new, dir.path(), name, &["undrain"]);
        live_on(&store, name, is_new).await;
        if i == 0 {
            // The new node migrated: an old node restarted now must come back on the newer
            // schema (releases before 868a108 retried forever here on SQLite; on PostgreSQL
            // and MariaDB 868a108 already used a newer schema as it was).
            let (applied, knows) = store.schema_version().await.unwrap();
            assert_eq!(applied, Some(knows), "the new node did not migrate");
            assert!(nodes.remove(2).stop().success());
            nodes.insert(
                2,
                DaemonProcess::start_binary(&old, dir.path(), "n3", &config("n3")),
            );
            live_on(&store, "n3", is_old).await;
            let ran = ok_runs(&store, "tick").await;
            eventually(
                Duration::from_secs(30),
                "runs with mixed releases",
                || async { (ok_runs(&store, "tick").await >= ran + 5).then_some(()) },
            )
            .await;
            // A lock taken at once by both releases' CLIs is held by one at a time.
            let marker = dir.path().join("lock-marker");
            let overlaps = dir.path().join("overlaps");
            let body = format!(
                "mkdir {0} 2>/dev/null || echo lock >> {1}; sleep 0.5; rmdir {0}",
                marker.display(),
                overlaps.display()
            );
            let holders: Vec<_> = [&old, &new, &old, &new]
                .iter()
                .map(|bin| {
                    Command::new(bin)
                        .arg("--config")
                        .arg(dir.path().join("n1.toml"))
                        .args([
                            "lock",
                            "upgrade-lock",
                            "--wait",
                            "60s",
                            "--",
                            "sh",
                            "-c",
                            &body,
                        ])
                        .env_remove("SQLCRON_DATABASE_URL")
                        .spawn()
                        .unwrap()
                })
                .collect();
            for mut h in holders {
                let status =
                    crate::util::wait_exit(&mut h, Duration::from_secs(90), "a lock holder").await;
                assert!(status.success(), "a lock holder failed: {status:?}");
            }
        }
    }
    let ran = ok_runs(&store, "tick").await;
    eventually(
        Duration::from_secs(30),
        "runs on the new release",
        || async {
            (ok_runs(&store, "tick").await >= ran + 5
                && ok_runs(&store, "gated").await >= 3
                && ok_runs(&store, "p1").await >= 2
                && ok_runs(&store, "p2").await >= 2)
                .then_some(())
        },
    )
    .await;
    for (i, n) in nodes.iter().enumerate() {
        assert!(alive(n.pid()), "node {} died:\n{}", i + 1, n.log_text());
    }
    let history = store.history(Some("tick"), 100_000).await.unwrap();
    crate::environment_faults::every_slot_once(&history);
    let overlaps = std::fs::read_to_string(dir.path().join("overlaps")).unwrap_or_default();
    assert!(overlaps.is_empty(), "held twice at once: {overlaps}");
    // The chain followed its upstream on both releases: each upstream run but the last few
    // started its downstream.
    let (up, down) = (ok_runs(&store, "up").await, chained_runs(&store).await);
    assert!(
        down + 2 >= up && down >= 3,
        "up ran {up} times, down {down}"
    );
    for n in nodes {
        let log = n.log_text();
        assert!(n.stop().success(), "{log}");
        assert!(
            !log.contains("missing in the resolved migrations") && !log.contains("panicked"),
            "{log}"
        );
    }
    store.close().await;
}
