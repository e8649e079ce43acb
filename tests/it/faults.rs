//! Issue 9: every scheduled slot runs exactly once under the faults a cluster sees — a node
//! re-claiming its own row, output a database cannot store, a start whose reply was lost, a
//! takeover chain, a manual run during a takeover, bad rows written with SQL, a statement that
//! hangs past the trust window, a database that never comes up at start, a node dying in a run
//! of a later slot than its row's (after missed slots were skipped).
//!
//! Most cases drive one daemon in this process (`Daemon::tick`, or `Daemon::run` where the lease
//! loop matters) against a real database, and set up the other holders' traces with the store.

use std::path::Path;
use std::time::{Duration, Instant};

use sqlcron::config::{Environment, parse};
use sqlcron::daemon::{Control, Daemon};
use sqlcron::model::job::Outcome;
use sqlcron::store::{Dialect, HistoryRow, RunKey, Store};
use tokio::task::JoinSet;

use crate::util::make_due_now as make_due;
use crate::util::{DaemonProcess, TestDb, alive, eventually, free_port, node_config, stop_thread};

for_each_dialect!(
    a_node_never_claims_a_row_it_still_supervises,
    output_with_nul_and_invalid_utf8_is_recorded_once,
    takeover_chain_reruns_the_lost_run_once,
    manual_run_during_a_takeover_waits_for_the_rerun,
    claimed_but_never_started_slot_is_run_not_lost,
    hung_statement_cannot_keep_a_claim_trusted,
    stopped_daemon_leaves_no_job_running_when_another_node_takes_over,
    a_run_of_a_later_slot_is_found_when_its_node_dies,
    a_blocked_daemon_thread_keeps_its_leases,
    a_daemon_thread_stuck_past_twice_the_lease_loses_its_claims,
    a_run_the_reaper_killed_while_the_lease_thread_starved_is_lost_not_failed,
);

/// A daemon in this process, on `db`, with `jobs` (TOML `[[job]]` tables) and the node `name`.
async fn daemon(db: &TestDb, name: &str, daemon_keys: &str, jobs: &str) -> (Daemon, Store) {
    let store = db.store().await;
    let daemon = Daemon::new(store.clone(), config(&db.url, name, daemon_keys, jobs));
    daemon.apply_config().await.unwrap();
    (daemon, store)
}

/// The configuration of a node `name` on the database at `url`.
fn config(url: &str, name: &str, daemon_keys: &str, jobs: &str) -> sqlcron::config::Config {
    let text = format!(
        "[database]\nurl = \"{url}\"\n[node]\nname = \"{name}\"\n[daemon]\n{}\npoll_interval = \"200ms\"\n{daemon_keys}\n{jobs}",
        crate::util::default_user()
    );
    parse(&text, Path::new("t.toml"), &Environment::default()).unwrap()
}

/// Ends a claim's lease now, as if its holder had stopped renewing it.
async fn expire(store: &Store, job: &str) {
    store
        .execute_raw(&format!(
            "UPDATE cron_table SET next_exec = 0, lease_until = 0 WHERE name = '{job}'"
        ))
        .await
        .unwrap();
}

async fn drain(tasks: &mut JoinSet<()>) {
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

/// The job's history, oldest first, as (slot, attempt, outcome).
async fn runs(store: &Store, job: &str) -> Vec<(i64, i64, String)> {
    let mut h: Vec<HistoryRow> = store.history(Some(job), 100).await.unwrap();
    h.reverse();
    h.into_iter()
        .map(|r| (r.slot, r.attempt, r.outcome))
        .collect()
}

/// Issue 9 (1): after a stall longer than the lease, the node sees its own row due again while
/// it still supervises the run: it must not claim it (before, the second claim replaced the
/// first run's entry, SIGTERMed it, and the slot was lost). With `on_lease_lost = "ignore"` the
/// run finishes, and as its trust window had ended, nothing is written for it: the next holder
/// records it lost (before, with no lease loop running here to notice the window pass, the
/// run's end was recorded `ok` under a lease the database no longer held).
async fn a_node_never_claims_a_row_it_still_supervises(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let jobs = format!(
        "[[job]]\nname = \"s\"\nschedule = \"0 0 1 1 *\"\non_lease_lost = \"ignore\"\n\
         command = \"while [ ! -e {} ]; do sleep 0.05; done\"\n",
        go.display()
    );
    let (daemon, store) = daemon(&db, "a", "lease = \"3s\"", &jobs).await;
    let mut tasks = JoinSet::new();
    daemon.tick(&mut tasks).await.unwrap();
    make_due(&store, "s").await;
    assert_eq!(daemon.tick(&mut tasks).await.unwrap().claimed, 1);
    eventually(Duration::from_secs(5), "the run to start", || async {
        (runs(&store, "s").await.len() == 1).then_some(())
    })
    .await;
    // No lease loop runs here (only ticks): the lease runs out in the database while the node
    // still supervises the run, as after a stall of its event loop.
    eventually(Duration::from_secs(10), "the lease to run out", || async {
        let row = store.job("s").await.unwrap()?;
        let now = store.now().await.unwrap();
        (row.next_exec? < now).then_some(())
    })
    .await;
    let report = daemon.tick(&mut tasks).await.unwrap();
    assert_eq!(
        report.claimed, 0,
        "the node claimed a row it still supervises"
    );
    std::fs::write(&go, "").unwrap();
    drain(&mut tasks).await;
    let h = runs(&store, "s").await;
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0].2, "running", "nothing written after the window: {h:?}");
    let row = store.job("s").await.unwrap().unwrap();
    assert_eq!(
        row.exec_by.as_deref(),
        Some("a"),
        "not released by the node"
    );
}

/// Issue 9 (2): a job printing a NUL byte (PostgreSQL's `text` refuses it) and bytes that are
/// not UTF-8 is recorded once, `ok`, not run again after its release failed for a lease.
async fn output_with_nul_and_invalid_utf8_is_recorded_once(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let jobs = "[[job]]\nname = \"nul\"\nschedule = \"0 0 1 1 *\"\ncommand = \"printf 'a\\\\000b\\\\377c'\"\n";
    let (daemon, store) = daemon(&db, "a", "lease = \"2s\"", jobs).await;
    let mut tasks = JoinSet::new();
    daemon.tick(&mut tasks).await.unwrap();
    make_due(&store, "nul").await;
    assert_eq!(daemon.tick(&mut tasks).await.unwrap().claimed, 1);
    tokio::time::timeout(Duration::from_secs(10), drain(&mut tasks))
        .await
        .expect("the run ends and its release lands");
    let h = store.history(Some("nul"), 10).await.unwrap();
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0].outcome, "ok");
    assert_eq!(h[0].output.as_deref(), Some("a\u{FFFD}b\u{FFFD}c"));
    let row = store.job("nul").await.unwrap().unwrap();
    assert_eq!(row.exec_by, None, "released");
    assert_eq!(row.last_status.as_deref(), Some("ok"));
}

/// Issue 9 (4): A starts a run and dies, B claims and dies before starting anything, C takes
/// over: it finds A's run by the row's slot and attempts (not by `token - 1`), records it lost
/// and reruns it once.
async fn takeover_chain_reruns_the_lost_run_once(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let jobs =
        "[[job]]\nname = \"c\"\nschedule = \"0 * * * *\"\ncommand = \"echo $SQLCRON_ATTEMPT\"\n";
    let (daemon, store) = daemon(&db, "C", "lease = \"3s\"", jobs).await;
    let mut tasks = JoinSet::new();
    daemon.tick(&mut tasks).await.unwrap();
    let slot = make_due(&store, "c").await;
    let (_, a) = store.claim("A", 1, Duration::from_secs(10)).await.unwrap();
    let key = RunKey {
        job: "c".into(),
        slot,
        attempt: 1,
    };
    store
        .start_run(a[0].id, "A", a[0].token, &key)
        .await
        .unwrap();
    expire(&store, "c").await;
    let (_, b) = store.claim("B", 1, Duration::from_secs(10)).await.unwrap();
    assert_eq!(b.len(), 1);
    expire(&store, "c").await;
    assert_eq!(daemon.tick(&mut tasks).await.unwrap().claimed, 1);
    drain(&mut tasks).await;
    let h = runs(&store, "c").await;
    assert_eq!(
        h,
        [(slot, 1, "lost".into()), (slot, 2, "ok".into())],
        "the lost run is rerun once"
    );
    let row = store.job("c").await.unwrap().unwrap();
    assert!(row.slot.unwrap() > slot, "released to the next slot");
}

/// Issue 9 (4): `sqlcron run` while a lost run is owed: the rerun comes first, then the manual
/// run; neither is forgotten.
async fn manual_run_during_a_takeover_waits_for_the_rerun(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let jobs = "[[job]]\nname = \"m\"\nschedule = \"0 * * * *\"\ncommand = \"true\"\n";
    let (daemon, store) = daemon(&db, "C", "lease = \"3s\"", jobs).await;
    let mut tasks = JoinSet::new();
    daemon.tick(&mut tasks).await.unwrap();
    let slot = make_due(&store, "m").await;
    let (_, a) = store.claim("A", 1, Duration::from_secs(10)).await.unwrap();
    let key = RunKey {
        job: "m".into(),
        slot,
        attempt: 1,
    };
    store
        .start_run(a[0].id, "A", a[0].token, &key)
        .await
        .unwrap();
    assert!(
        store
            .request_run("m", &sqlcron::exec::account::this_process(None))
            .await
            .unwrap()
    );
    expire(&store, "m").await;
    assert_eq!(daemon.tick(&mut tasks).await.unwrap().claimed, 1);
    drain(&mut tasks).await;
    assert_eq!(
        runs(&store, "m").await,
        [(slot, 1, "lost".into()), (slot, 2, "ok".into())]
    );
    let row = store.job("m").await.unwrap().unwrap();
    assert!(row.run_now, "the manual run is still asked for");
    let started = Instant::now();
    while runs(&store, "m").await.len() < 3 {
        assert!(started.elapsed() < Duration::from_secs(5), "no manual run");
        daemon.tick(&mut tasks).await.unwrap();
        drain(&mut tasks).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(runs(&store, "m").await[2].2, "ok");
    let row = store.job("m").await.unwrap().unwrap();
    assert!(!row.run_now);
    assert_eq!(
        row.slot.unwrap(),
        policy_next_hour(slot),
        "the schedule is unchanged"
    );
}

fn policy_next_hour(slot: i64) -> i64 {
    (slot / 3_600_000 + 1) * 3_600_000
}

/// Issue 9 (4): a slot that was claimed but whose process never started was not run: it is
/// still owed and runs as attempt 1, not recorded lost.
async fn claimed_but_never_started_slot_is_run_not_lost(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let jobs = "[[job]]\nname = \"n\"\nschedule = \"0 * * * *\"\ncommand = \"true\"\n";
    let (daemon, store) = daemon(&db, "C", "lease = \"3s\"", jobs).await;
    let mut tasks = JoinSet::new();
    daemon.tick(&mut tasks).await.unwrap();
    let slot = make_due(&store, "n").await;
    let (_, a) = store.claim("A", 1, Duration::from_secs(10)).await.unwrap();
    assert_eq!(a.len(), 1);
    expire(&store, "n").await;
    assert_eq!(daemon.tick(&mut tasks).await.unwrap().claimed, 1);
    drain(&mut tasks).await;
    assert_eq!(runs(&store, "n").await, [(slot, 1, "ok".into())]);
}

/// A job that is never due by its schedule (the tests make it due) and whose every run appends
/// its shell's PID to `pids`, then sleeps a minute; a second's grace after SIGTERM.
fn sleeper_job(name: &str, pids: &std::path::Path) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"0 0 1 1 *\"\nkill_grace = \"1s\"\n\
         command = \"echo $$ >> {}; exec sleep 60\"\n",
        pids.display()
    )
}

/// Issue 9 (6): a statement that hangs (here: waits on a row lock an operator holds) cannot keep
/// a claim trusted. The job is stopped by the trust window on its own timer, before the lease
/// the database holds runs out, so no other node can start the rerun while it still runs.
async fn hung_statement_cannot_keep_a_claim_trusted(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let jobs = sleeper_job("h", &pidfile);
    let (daemon, store) = daemon(&db, "a", "lease = \"3s\"", &jobs).await;
    let mut tasks = JoinSet::new();
    daemon.tick(&mut tasks).await.unwrap();
    drop(tasks);
    make_due(&store, "h").await;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let running = tokio::spawn(daemon.run(rx));
    let pid: i32 = eventually(Duration::from_secs(5), "the job to start", || async {
        std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|t| t.lines().next()?.trim().parse().ok())
    })
    .await;
    // An operator's open transaction holds the row: every extension now waits on its lock.
    let pool = sqlx::AnyPool::connect(&db.url).await.unwrap();
    let mut tx_lock = pool.begin().await.unwrap();
    sqlx::query("UPDATE cron_table SET workdir = workdir WHERE name = 'h'")
        .execute(&mut *tx_lock)
        .await
        .unwrap();
    let locked_at = Instant::now();
    let deadline = Duration::from_secs(10);
    while alive(pid) && locked_at.elapsed() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(pid), "the job outlived its trust window");
    // It died while the lease the database holds was still valid: nobody could have taken over.
    let row = store.job("h").await.unwrap().unwrap();
    let now = store.now().await.unwrap();
    assert!(
        now <= row.lease_until.unwrap(),
        "killed {} ms after the lease ended",
        now - row.lease_until.unwrap()
    );
    tx_lock.rollback().await.unwrap();
    tx.send(Control::StopNow).unwrap();
    tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("the daemon stops")
        .unwrap();
    // Nothing was written for the lost run: the next holder accounts for it.
    let h = store.history(Some("h"), 10).await.unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].outcome, Outcome::Running.as_str());
}

/// Issue 9 (5): on SQLite, rows of the wrong type written with SQL are parked one by one with
/// the column and value named; the good job keeps running, and a fix un-parks them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sqlite_rows_are_parked_one_at_a_time() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let jobs = "[[job]]\nname = \"good\"\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n";
    let (daemon, store) = daemon(&db, "a", "", jobs).await;
    // The schema refuses them when they are written, naming the column...
    let refused = store
        .execute_raw("UPDATE cron_table SET enabled = 'yes' WHERE name = 'good'")
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("cron_table.enabled must be 0 or 1"),
        "{refused}"
    );
    let refused = store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('b', '* * * * *', X'00')",
        )
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("cron_table.command must be text or NULL"),
        "{refused}"
    );
    // ... but rows stored before those checks existed may still be bad.
    for trigger in ["cron_table_types_insert", "cron_table_types_update"] {
        store
            .execute_raw(&format!("DROP TRIGGER {trigger}"))
            .await
            .unwrap();
    }
    for (name, column, value) in [
        ("yes", "enabled", "'yes'"),
        ("half", "retries", "1.5"),
        ("blob", "command", "X'00ff'"),
    ] {
        store
            .execute_raw(&format!(
                "INSERT INTO cron_table (name, schedule, command) VALUES ('{name}', '* * * * *', 'true')"
            ))
            .await
            .unwrap();
        store
            .execute_raw(&format!(
                "UPDATE cron_table SET {column} = {value} WHERE name = '{name}'"
            ))
            .await
            .unwrap();
    }
    let mut tasks = JoinSet::new();
    let report = daemon.tick(&mut tasks).await.unwrap();
    assert_eq!((report.prepared, report.invalid), (1, 3), "{report:?}");
    for (name, says) in [
        ("yes", "column enabled: \"yes\" is not a whole number"),
        ("half", "column retries: 1.5 is not a whole number"),
        ("blob", "column command: a BLOB of 2 bytes is not text"),
    ] {
        let row = store.job(name).await.unwrap().unwrap();
        assert_eq!(row.error.as_deref(), Some(says), "{name}");
    }
    make_due(&store, "good").await;
    assert_eq!(daemon.tick(&mut tasks).await.unwrap().claimed, 1);
    drain(&mut tasks).await;
    assert_eq!(runs(&store, "good").await.len(), 1);
    store
        .execute_raw("UPDATE cron_table SET enabled = 1 WHERE name = 'yes'")
        .await
        .unwrap();
    let report = daemon.tick(&mut tasks).await.unwrap();
    assert_eq!(report.prepared, 1, "the fixed row is scheduled again");
    assert_eq!(store.job("yes").await.unwrap().unwrap().error, None);
}

/// Issue 9 (9): a node whose database never comes up still obeys SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_wait_for_the_database_obeys_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("postgres://postgres@127.0.0.1:{}/none", free_port());
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&url, "n", ""));
    eventually(Duration::from_secs(10), "the retry loop", || async {
        node.log_text().contains("database not ready").then_some(())
    })
    .await;
    let mut node = node;
    node.signal(libc::SIGTERM);
    let started = Instant::now();
    let status = loop {
        if let Some(s) = node.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "still running 5 s after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status:?}");
}

/// Issue 9 (5): a daemon that is stopped (SIGSTOP: its event loop cannot act) must not leave its
/// job running once its lease could pass to another node. The reaper, a process of its own,
/// kills the job at its deadline. The jobs check for themselves, at start, that no earlier
/// process of the job is alive, so the verdict does not trust the daemons' bookkeeping.
async fn stopped_daemon_leaves_no_job_running_when_another_node_takes_over(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let overlap = dir.path().join("overlap");
    let script = dir.path().join("job.sh");
    std::fs::write(
        &script,
        format!(
            "for p in $(cat {pids} 2>/dev/null); do\n\
             s=$(awk '{{print $3}}' /proc/$p/stat 2>/dev/null)\n\
             if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo $p >> {overlap}; fi\n\
             done\n\
             echo $$ >> {pids}\n\
             exec sleep 60\n",
            pids = pids.display(),
            overlap = overlap.display()
        ),
    )
    .unwrap();
    let command = format!("sh {}", script.display());
    let job =
        format!("[[job]]\nname = \"frozen\"\nschedule = \"0 0 1 1 *\"\ncommand = \"{command}\"\n");
    let a = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", &job));
    eventually(
        Duration::from_secs(10),
        "the job to be scheduled",
        || async {
            store
                .job("frozen")
                .await
                .unwrap()
                .and_then(|r| r.next_exec)
                .map(|_| ())
        },
    )
    .await;
    make_due(&store, "frozen").await;
    let lines = || std::fs::read_to_string(&pids).unwrap_or_default();
    let first: i32 = eventually(Duration::from_secs(10), "the first run", || async {
        lines().lines().next().and_then(|l| l.parse().ok())
    })
    .await;
    eventually(
        Duration::from_secs(5),
        "the run handed to the reaper",
        || async { a.log_text().contains("job process started").then_some(()) },
    )
    .await;
    a.signal(libc::SIGSTOP);
    let b = DaemonProcess::start(dir.path(), "b", &node_config(&db.url, "b", &job));
    eventually(Duration::from_secs(15), "node b's rerun", || async {
        (lines().lines().count() >= 2).then_some(())
    })
    .await;
    let overlapped = std::fs::read_to_string(&overlap).unwrap_or_default();
    a.signal(libc::SIGCONT);
    assert!(
        overlapped.is_empty(),
        "run {first} was alive when the rerun started"
    );
    assert!(!alive(first));
    let h = store.history(Some("frozen"), 10).await.unwrap();
    assert!(
        h.iter().any(|r| r.outcome == "lost" && r.attempt == 1),
        "{h:?}"
    );
    drop(b);
    drop(a);
}

/// A claim that skips missed slots runs a later slot than the row's. When its node dies in that
/// run, the next node must find the run (and record it lost), not plan from the row's old slot:
/// that planned the run again, found its record under the dead node's token and handed the row
/// over, forever, leaving the run `running` and the job stuck.
async fn a_run_of_a_later_slot_is_found_when_its_node_dies(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let jobs = format!(
        "[[job]]\nname = \"later\"\nschedule = \"* * * * * *\"\nmisfire = \"skip\"\n\
         starting_deadline = \"1s\"\n\
         command = \"if [ -e {d}/go ]; then rm {d}/go; echo $SQLCRON_SLOT > {d}/started; sleep 60; fi\"\n"
    );
    let a = DaemonProcess::start(dir.path(), "la", &node_config(&db.url, "la", &jobs));
    eventually(Duration::from_secs(20), "later runs", || async {
        (!store.history(Some("later"), 1).await.unwrap().is_empty()).then_some(())
    })
    .await;
    // Missed slots: the job is paused for three seconds, then resumed with the go file there.
    let actor = sqlcron::exec::account::this_process(None);
    store.set_enabled("later", false, &actor).await.unwrap();
    let paused_at = store.now().await.unwrap();
    eventually(Duration::from_secs(10), "three slots missed", || async {
        (store.now().await.unwrap() > paused_at + 3_500).then_some(())
    })
    .await;
    std::fs::write(dir.path().join("go"), "").unwrap();
    store.set_enabled("later", true, &actor).await.unwrap();
    let started = dir.path().join("started");
    eventually(Duration::from_secs(20), "the long run started", || async {
        std::fs::metadata(&started).ok().map(|_| ())
    })
    .await;
    let history = store.history(Some("later"), 100).await.unwrap();
    assert!(
        history.iter().any(|r| r.outcome == "skipped"),
        "the pause skipped slots: {history:?}"
    );
    let running = history
        .iter()
        .find(|r| r.outcome == "running")
        .cloned()
        .expect("the long run is recorded running");
    a.signal(libc::SIGKILL);
    let mut a = a;
    let _ = a.child.wait();

    let b = DaemonProcess::start(dir.path(), "lb", &node_config(&db.url, "lb", &jobs));
    eventually(
        Duration::from_secs(30),
        "the dead node's run recorded lost, and later slots run again",
        || async {
            let h = store.history(Some("later"), 200).await.unwrap();
            let lost = h
                .iter()
                .any(|r| r.slot == running.slot && r.attempt == 1 && r.outcome == "lost");
            let after = h.iter().any(|r| {
                r.slot > running.slot && r.outcome == "ok" && r.node.as_deref() == Some("lb")
            });
            (lost && after).then_some(())
        },
    )
    .await;
    assert!(
        !b.log_text().contains("recorded under another claim"),
        "{}",
        b.log_text()
    );
    assert!(b.stop().success());
    store.close().await;
}

/// A daemon in this process on a runtime of one thread, as `sqlcron daemon` runs it, with one
/// job (`b`) that runs until `go` exists, made due and started.
struct OneThreadDaemon {
    handle: tokio::runtime::Handle,
    ctl: tokio::sync::mpsc::UnboundedSender<Control>,
    thread: std::thread::JoinHandle<()>,
    pid: i32,
    go: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl OneThreadDaemon {
    async fn start(db: &TestDb, lease: &str) -> OneThreadDaemon {
        let dir = tempfile::tempdir().unwrap();
        let go = dir.path().join("go");
        let pidfile = dir.path().join("pid");
        let jobs = format!(
            "[[job]]\nname = \"b\"\nschedule = \"0 0 1 1 *\"\n\
             command = \"echo $$ > {}; while [ ! -e {} ]; do sleep 0.05; done\"\n",
            pidfile.display(),
            go.display()
        );
        let config = config(&db.url, "a", &format!("lease = \"{lease}\""), &jobs);
        let url = db.url.clone();
        let (handle_tx, handle_rx) = std::sync::mpsc::channel();
        let (ctl, ctl_rx) = tokio::sync::mpsc::unbounded_channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            handle_tx.send(runtime.handle().clone()).unwrap();
            runtime.block_on(async move {
                let store = Store::connect(&crate::util::db_url(&url), 4).unwrap();
                let daemon = Daemon::new(store.clone(), config);
                daemon.apply_config().await.unwrap();
                let mut tasks = JoinSet::new();
                daemon.tick(&mut tasks).await.unwrap();
                drop(tasks);
                make_due(&store, "b").await;
                daemon.run(ctl_rx).await;
            });
        });
        let handle = handle_rx.recv().unwrap();
        let pid: i32 = eventually(Duration::from_secs(10), "the job to start", || async {
            std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|t| t.trim().parse().ok())
        })
        .await;
        OneThreadDaemon {
            handle,
            ctl,
            thread,
            pid,
            go,
            _dir: dir,
        }
    }

    /// Blocks the daemon's one thread for `how_long`; returns once the block has begun, with a
    /// receiver told when it ends.
    async fn block(&self, how_long: Duration) -> tokio::sync::oneshot::Receiver<()> {
        let (blocked_tx, blocked_rx) = tokio::sync::oneshot::channel();
        let (unblocked_tx, unblocked_rx) = tokio::sync::oneshot::channel();
        self.handle.spawn(async move {
            blocked_tx.send(()).unwrap();
            std::thread::sleep(how_long);
            unblocked_tx.send(()).unwrap();
        });
        blocked_rx.await.unwrap();
        unblocked_rx
    }

    /// Stops the daemon at once and waits for its thread. The bound is the daemon's own (its
    /// run tasks get 60 s to release their rows, the node's stop record 5 s), not a speed the
    /// tests expect: on a loaded machine one stop took more than 20 s once.
    async fn stop(self) {
        self.ctl.send(Control::StopNow).unwrap();
        let thread = self.thread;
        let joined = tokio::task::spawn_blocking(move || thread.join());
        tokio::time::timeout(Duration::from_secs(75), joined)
            .await
            .expect("the daemon stops")
            .unwrap()
            .unwrap();
    }
}

/// `sqlcron daemon` runs its tasks on one thread and its lease extension on a thread of its own
/// (`daemon/lease_thread.rs`). A task that blocks the daemon's thread for longer than the trust
/// window but less than twice the lease (a slow name-service lookup, say) stalls the poll loop
/// and the run tasks, but not the extension: the run keeps its claim, its process is not
/// killed, and it ends once, `ok`.
async fn a_blocked_daemon_thread_keeps_its_leases(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let daemon = OneThreadDaemon::start(&db, "3s").await;
    // 4.5 s: past the trust window (2.4 s) and the reaper's deadline (2.7 s), short of the
    // stall limit (6 s).
    let unblocked = daemon.block(Duration::from_millis(4500)).await;
    let lease_at_block = store.job("b").await.unwrap().unwrap().lease_until.unwrap();
    // The lease moves on while the thread is blocked: extended from the lease thread.
    eventually(
        Duration::from_secs(4),
        "an extension during the block",
        || async {
            let row = store.job("b").await.unwrap()?;
            (row.lease_until? > lease_at_block + 1500).then_some(())
        },
    )
    .await;
    unblocked.await.unwrap();
    assert!(
        alive(daemon.pid),
        "the run was killed while the daemon's thread was blocked"
    );
    let row = store.job("b").await.unwrap().unwrap();
    let now = store.now().await.unwrap();
    assert!(
        row.lease_until.unwrap() > now,
        "the lease ran out while the daemon's thread was blocked"
    );
    std::fs::write(&daemon.go, "").unwrap();
    eventually(Duration::from_secs(10), "the run to end", || async {
        let h = store.history(Some("b"), 10).await.unwrap();
        (h.len() == 1 && h[0].outcome != Outcome::Running.as_str()).then_some(h)
    })
    .await;
    daemon.stop().await;
    let h = runs(&store, "b").await;
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0].2, "ok", "{h:?}");
    let row = store.job("b").await.unwrap().unwrap();
    assert_eq!(row.exec_by, None, "released");
}

/// A daemon's thread that runs nothing for more than twice the lease can stop no job (at its
/// `timeout`, on `sqlcron stop`): its lease thread stops extending, the lease ends in the
/// database (another node may take the row over; under `sqlcron daemon` the reaper stops the
/// run before that, see `stopped_daemon_leaves_no_job_running_when_another_node_takes_over`),
/// and once the thread runs again the run's task finds its claim lost: it stops the job and
/// writes nothing for it; the row's next holder records it lost.
async fn a_daemon_thread_stuck_past_twice_the_lease_loses_its_claims(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let daemon = OneThreadDaemon::start(&db, "3s").await;
    let unblocked = daemon.block(Duration::from_secs(12)).await;
    let blocked_at = Instant::now();
    // Extensions stop 6 s into the block; the last one's lease ends within 3 s after. What
    // was seen of the lease on the way is kept for the failure's message: whether the
    // extensions stopped early or the lease was read late.
    let seen = std::sync::Mutex::new(Vec::new());
    eventually(
        Duration::from_secs(11),
        "the lease to end in the database",
        || async {
            let row = store.job("b").await.unwrap()?;
            let now = store.now().await.unwrap();
            let lease_until = row.lease_until?;
            seen.lock()
                .unwrap()
                .push((blocked_at.elapsed().as_millis(), lease_until - now));
            (lease_until < now).then_some(())
        },
    )
    .await;
    assert!(
        blocked_at.elapsed() >= Duration::from_secs(6),
        "the lease ended {:?} into the block; (ms into the block, lease left in ms) as read: {:?}",
        blocked_at.elapsed(),
        seen.lock().unwrap()
    );
    unblocked.await.unwrap();
    eventually(
        Duration::from_secs(10),
        "the lost run to be stopped",
        || async { (!alive(daemon.pid)).then_some(()) },
    )
    .await;
    daemon.stop().await;
    // Nothing was written for the lost run by its node: its record is still `running`, or the
    // row's next holder (the same node, if its loop took the row, due with its lease over,
    // before the stop) recorded it lost.
    let h = store.history(Some("b"), 10).await.unwrap();
    let first = h.iter().find(|r| r.attempt == 1).expect("the first run");
    let taken_over = first.outcome == Outcome::Lost.as_str()
        && first
            .message
            .as_deref()
            .is_some_and(|m| m.contains("expired"));
    assert!(
        first.outcome == Outcome::Running.as_str() || taken_over,
        "{h:?}"
    );
}

/// A node whose lease thread is starved (here held in a ptrace stop while the rest of the
/// daemon runs on) stops extending and stops watching its trust windows; the job reaper kills
/// the run at its deadline. The run's end, seen by the daemon's thread, is then not the job's
/// own failure: the window had ended, the claim is lost and nothing is written; the next holder
/// (this node, once the lease ends) records the run `lost` and runs it again (`rerun_lost`).
/// Before, the node recorded the killed run as `failed` by signal 9 and never ran the slot
/// again, as a 200-node benchmark on two cores showed (docs/benchmarks.md). A lease extension
/// that comes back after a window ended does not open it again either
/// (`model::lease::window_open`).
async fn a_run_the_reaper_killed_while_the_lease_thread_starved_is_lost_not_failed(
    dialect: Dialect,
) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let job = sleeper_job("x", &pids);
    let node = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", &job));
    eventually(
        Duration::from_secs(20),
        "the job to be scheduled",
        || async { store.job("x").await.unwrap().and_then(|r| r.next_exec) },
    )
    .await;
    make_due(&store, "x").await;
    let started = || {
        std::fs::read_to_string(&pids)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse::<i32>().ok())
            .collect::<Vec<_>>()
    };
    let first = eventually(Duration::from_secs(10), "the run to start", || async {
        started().first().copied()
    })
    .await;
    eventually(
        Duration::from_secs(5),
        "the run handed to the reaper",
        || async {
            node.log_text()
                .contains("job process started")
                .then_some(())
        },
    )
    .await;
    let held = stop_thread(node.pid(), "lease");
    eventually(
        Duration::from_secs(10),
        "the reaper to kill the run",
        || async { (!alive(first)).then_some(()) },
    )
    .await;
    // The daemon's thread has seen the run end; nothing may be recorded for it but `running`.
    eventually(
        Duration::from_secs(5),
        "the run's end to be handled",
        || async {
            node.log_text()
                .contains("run ended after its lease was lost; nothing written")
                .then_some(())
        },
    )
    .await;
    drop(held);
    eventually(Duration::from_secs(30), "the slot run again", || async {
        (started().len() >= 2).then_some(())
    })
    .await;
    let log = node.log_text();
    let history = store.history(Some("x"), 10).await.unwrap();
    node.stop();
    let runs: Vec<(i64, String)> = history
        .iter()
        .rev()
        .map(|r| (r.attempt, r.outcome.clone()))
        .collect();
    assert_eq!(
        runs[0],
        (1, Outcome::Lost.as_str().to_string()),
        "the killed run is lost, not the node's own failure: {runs:?}\n{log}"
    );
    assert_eq!(runs.get(1).map(|r| r.0), Some(2), "{runs:?}");
}
