//! Issue 26 (6): `sqlcron doctor` passes on a healthy node and names each seeded problem, with
//! its fix and the exit code of the worst.

use std::time::Duration;

use sqlcron::store::Dialect;

use crate::util::{DaemonProcess, TestDb, eventually, node_config, sqlcron, stderr, stdout};

for_each_dialect!(doctor_names_each_problem);

async fn doctor_names_each_problem(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let job = "[[job]]\nname = \"fine\"\nschedule = \"@daily\"\ncommand = \"true\"\n";
    let _n1 = DaemonProcess::start(dir.path(), "n1", &node_config(&db.url, "n1", job));
    eventually(Duration::from_secs(20), "n1 alive", || async {
        let n = store.nodes().await.unwrap_or_default();
        let now = store.now().await.unwrap();
        n.iter()
            .any(|n| n.name == "n1" && n.alive(now))
            .then_some(())
    })
    .await;
    let doctor = |config: &str| {
        let out = sqlcron(&["--config", config, "doctor"]);
        (out.status.code(), stdout(&out), stderr(&out))
    };
    if dialect == Dialect::Sqlite {
        // The state directory the service's unit makes is 0750; this test's is the test's own.
        use std::os::unix::fs::PermissionsExt;
        let db_file = std::path::PathBuf::from(db.url.trim_start_matches("sqlite://"));
        let state = db_file.parent().unwrap();
        std::fs::set_permissions(state, std::fs::Permissions::from_mode(0o750)).unwrap();
    }
    let n1 = dir.path().join("n1.toml");
    let (code, text, err) = doctor(n1.to_str().unwrap());
    assert_eq!(code, Some(0), "a healthy node:\n{text}{err}");
    assert!(text.lines().all(|l| l.starts_with("ok ")), "{text}");
    for check in [
        "database",
        "schema",
        "clock",
        "node name",
        "this node",
        "parked jobs",
        "placement",
    ] {
        assert!(text.contains(check), "no {check} check:\n{text}");
    }
    if dialect != Dialect::Sqlite {
        assert!(
            text.contains("certificate"),
            "no certificate check:\n{text}"
        );
    }

    // Seeded problems: a row the daemon parks, a job no live node offers tags for, a second
    // live node on another host, with another version and another TOML, a schema one
    // migration behind, and the metrics address held by another program.
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('broken', 'not a schedule', 'true')",
        )
        .await
        .unwrap();
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command, placement) \
             VALUES ('gpu-only', '@daily', 'true', '{\"tags\":[\"gpu\"]}')",
        )
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "broken parked", || async {
        let e: Option<String> = store
            .scalar("SELECT error FROM cron_table WHERE name = 'broken'")
            .await
            .unwrap();
        e.map(|_| ())
    })
    .await;
    let now = store.now().await.unwrap();
    store
        .execute_raw(&format!(
            "INSERT INTO cron_nodes (name, host, pid, version, started, last_seen, toml_jobs) \
             VALUES ('n2', 'elsewhere', 1, '0.0.1', {now} - 10800000, {now}, '{{\"fine\":\"0000\"}}'), \
                    ('n3', 'elsewhere', 2, '0.0.2', {now} - 7200000, {now}, '{{\"fine\":\"0000\"}}')"
        ))
        .await
        .unwrap();
    let latest = store
        .scalar_i64("SELECT MAX(version) FROM _sqlx_migrations")
        .await
        .unwrap()
        .unwrap();
    store
        .execute_raw(&format!(
            "DELETE FROM _sqlx_migrations WHERE version = {latest}"
        ))
        .await
        .unwrap();
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let n2 = dir.path().join("n2.toml");
    std::fs::write(
        &n2,
        node_config(&db.url, "n2", "").replace(
            "[database]",
            &format!(
                "[metrics]\nlisten = \"{}\"\n[database]",
                held.local_addr().unwrap()
            ),
        ),
    )
    .unwrap();
    let (code, text, err) = doctor(n2.to_str().unwrap());
    assert_eq!(code, Some(2), "{text}{err}");
    for named in [
        "parked jobs",
        "broken:",
        "no live node can run gpu-only",
        "\"n2\" is the name of a live node on host elsewhere",
        "have run different versions for 2h",
        "disagree on fine",
        "run sqlcron migrate",
        "in use by another program",
    ] {
        assert!(
            text.contains(named),
            "doctor did not name {named:?}:\n{text}"
        );
    }
    assert!(
        text.lines()
            .filter(|l| !l.starts_with("ok "))
            .all(|l| l.contains("(fix: ")),
        "a problem without its fix:\n{text}"
    );
    // This node's own daemon killed (seen a minute ago, never stopped) is an error, though
    // other nodes run: every other check passed on such a host.
    store
        .execute_raw(&format!(
            "INSERT INTO cron_nodes (name, host, pid, version, started, last_seen) \
             VALUES ('n5', 'h', 3, '0.0.1', {now} - 120000, {now} - 60000)"
        ))
        .await
        .unwrap();
    let n5 = dir.path().join("n5.toml");
    std::fs::write(&n5, node_config(&db.url, "n5", "")).unwrap();
    let (code, text, err) = doctor(n5.to_str().unwrap());
    assert_eq!(code, Some(2), "{text}{err}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("ERROR")
                && l.contains("this node's daemon (\"n5\") is not running")),
        "{text}"
    );
    let json = sqlcron(&["--config", n2.to_str().unwrap(), "doctor", "--json"]);
    let found: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(
        found
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["check"] == "node name" && f["level"] == "error"),
        "{found:#}"
    );
    drop(held);
    store.close().await;
}

/// Issue 51, point 1: with no daemon running, doctor said "ok versions 0 live node(s)" and "ok
/// placement every enabled job has a live node to run it" and exited 0. No live node is an
/// error: nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_says_nothing_runs_without_a_live_node() {
    let db = TestDb::new(Dialect::Postgres).await;
    let store = db.store().await;
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('nightly', '@daily', 'true')",
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(&config, node_config(&db.url, "n1", "")).unwrap();
    let out = sqlcron(&["--config", config.to_str().unwrap(), "doctor"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(2), "{text}{}", stderr(&out));
    assert!(
        text.lines()
            .any(|l| l.starts_with("ERROR") && l.contains("no live node: nothing runs")),
        "{text}"
    );
    assert!(
        !text.contains("every enabled job has a live node"),
        "{text}"
    );
    // `explain` and `status` say it too (before: "will run in 52s", and jobs `due`).
    let out = sqlcron(&["--config", config.to_str().unwrap(), "explain", "nightly"]);
    assert!(
        stdout(&out).contains("nightly: will not run: no live node: nothing runs"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let out = sqlcron(&["--config", config.to_str().unwrap(), "status", "--json"]);
    let status: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert!(
        status["warning"]
            .as_str()
            .is_some_and(|w| w.starts_with("no live node")),
        "{status}"
    );

    // Issue 51, points 1 and 4: `run` refuses what nothing would run, and says why; --queue
    // asks for the run all the same. (Before, each said "will run as soon as a node is free".)
    let run = |args: &[&str]| {
        let mut all = vec!["--config", config.to_str().unwrap(), "run"];
        all.extend_from_slice(args);
        sqlcron(&all)
    };
    let out = run(&["nightly"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("no live node"), "{}", stderr(&out));
    let out = run(&["--queue", "nightly"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let asked = store.job("nightly").await.unwrap().unwrap();
    assert!(asked.run_now);
    store
        .execute_raw("UPDATE cron_table SET enabled = 0, run_now = 0 WHERE name = 'nightly'")
        .await
        .unwrap();
    let out = run(&["nightly"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is paused") && stderr(&out).contains("sqlcron resume nightly"),
        "{}",
        stderr(&out)
    );
    assert!(!store.job("nightly").await.unwrap().unwrap().run_now);
    store.close().await;
}
