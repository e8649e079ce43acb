//! Issue 50, point 17: jobs are created, edited, cloned and deleted in the dashboard (operators
//! edit, admins delete), checked as a node checks a row, saved only from a review page that
//! shows the diff and only if the row still has the values reviewed, each audited; a TOML job
//! is read-only; in signed mode a saved job stays parked until signed.

use std::time::Duration;

use reqwest::StatusCode;
use sqlcron::store::Dialect;

use crate::util::{DaemonProcess, TestDb, eventually, free_port, node_config, sqlcron, stdout};
use crate::web::{Browser, user_line};
use crate::web_guarded::hidden_fields;

for_each_dialect!(jobs_are_edited_in_the_dashboard_with_a_review_and_a_fence);

async fn post(b: &Browser, path: &str, fields: &[(String, String)]) -> reqwest::Response {
    let refs: Vec<(&str, &str)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    b.post(path, &refs, None).await
}

/// Posts `change` to the editor at `path` and returns the fields of the review page's confirm
/// form (what a second post saves).
async fn reviewed(b: &Browser, path: &str, change: &[(String, String)]) -> Vec<(String, String)> {
    let review = post(b, path, change).await.text().await.unwrap();
    hidden_fields(&review, "name=\"confirm\"")
}

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

struct Setup {
    _node: DaemonProcess,
    _dir: tempfile::TempDir,
    olga: Browser,
    ada: Browser,
    vera: Browser,
}

async fn setup(db: &TestDb, security: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(
        &users,
        user_line("olga", "operator", "olga-secret")
            + &user_line("ada", "admin", "ada-secret")
            + &user_line("vera", "viewer", "vera-secret"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o600)).unwrap();
    let port = free_port();
    let extra = format!(
        "{security}[web]\nlisten = \"127.0.0.1:{port}\"\nbase_path = \"/cron/\"\nusers_file = \"{}\"\n\
         [[job]]\nname = \"filejob\"\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n",
        users.display()
    );
    let node = DaemonProcess::start(dir.path(), "n1", &node_config(&db.url, "n1", &extra));
    eventually(Duration::from_secs(30), "the dashboard answers", || async {
        reqwest::get(format!("http://127.0.0.1:{port}/cron/login"))
            .await
            .ok()
            .filter(|r| r.status().is_success())
            .map(|_| ())
    })
    .await;
    let b = |u: &str, p: &str| {
        let mut x = Browser::new(port);
        let (u, p) = (u.to_string(), p.to_string());
        async move {
            assert_eq!(x.sign_in(&u, &p).await, StatusCode::SEE_OTHER);
            x
        }
    };
    let olga = b("olga", "olga-secret").await;
    let ada = b("ada", "ada-secret").await;
    let vera = b("vera", "vera-secret").await;
    Setup {
        _node: node,
        _dir: dir,
        olga,
        ada,
        vera,
    }
}

async fn jobs_are_edited_in_the_dashboard_with_a_review_and_a_fence(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let s = setup(&db, "").await;
    let (olga, ada, vera) = (&s.olga, &s.ada, &s.vera);
    eventually(Duration::from_secs(30), "the TOML job applied", || async {
        store.job("filejob").await.unwrap().map(|_| ())
    })
    .await;

    // Create: the form, a review page (nothing written), then the button.
    assert_eq!(olga.get("/new-job").await.0, StatusCode::OK);
    assert_eq!(vera.get("/new-job").await.0, StatusCode::FORBIDDEN);
    let made = owned(&[
        ("name", "made"),
        ("schedule", "* * * * * *"),
        ("command", "echo made-in-the-dashboard"),
        ("retries", "2"),
    ]);
    assert_eq!(
        post(vera, "/new-job", &made).await.status(),
        StatusCode::FORBIDDEN
    );
    let r = post(olga, "/new-job", &made).await;
    assert_eq!(r.status(), StatusCode::OK);
    let review = r.text().await.unwrap();
    assert!(
        review.contains("Create made?") && review.contains("<ins>echo made-in-the-dashboard</ins>"),
        "{review}"
    );
    assert!(
        store.job("made").await.unwrap().is_none(),
        "nothing before the button"
    );
    // What a node would refuse is refused here, with the reason.
    let mut bad = made.clone();
    bad[1].1 = "every tuesday".into();
    let r = post(olga, "/new-job", &bad).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("schedule:"));
    let mut root = made.clone();
    root.push(("run_user".into(), "nobody".into()));
    let r = post(olga, "/new-job", &root).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("this node would refuse it")
    );
    let mut multi = made.clone();
    multi[2].1 = "echo a\nrm -rf /".into();
    assert_eq!(
        post(olga, "/new-job", &multi).await.status(),
        StatusCode::BAD_REQUEST
    );

    let confirm = hidden_fields(&review, "name=\"confirm\"");
    assert_eq!(
        post(olga, "/new-job", &confirm).await.status(),
        StatusCode::SEE_OTHER
    );
    let row = store.job("made").await.unwrap().unwrap();
    assert_eq!(
        (row.source.as_str(), row.policy["retries"].as_deref()),
        ("web", Some("2"))
    );
    assert_eq!(
        post(olga, "/new-job", &confirm).await.status(),
        StatusCode::CONFLICT,
        "the name is taken"
    );
    // A node runs it.
    eventually(
        Duration::from_secs(30),
        "a run of the job made in the dashboard",
        || async {
            let h = store.history(Some("made"), 5).await.unwrap();
            h.iter()
                .any(|r| {
                    r.outcome == "ok" && r.output.as_deref() == Some("made-in-the-dashboard\n")
                })
                .then_some(())
        },
    )
    .await;

    // Edit: the diff, then the save, fenced by what was reviewed.
    let (status, form, _) = olga.get("/jobs/made/edit").await;
    assert!(
        status == StatusCode::OK && form.contains("value=\"echo made-in-the-dashboard\""),
        "{form}"
    );
    let change = owned(&[
        ("schedule", "0 3 * * *"),
        ("command", "echo made-in-the-dashboard"),
        ("retries", ""),
    ]);
    let r = post(olga, "/jobs/made/edit", &change).await;
    let review = r.text().await.unwrap();
    assert!(
        review.contains("<del>* * * * * *</del>")
            && review.contains("<ins>0 3 * * *</ins>")
            && review.contains("<del>2</del>"),
        "{review}"
    );
    let confirm = hidden_fields(&review, "name=\"confirm\"");
    // Someone changes the row between the review and the button: nothing is saved.
    store
        .execute_raw("UPDATE cron_table SET command = 'echo changed-meanwhile' WHERE name = 'made'")
        .await
        .unwrap();
    assert_eq!(
        post(olga, "/jobs/made/edit", &confirm).await.status(),
        StatusCode::CONFLICT
    );
    let row = store.job("made").await.unwrap().unwrap();
    assert_eq!(
        (row.schedule.as_str(), row.command.as_deref()),
        ("* * * * * *", Some("echo changed-meanwhile"))
    );
    // A column the editor does not show, changed in between, is refused too.
    let change = owned(&[
        ("schedule", "0 3 * * *"),
        ("command", "echo changed-meanwhile"),
        ("retries", ""),
    ]);
    let confirm = reviewed(olga, "/jobs/made/edit", &change).await;
    store
        .execute_raw(
            "UPDATE cron_table SET env = '{\"LD_PRELOAD\":\"/tmp/x.so\"}' WHERE name = 'made'",
        )
        .await
        .unwrap();
    assert_eq!(
        post(olga, "/jobs/made/edit", &confirm).await.status(),
        StatusCode::CONFLICT
    );
    // Names sqlcron derives are not for the editor.
    let mut derived = made.clone();
    derived[0].1 = "made@n1".into();
    assert_eq!(
        post(olga, "/new-job", &derived).await.status(),
        StatusCode::BAD_REQUEST
    );
    // Reviewed again, it saves.
    let change = owned(&[
        ("schedule", "0 3 * * *"),
        ("command", "echo changed-meanwhile"),
        ("retries", ""),
    ]);
    let confirm = reviewed(olga, "/jobs/made/edit", &change).await;
    assert_eq!(
        post(olga, "/jobs/made/edit", &confirm).await.status(),
        StatusCode::SEE_OTHER
    );
    let row = store.job("made").await.unwrap().unwrap();
    assert_eq!(
        (row.schedule.as_str(), row.policy["retries"].as_deref()),
        ("0 3 * * *", None)
    );
    let trail = store.audit_log(Some("made"), 10).await.unwrap();
    assert!(
        trail.iter().any(|a| a.action == "edit"
            && a.who == "web:olga"
            && a.detail
                .as_deref()
                .is_some_and(|d| d.starts_with("changed schedule,retries"))),
        "{trail:?}"
    );
    assert!(
        trail
            .iter()
            .any(|a| a.action == "create" && a.who == "web:olga"),
        "{trail:?}"
    );

    // A TOML job is read-only, and says where it is defined.
    let (_, page, _) = olga.get("/jobs/filejob/edit").await;
    assert!(page.contains("Defined in the TOML file of n1"), "{page}");
    assert_eq!(
        post(olga, "/jobs/filejob/edit", &change).await.status(),
        StatusCode::CONFLICT
    );

    // Clone: the editable fields under a new name.
    let (_, clone, _) = olga.get("/new-job?from=made").await;
    assert!(
        clone.contains("value=\"made-copy\"") && clone.contains("value=\"0 3 * * *\""),
        "{clone}"
    );

    // Delete: admins only, after a confirmation; the history stays.
    assert_eq!(olga.get("/jobs/made/delete").await.0, StatusCode::FORBIDDEN);
    assert_eq!(
        post(olga, "/jobs/made/delete", &owned(&[("confirm", "yes")]))
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    let (status, page, _) = ada.get("/jobs/made/delete").await;
    assert!(
        status == StatusCode::OK && page.contains("Confirm: delete made"),
        "{page}"
    );
    assert_eq!(
        post(ada, "/jobs/made/delete", &[]).await.status(),
        StatusCode::BAD_REQUEST
    );
    assert!(store.job("made").await.unwrap().is_some());
    assert_eq!(
        post(ada, "/jobs/filejob/delete", &owned(&[("confirm", "yes")]))
            .await
            .status(),
        StatusCode::CONFLICT
    );
    eventually(
        Duration::from_secs(30),
        "made deleted (between its runs)",
        || async {
            let r = post(ada, "/jobs/made/delete", &owned(&[("confirm", "yes")])).await;
            (r.status() == StatusCode::SEE_OTHER || r.status() == StatusCode::NOT_FOUND)
                .then_some(())
        },
    )
    .await;
    assert!(store.job("made").await.unwrap().is_none());
    assert!(
        !store.history(Some("made"), 5).await.unwrap().is_empty(),
        "its history stays"
    );
    assert!(
        store
            .audit_log(Some("made"), 10)
            .await
            .unwrap()
            .iter()
            .any(|a| a.action == "delete" && a.who == "web:ada")
    );
}

/// In signed mode the review says the job will wait for a signature, and it does: parked, with
/// no run, until `sqlcron sign`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_signed_mode_a_saved_job_waits_for_its_signature() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let store = db.store().await;
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("signing.key");
    let out = sqlcron(&["keygen", "--out", key.to_str().unwrap()]);
    assert!(out.status.success());
    let public = stdout(&out).trim().to_string();
    let s = setup(
        &db,
        &format!("[security]\nsql_jobs = \"signed\"\ntrusted_keys = [\"{public}\"]\n"),
    )
    .await;
    let made = owned(&[
        ("name", "unsigned"),
        ("schedule", "* * * * * *"),
        ("command", "echo should-not-run"),
    ]);
    let review = post(&s.olga, "/new-job", &made).await.text().await.unwrap();
    assert!(
        review.contains("stays parked, running nothing, until it is signed"),
        "{review}"
    );
    let confirm = hidden_fields(&review, "name=\"confirm\"");
    assert_eq!(
        post(&s.olga, "/new-job", &confirm).await.status(),
        StatusCode::SEE_OTHER
    );
    let parked = eventually(
        Duration::from_secs(30),
        "the unsigned job parked",
        || async {
            store
                .job("unsigned")
                .await
                .unwrap()
                .filter(|r| r.error.is_some())
        },
    )
    .await;
    assert!(
        parked.error.as_deref().unwrap().contains("sign"),
        "{parked:?}"
    );
    assert!(
        store
            .history(Some("unsigned"), 5)
            .await
            .unwrap()
            .iter()
            .all(|r| r.outcome != "ok")
    );
}
