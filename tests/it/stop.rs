//! Stopping a run in progress (`sqlcron stop`, the dashboard's Stop): the holder sees the
//! request at its next lease extension, stops the run, records it `stopped` once and does not
//! retry it; the row waits for its next slot. A stop asked while the holder is frozen (SIGSTOP,
//! shorter than its lease) lands when it resumes: still one record, no takeover, no rerun on the
//! other node.

use std::path::Path;
use std::time::Duration;

use sqlcron::store::{Dialect, Store};

use crate::util::{DaemonProcess, TestDb, alive, eventually, make_due_now, sqlcron};

for_each_dialect!(
    a_stopped_run_is_recorded_once_and_not_retried,
    a_stop_asked_while_its_node_is_frozen_lands_when_it_resumes,
);

/// A node's configuration: a 9 s lease (extended every 3 s), and a job that never falls due by
/// itself, retried twice on failure, writing its shell's PID to `pids` before sleeping.
fn config(url: &str, node: &str, pids: &Path) -> String {
    format!(
        "[database]\nurl = \"{url}\"\n[node]\nname = \"{node}\"\n[daemon]\n{}\npoll_interval = \"500ms\"\n\
         lease = \"9s\"\nshutdown_grace = \"5s\"\n\
         [[job]]\nname = \"long\"\nschedule = \"0 0 1 1 *\"\nretries = 2\nretry_backoff = \"1s\"\n\
         command = \"echo $$ >> {}; exec sleep 120\"\n",
        crate::util::default_user(),
        pids.display()
    )
}

/// The PIDs the job's runs wrote, once `n` of them did.
async fn pids(file: &Path, n: usize) -> Vec<i32> {
    eventually(Duration::from_secs(30), "the run started", || async {
        let text = std::fs::read_to_string(file).ok()?;
        let p: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        (p.len() >= n).then_some(p)
    })
    .await
}

/// The slot's run records as (attempt, node, outcome), once one is not running.
async fn ended(store: &Store, slot: i64) -> Vec<(i64, String, String)> {
    eventually(
        Duration::from_secs(30),
        "the run recorded as ended",
        || async {
            let h = store.history(Some("long"), 20).await.ok()?;
            let of_slot: Vec<_> = h
                .iter()
                .filter(|r| r.slot == slot)
                .map(|r| {
                    (
                        r.attempt,
                        r.node.clone().unwrap_or_default(),
                        r.outcome.clone(),
                    )
                })
                .collect();
            of_slot
                .iter()
                .any(|(_, _, o)| o != "running")
                .then_some(of_slot)
        },
    )
    .await
}

async fn a_stopped_run_is_recorded_once_and_not_retried(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    let conf = dir.path().join("n1.toml");
    let n1 = DaemonProcess::start(dir.path(), "n1", &config(&db.url, "n1", &file));
    // Nothing runs yet: the CLI says so, exit 2.
    let out = sqlcron(&["--config", conf.to_str().unwrap(), "stop", "long"]);
    assert_eq!(out.status.code(), Some(2), "{}", crate::util::stderr(&out));
    let slot = make_due_now(&store, "long").await;
    let pid = pids(&file, 1).await[0];
    let out = sqlcron(&["--config", conf.to_str().unwrap(), "stop", "long"]);
    assert!(out.status.success(), "{}", crate::util::stderr(&out));
    let runs = ended(&store, slot).await;
    assert_eq!(runs, vec![(1, "n1".to_string(), "stopped".to_string())]);
    assert!(!alive(pid), "the job's process is gone");
    // Not retried: once released, the row waits for its next regular slot, a year away.
    let row = eventually(Duration::from_secs(30), "the row released", || async {
        store
            .job("long")
            .await
            .ok()?
            .filter(|r| r.exec_by.is_none())
    })
    .await;
    assert!(
        row.slot.unwrap() > slot + 86_400_000,
        "no retry pending: {row:?}"
    );
    let trail = store.audit_log(Some("long"), 10).await.unwrap();
    assert!(trail.iter().any(|a| a.action == "stop"), "{trail:?}");
    // The next run is not stopped by the old request.
    let slot = make_due_now(&store, "long").await;
    let pid = pids(&file, 2).await[1];
    let running = eventually(
        Duration::from_secs(10),
        "the second run recorded",
        || async {
            let h = store.history(Some("long"), 5).await.ok()?;
            h.iter()
                .find(|r| r.slot == slot && r.outcome == "running")
                .map(|_| ())
        },
    );
    running.await;
    assert!(alive(pid));
    assert!(store.request_stop("long", None, &actor()).await.unwrap());
    assert_eq!(
        ended(&store, slot).await,
        vec![(1, "n1".to_string(), "stopped".to_string())]
    );
    n1.stop();
}

fn actor() -> sqlcron::model::actor::Actor {
    sqlcron::model::actor::Actor {
        who: "test".into(),
        host: None,
        pid: None,
    }
}

async fn a_stop_asked_while_its_node_is_frozen_lands_when_it_resumes(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    let n1 = DaemonProcess::start(dir.path(), "n1", &config(&db.url, "n1", &file));
    // n2 starts once n1 holds the run, so the run is n1's.
    let slot = make_due_now(&store, "long").await;
    let pid = pids(&file, 1).await[0];
    let n2 = DaemonProcess::start(dir.path(), "n2", &config(&db.url, "n2", &file));
    let holder = store.job("long").await.unwrap().unwrap().exec_by;
    assert_eq!(holder.as_deref(), Some("n1"));
    // Frozen for 2 s (its lease is 9 s): the stop is asked meanwhile.
    n1.signal(libc::SIGSTOP);
    assert!(store.request_stop("long", None, &actor()).await.unwrap());
    tokio::time::sleep(Duration::from_secs(2)).await;
    n1.signal(libc::SIGCONT);
    let runs = ended(&store, slot).await;
    assert_eq!(runs, vec![(1, "n1".to_string(), "stopped".to_string())]);
    assert!(!alive(pid));
    // The row is released after the run's record is written (on a loaded machine the two may
    // be read apart): wait for the release, then no retry is pending.
    let row = eventually(Duration::from_secs(30), "the row released", || async {
        store
            .job("long")
            .await
            .ok()?
            .filter(|r| r.exec_by.is_none())
    })
    .await;
    assert!(
        row.slot.unwrap() > slot + 86_400_000,
        "no retry pending: {row:?}"
    );
    // The other node never ran it: one PID was ever written.
    assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 1);
    n1.stop();
    n2.stop();
}
