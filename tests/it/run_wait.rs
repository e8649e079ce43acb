//! `sqlcron run --wait` and `sqlcron logs` (issue 51, point 12): a run's output without
//! `--json | jq`, and a run asked for from a script that waits for it and gets its exit code.

use std::time::Duration;

use sqlcron::store::Dialect;

use crate::util::{DaemonProcess, TestDb, eventually, node_config, sqlcron, stderr};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_wait_exits_with_the_runs_code_and_logs_prints_its_output() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let jobs = r#"[[job]]
name = "say"
schedule = "0 0 1 1 *"
command = '''printf 'line1\ttab\n\033[2Jline2\n'; exit 3'''
[[job]]
name = "fine"
schedule = "0 0 1 1 *"
command = "echo all well"
[[job]]
name = "slow-fail"
schedule = "0 0 1 1 *"
command = "sleep 2; exit 4"
"#;
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&db.url, "n", jobs));
    let store = db.store().await;
    eventually(Duration::from_secs(10), "the jobs applied", || async {
        store.job("fine").await.unwrap().and_then(|j| j.next_exec)
    })
    .await;
    let cfg = dir.path().join("n.toml");
    let cli = |args: &[&str]| {
        let mut all = vec!["--config", cfg.to_str().unwrap()];
        all.extend_from_slice(args);
        sqlcron(&all)
    };
    let raw = "line1\ttab\n\u{1b}[2Jline2\n";

    let r = cli(&["run", "--wait", "say"]);
    assert_eq!(r.status.code(), Some(3), "{}", stderr(&r));
    assert_eq!(String::from_utf8_lossy(&r.stdout), raw, "piped: as stored");
    let about = stderr(&r);
    assert!(
        about.contains("of say:") && about.contains("failed exit 3"),
        "{about}"
    );
    let r = cli(&["run", "--wait", "fine"]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    assert_eq!(String::from_utf8_lossy(&r.stdout), "all well\n");

    // The newest run's output, and a run by the id `history` shows.
    let r = cli(&["logs", "say"]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    assert_eq!(String::from_utf8_lossy(&r.stdout), raw);
    let id = store.history(Some("say"), 1).await.unwrap()[0].id;
    let table = cli(&["history", "say"]);
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    let row = table.lines().nth(1).unwrap_or("").to_string();
    assert_eq!(
        row.split_whitespace().next(),
        Some(id.to_string().as_str()),
        "{table}"
    );
    let r = cli(&["logs", "say", &id.to_string()]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    assert_eq!(String::from_utf8_lossy(&r.stdout), raw);
    // Another job's run is not this job's; a run that does not exist; a job that does not.
    let fine = store.history(Some("fine"), 1).await.unwrap()[0].id;
    let r = cli(&["logs", "say", &fine.to_string()]);
    assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
    let r = cli(&["logs", "sya"]);
    assert_eq!(r.status.code(), Some(2), "{}", stderr(&r));
    assert!(
        stderr(&r).contains("did you mean \"say\""),
        "{}",
        stderr(&r)
    );

    // A record made after the request for an older slot (here planted; a scheduled run held
    // by the start rate, a lost run's line) is not the run asked for: `--wait` reported it,
    // exit 0, while the run asked for failed.
    let waiting = std::process::Command::new(crate::util::sqlcron_bin())
        .args([
            "--config",
            cfg.to_str().unwrap(),
            "run",
            "--wait",
            "slow-fail",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(20), "slow-fail running", || async {
        let h = store.history(Some("slow-fail"), 5).await.ok()?;
        h.iter().any(|r| r.outcome == "running").then_some(())
    })
    .await;
    store
        .execute_raw(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, started, ended, outcome, \
             exit_code) VALUES ('slow-fail', 1000, 1, 'n', 1000, 2000, 'ok', 0)",
        )
        .await
        .unwrap();
    let r = tokio::task::spawn_blocking(move || waiting.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.status.code(), Some(4), "{}", stderr(&r));

    let log = node.log_text();
    assert!(node.stop().success(), "{log}");
    store.close().await;
}
