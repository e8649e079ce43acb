//! PostgreSQL failover: a primary and a streaming standby of the test's own (initdb,
//! pg_basebackup), two daemons on a multi-host URL. The primary is stopped hard while a job runs
//! every two seconds, the standby promoted; the nodes must find the new primary, run every slot
//! once, and keep the history written before the failover (synchronous replication: no commit
//! acknowledged by the old primary is missing on the new one).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use sqlcron::store::Store;

use crate::outage::{ThrowawayPostgres, lines};
use crate::util::{DaemonProcess, eventually, node_config};

/// A slot as `$SQLCRON_SLOT` gives it (RFC 3339), in milliseconds.
fn slot_ms(text: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("slot {text:?}: {e}"))
        .timestamp_millis()
}

/// `start SLOT ATTEMPT NODE` lines by (slot, attempt), and the slots that ended.
fn runs(path: &Path) -> (BTreeMap<(i64, i64), usize>, BTreeSet<i64>) {
    let mut started = BTreeMap::new();
    let mut ended = BTreeSet::new();
    for l in lines(path) {
        let f: Vec<&str> = l.split(' ').collect();
        match f.as_slice() {
            ["start", slot, attempt, _node] => {
                *started
                    .entry((slot_ms(slot), attempt.parse().unwrap()))
                    .or_default() += 1;
            }
            ["end", slot, _attempt] => {
                ended.insert(slot_ms(slot));
            }
            _ => panic!("unexpected line {l:?}"),
        }
    }
    (started, ended)
}

/// The multi-host URL of the two servers, the writable one chosen.
fn primary_then_standby(primary: &ThrowawayPostgres, standby: &ThrowawayPostgres) -> String {
    format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port, standby.port
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_failover_to_a_promoted_standby_runs_every_slot_once() {
    let primary = ThrowawayPostgres::start();
    let standby = primary.standby();
    // Synchronous replication: a commit the old primary acknowledged is on the standby.
    let admin = Store::connect(&crate::util::db_url(&primary.url()), 1).unwrap();
    admin
        .execute_raw("ALTER SYSTEM SET synchronous_standby_names = '*'")
        .await
        .unwrap();
    admin.execute_raw("SELECT pg_reload_conf()").await.unwrap();
    eventually(Duration::from_secs(20), "the standby in sync", || async {
        let n = admin
            .scalar_i64("SELECT COUNT(*) FROM pg_stat_replication WHERE sync_state = 'sync'")
            .await
            .ok()
            .flatten()
            .unwrap_or(0);
        (n == 1).then_some(())
    })
    .await;
    admin.close().await;

    let url = primary_then_standby(&primary, &standby);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let job = format!(
        "[[job]]\nname = \"every2\"\nschedule = \"@every 2s\"\n\
         command = \"echo start $SQLCRON_SLOT $SQLCRON_ATTEMPT $SQLCRON_NODE >> {0}; sleep 0.5; \
         echo end $SQLCRON_SLOT $SQLCRON_ATTEMPT >> {0}\"\n",
        out.display()
    );
    let nodes: Vec<DaemonProcess> = ["a", "b"]
        .iter()
        .map(|n| DaemonProcess::start(dir.path(), n, &node_config(&url, n, &job)))
        .collect();
    eventually(
        Duration::from_secs(30),
        "runs before the failover",
        || async { (runs(&out).1.len() >= 3).then_some(()) },
    )
    .await;

    // The primary dies; a second later the standby is promoted (as Patroni or an operator
    // would).
    let (_, ended_before) = runs(&out);
    let started_before = lines(&out)
        .iter()
        .filter(|l| l.starts_with("start"))
        .count();
    let fault = Instant::now();
    primary.crash();
    tokio::time::sleep(Duration::from_secs(1)).await;
    standby.promote();
    let gap = eventually(
        Duration::from_secs(60),
        "runs on the new primary",
        || async {
            let n = lines(&out)
                .iter()
                .filter(|l| l.starts_with("start"))
                .count();
            (n > started_before).then(|| fault.elapsed())
        },
    )
    .await;
    eventually(Duration::from_secs(30), "three more runs", || async {
        (runs(&out).1.len() >= ended_before.len() + 3).then_some(())
    })
    .await;
    let logs: Vec<String> = nodes.iter().map(|n| n.log_text()).collect();
    for n in nodes {
        let log = n.log_text();
        assert!(n.stop().success(), "{log}");
    }
    println!("failover gap (crash to the first start on the new primary): {gap:?}");
    assert!(
        logs.iter().any(|l| l.contains("database server changed")),
        "a node says it moved to the new primary:\n{}",
        logs.join("\n---\n")
    );

    // Every (slot, attempt) started once; a slot cut short by the failover may run again as a
    // later attempt (the lease rules), never as the same one.
    let (started, ended) = runs(&out);
    for ((slot, attempt), n) in &started {
        assert_eq!(*n, 1, "slot {slot} attempt {attempt} started {n} times");
    }
    // The history on the new primary holds every run that ended before the failover, once.
    let store = Store::connect(&crate::util::db_url(&standby.url()), 2).unwrap();
    let history = store.history(Some("every2"), 1000).await.unwrap();
    let mut recorded: BTreeMap<i64, usize> = BTreeMap::new();
    for r in history.iter().filter(|r| r.outcome == "ok") {
        *recorded.entry(r.slot).or_default() += 1;
    }
    for slot in &ended_before {
        assert_eq!(
            recorded.get(slot),
            Some(&1),
            "slot {slot} ended before the failover: its record is on the new primary, once"
        );
    }
    for (slot, n) in &recorded {
        assert_eq!(*n, 1, "slot {slot} recorded ok {n} times");
    }
    assert!(ended.len() >= ended_before.len() + 3);
    store.close().await;
}

/// Runs SQL statements on a throwaway server with psql (each its own `-c`).
fn psql(pg: &ThrowawayPostgres, statements: &[&str]) -> String {
    let mut cmd = std::process::Command::new("psql");
    cmd.args([
        "-h",
        "127.0.0.1",
        "-p",
        &pg.port.to_string(),
        "-U",
        "postgres",
    ])
    .args(["-d", "postgres", "-At", "-v", "ON_ERROR_STOP=1"]);
    for sql in statements {
        cmd.args(["-c", sql]);
    }
    let out = cmd.output().expect("psql");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_an_asynchronous_standby_reports_the_runs_it_lost() {
    let primary = ThrowawayPostgres::start();
    let standby = primary.standby();
    let url = primary_then_standby(&primary, &standby);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let job = format!(
        "[[job]]\nname = \"every1\"\nschedule = \"@every 1s\"\n\
         command = \"echo start $SQLCRON_SLOT $SQLCRON_ATTEMPT $SQLCRON_NODE >> {0}; \
         echo end $SQLCRON_SLOT $SQLCRON_ATTEMPT >> {0}\"\n",
        out.display()
    );
    let node = DaemonProcess::start(dir.path(), "a", &node_config(&url, "a", &job));
    eventually(Duration::from_secs(30), "runs before the cut", || async {
        (runs(&out).1.len() >= 3).then_some(())
    })
    .await;
    // The standby stops receiving (as a lagging asynchronous standby would): what the primary
    // commits from now on is not on it.
    psql(
        &standby,
        &[
            "ALTER SYSTEM SET primary_conninfo = ''",
            "SELECT pg_reload_conf()",
        ],
    );
    eventually(Duration::from_secs(20), "replication stopped", || async {
        (psql(&primary, &["SELECT COUNT(*) FROM pg_stat_replication"]) == "0").then_some(())
    })
    .await;
    let ended_at_cut = runs(&out).1.len();
    let recorded = || {
        psql(
            &primary,
            &["SELECT COUNT(*) FROM cron_runs WHERE ended IS NOT NULL"],
        )
    };
    let recorded_at_cut: usize = recorded().parse().unwrap();
    // Three more runs recorded on the primary only (their records committed, not just ended).
    eventually(Duration::from_secs(30), "runs after the cut", || async {
        (recorded().parse::<usize>().unwrap() >= recorded_at_cut + 3).then_some(())
    })
    .await;
    primary.crash();
    standby.promote();
    // The node reads back what it recorded before the outage and reports what is missing.
    let report = "is not in the database after the outage";
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let log = loop {
        let log = node.log_text();
        if log.contains("runs recorded before the outage read back") {
            break log;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no report of the lost runs in 60 s:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let reported = log.matches(report).count();
    assert!(node.stop().success(), "{log}");
    // Each is an event too, for `sqlcron events` on the new primary.
    let store = Store::connect(&crate::util::db_url(&standby.url()), 1).unwrap();
    let events = store.events(Some("every1"), 100).await.unwrap();
    let lost_events = events.iter().filter(|e| e.kind == "lost_record").count();
    for e in events.iter().filter(|e| e.kind == "lost_record") {
        assert_eq!(e.node.as_deref(), Some("a"), "{e:?}");
        assert!(
            e.detail
                .as_deref()
                .is_some_and(|d| d.starts_with("slot ") && d.contains("token")),
            "{e:?}"
        );
    }
    store.close().await;
    assert_eq!(
        lost_events, reported,
        "one lost_record event per run reported: {events:?}\n{log}"
    );
    // At least one run recorded after the cut is gone from the promoted standby and reported.
    // Not all three every time: a standby whose replication was cut may still hold WAL that was
    // on its way (seen on a loaded machine: one of three lost, and reported).
    assert!(
        reported >= 1,
        "the runs recorded after the cut are reported ({reported}):\n{log}"
    );
    assert!(
        reported <= runs(&out).1.len() - ended_at_cut + 2,
        "runs the standby has are not reported ({reported}):\n{log}"
    );
}

/// Sets `default_transaction_read_only` on the server and reloads it (as an operator fencing an
/// old primary would), with psql.
fn set_read_only(pg: &ThrowawayPostgres, on: bool) {
    let out = std::process::Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &pg.port.to_string(),
            "-U",
            "postgres",
            "-d",
        ])
        .arg("postgres")
        .args(["-v", "ON_ERROR_STOP=1", "-c"])
        .arg(format!(
            "ALTER SYSTEM SET default_transaction_read_only = {}",
            if on { "on" } else { "off" }
        ))
        .args(["-c", "SELECT pg_reload_conf()"])
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_turned_read_only_is_left_until_it_takes_writes_again() {
    let pg = ThrowawayPostgres::start();
    let log = crate::outage::daemon_survives_restart(
        &pg.url(),
        Duration::from_secs(10),
        Duration::from_secs(30),
        |up| set_read_only(&pg, !up),
    )
    .await;
    assert!(
        log.contains("does not accept writes"),
        "the node says why it does not use the server:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_commands_use_the_read_url_and_outlive_the_primary() {
    use crate::util::{sqlcron, stderr, stdout};
    let primary = ThrowawayPostgres::start();
    let standby = primary.standby();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("cli.toml");
    let config = node_config(
        &primary.url(),
        "cli",
        "[[job]]\nname = \"report\"\nschedule = \"0 4 * * *\"\ncommand = \"true\"\n",
    )
    .replace(
        "[node]",
        &format!("read_url = \"{}\"\n[node]", standby.url()),
    );
    std::fs::write(&cfg, config).unwrap();
    let cfg = cfg.to_str().unwrap();
    let applied = sqlcron(&["--config", cfg, "apply"]);
    assert!(applied.status.success(), "{}", stderr(&applied));
    let primary_store = Store::connect(&crate::util::db_url(&primary.url()), 1).unwrap();
    primary_store
        .execute_raw(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, ended, outcome) \
             VALUES ('report', 1000, 1, 'old', 1, 1000, 2000, 'ok')",
        )
        .await
        .unwrap();
    primary_store.close().await;
    // The record reaches the standby, and the reading commands show it from there.
    eventually(
        Duration::from_secs(20),
        "history from the standby",
        || async {
            let out = sqlcron(&["--config", cfg, "history", "report", "--json"]);
            (out.status.success() && stdout(&out).contains("\"node\": \"old\"")).then_some(())
        },
    )
    .await;
    // Without the primary, the reading commands still answer; a writing one does not.
    primary.crash();
    for args in [
        vec!["status"],
        vec!["history", "report"],
        vec!["explain", "report"],
    ] {
        let out = sqlcron(&[&["--config", cfg][..], &args[..]].concat());
        assert!(
            out.status.success(),
            "{args:?} reads from the standby: {}",
            stderr(&out)
        );
        assert!(
            stdout(&out).contains("report"),
            "{args:?}: {}",
            stdout(&out)
        );
    }
    let run = sqlcron(&["--config", cfg, "run", "report"]);
    assert!(
        !run.status.success(),
        "sqlcron run writes to [database] url, which is down"
    );
}

/// The lease extension's pool of its own (`Store::own_pool`, `daemon/lease_thread.rs`) shares
/// the daemon's choice of server: when the daemon's pool moves to another host, the lease pool
/// points there too, before any error of its own. Otherwise, in a split with two servers taking
/// writes, a node could extend its leases on one while it claims and releases on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_its_own_follows_the_stores_choice_of_server() {
    let db = crate::util::TestDb::new(sqlcron::store::Dialect::Postgres).await;
    let database = db.url.rsplit('/').next().unwrap().to_string();
    // Nothing listens on the first host's port.
    let down = crate::util::free_port();
    let url = format!("postgres://postgres@127.0.0.1:{down},127.0.0.1:5432/{database}");
    let store = Store::connect(&crate::util::db_url(&url), 2).unwrap();
    let lease = store.own_pool(2).unwrap().expect("a pool of its own");
    assert!(
        store.server_name().unwrap().ends_with(&down.to_string()),
        "{:?}",
        store.server_name()
    );
    // The store's statements find the first host gone, and it moves to the second.
    eventually(
        Duration::from_secs(20),
        "the store on the second host",
        || async { store.now().await.ok() },
    )
    .await;
    assert!(
        store.server_name().unwrap().ends_with(":5432"),
        "{:?}",
        store.server_name()
    );
    // The lease pool never failed, yet its first statement goes to the second host.
    lease
        .now()
        .await
        .expect("the lease pool follows the store's choice of server");
    lease.close().await;
    store.close().await;
}

/// The read-back follows any broken connection, not only a poll that failed: the server ends
/// every connection of the node (as a failover does) after one of its run records was lost
/// (deleted here, as a standby that never received it would lack it). Whichever of the node's
/// loops meets the broken connection first, the node reads back the runs it recorded before
/// it claims again, and reports the lost one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_ended_by_the_server_have_the_runs_recorded_before_read_back() {
    let db = crate::util::TestDb::new(sqlcron::store::Dialect::Postgres).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let job = "[[job]]\nname = \"every1\"\nschedule = \"@every 1s\"\ncommand = \"true\"\n";
    let node = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", job));
    let ended = || async {
        store
            .scalar_i64("SELECT COUNT(*) FROM cron_runs WHERE ended IS NOT NULL")
            .await
            .unwrap()
            .unwrap_or(0)
    };
    eventually(Duration::from_secs(30), "three runs recorded", || async {
        (ended().await >= 3).then_some(())
    })
    .await;
    let lost = store
        .scalar_i64(
            "DELETE FROM cron_runs WHERE id = (SELECT MAX(id) FROM cron_runs \
             WHERE ended IS NOT NULL) RETURNING slot",
        )
        .await
        .unwrap()
        .expect("a run record deleted");
    store
        .execute_raw(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .await
        .unwrap();
    let report = "a run this node recorded is not in the database after the outage";
    let log = eventually(Duration::from_secs(30), "the lost run reported", || async {
        let log = node.log_text();
        log.contains(report).then_some(log)
    })
    .await;
    let reported: Vec<&str> = log.lines().filter(|l| l.contains(report)).collect();
    assert_eq!(reported.len(), 1, "only the lost run is reported:\n{log}");
    let slot = chrono::DateTime::from_timestamp_millis(lost)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string();
    assert!(
        reported[0].contains(&slot) && reported[0].contains("its record is missing"),
        "the lost run ({slot}) is the one reported:\n{log}"
    );
    assert!(node.stop().success(), "{log}");
    store.close().await;
}

/// A standby first in the list of hosts (after a failover that left the primary on a later
/// host): every command finds the primary at once, and so does a node at its start (issue 52,
/// bugs 1 and 2). Before, `migrate`, `apply`, `status`, `history`, `explain` and `events` each
/// failed after 5 s with `pool timed out while waiting for an open connection`, and a node
/// ran nothing until its pool's timeout had passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_listed_first_is_passed_over_at_once() {
    use crate::util::{sqlcron, stderr};
    let primary = ThrowawayPostgres::start();
    let standby = primary.standby();
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        standby.port, primary.port
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("cli.toml");
    std::fs::write(
        &cfg,
        node_config(
            &url,
            "cli",
            "[[job]]\nname = \"report\"\nschedule = \"0 4 * * *\"\ncommand = \"true\"\n",
        ),
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    for args in [
        vec!["migrate"],
        vec!["apply"],
        vec!["status"],
        vec!["history"],
        vec!["explain", "report"],
        vec!["events"],
    ] {
        let began = std::time::Instant::now();
        let out = sqlcron(&[&["--config", cfg][..], &args[..]].concat());
        // `status` and `explain` say "no live node" (exit 0 with a warning, or 0); none fails
        // on the standby.
        assert!(
            out.status.success(),
            "{args:?} with the standby first: {}",
            stderr(&out)
        );
        eprintln!("{args:?}: {:?}", began.elapsed());
    }
    // A node started on the same list runs its job without waiting out a pool timeout.
    let marker = dir.path().join("ran");
    let node = DaemonProcess::start(
        dir.path(),
        "n1",
        &node_config(
            &url,
            "n1",
            &format!(
                "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\ncommand = \"touch {}\"\n",
                marker.display()
            ),
        ),
    );
    eventually(Duration::from_secs(20), "tick ran", || async {
        marker.exists().then_some(())
    })
    .await;
    let log = node.log_text();
    assert!(
        !log.contains("pool timed out") && !log.contains("database not ready"),
        "the node waited on the standby:\n{log}"
    );
    assert!(node.stop().success(), "{log}");
}
