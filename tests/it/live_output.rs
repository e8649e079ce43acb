//! Issue 50, point 14: a long run's output is followed as it is written. Its node stores the
//! output so far in the `running` record every `[daemon] live_output`; the run's page shows it
//! and follows it, the runs view's search finds it, and the end stores the whole of it. A write
//! of the output so far never touches a record that has ended.

use std::time::Duration;

use reqwest::StatusCode;
use sqlcron::store::Dialect;

use crate::util::{DaemonProcess, TestDb, eventually, free_port, node_config};
use crate::web::{Browser, user_line};

for_each_dialect!(a_long_runs_output_is_followed_as_it_is_written);

async fn a_long_runs_output_is_followed_as_it_is_written(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(&users, user_line("vera", "viewer", "vera-secret")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o600)).unwrap();
    let port = free_port();
    // The job prints a line, then waits for a file the test writes: the run lasts exactly as
    // long as the test needs it to.
    let go = dir.path().join("go");
    let extra = format!(
        "live_output = \"1s\"\n\
         [web]\nlisten = \"127.0.0.1:{port}\"\nbase_path = \"/cron/\"\nusers_file = \"{}\"\n\
         [[job]]\nname = \"long\"\nschedule = \"0 0 1 1 *\"\ntimeout = \"2m\"\n\
         command = \"echo first-line; while [ ! -e {go} ]; do sleep 0.2; done; echo last-line\"\n",
        users.display(),
        go = go.display()
    );
    // `live_output` belongs to [daemon], which node_config opens last but one: put it there.
    let config = node_config(&db.url, "n1", "").replace(
        "shutdown_grace = \"5s\"\n",
        &format!("shutdown_grace = \"5s\"\n{extra}"),
    );
    let _node = DaemonProcess::start(dir.path(), "n1", &config);
    let mut vera = Browser::new(port);
    eventually(Duration::from_secs(30), "the dashboard answers", || async {
        reqwest::get(format!("http://127.0.0.1:{port}/cron/login"))
            .await
            .ok()
            .filter(|r| r.status().is_success())
            .map(|_| ())
    })
    .await;
    assert_eq!(
        vera.sign_in("vera", "vera-secret").await,
        StatusCode::SEE_OTHER
    );
    eventually(Duration::from_secs(30), "the job applied", || async {
        store.job("long").await.unwrap().map(|_| ())
    })
    .await;
    let actor = sqlcron::model::actor::Actor {
        who: "test".into(),
        host: None,
        pid: None,
    };
    assert!(store.request_run("long", &actor).await.unwrap());

    // While it runs, its record holds what it printed.
    let running = eventually(
        Duration::from_secs(30),
        "the output so far stored",
        || async {
            store
                .history(Some("long"), 5)
                .await
                .unwrap()
                .into_iter()
                .find(|r| {
                    r.outcome == "running"
                        && r.output
                            .as_deref()
                            .is_some_and(|o| o.contains("first-line"))
                })
        },
    )
    .await;
    let (_, page, _) = vera.get(&format!("/runs/{}", running.id)).await;
    assert!(
        page.contains("data-follow=\"1\"")
            && page.contains("first-line")
            && !page.contains("last-line"),
        "{page}"
    );
    let (_, found, _) = vera.get("/api/v1/runs?q=first-line").await;
    assert!(
        found.contains(&format!("\"id\":{}", running.id)),
        "the search finds a running run: {found}"
    );
    let (_, download, _) = vera.get(&format!("/runs/{}/output", running.id)).await;
    assert_eq!(download, "first-line\n");

    // The end stores the whole output; a late write of the output so far matches nothing.
    std::fs::write(&go, "").unwrap();
    let done = eventually(Duration::from_secs(30), "the run ended", || async {
        store
            .history(Some("long"), 5)
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.id == running.id && r.outcome == "ok")
    })
    .await;
    assert_eq!(done.output.as_deref(), Some("first-line\nlast-line\n"));
    let late = store
        .store_live_output(
            "long",
            done.slot,
            u32::try_from(done.attempt).unwrap(),
            done.token.unwrap(),
            "first-line\n",
        )
        .await
        .unwrap();
    assert!(!late, "an ended record is not written");
    let after = store.history(Some("long"), 5).await.unwrap();
    let after = after.iter().find(|r| r.id == running.id).unwrap();
    assert_eq!(after.output.as_deref(), Some("first-line\nlast-line\n"));
    let (_, page, _) = vera.get(&format!("/runs/{}", running.id)).await;
    assert!(
        !page.contains("data-follow"),
        "an ended run's page stops following: {page}"
    );
}
