//! Issue 26 (1): jobs edited with the distribution's `sqlite3` on a live daemon's database. The
//! schema's triggers run inside whatever SQLite writes the file, so they must work on the oldest
//! SQLite we support (3.31); the CLI here is the machine's own (`scripts/test.sh` installs it).

use std::process::Command;
use std::time::Duration;

use sqlcron::store::{Dialect, Store};

use crate::util::{DaemonProcess, TestDb, eventually, node_config, stderr};

/// Functions, operators and statements newer than SQLite 3.31, with the version that added
/// each: none may appear in the schema a migrated database holds.
const NEWER_THAN_FLOOR: &[(&str, &str)] = &[
    ("unixepoch(", "3.38"),
    ("subsec", "3.42"),
    ("->", "3.38"),
    ("iif(", "3.32"),
    ("returning", "3.35"),
    ("strict", "3.37"),
    ("drop column", "3.35"),
    ("format(", "3.38"),
    ("concat(", "3.44"),
    ("concat_ws(", "3.44"),
    ("octet_length(", "3.43"),
    ("timediff(", "3.43"),
    ("unhex(", "3.41"),
    ("floor(", "3.35"),
    ("ceil(", "3.35"),
    ("pow(", "3.35"),
];

fn sqlite3(db: &str, sql: &str) -> String {
    let out = Command::new("sqlite3")
        .args(["-batch", "-bail", "-cmd", ".timeout 10000", db, sql])
        .output()
        .expect("the sqlite3 command-line tool (apt-get install sqlite3)");
    assert!(out.status.success(), "sqlite3 {sql}: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

async fn ok_runs(store: &Store, job: &str) -> Vec<String> {
    store
        .history(Some(job), 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.outcome == "ok")
        .map(|r| r.output.unwrap_or_default().trim().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_distributions_sqlite3_edits_jobs_on_a_live_database() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let path = db.url.trim_start_matches("sqlite://").to_string();
    let store = db.store().await;
    let schema = sqlite3(&path, "SELECT group_concat(sql, ';') FROM sqlite_master");
    let lower = schema.to_lowercase();
    for (what, since) in NEWER_THAN_FLOOR {
        assert!(
            !lower.contains(what),
            "the schema uses {what:?} (SQLite {since}), above the 3.31 floor"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let _node = DaemonProcess::start(dir.path(), "n1", &node_config(&db.url, "n1", ""));

    sqlite3(
        &path,
        "INSERT INTO cron_table (name, schedule, command) VALUES ('cli', '* * * * * *', 'echo v1')",
    );
    eventually(Duration::from_secs(20), "the inserted job ran", || async {
        ok_runs(&store, "cli")
            .await
            .contains(&"v1".to_string())
            .then_some(())
    })
    .await;
    sqlite3(
        &path,
        "UPDATE cron_table SET command = 'echo v2' WHERE name = 'cli'",
    );
    eventually(Duration::from_secs(20), "the updated job ran", || async {
        ok_runs(&store, "cli")
            .await
            .contains(&"v2".to_string())
            .then_some(())
    })
    .await;
    sqlite3(
        &path,
        "UPDATE cron_table SET enabled = 0 WHERE name = 'cli'",
    );
    // Paused: once the run in hand (if any) ends, no new run starts. The row is left idle.
    eventually(Duration::from_secs(20), "the paused job idle", || async {
        let busy = store
            .scalar_i64(
                "SELECT COUNT(*) FROM cron_table WHERE name = 'cli' AND exec_by IS NOT NULL",
            )
            .await
            .unwrap()
            .unwrap_or(1);
        (busy == 0).then_some(())
    })
    .await;
    let count = store.history(Some("cli"), 1000).await.unwrap().len();
    // Three poll intervals of the node (1 s each) with the job due every second.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        store.history(Some("cli"), 1000).await.unwrap().len(),
        count,
        "a job paused with UPDATE ... enabled = 0 kept running"
    );
    sqlite3(&path, "DELETE FROM cron_table WHERE name = 'cli'");

    let now = store.now().await.unwrap();
    let audit: Vec<(String, String, i64)> = store
        .audit_log(Some("cli"), 10)
        .await
        .unwrap()
        .into_iter()
        .rev()
        .map(|r| (r.action, r.detail.unwrap_or_default(), r.at))
        .collect();
    let actions: Vec<(&str, &str)> = audit
        .iter()
        .map(|(a, d, _)| (a.as_str(), d.as_str()))
        .collect();
    assert_eq!(
        actions,
        vec![
            ("sql_insert", ""),
            ("sql_update", "changed command"),
            ("sql_update", "changed enabled"),
            ("sql_delete", ""),
        ]
    );
    assert!(
        audit.iter().all(|(_, _, at)| (now - at).abs() < 120_000),
        "audit times from the SQLite clock in milliseconds: {audit:?}"
    );
    store.close().await;
}
