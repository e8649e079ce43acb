//! Issue 51, point 2: a second daemon with the name of a live node refuses to start. Before, it
//! started, said `ready`, and both claimed as one node; `status` showed the second's PID even
//! after it exited.

use std::time::{Duration, Instant};

use sqlcron::store::Dialect;

use crate::util::{DaemonProcess, TestDb, eventually, node_config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_daemon_with_a_live_nodes_name_refuses_to_start() {
    let db = TestDb::new(Dialect::Postgres).await;
    let store = db.store().await;
    let (dir1, dir2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let config = node_config(&db.url, "web-1", "");
    let first = DaemonProcess::start(dir1.path(), "web-1", &config);
    let pid = i64::from(first.pid());
    let registered = || async {
        store
            .nodes()
            .await
            .unwrap()
            .into_iter()
            .find(|n| n.name == "web-1")
            .and_then(|n| n.pid)
    };
    eventually(Duration::from_secs(20), "web-1 registered", || async {
        (registered().await == Some(pid)).then_some(())
    })
    .await;

    let mut second = DaemonProcess::start(dir2.path(), "web-1", &config);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = second.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the second daemon still runs\n{}",
            second.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let log = second.log_text();
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(
        log.contains("is held by a live daemon on") && log.contains(&format!("(pid {pid})")),
        "{log}"
    );
    assert_eq!(registered().await, Some(pid), "the holder's PID stays");

    // The holder killed and started again on the same host takes its name back at once.
    first.signal(libc::SIGKILL);
    // Not reaped yet (a zombie), as a supervisor may leave it for a moment: gone all the same.
    let again = DaemonProcess::start(dir1.path(), "web-1", &config);
    let new_pid = i64::from(again.pid());
    eventually(
        Duration::from_secs(20),
        "the restarted daemon registered",
        || async { (registered().await == Some(new_pid)).then_some(()) },
    )
    .await;
    let log = again.log_text();
    assert!(again.stop().success(), "{log}");
    drop(first);
    store.close().await;
}
