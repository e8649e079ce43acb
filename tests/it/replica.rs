//! A MariaDB primary with a replica that applies its binary log: the triggers that make every
//! id the server's (jobs, audit rows, lock requests) refuse an insert in a session that set
//! `insert_id`. MIXED, MariaDB's default, logs sqlcron's inserts as rows, as ROW does, and
//! their replicas apply everything; STATEMENT logs them as statements, each after the `insert_id` the
//! primary gave, and its replica stops at the first such insert with sqlcron's reason (the
//! documented limit: docs/src/how-to/production-databases.md). Throwaway servers of the
//! test's own, on free ports.

use std::process::Command;
use std::time::Duration;

use crate::mariadb_outage::ThrowawayMariadb;
use crate::util::{DaemonProcess, eventually, node_config, sqlcron, stderr};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_replica_applies_what_sqlcron_writes() {
    replica_of("MIXED", false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_replica_applies_what_sqlcron_writes() {
    replica_of("ROW", false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_replica_stops_with_the_reason_as_documented() {
    replica_of("STATEMENT", true).await
}

/// `sql` run by the `mariadb` client on `db`: whether it succeeded, and what it printed.
fn client(db: &ThrowawayMariadb, sql: &str) -> (bool, String) {
    let out = Command::new("mariadb")
        .args([
            "-h127.0.0.1",
            &format!("-P{}", db.port),
            "-uroot",
            "-e",
            sql,
        ])
        .output()
        .expect("the mariadb client: apt-get install mariadb-client");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

async fn replica_of(format: &str, stops: bool) {
    let primary = ThrowawayMariadb::start_with(|_| {
        vec![
            "--log-bin=primary-bin".into(),
            "--server-id=1".into(),
            format!("--binlog-format={format}"),
        ]
    });
    let replica = ThrowawayMariadb::start_with(|_| vec!["--server-id=2".into()]);
    let (ok, said) = client(
        &replica,
        &format!(
            "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={}, MASTER_USER='root', \
             MASTER_PASSWORD='', MASTER_USE_GTID=no, MASTER_LOG_FILE='primary-bin.000001', \
             MASTER_LOG_POS=4; START SLAVE",
            primary.port
        ),
    );
    assert!(ok, "{said}");
    let (ok, said) = client(&primary, "CREATE DATABASE sqlcron");
    assert!(ok, "{said}");
    let url = primary.url().replace("/mysql", "/sqlcron");
    let dir = tempfile::tempdir().unwrap();
    let jobs = "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n";
    let node = DaemonProcess::start(dir.path(), "n1", &node_config(&url, "n1", jobs));
    let conf = dir.path().join("n1.toml");
    let conf = conf.to_str().unwrap();
    // A job (the apply), a lock request, audit rows (a pause and a resume).
    for args in [
        &["lock", "L", "--wait", "30s", "--", "true"][..],
        &["pause", "tick"],
        &["resume", "tick"],
    ] {
        let out = sqlcron(&[&["--config", conf][..], args].concat());
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }
    let doctor = crate::util::stdout(&sqlcron(&["--config", conf, "doctor"]));
    let warned = doctor.contains("binlog_format = STATEMENT): its replicas stop");
    assert_eq!(warned, format == "STATEMENT", "{doctor}");
    if stops {
        let status = eventually(Duration::from_secs(60), "the replica stopped", || async {
            let (_, status) = client(&replica, "SHOW SLAVE STATUS\\G");
            status.contains("Slave_SQL_Running: No").then_some(status)
        })
        .await;
        assert!(status.contains("unset insert_id"), "{status}");
    } else {
        eventually(
            Duration::from_secs(60),
            "all of it on the replica",
            || async {
                let (_, status) = client(&replica, "SHOW SLAVE STATUS\\G");
                assert!(
                    !status.contains("Slave_SQL_Running: No"),
                    "the replica stopped: {status}"
                );
                let (ok, counts) = client(
                    &replica,
                    "SELECT (SELECT COUNT(*) FROM sqlcron.cron_table WHERE name = 'tick') \
                     + (SELECT COUNT(*) FROM sqlcron.cron_locks WHERE name = 'L') \
                     + (SELECT COUNT(*) > 1 FROM sqlcron.cron_audit WHERE job = 'tick') \
                     + (SELECT COUNT(*) > 2 FROM sqlcron.cron_runs WHERE job_name = 'tick') AS n",
                );
                (ok && counts.lines().nth(1).is_some_and(|n| n.trim() == "4")).then_some(())
            },
        )
        .await;
    }
    let log = node.log_text();
    assert!(node.stop().success(), "{log}");
}
