//! Issue 9: faults on the network between a daemon and its database, through the proxy in
//! `proxy.rs` (PostgreSQL and MariaDB; SQLite has no network, its stall is a held write lock,
//! see `faults::*::hung_statement_cannot_keep_a_claim_trusted`).

use std::path::Path;
use std::time::Duration;

use sqlcron::config::{Environment, parse};
use sqlcron::daemon::{Control, Daemon};
use sqlcron::store::{Dialect, Fenced, ReleaseOf, Store};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

use crate::proxy::Proxy;
use crate::util::make_due_now as make_due;
use crate::util::{DaemonProcess, TestDb, alive, default_user, eventually};

macro_rules! for_each_server {
    ($($case:ident),* $(,)?) => {
        mod postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $case() { super::$case(sqlcron::store::Dialect::Postgres).await } )* }
        mod mysql { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $case() { super::$case(sqlcron::store::Dialect::Mysql).await } )* }
    };
}

for_each_server!(
    reply_lost_after_the_start_record_runs_the_slot_once,
    reply_lost_after_the_release_runs_the_slot_once,
    connections_reset_mid_run_do_not_lose_the_run,
    stall_longer_than_the_lease_kills_the_run_before_the_rerun,
    stall_longer_than_the_lease_with_ignore_lets_the_run_finish,
    release_blocked_longer_than_the_lease_keeps_the_lease_and_lands,
    a_batch_of_releases_cut_off_part_way_or_at_its_commit_reads_back_once,
    a_node_that_cannot_open_its_lease_connection_claims_nothing,
);

/// The database's address as the proxy needs it, and the URL through the proxy.
fn through(db: &TestDb, proxy: &Proxy) -> String {
    let server = match db.dialect {
        Dialect::Postgres => "127.0.0.1:5432",
        _ => "127.0.0.1:3306",
    };
    let url = db.url.replace(server, &format!("127.0.0.1:{}", proxy.port));
    // The proxy finds statements in the protocol: the shared server offers TLS, which the
    // default `sslmode=prefer` would take, hiding them.
    match db.dialect {
        Dialect::Postgres => format!("{url}?sslmode=disable"),
        _ => url,
    }
}

fn upstream(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => "127.0.0.1:5432",
        _ => "127.0.0.1:3306",
    }
}

/// A daemon in this process on `url`, with its jobs applied.
async fn daemon(url: &str, name: &str, keys: &str, jobs: &str) -> Daemon {
    let text = format!(
        "[database]\nurl = \"{url}\"\n[node]\nname = \"{name}\"\n[daemon]\n{}\npoll_interval = \"200ms\"\n{keys}\n{jobs}",
        crate::util::default_user()
    );
    let config = parse(&text, Path::new("t.toml"), &Environment::default()).unwrap();
    let lease = config.daemon.lease;
    let store = Store::connect_with(
        &crate::util::db_url(url),
        4,
        Some(sqlcron::model::lease::statement_timeout(lease)),
    )
    .unwrap();
    store.migrate().await.unwrap();
    let daemon = Daemon::new(store, config);
    daemon.apply_config().await.unwrap();
    daemon
}

fn start(daemon: Daemon) -> (mpsc::UnboundedSender<Control>, JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, tokio::spawn(daemon.run(rx)))
}

async fn stop(tx: mpsc::UnboundedSender<Control>, handle: JoinHandle<()>) {
    tx.send(Control::StopNow).unwrap();
    tokio::time::timeout(Duration::from_secs(30), handle)
        .await
        .expect("the daemon stops")
        .unwrap();
}

async fn outcomes(store: &Store, job: &str) -> Vec<(i64, String)> {
    let mut h = store.history(Some(job), 100).await.unwrap();
    h.reverse();
    h.into_iter().map(|r| (r.attempt, r.outcome)).collect()
}

/// Runs one due job through `daemon`'s ticks until its tasks are done.
async fn tick_once(daemon: &Daemon) {
    let mut tasks = JoinSet::new();
    let report = daemon.tick(&mut tasks).await.unwrap();
    assert_eq!(report.claimed, 1, "{report:?}");
    tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(t) = tasks.join_next().await {
            t.unwrap();
        }
    })
    .await
    .expect("the run ends");
}

/// Issue 9 (3): the start record commits, its reply is lost. Before, the retry hit the unique
/// key, took it as "already done", skipped the slot and left the record `running` forever.
async fn reply_lost_after_the_start_record_runs_the_slot_once(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let proxy = Proxy::start(upstream(dialect)).await;
    let jobs = "[[job]]\nname = \"s\"\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n";
    let d = daemon(&through(&db, &proxy), "a", "lease = \"3s\"", jobs).await;
    let mut tasks = JoinSet::new();
    d.tick(&mut tasks).await.unwrap();
    make_due(&store, "s").await;
    proxy.lose_reply_of("INSERT INTO cron_runs").await;
    tick_once(&d).await;
    assert_eq!(proxy.replies_lost(), 1, "the fault was injected");
    assert_eq!(outcomes(&store, "s").await, [(1, "ok".to_string())]);
    assert_eq!(store.job("s").await.unwrap().unwrap().exec_by, None);
}

/// Issue 9: the release commits, its reply is lost: the retry finds the row released by its own
/// first try; the slot is not run again and the row moves on.
async fn reply_lost_after_the_release_runs_the_slot_once(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let proxy = Proxy::start(upstream(dialect)).await;
    let jobs = "[[job]]\nname = \"r\"\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n";
    let d = daemon(&through(&db, &proxy), "a", "lease = \"3s\"", jobs).await;
    let mut tasks = JoinSet::new();
    d.tick(&mut tasks).await.unwrap();
    let slot = make_due(&store, "r").await;
    proxy.lose_reply_of("next_exec = CASE WHEN dirty").await;
    tick_once(&d).await;
    assert_eq!(proxy.replies_lost(), 1, "the fault was injected");
    assert_eq!(outcomes(&store, "r").await, [(1, "ok".to_string())]);
    let row = store.job("r").await.unwrap().unwrap();
    assert_eq!(row.exec_by, None);
    assert!(row.slot.unwrap() > slot, "released to the next slot");
    assert_eq!(row.last_status.as_deref(), Some("ok"));
}

/// Issue 29: releases written together (`daemon/release_batch.rs`) whose connection is lost
/// read back as single releases do: each is then written alone, and lands or finds itself
/// already done, and every run is recorded once with its outcome. On MySQL the batch is one
/// transaction of three multi-row statements (lock, run ends, rows), cut part way (the reply
/// of each statement inside the transaction: the server rolls it all back) or at the commit
/// (the reply of `COMMIT`: it all landed); on PostgreSQL it is one multi-row statement, whose
/// reply is lost after it ran.
async fn a_batch_of_releases_cut_off_part_way_or_at_its_commit_reads_back_once(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let proxy = Proxy::start(upstream(dialect)).await;
    let url = crate::util::db_url(&through(&db, &proxy));
    for name in ["p1", "p2", "p3"] {
        store
            .execute_raw(&format!(
                "INSERT INTO cron_table (name, schedule, command) VALUES ('{name}', '0 0 1 1 *', 'true')"
            ))
            .await
            .unwrap();
    }
    let ended = crate::util::ok_release(4_102_444_800_000, "done\n");
    // (what is cut, the text whose reply is lost, whether it is a simple query, whether the
    // batch landed)
    let cases: &[(&str, &str, bool, bool)] = match dialect {
        Dialect::Postgres => &[("the one statement", "FROM v WHERE id = v_id", false, true)],
        _ => &[
            ("at the lock", "FOR UPDATE", false, false),
            ("at the run ends", "UPDATE cron_runs JOIN", false, false),
            ("at the rows", "UPDATE cron_table JOIN", false, false),
            ("at the commit", "COMMIT", true, true),
        ],
    };
    for (round, &(cut, text, simple, landed)) in cases.iter().enumerate() {
        // A fresh connection: the proxy knows a statement by the text sent when preparing it.
        let via = Store::connect(&url, 1).unwrap();
        for name in ["p1", "p2", "p3"] {
            make_due(&store, name).await;
        }
        let (rows, keys) = crate::util::claim_and_start(&via, "a", 3, 1_000 + round as i64).await;
        assert_eq!(rows.len(), 3, "{cut}");
        let batch: Vec<ReleaseOf<'_>> = rows
            .iter()
            .zip(&keys)
            .map(|(r, k)| ReleaseOf {
                id: r.id,
                token: r.token,
                release: &ended,
                run: Some(k),
            })
            .collect();
        let lost_before = proxy.replies_lost();
        if simple {
            proxy.lose_reply_to(text).await;
        } else {
            proxy.lose_reply_of(text).await;
        }
        assert!(via.release_together("a", &batch).await.is_err(), "{cut}");
        assert_eq!(
            proxy.replies_lost(),
            lost_before + 1,
            "{cut}: the fault was injected"
        );
        // What the server kept: nothing (part way) or all of it.
        let mut kept = 0;
        for r in &rows {
            if store.job(&r.name).await.unwrap().unwrap().exec_by.is_none() {
                kept += 1;
            }
        }
        assert_eq!(kept, if landed { 3 } else { 0 }, "{cut}");
        // Each written alone, as the daemon then does.
        let again = Store::connect(&url, 1).unwrap();
        for r in &batch {
            let fenced = again
                .release(r.id, "a", r.token, r.release, r.run)
                .await
                .unwrap();
            let want = if landed { Fenced::Lost } else { Fenced::Done };
            assert_eq!(fenced, want, "{cut}");
        }
        for k in &keys {
            let runs = store.runs_between(&k.job, k.slot, k.slot).await.unwrap();
            let outcomes: Vec<&str> = runs.iter().map(|r| r.outcome.as_str()).collect();
            assert_eq!(outcomes, ["ok"], "{cut}: {}", k.job);
        }
        via.close().await;
        again.close().await;
    }
}

/// Issue 9: every connection reset while a job runs: the extensions fail once, the pool
/// reconnects, the run ends and is recorded once.
async fn connections_reset_mid_run_do_not_lose_the_run(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let proxy = Proxy::start(upstream(dialect)).await;
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let jobs = format!(
        "[[job]]\nname = \"x\"\nschedule = \"0 0 1 1 *\"\ncommand = \"while [ ! -e {} ]; do sleep 0.05; done\"\n",
        go.display()
    );
    let d = daemon(&through(&db, &proxy), "a", "lease = \"3s\"", &jobs).await;
    let mut tasks = JoinSet::new();
    d.tick(&mut tasks).await.unwrap();
    drop(tasks);
    make_due(&store, "x").await;
    let (tx, handle) = start(d);
    eventually(Duration::from_secs(10), "the run to start", || async {
        (!outcomes(&store, "x").await.is_empty()).then_some(())
    })
    .await;
    for _ in 0..3 {
        proxy.reset();
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    std::fs::write(&go, "").unwrap();
    eventually(Duration::from_secs(10), "the run to end", || async {
        let h = outcomes(&store, "x").await;
        (h.last().is_some_and(|(_, o)| o != "running")).then_some(h)
    })
    .await;
    stop(tx, handle).await;
    assert_eq!(outcomes(&store, "x").await, [(1, "ok".to_string())]);
}

/// A job that records its own pid, and notes any earlier process of the job still alive when it
/// starts: the verdict does not trust the daemons' bookkeeping.
fn self_checking_job(dir: &Path, name: &str, keys: &str, tail: &str) -> String {
    let script = dir.join("job.sh");
    std::fs::write(
        &script,
        format!(
            "for p in $(cat {d}/pids 2>/dev/null); do\n\
             s=$(awk '{{print $3}}' /proc/$p/stat 2>/dev/null)\n\
             if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo $p >> {d}/overlap; fi\n\
             done\n\
             echo $$ >> {d}/pids\n\
             {tail}\n",
            d = dir.display()
        ),
    )
    .unwrap();
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"0 0 1 1 *\"\n{keys}\ncommand = \"sh {}\"\n",
        script.display()
    )
}

fn pids(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("pids"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect()
}

/// Issue 9 (6): node A's connection stalls for longer than the lease (`on_lease_lost = kill`):
/// A's process is dead before node B starts the rerun.
async fn stall_longer_than_the_lease_kills_the_run_before_the_rerun(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let proxy = Proxy::start(upstream(dialect)).await;
    let dir = tempfile::tempdir().unwrap();
    let jobs = self_checking_job(dir.path(), "k", "kill_grace = \"1s\"", "exec sleep 60");
    let a = daemon(&through(&db, &proxy), "a", "lease = \"3s\"", &jobs).await;
    let mut tasks = JoinSet::new();
    a.tick(&mut tasks).await.unwrap();
    drop(tasks);
    make_due(&store, "k").await;
    let (a_tx, a_handle) = start(a);
    let first = eventually(Duration::from_secs(10), "A's run", || async {
        pids(dir.path()).first().copied()
    })
    .await;
    proxy.stall(true);
    let b = daemon(&db.url, "b", "lease = \"3s\"", &jobs).await;
    let (b_tx, b_handle) = start(b);
    eventually(Duration::from_secs(20), "B's rerun", || async {
        (pids(dir.path()).len() >= 2).then_some(())
    })
    .await;
    let overlap = std::fs::read_to_string(dir.path().join("overlap")).unwrap_or_default();
    assert!(
        overlap.is_empty(),
        "A's run {first} was alive when B's rerun started"
    );
    assert!(!alive(first));
    proxy.stall(false);
    stop(b_tx, b_handle).await;
    stop(a_tx, a_handle).await;
    let h = outcomes(&store, "k").await;
    assert_eq!(h[0], (1, "lost".to_string()), "{h:?}");
}

/// Issue 9 (6): the same stall with `on_lease_lost = ignore`: nothing kills the run, it is left
/// to finish (and its node writes nothing for it).
async fn stall_longer_than_the_lease_with_ignore_lets_the_run_finish(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let proxy = Proxy::start(upstream(dialect)).await;
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    let jobs = self_checking_job(
        dir.path(),
        "i",
        "on_lease_lost = \"ignore\"",
        &format!("sleep 5; touch {}", done.display()),
    );
    let a = daemon(&through(&db, &proxy), "a", "lease = \"2s\"", &jobs).await;
    let mut tasks = JoinSet::new();
    a.tick(&mut tasks).await.unwrap();
    drop(tasks);
    make_due(&store, "i").await;
    let (a_tx, a_handle) = start(a);
    let first = eventually(Duration::from_secs(10), "A's run", || async {
        pids(dir.path()).first().copied()
    })
    .await;
    proxy.stall(true);
    // It reached its end (nothing killed it), and then exited on its own.
    eventually(Duration::from_secs(15), "the run to finish", || async {
        done.exists().then_some(())
    })
    .await;
    eventually(
        Duration::from_secs(5),
        "the run's process to exit",
        || async { (!alive(first)).then_some(()) },
    )
    .await;
    proxy.stall(false);
    stop(a_tx, a_handle).await;
}

/// Issue 9 (2): a finished run whose release cannot be written for longer than the lease (here
/// an operator's transaction holds its history row) while the database is otherwise reachable:
/// the lease is still extended, the release is retried and lands; the slot is not run again.
/// Before, the lease stopped with the process and the retry gave up after one lease: another
/// claim took the row over and ran the slot a second time.
async fn release_blocked_longer_than_the_lease_keeps_the_lease_and_lands(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let count = dir.path().join("count");
    let jobs = format!(
        "[[job]]\nname = \"b\"\nschedule = \"0 0 1 1 *\"\n\
         command = \"echo run >> {}; while [ ! -e {} ]; do sleep 0.05; done\"\n",
        count.display(),
        go.display()
    );
    let d = daemon(&db.url, "a", "lease = \"2s\"", &jobs).await;
    let mut tasks = JoinSet::new();
    d.tick(&mut tasks).await.unwrap();
    drop(tasks);
    make_due(&store, "b").await;
    let (tx, handle) = start(d);
    eventually(Duration::from_secs(10), "the run to start", || async {
        (!outcomes(&store, "b").await.is_empty()).then_some(())
    })
    .await;
    // An operator's transaction holds the run's history row: the release waits on it.
    let pool = sqlx::AnyPool::connect(&db.url).await.unwrap();
    let mut lock = pool.begin().await.unwrap();
    sqlx::query("UPDATE cron_runs SET message = message WHERE job_name = 'b'")
        .execute(&mut *lock)
        .await
        .unwrap();
    std::fs::write(&go, "").unwrap();
    // Three leases long, the release cannot land; the claim must stay alive meanwhile.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let row = store.job("b").await.unwrap().unwrap();
        let now = store.now().await.unwrap();
        assert_eq!(row.exec_by.as_deref(), Some("a"), "the claim was given up");
        assert!(row.lease_until.unwrap() > now, "the lease ran out");
    }
    lock.rollback().await.unwrap();
    eventually(Duration::from_secs(10), "the release to land", || async {
        let row = store.job("b").await.unwrap().unwrap();
        row.exec_by.is_none().then_some(())
    })
    .await;
    stop(tx, handle).await;
    assert_eq!(outcomes(&store, "b").await, [(1, "ok".to_string())]);
    let runs = std::fs::read_to_string(&count).unwrap();
    assert_eq!(runs.lines().count(), 1, "the slot ran again");
}

/// The lease extension's connection is opened before a node's first claim (and again after the
/// node gave it back, `daemon/lease_connection.rs`): while the server refuses new connections,
/// a due row is not claimed, however well the node's pooled connection serves its looks; once
/// connections are taken again, the row runs once and its lease is extended (the run outlasts
/// the trust window of its claim). Before, the claim came first and the connection was opened
/// for the first extension: a refusal then cost the run its claim.
async fn a_node_that_cannot_open_its_lease_connection_claims_nothing(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let proxy = Proxy::start(upstream(dialect)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[database]\nurl = \"{}\"\n[node]\nname = \"a\"\n[daemon]\n{}\n\
         poll_interval = \"200ms\"\nlease = \"2s\"\nshutdown_grace = \"5s\"\n\
         [[job]]\nname = \"s\"\nschedule = \"0 0 1 1 *\"\ncommand = \"sleep 3\"\n",
        through(&db, &proxy),
        default_user()
    );
    let node = DaemonProcess::start(dir.path(), "a", &config);
    // Past its start: the pool's connections its loops use are open (new ones are refused
    // from here on; one opened for the first pass after the refusal was an outage logged).
    eventually(
        Duration::from_secs(20),
        "the node's first passes",
        || async {
            // Its prepare pass computed the job's first slot.
            let prepared = store.job("s").await.unwrap()?.next_exec.is_some();
            (prepared
                && !store.nodes().await.unwrap().is_empty()
                && node.log_text().contains("history pruning round done"))
            .then_some(())
        },
    )
    .await;
    proxy.refuse(true);
    make_due(&store, "s").await;
    eventually(
        Duration::from_secs(30),
        "the node to say it cannot open the lease extension's connection",
        || async {
            node.log_text()
                .contains("the lease extension's connection cannot be opened; nothing is claimed")
                .then_some(())
        },
    )
    .await;
    assert!(
        outcomes(&store, "s").await.is_empty(),
        "nothing claimed while the lease connection cannot open:\n{}",
        node.log_text()
    );
    let claimed_by = store
        .scalar_i64("SELECT COUNT(*) FROM cron_table WHERE name = 's' AND exec_by IS NOT NULL")
        .await
        .unwrap();
    assert_eq!(claimed_by, Some(0), "the row is not held");
    proxy.refuse(false);
    eventually(Duration::from_secs(40), "the run to end", || async {
        let h = outcomes(&store, "s").await;
        (h.last().is_some_and(|(_, o)| o != "running")).then_some(())
    })
    .await;
    let log = node.log_text();
    node.stop();
    assert_eq!(
        outcomes(&store, "s").await,
        [(1, "ok".to_string())],
        "once, extended past its claim's trust window:\n{log}"
    );
    assert!(
        log.contains("the lease extension's connection is open again; claims go on"),
        "{log}"
    );
    assert!(
        !log.contains("database unreachable"),
        "the node's pool worked all along: no outage is logged\n{log}"
    );
}
