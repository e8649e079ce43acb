//! Issue 50, points 7 and 8: the sign-in lands on the page asked for (never on another site),
//! and one click of "Run now" is one run and one audit row, whatever the tabs and double clicks.

use std::time::Duration;

use reqwest::StatusCode;
use sqlcron::store::Dialect;

use crate::util::{DaemonProcess, TestDb, eventually, free_port, node_config};
use crate::web::{Browser, user_line};

/// The `seen` value of the "Run now" form on `page` (the confirmation page of Run now).
fn seen_token(page: &str) -> String {
    let at = page
        .find("name=\"seen\" value=\"")
        .unwrap_or_else(|| panic!("no Run now form: {page}"));
    let rest = &page[at + "name=\"seen\" value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// Point 7b: behind a proxy that strips `/cron` before passing a request on (nginx:
/// `location /cron/ { proxy_pass http://127.0.0.1:PORT/; }`), `public_path = "/cron"` keeps
/// every link, redirect and the cookie under `/cron`, where the browser must address them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_that_strips_the_prefix_keeps_links_redirects_and_cookie_under_it() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(&users, user_line("olga", "operator", "olga-secret")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o600)).unwrap();
    let port = free_port();
    let extra = format!(
        "[web]\nlisten = \"127.0.0.1:{port}\"\npublic_path = \"/cron\"\nusers_file = \"{}\"\n\
         [[job]]\nname = \"once\"\nschedule = \"0 0 1 1 *\"\ncommand = \"echo ran\"\n",
        users.display()
    );
    let _node = DaemonProcess::start(dir.path(), "n1", &node_config(&db.url, "n1", &extra));
    // What the proxy sends on: the address without the prefix.
    let mut olga = Browser::new(port);
    olga.base = format!("http://127.0.0.1:{port}");
    eventually(Duration::from_secs(30), "the dashboard answers", || async {
        olga.client
            .get(format!("{}/login", olga.base))
            .send()
            .await
            .ok()
            .filter(|r| r.status() == StatusCode::OK)
            .map(|_| ())
    })
    .await;
    let (status, _, headers) = olga.get("/jobs/once?tab=1").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(
        headers["location"], "/cron/login?next=%2Fcron%2Fjobs%2Fonce%3Ftab%3D1",
        "the sign-in, and the page to return to, as the browser addresses them"
    );
    let (_, form, _) = olga.get("/login?next=%2Fcron%2Fjobs%2Fonce").await;
    assert!(form.contains("action=\"/cron/login\""), "{form}");
    assert!(
        form.contains("name=\"next\" value=\"/cron/jobs/once\""),
        "{form}"
    );
    let r = olga
        .post(
            "/login",
            &[
                ("user", "olga"),
                ("password", "olga-secret"),
                ("next", "/cron/jobs/once"),
            ],
            None,
        )
        .await;
    assert_eq!(r.headers()["location"], "/cron/jobs/once");
    // A dot segment would lead the browser out of the prefix, to another site on the host.
    for bad in ["/cron/../grafana/x", "/cron/%2e%2E/grafana", "/cronx/jobs"] {
        let r = olga
            .post(
                "/login",
                &[("user", "olga"), ("password", "olga-secret"), ("next", bad)],
                None,
            )
            .await;
        assert_eq!(r.headers()["location"], "/cron", "{bad}");
    }
    assert_eq!(
        olga.sign_in("olga", "olga-secret").await,
        StatusCode::SEE_OTHER
    );
    let (status, page, _) = olga.get("/jobs/once").await;
    assert_eq!(status, StatusCode::OK);
    for attr in ["href=\"", "action=\"", "src=\""] {
        for link in page.split(attr).skip(1) {
            assert!(
                link.starts_with("/cron/") || link.starts_with("/cron\""),
                "{attr}{link}"
            );
        }
    }
    // An action's answer goes back under the prefix too.
    let r = olga.post("/jobs/once/pause", &[], None).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(
        r.headers()["location"]
            .to_str()
            .unwrap()
            .starts_with("/cron"),
        "{:?}",
        r.headers()["location"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_lands_on_the_page_asked_for_and_one_click_is_one_run() {
    let db = TestDb::new(Dialect::Postgres).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(&users, user_line("olga", "operator", "olga-secret")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o600)).unwrap();
    let port = free_port();
    let extra = format!(
        "[web]\nlisten = \"127.0.0.1:{port}\"\nbase_path = \"/cron\"\nusers_file = \"{}\"\n\
         [[job]]\nname = \"once\"\nschedule = \"0 0 1 1 *\"\ncommand = \"echo ran\"\n",
        users.display()
    );
    let _node = DaemonProcess::start(dir.path(), "n1", &node_config(&db.url, "n1", &extra));
    let mut olga = Browser::new(port);
    eventually(Duration::from_secs(30), "the dashboard answers", || async {
        olga.client
            .get(format!("{}/login", olga.base))
            .send()
            .await
            .ok()
            .filter(|r| r.status() == StatusCode::OK)
            .map(|_| ())
    })
    .await;

    // Point 7: a page asked for before signing in is where the sign-in lands.
    let (status, _, headers) = olga.get("/jobs/once?tab=1").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let to = headers["location"].to_str().unwrap().to_string();
    assert_eq!(to, "/cron/login?next=%2Fcron%2Fjobs%2Fonce%3Ftab%3D1");
    let (_, form, _) = olga.get(to.strip_prefix("/cron").unwrap()).await;
    assert!(
        form.contains("name=\"next\" value=\"/cron/jobs/once?tab=1\""),
        "{form}"
    );
    // Never another site, nor the sign-in page again.
    for bad in [
        "//evil.example/x",
        "https://evil.example/",
        "/elsewhere",
        "/cron/login",
        "/cron\\..\\x",
    ] {
        let r = olga
            .post(
                "/login",
                &[("user", "olga"), ("password", "olga-secret"), ("next", bad)],
                None,
            )
            .await;
        assert_eq!(r.headers()["location"], "/cron", "{bad}");
    }
    let r = olga
        .post(
            "/login",
            &[
                ("user", "olga"),
                ("password", "olga-secret"),
                ("next", "/cron/jobs/once?tab=1"),
            ],
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/cron/jobs/once?tab=1");
    assert_eq!(
        olga.sign_in("olga", "olga-secret").await,
        StatusCode::SEE_OTHER
    );

    // Point 8: two tabs show the page; three posts of the same page at once, then the other
    // tab's: one run is asked for, one audit row.
    let (_, tab1, _) = olga.get("/jobs/once/run").await;
    let (_, tab2, _) = olga.get("/jobs/once/run").await;
    let seen = seen_token(&tab1);
    assert_eq!(seen, seen_token(&tab2));
    // Point 10: a yearly job's page lists its next five slots.
    let (_, job_page, _) = olga.get("/jobs/once").await;
    assert_eq!(
        job_page.matches("<tr class=\"scheduled\">").count(),
        5,
        "the next five of a yearly job: {job_page}"
    );
    let form = [("seen", seen.as_str())];
    let post = || olga.post("/jobs/once/run", &form, None);
    let (a, b, c) = tokio::join!(post(), post(), post());
    let mut codes: Vec<StatusCode> = [a, b, c].iter().map(|r| r.status()).collect();
    codes.sort();
    assert_eq!(
        codes,
        vec![
            StatusCode::SEE_OTHER,
            StatusCode::CONFLICT,
            StatusCode::CONFLICT
        ]
    );
    let again = post().await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    assert!(
        again.text().await.unwrap().contains("already asked for"),
        "the second tab is told why"
    );
    let runs_asked = || async {
        store
            .audit_log(Some("once"), 100)
            .await
            .unwrap()
            .iter()
            .filter(|r| r.action == "run")
            .count()
    };
    assert_eq!(runs_asked().await, 1);
    eventually(Duration::from_secs(30), "the asked run", || async {
        store
            .history(Some("once"), 10)
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.outcome == "ok")
    })
    .await;
    // The run happened: a click on a page drawn before it adds nothing, and says so.
    let stale = post().await;
    assert_eq!(stale.status(), StatusCode::CONFLICT);
    assert!(stale.text().await.unwrap().contains("has run since"));
    // A page drawn now asks for one more.
    let released = |what: &'static str| {
        eventually(Duration::from_secs(30), what, || async {
            store
                .job("once")
                .await
                .unwrap()
                .filter(|j| !j.run_now && j.exec_by.is_none())
                .map(|_| ())
        })
    };
    released("the run released").await;
    let (_, fresh, _) = olga.get("/jobs/once/run").await;
    let r = olga
        .post(
            "/jobs/once/run",
            &[("seen", seen_token(&fresh).as_str())],
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(runs_asked().await, 2);
    // The page shows what would run: a writer who changes the command after it was drawn gets
    // no run asked under the operator's name.
    released("the second run released").await;
    let (_, shown, _) = olga.get("/jobs/once/run").await;
    let definition = {
        let key = "name=\"definition\" value=\"";
        let rest = &shown[shown.find(key).expect("the definition shown") + key.len()..];
        rest[..rest.find('"').unwrap()].to_string()
    };
    store
        .execute_raw("UPDATE cron_table SET command = 'echo changed' WHERE name = 'once'")
        .await
        .unwrap();
    let r = olga
        .post(
            "/jobs/once/run",
            &[
                ("seen", seen_token(&shown).as_str()),
                ("definition", definition.as_str()),
            ],
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert!(r.text().await.unwrap().contains("has changed since"));
    assert_eq!(runs_asked().await, 2);
    store.close().await;
}
