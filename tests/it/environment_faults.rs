//! Issue 52 (10): faults of what sqlcron stands on, each tried for real: the SQLite file's disk
//! fills up, PostgreSQL reaches `max_connections`, a job's user is deleted while the job is
//! scheduled, and the database server's clock steps back 10 s. In each, the daemon keeps running,
//! says why, loses no slot it owes and runs none twice.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sqlcron::store::{Dialect, Store};

use crate::outage::ThrowawayPostgres;
use crate::security::{TestUser, is_root};
use crate::util::{DaemonProcess, TestDb, alive, eventually, node_config};

/// A job that runs every second.
const TICK: &str =
    "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\ncommand = \"echo tick\"\n";

/// `job`'s history, oldest first.
async fn history(store: &Store, job: &str) -> Vec<sqlcron::store::HistoryRow> {
    // Nothing yet before the daemon's first migration.
    let mut rows = store.history(Some(job), 100_000).await.unwrap_or_default();
    rows.sort_by_key(|r| r.id);
    rows
}

/// How many of `job`'s runs ended ok.
async fn ok_runs(store: &Store, job: &str) -> usize {
    history(store, job)
        .await
        .iter()
        .filter(|r| r.outcome == "ok")
        .count()
}

/// Checks a per-second job's history: no slot run twice (a run recorded `lost` counts as its
/// slot's run, retries `abandoned` do not), and every second from the first slot to the last either run or recorded as
/// skipped (nothing owed went unrecorded). Returns the runs' count.
pub(crate) fn every_slot_once(rows: &[sqlcron::store::HistoryRow]) -> usize {
    let mut covered = std::collections::BTreeMap::new();
    for r in rows {
        // A slot's retries abandoned (the next regular slot came first) ran nothing more: the
        // slot is accounted for by its earlier attempt's record.
        if r.outcome == "abandoned" {
            covered.entry(r.slot).or_insert(0);
            continue;
        }
        if r.outcome == "skipped" {
            let last = r.skipped_last.unwrap_or(r.slot);
            let mut s = r.slot;
            while s <= last {
                covered.entry(s).or_insert(0);
                s += 1000;
            }
            continue;
        }
        if r.outcome == "running" {
            continue;
        }
        *covered.entry(r.slot).or_insert(0) += 1;
    }
    let twice: Vec<_> = covered.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "slots run twice: {twice:?}\n{rows:#?}");
    let (Some(first), Some(last)) = (
        covered.keys().next().copied(),
        covered.keys().last().copied(),
    ) else {
        return 0;
    };
    let missing: Vec<i64> = (0..=(last - first) / 1000)
        .map(|i| first + i * 1000)
        .filter(|s| !covered.contains_key(s))
        .collect();
    assert!(
        missing.is_empty(),
        "slots neither run nor recorded as skipped: {missing:?}\n{rows:#?}"
    );
    covered.values().filter(|n| **n > 0).count()
}

/// A tmpfs of `size` mounted on `dir` for one test, unmounted after it.
struct SmallDisk<'a>(&'a Path);

impl<'a> SmallDisk<'a> {
    fn mount(dir: &'a Path, size: &str) -> SmallDisk<'a> {
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mount a tmpfs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallDisk(dir)
    }

    /// Fills what is left with one file; returns its path.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        // The last partial chunk: byte by byte up to the very end.
        while f.write_all(&[0]).is_ok() {}
        path
    }
}

impl Drop for SmallDisk<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0).output();
    }
}

/// The SQLite file's disk fills up under a running daemon: it keeps running, says why it
/// cannot record (SQLite's "database or disk is full"), keeps every run it recorded, runs
/// nothing it could not record, and goes on by itself when the space comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_sqlite_loses_nothing_recorded_and_recovers() {
    if !is_root() {
        eprintln!(
            "SKIPPED a_full_disk_under_sqlite_loses_nothing_recorded_and_recovers: needs root to mount a tmpfs"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("disk");
    std::fs::create_dir(&mnt).unwrap();
    let disk = SmallDisk::mount(&mnt, "6m");
    let url = format!("sqlite://{}/sqlcron.db", mnt.display());
    // A run whose end cannot be recorded within its lease is recorded lost and not run again
    // (rerun_lost = false): the test counts a second run of a slot as a defect.
    let once = format!("{TICK}rerun_lost = false\n");
    let node = DaemonProcess::start(dir.path(), "n1", &node_config(&url, "n1", &once));
    let store = Store::connect(&crate::util::db_url(&url), 1).unwrap();
    eventually(Duration::from_secs(30), "three runs", || async {
        (ok_runs(&store, "tick").await >= 3).then_some(())
    })
    .await;
    let filler = disk.fill();
    eventually(
        Duration::from_secs(30),
        "the daemon saying the disk is full",
        || async { node.log_text().contains("disk is full").then_some(()) },
    )
    .await;
    let before = history(&store, "tick").await;
    // A few seconds on a full disk: the daemon must stay up.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        alive(node.pid()),
        "the daemon died on a full disk:\n{}",
        node.log_text()
    );
    std::fs::remove_file(&filler).unwrap();
    let after = eventually(
        Duration::from_secs(60),
        "runs after the space came back",
        || async {
            let rows = history(&store, "tick").await;
            let newer = rows
                .iter()
                .filter(|r| r.outcome == "ok" && before.iter().all(|b| b.id != r.id))
                .count();
            (newer >= 3).then_some(rows)
        },
    )
    .await;
    for b in before.iter().filter(|b| b.outcome == "ok") {
        assert!(
            after.iter().any(|a| a.id == b.id && a.slot == b.slot),
            "a run recorded before the disk filled is gone: {b:?}"
        );
    }
    every_slot_once(&after);
    let check: Option<String> = store.scalar("PRAGMA integrity_check").await.unwrap();
    assert_eq!(check.as_deref(), Some("ok"));
    assert!(alive(node.pid()), "{}", node.log_text());
    store.close().await;
    node.stop();
    drop(disk);
}

/// PostgreSQL at `max_connections`: a node that cannot get a connection waits and says why
/// ("too many clients"), the node that has its connections keeps running every slot, and the
/// waiting node joins when a connection frees up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_connect_waits_and_reports_while_the_others_run() {
    let pg = ThrowawayPostgres::start_with(|_| {
        vec![
            "max_connections=12".to_string(),
            "superuser_reserved_connections=0".to_string(),
        ]
    });
    let url = pg.url();
    let dir = tempfile::tempdir().unwrap();
    let n1 = DaemonProcess::start(dir.path(), "n1", &node_config(&url, "n1", TICK));
    let store = Store::connect(&crate::util::db_url(&url), 1).unwrap();
    eventually(Duration::from_secs(30), "three runs on n1", || async {
        (ok_runs(&store, "tick").await >= 3).then_some(())
    })
    .await;
    // Every connection the server has left, held by this test.
    let mut held = Vec::new();
    loop {
        let s = Store::connect(&crate::util::db_url(&url), 1).unwrap();
        match s.now().await {
            Ok(_) => held.push(s),
            Err(e) => {
                // The pool says it timed out; the server says why.
                assert!(e.is_pool_timeout(), "{e}");
                let why = s.connect_error().await.unwrap_or_default();
                assert!(why.contains("too many clients"), "{why}");
                s.close().await;
                break;
            }
        }
        assert!(held.len() < 20, "max_connections was not reached");
    }
    let during = ok_runs(&store, "tick").await;
    let n2 = DaemonProcess::start(dir.path(), "n2", &node_config(&url, "n2", TICK));
    eventually(
        Duration::from_secs(30),
        "n2 saying it cannot connect",
        || async { n2.log_text().contains("too many clients").then_some(()) },
    )
    .await;
    // n1 goes on meanwhile: at least five more runs while the server is full.
    eventually(
        Duration::from_secs(30),
        "n1 running on a full server",
        || async { (ok_runs(&store, "tick").await >= during + 5).then_some(()) },
    )
    .await;
    assert!(alive(n2.pid()), "n2 gave up:\n{}", n2.log_text());
    for s in held {
        s.close().await;
    }
    eventually(
        Duration::from_secs(60),
        "n2 live once connections free up",
        || async {
            let now = store.now().await.ok()?;
            store
                .nodes()
                .await
                .ok()?
                .iter()
                .any(|n| n.name == "n2" && n.alive(now))
                .then_some(())
        },
    )
    .await;
    let seen = ok_runs(&store, "tick").await;
    eventually(
        Duration::from_secs(30),
        "runs with both nodes up",
        || async { (ok_runs(&store, "tick").await >= seen + 3).then_some(()) },
    )
    .await;
    every_slot_once(&history(&store, "tick").await);
    store.close().await;
    n1.stop();
    n2.stop();
}

/// A job's user deleted while the job is scheduled: each run fails with the reason (the account
/// does not exist on this node), recorded; the daemon keeps running the other jobs; once the
/// account is back, the job runs again with nothing to undo. Not parked: one node's accounts are
/// not the cluster's (docs/daemon.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_user_fails_its_runs_with_the_reason_until_it_is_back() {
    if !is_root() {
        eprintln!(
            "SKIPPED a_deleted_user_fails_its_runs_with_the_reason_until_it_is_back: needs root to add a user"
        );
        return;
    }
    let db = TestDb::new(Dialect::Postgres).await;
    let store = db.store().await;
    let user = TestUser::create();
    let dir = tempfile::tempdir().unwrap();
    let me = sqlcron::exec::account::current().unwrap().name;
    let config = format!(
        "[database]\nurl = \"{1}\"\n[node]\nname = \"n1\"\n[daemon]\ndefault_user = \"{me}\"\n\
         allowed_users = [\"{me}\", \"{0}\"]\npoll_interval = \"1s\"\nlease = \"3s\"\n\
         [[job]]\nname = \"as-user\"\nschedule = \"* * * * * *\"\nuser = \"{0}\"\ncommand = \"id -un\"\n{TICK}",
        user.name, db.url
    );
    let node = DaemonProcess::start(dir.path(), "n1", &config);
    eventually(Duration::from_secs(30), "a run as the user", || async {
        (ok_runs(&store, "as-user").await >= 1).then_some(())
    })
    .await;
    let out = Command::new("userdel").arg(&user.name).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reason = format!("user \"{}\" does not exist on node n1", user.name);
    let failed_for_it = |rows: &[sqlcron::store::HistoryRow]| {
        rows.iter()
            .filter(|r| {
                r.outcome == "failed" && r.message.as_deref().unwrap_or("").contains(&reason)
            })
            .count()
    };
    eventually(
        Duration::from_secs(30),
        "runs failing with the reason",
        || async { (failed_for_it(&history(&store, "as-user").await) >= 2).then_some(()) },
    )
    .await;
    let error: Option<String> = store
        .scalar("SELECT error FROM cron_table WHERE name = 'as-user'")
        .await
        .unwrap();
    assert_eq!(error, None, "the job was parked");
    // The other job goes on.
    let ticks = ok_runs(&store, "tick").await;
    eventually(Duration::from_secs(20), "tick runs on", || async {
        (ok_runs(&store, "tick").await >= ticks + 3).then_some(())
    })
    .await;
    // The account back (same name, new uid): the job runs again, nothing to undo.
    let out = Command::new("useradd")
        .args([
            "-M",
            "-d",
            "/nonexistent-home",
            "-s",
            "/bin/sh",
            "-g",
            &user.group,
        ])
        .arg(&user.name)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = ok_runs(&store, "as-user").await;
    eventually(
        Duration::from_secs(30),
        "runs after the account came back",
        || async { (ok_runs(&store, "as-user").await >= done + 2).then_some(()) },
    )
    .await;
    every_slot_once(&history(&store, "tick").await);
    assert!(alive(node.pid()), "{}", node.log_text());
    node.stop();
    store.close().await;
}

/// The database server's clock steps back 10 s under a running cluster (libfaketime under a
/// throwaway PostgreSQL): decisions follow the database's clock, so nothing runs early and no
/// slot runs twice; the slots after the step run once the database's clock reaches them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_clock_stepping_back_runs_nothing_twice_or_early() {
    let lib = std::fs::read_dir("/usr/lib")
        .unwrap()
        .flatten()
        .map(|d| d.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.exists())
        .expect("libfaketime is required (apt-get install faketime; scripts/test.sh installs it)");
    let mut pg = ThrowawayPostgres::start();
    let offset = pg.data.parent().unwrap().join("faketime.rc");
    std::fs::write(&offset, "+0\n").unwrap();
    crate::util::chown_if_root(&offset, "postgres");
    pg.down();
    pg.env = vec![
        ("LD_PRELOAD".into(), lib.display().to_string()),
        (
            "FAKETIME_TIMESTAMP_FILE".into(),
            offset.display().to_string(),
        ),
        ("FAKETIME_CACHE_DURATION".into(), "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ];
    pg.up();
    let url = pg.url();
    let dir = tempfile::tempdir().unwrap();
    let n1 = DaemonProcess::start(dir.path(), "n1", &node_config(&url, "n1", TICK));
    let n2 = DaemonProcess::start(dir.path(), "n2", &node_config(&url, "n2", TICK));
    let store = Store::connect(&crate::util::db_url(&url), 1).unwrap();
    eventually(Duration::from_secs(30), "five runs", || async {
        (ok_runs(&store, "tick").await >= 5).then_some(())
    })
    .await;
    let local = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    std::fs::write(&offset, "-10s\n").unwrap();
    eventually(
        Duration::from_secs(20),
        "the database's clock 10 s back",
        || async {
            let db = store.now().await.ok()?;
            (local() - db > 9_000).then_some(())
        },
    )
    .await;
    let last_before = history(&store, "tick")
        .await
        .iter()
        .map(|r| r.slot)
        .max()
        .unwrap();
    // Runs resume once the database's clock passes the last slot run, about 10 s later.
    eventually(Duration::from_secs(60), "runs after the step", || async {
        let rows = history(&store, "tick").await;
        (rows
            .iter()
            .filter(|r| r.outcome == "ok" && r.slot > last_before)
            .count()
            >= 5)
            .then_some(())
    })
    .await;
    let rows = history(&store, "tick").await;
    every_slot_once(&rows);
    // No run early: a slot after the step starts at its slot or later by the database's clock.
    // (A run claimed in the instant before the step has its start recorded on the stepped-back
    // clock, before its slot: that is the record's clock, not an early run.)
    for r in rows.iter().filter(|r| r.slot > last_before + 1000) {
        if let Some(started) = r.started {
            assert!(
                started >= r.slot,
                "slot {} started {} ms early: {r:?}",
                r.slot,
                r.slot - started
            );
        }
    }
    assert!(alive(n1.pid()) && alive(n2.pid()));
    store.close().await;
    n1.stop();
    n2.stop();
}
