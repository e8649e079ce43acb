//! Issue 27: the web dashboard and its API, over HTTP, on all three databases: sign-in with a
//! users file, a session valid on every node, the pages under a sub-path, actions that re-check
//! the role and the origin on the server and land in the audit trail, the JSON API.

use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::redirect::Policy;
use sqlcron::store::Dialect;

use crate::util::{DaemonProcess, TestDb, eventually, free_port, node_config, sqlcron};

for_each_dialect!(the_dashboard_signs_in_shows_the_cluster_and_acts_by_role);

/// A users file line made by `sqlcron web-user`, the password on standard input.
pub fn user_line(name: &str, role: &str, password: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sqlcron"))
        .args(["web-user", name, "--role", role])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

pub struct Browser {
    pub client: reqwest::Client,
    pub base: String,
    origin: String,
    pub cookie: Option<String>,
}

impl Browser {
    pub fn new(port: u16) -> Browser {
        Browser {
            // The server closes connections idle past its 10 s header timeout: never reuse one
            // idle that long (a POST on a connection closed under it is not retried).
            client: reqwest::Client::builder()
                .redirect(Policy::none())
                .pool_idle_timeout(Duration::from_secs(5))
                .build()
                .unwrap(),
            base: format!("http://127.0.0.1:{port}/cron"),
            origin: format!("http://127.0.0.1:{port}"),
            cookie: None,
        }
    }

    pub async fn get(&self, path: &str) -> (StatusCode, String, reqwest::header::HeaderMap) {
        let mut r = self.client.get(format!("{}{path}", self.base));
        if let Some(c) = &self.cookie {
            r = r.header("cookie", c);
        }
        let resp = r.send().await.unwrap();
        let (status, headers) = (resp.status(), resp.headers().clone());
        (status, resp.text().await.unwrap(), headers)
    }

    /// A form post as the dashboard's own page sends it (same origin), or with `origin`.
    pub async fn post(
        &self,
        path: &str,
        form: &[(&str, &str)],
        origin: Option<&str>,
    ) -> reqwest::Response {
        let mut r = self
            .client
            .post(format!("{}{path}", self.base))
            .header("origin", origin.unwrap_or(&self.origin))
            .form(form);
        if let Some(c) = &self.cookie {
            r = r.header("cookie", c);
        }
        r.send().await.unwrap()
    }

    pub async fn sign_in(&mut self, user: &str, password: &str) -> StatusCode {
        let resp = self
            .post("/login", &[("user", user), ("password", password)], None)
            .await;
        if let Some(c) = resp.headers().get("set-cookie") {
            let c = c.to_str().unwrap();
            assert!(
                c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Path=/cron"),
                "{c}"
            );
            self.cookie = Some(c.split(';').next().unwrap().to_string());
        }
        resp.status()
    }
}

async fn the_dashboard_signs_in_shows_the_cluster_and_acts_by_role(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    // Kept as written: a line made again has a new salt, so a new hash.
    let others =
        user_line("victor", "viewer", "victor-secret") + &user_line("ada", "admin", "ada-secret-1");
    std::fs::write(
        &users,
        user_line("alice", "operator", "alice-secret") + &others,
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (p1, p2) = (free_port(), free_port());
    // n1 believes proxies on 127.0.0.1 (the test's own address); n2 believes none.
    let web = |port: u16| {
        let proxies = if port == p1 { "[\"127.0.0.1\"]" } else { "[]" };
        format!(
            "[web]\nlisten = \"127.0.0.1:{port}\"\nbase_path = \"/cron/\"\nusers_file = \"{}\"\n\
             trusted_proxies = {proxies}\nsso_header = \"X-Remote-User\"\n\
             [[job]]\nname = \"tick\"\nschedule = \"*/2 * * * * *\"\ncommand = \"echo '<b>tick</b>'\"\non_failure = \"true\"\n\
             [[job]]\nname = \"slow\"\nschedule = \"0 0 1 1 *\"\nretries = 1\ncommand = \"sleep 120\"\n",
            users.display()
        )
    };
    let _n1 = DaemonProcess::start(dir.path(), "n1", &node_config(&db.url, "n1", &web(p1)));
    let _n2 = DaemonProcess::start(dir.path(), "n2", &node_config(&db.url, "n2", &web(p2)));
    let mut alice = Browser::new(p1);
    for port in [p1, p2] {
        let b = Browser::new(port);
        eventually(
            Duration::from_secs(30),
            "both dashboards answer",
            || async {
                b.client
                    .get(format!("{}/login", b.base))
                    .send()
                    .await
                    .ok()
                    .filter(|r| r.status() == StatusCode::OK)
                    .map(|_| ())
            },
        )
        .await;
    }

    // Signed out: pages send the browser to sign in, the API answers 401.
    let (status, _, headers) = alice.get("/jobs").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], "/cron/login?next=%2Fcron%2Fjobs");
    assert_eq!(alice.get("/api/v1/jobs").await.0, StatusCode::UNAUTHORIZED);
    // Outside the sub-path there is nothing.
    let outside = alice
        .client
        .get(format!("{}/jobs", alice.origin))
        .send()
        .await
        .unwrap();
    assert_eq!(outside.status(), StatusCode::NOT_FOUND);

    assert_eq!(
        alice.sign_in("alice", "wrong").await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        alice.sign_in("nobody", "alice-secret").await,
        StatusCode::UNAUTHORIZED
    );
    assert!(alice.cookie.is_none());
    assert_eq!(
        alice.sign_in("alice", "alice-secret").await,
        StatusCode::SEE_OTHER
    );

    // The overview and the job list, with security headers; every link under /cron.
    let (status, _, headers) = alice.get("/").await;
    assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(headers["location"], "/cron");
    let (status, page, headers) = alice.get("").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("frame-ancestors 'none'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert!(page.contains("nodes alive"), "{page}");
    for href in page.split("href=\"").skip(1) {
        assert!(
            href.starts_with("/cron"),
            "a link outside the sub-path: {href}"
        );
    }
    eventually(
        Duration::from_secs(20),
        "tick ran and shows on its page",
        || async {
            let (_, page, _) = alice.get("/jobs/tick").await;
            page.contains("badge ok").then_some(())
        },
    )
    .await;
    let (_, list, _) = alice.get("/jobs?q=ti").await;
    assert!(list.contains("/cron/jobs/tick"), "{list}");
    let (_, list, _) = alice.get("/jobs?q=zz").await;
    assert!(!list.contains("/cron/jobs/tick"), "{list}");
    // Each node registers when its database is ready: under load one may come a moment later.
    eventually(
        Duration::from_secs(30),
        "both nodes on the nodes page",
        || async {
            let (_, nodes, _) = alice.get("/nodes").await;
            (nodes.contains(">n1<") && nodes.contains(">n2<")).then_some(())
        },
    )
    .await;

    // Single sign-on and X-Forwarded-Proto: believed from a trusted proxy only.
    let sso = |port: u16, user: &str| {
        alice
            .client
            .get(format!("http://127.0.0.1:{port}/cron/jobs"))
            .header("x-remote-user", user)
            .send()
    };
    let r = sso(p1, "victor").await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await.unwrap().contains("victor (viewer)"));
    assert_eq!(
        sso(p1, "mallory").await.unwrap().status(),
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        sso(p2, "victor").await.unwrap().status(),
        StatusCode::SEE_OTHER
    );
    for (port, secure) in [(p1, true), (p2, false)] {
        let r = alice
            .client
            .post(format!("http://127.0.0.1:{port}/cron/login"))
            .header("origin", format!("http://127.0.0.1:{port}"))
            .header("x-forwarded-proto", "https")
            .form(&[("user", "victor"), ("password", "victor-secret")])
            .send()
            .await
            .unwrap();
        let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
        assert_eq!(cookie.contains("; Secure"), secure, "port {port}: {cookie}");
    }

    // The session holds on the other node: it is in the database.
    let mut alice_on_n2 = Browser::new(p2);
    alice_on_n2.cookie = alice.cookie.clone();
    assert_eq!(alice_on_n2.get("/jobs").await.0, StatusCode::OK);

    // Cross-site requests do not act, whatever the cookie.
    let r = alice
        .post("/jobs/tick/pause", &[], Some("http://evil.example"))
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = alice
        .client
        .post(format!("{}/jobs/tick/pause", alice.base))
        .header("cookie", alice.cookie.clone().unwrap())
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(store.job("tick").await.unwrap().unwrap().enabled);

    // A viewer reads but cannot act, even with a forged form.
    let mut victor = Browser::new(p1);
    assert_eq!(
        victor.sign_in("victor", "victor-secret").await,
        StatusCode::SEE_OTHER
    );
    let (_, page, _) = victor.get("/jobs").await;
    assert!(
        !page.contains("/cron/jobs/tick/pause"),
        "a viewer sees no action: {page}"
    );
    let r = victor.post("/jobs/tick/pause", &[], None).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.text().await.unwrap().contains("needs the operator role"));
    assert!(store.job("tick").await.unwrap().unwrap().enabled);
    // Issue 50, point 9: the refusal leaves a trace (who, what, on what, from where); a
    // client's own address header is not believed.
    let r = victor
        .client
        .post(format!("{}/jobs/tick/resume", victor.base))
        .header("origin", &victor.origin)
        .header("cookie", victor.cookie.clone().unwrap())
        .header("x-sqlcron-peer", "203.0.113.9")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let denied: Vec<_> = store
        .audit_log(Some("tick"), 50)
        .await
        .unwrap()
        .into_iter()
        .filter(|a| a.action == "denied")
        .collect();
    // The cross-origin posts refused above are there too, under the operator's name.
    assert!(
        denied.iter().any(|a| a.who == "web:alice"
            && a.detail
                .as_deref()
                .is_some_and(|d| d.contains("cross-origin"))),
        "{denied:?}"
    );
    let details: Vec<&str> = denied
        .iter()
        .filter(|a| a.who == "web:victor")
        .filter_map(|a| a.detail.as_deref())
        .collect();
    assert_eq!(details.len(), 2, "{denied:?}");
    assert!(
        details
            .iter()
            .any(|d| d.starts_with("pause refused") && d.ends_with("(from 127.0.0.1)"))
            && details
                .iter()
                .any(|d| d.starts_with("resume refused") && !d.contains("203.0.113.9")),
        "{details:?}"
    );

    // The operator pauses, runs now and resumes: the audit trail names the web user.
    assert_eq!(
        alice.post("/jobs/tick/pause", &[], None).await.status(),
        StatusCode::SEE_OTHER
    );
    assert!(!store.job("tick").await.unwrap().unwrap().enabled);
    // Issue 50, point 16: a pause with a reason; the job's page says who paused it, when and
    // why, until it is resumed. A reason on several lines is refused.
    let (_, page, _) = alice.get("/jobs/tick").await;
    assert!(page.contains("Paused by web:alice"), "{page}");
    assert!(
        !page.contains("<q>"),
        "a pause without a reason shows none: {page}"
    );
    assert!(page.contains("name=\"reason\"") || page.contains("/cron/jobs/tick/resume"));
    assert_eq!(
        alice.post("/jobs/tick/resume", &[], None).await.status(),
        StatusCode::SEE_OTHER
    );
    let (_, page, _) = alice.get("/jobs/tick").await;
    assert!(
        page.contains("name=\"reason\""),
        "the job's page asks why: {page}"
    );
    for text in ["two\nlines", "evil\u{202E}txt"] {
        let bad = [("reason", text)];
        assert_eq!(
            alice.post("/jobs/tick/pause", &bad, None).await.status(),
            StatusCode::BAD_REQUEST,
            "{text:?}"
        );
    }
    // A viewer is refused for the role, whatever the reason holds.
    let bad = [("reason", "two\nlines")];
    assert_eq!(
        victor.post("/jobs/tick/pause", &bad, None).await.status(),
        StatusCode::FORBIDDEN
    );
    assert!(store.job("tick").await.unwrap().unwrap().enabled);
    let why = [("reason", "db upgrade <tonight>")];
    assert_eq!(
        alice.post("/jobs/tick/pause", &why, None).await.status(),
        StatusCode::SEE_OTHER
    );
    let (_, page, _) = alice.get("/jobs/tick").await;
    assert!(
        page.contains("Paused by web:alice")
            && page.contains("<q><bdi>db upgrade &lt;tonight&gt;")
            && (dialect == Dialect::Sqlite || page.contains("(database user ")),
        "{page}"
    );
    let trail = store.audit_log(Some("tick"), 5).await.unwrap();
    assert!(
        trail[0].action == "pause"
            && trail[0]
                .detail
                .as_deref()
                .is_some_and(|d| d.starts_with("reason: db upgrade <tonight>")),
        "{trail:?}"
    );
    assert_eq!(
        alice.post("/jobs/tick/resume", &[], None).await.status(),
        StatusCode::SEE_OTHER
    );
    assert!(store.job("tick").await.unwrap().unwrap().enabled);
    let (_, page, _) = alice.get("/jobs/tick").await;
    assert!(!page.contains("Paused by"), "resumed: {page}");
    assert_eq!(
        alice.post("/nodes/n2/drain", &[], None).await.status(),
        StatusCode::SEE_OTHER
    );
    assert!(
        store
            .nodes()
            .await
            .unwrap()
            .iter()
            .any(|n| n.name == "n2" && n.drain)
    );
    assert_eq!(
        alice.post("/nodes/n2/undrain", &[], None).await.status(),
        StatusCode::SEE_OTHER
    );
    // Bulk: the selected jobs, each through the same call and audit row; viewers refused.
    let (_, list, _) = alice.get("/jobs").await;
    assert!(
        list.contains("form=\"bulk\" name=\"job\" value=\"tick\""),
        "{list}"
    );
    let r = victor
        .post("/jobs/bulk", &[("action", "pause"), ("job", "tick")], None)
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = alice
        .post(
            "/jobs/bulk",
            &[("action", "explode"), ("job", "tick")],
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // Nothing is done before the confirmation page's button (web_guarded.rs tests it in full).
    for action in ["pause", "resume"] {
        let r = alice
            .post(
                "/jobs/bulk",
                &[("action", action), ("job", "tick"), ("job", "gone")],
                None,
            )
            .await;
        assert_eq!(r.status(), StatusCode::OK);
        let page = r.text().await.unwrap();
        assert!(page.contains("<strong>1</strong> job(s)"), "{page}");
        let form = crate::web_guarded::hidden_fields(&page, "name=\"confirm\"");
        let refs: Vec<(&str, &str)> = form.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            alice.post("/jobs/bulk", &refs, None).await.status(),
            StatusCode::OK
        );
        assert_eq!(
            store.job("tick").await.unwrap().unwrap().enabled,
            action == "resume"
        );
    }
    let audit = store.audit_log(Some("tick"), 20).await.unwrap();
    assert!(
        audit
            .iter()
            .filter(|a| a.action == "pause" && a.who == "web:alice")
            .count()
            >= 2,
        "the bulk pause is audited: {audit:?}"
    );
    for action in ["pause", "resume"] {
        assert!(
            audit
                .iter()
                .any(|a| a.action == action && a.who == "web:alice"),
            "no {action} by web:alice: {audit:?}"
        );
    }

    // The API: the same job, paged by cursor; no environment or command shown.
    let (status, json, _) = alice.get("/api/v1/jobs").await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let names: Vec<&str> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["name"].as_str())
        .collect();
    assert_eq!(names, ["slow", "tick"]);
    assert_eq!(v["next_after"], serde_json::Value::Null);
    let (_, json, _) = alice.get("/api/v1/runs?job=tick&limit=5").await;
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(
        v["runs"].as_array().is_some_and(|r| !r.is_empty()),
        "{json}"
    );
    assert_eq!(
        alice.get("/api/v1/jobs/nope").await.0,
        StatusCode::NOT_FOUND
    );

    // The overview warns of a node gone silent without stopping and of a parked row.
    let now = store.now().await.unwrap();
    store
        .execute_raw(&format!(
            "INSERT INTO cron_nodes (name, host, last_seen) VALUES ('ghost', 'gone', {})",
            now - 120_000
        ))
        .await
        .unwrap();
    store
        .execute_raw("INSERT INTO cron_table (name, schedule, command) VALUES ('broken', 'not a schedule', 'true')")
        .await
        .unwrap();
    eventually(
        Duration::from_secs(20),
        "the overview's warnings",
        || async {
            let (_, page, _) = alice.get("").await;
            (page.contains("<strong>ghost</strong> last sent a heartbeat")
                && page.contains(
                    "running nowhere until fixed: <a href=\"/cron/jobs/broken\">broken</a>",
                ))
            .then_some(())
        },
    )
    .await;

    // And of a node whose clock is off, and of a job that no live node can run.
    store
        .execute_raw(&format!(
            "INSERT INTO cron_nodes (name, host, last_seen, clock_offset) VALUES ('skewed', 'h', {now}, 4500)"
        ))
        .await
        .unwrap();
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command, placement) \
             VALUES ('gpu-job', '@yearly', 'true', '{\"tags\": [\"gpu\"]}')",
        )
        .await
        .unwrap();
    let (_, page, _) = alice.get("").await;
    assert!(
        page.contains("<strong>skewed</strong>'s clock is 4.5 s ahead of the database's"),
        "{page}"
    );
    assert!(
        page.contains("No live node can run: <a href=\"/cron/jobs/gpu-job\">gpu-job</a>"),
        "{page}"
    );

    // Times in the reader's zone: the choice is a cookie, the browser's zone another.
    let r = alice.post("/zone", &[("zone", "browser")], None).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let set = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        set.starts_with("sqlcron_zone=browser; Path=/cron;"),
        "{set}"
    );
    assert_eq!(
        alice
            .post("/zone", &[("zone", "mars")], None)
            .await
            .status(),
        StatusCode::BAD_REQUEST
    );
    let mut tokyo = Browser::new(p1);
    tokyo.cookie = Some(format!(
        "{}; sqlcron_zone=browser; sqlcron_browser_zone=Asia%2FTokyo",
        alice.cookie.clone().unwrap()
    ));
    let (_, timeline, _) = tokyo.get("/timeline").await;
    assert!(
        timeline.contains("(Asia/Tokyo, from ") && timeline.contains(" JST"),
        "{timeline}"
    );
    let (_, timeline, _) = alice.get("/timeline").await;
    assert!(timeline.contains("(UTC, from "), "{timeline}");

    // Backfill: admins only; the plan first, then the runs queued, audited with the web user.
    let mut ada = Browser::new(p1);
    assert_eq!(
        ada.sign_in("ada", "ada-secret-1").await,
        StatusCode::SEE_OTHER
    );
    let when = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%S")
            .to_string()
    };
    let (from, to) = (when(now - 3_600_000), when(now - 3_590_000));
    let plan = format!("/jobs/tick/backfill?from={from}&to={to}");
    assert_eq!(alice.get(&plan).await.0, StatusCode::FORBIDDEN);
    let (status, page, _) = ada.get(&plan).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        page.contains("slot(s) in the range, 0 already ran successfully"),
        "{page}"
    );
    let form = [
        ("from", from.as_str()),
        ("to", to.as_str()),
        ("confirm", "yes"),
    ];
    assert_eq!(
        alice
            .post("/jobs/tick/backfill", &form, None)
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        ada.post("/jobs/tick/backfill", &form[..2], None)
            .await
            .status(),
        StatusCode::BAD_REQUEST
    );
    // The plan page's button names the job as planned and the runs it showed: a job changed
    // since (another fingerprint), or a plan of another size, queues nothing.
    let hidden = |name: &str| {
        page.split(&format!("name=\"{name}\" value=\""))
            .nth(1)
            .and_then(|t| t.split('"').next())
            .unwrap_or_else(|| panic!("no {name} in the plan page: {page}"))
            .to_string()
    };
    let (seen, count) = (hidden("seen"), hidden("count"));
    let other = "0".repeat(seen.len());
    let more = (count.parse::<usize>().unwrap() + 1).to_string();
    for (s, c) in [
        (other.as_str(), count.as_str()),
        (seen.as_str(), more.as_str()),
    ] {
        let stale = [form[0], form[1], form[2], ("seen", s), ("count", c)];
        assert_eq!(
            ada.post("/jobs/tick/backfill", &stale, None).await.status(),
            StatusCode::CONFLICT
        );
    }
    assert!(
        !store
            .jobs()
            .await
            .unwrap()
            .iter()
            .any(|j| j.name.starts_with("tick#backfill-")),
        "nothing queued by a stale plan"
    );
    let planned = [
        form[0],
        form[1],
        form[2],
        ("seen", seen.as_str()),
        ("count", count.as_str()),
    ];
    assert_eq!(
        ada.post("/jobs/tick/backfill", &planned, None)
            .await
            .status(),
        StatusCode::SEE_OTHER
    );
    let queued = store
        .jobs()
        .await
        .unwrap()
        .into_iter()
        .filter(|j| j.name.starts_with("tick#backfill-"))
        .count();
    assert!((5..=6).contains(&queued), "{queued} backfill rows");
    let trail = store.audit_log(None, 50).await.unwrap();
    assert!(
        trail.iter().any(|a| a
            .job
            .as_deref()
            .is_some_and(|j| j.starts_with("tick#backfill-"))
            && a.who == "web:ada"),
        "{trail:?}"
    );

    // Stopping a run in progress: operators, after a confirmation; recorded `stopped`.
    let slot = crate::util::make_due_now(&store, "slow").await;
    eventually(Duration::from_secs(20), "slow runs", || async {
        store.job("slow").await.ok()??.exec_by.map(|_| ())
    })
    .await;
    // Point 16: the nodes page lists what each node holds and when its lease ends.
    let (_, nodes, _) = victor.get("/nodes").await;
    let held = nodes.split("id=\"held\"").nth(1).unwrap_or_default();
    assert!(
        held.contains("href=\"/cron/jobs/slow\"") && held.contains("<time datetime="),
        "slow and its lease's end: {nodes}"
    );
    let (_, page, _) = alice.get("/jobs/slow").await;
    assert!(page.contains("/cron/jobs/slow/stop"), "{page}");
    let (_, page, _) = victor.get("/jobs/slow").await;
    assert!(!page.contains("/cron/jobs/slow/stop"), "{page}");
    let (status, confirm, _) = alice.get("/jobs/slow/stop").await;
    assert_eq!(status, StatusCode::OK);
    assert!(confirm.contains("cannot be undone"), "{confirm}");
    assert_eq!(
        victor
            .post("/jobs/slow/stop", &[("confirm", "yes")], None)
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        alice.post("/jobs/slow/stop", &[], None).await.status(),
        StatusCode::BAD_REQUEST
    );
    // The page's button names the run it showed (its fencing token): a post for another
    // claim (that run ended, the next slot's began) stops nothing.
    let seen: i64 = confirm
        .split("name=\"seen\" value=\"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .and_then(|t| t.parse().ok())
        .expect("the run's token in the stop page");
    let stale = (seen + 1).to_string();
    assert_eq!(
        alice
            .post(
                "/jobs/slow/stop",
                &[("confirm", "yes"), ("seen", &stale)],
                None
            )
            .await
            .status(),
        StatusCode::CONFLICT
    );
    let asked = store
        .scalars::<Option<i64>>("SELECT stop_token FROM cron_table WHERE name = 'slow'")
        .await
        .unwrap();
    assert_eq!(asked, [None]);
    let seen = seen.to_string();
    assert_eq!(
        alice
            .post(
                "/jobs/slow/stop",
                &[("confirm", "yes"), ("seen", &seen)],
                None
            )
            .await
            .status(),
        StatusCode::SEE_OTHER
    );
    eventually(Duration::from_secs(20), "slow recorded stopped", || async {
        let h = store.history(Some("slow"), 5).await.ok()?;
        h.iter()
            .any(|r| r.slot == slot && r.outcome == "stopped")
            .then_some(())
    })
    .await;
    assert!(
        store
            .audit_log(Some("slow"), 5)
            .await
            .unwrap()
            .iter()
            .any(|a| a.action == "stop" && a.who == "web:alice")
    );

    // A failed event delivered again: operators only, audited; the daemon delivers it (to the
    // hook tick's definition names: an event row's own hook is never run).
    store
        .execute_raw(&format!(
            "INSERT INTO cron_events (dedupe, job_name, kind, created, hook, payload, state, tries, error) \
             VALUES ('t1', 'tick', 'failure', {now}, '{{\"command\":\"true\"}}', '{{}}', 'failed', 5, 'gave up')"
        ))
        .await
        .unwrap();
    let event = store.events(Some("tick"), 5).await.unwrap()[0].id;
    let (_, events_page, _) = alice.get("/events").await;
    assert!(
        events_page.contains(&format!("/cron/events/{event}/retry")),
        "{events_page}"
    );
    let retry = format!("/events/{event}/retry");
    assert_eq!(
        victor.post(&retry, &[], None).await.status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        alice.post(&retry, &[], None).await.status(),
        StatusCode::SEE_OTHER
    );
    eventually(Duration::from_secs(20), "the event delivered", || async {
        let e = store.events(Some("tick"), 5).await.ok()?;
        e.iter()
            .any(|e| e.id == event && e.state == "sent")
            .then_some(())
    })
    .await;
    assert_eq!(
        alice.post(&retry, &[], None).await.status(),
        StatusCode::NOT_FOUND
    );
    let trail = store.audit_log(Some("tick"), 20).await.unwrap();
    assert!(
        trail
            .iter()
            .any(|a| a.action == "event_retry" && a.who == "web:alice"),
        "{trail:?}"
    );

    // Every view answers, its links stay under the sub-path; the API matches docs/openapi.json.
    let run_id = v["runs"][0]["id"].as_i64().expect("a run id");
    for path in [
        "/timeline?minutes=360",
        "/locks",
        "/events",
        "/audit?job=tick",
        "/jobs/tick/calendar?days=7",
        "/density",
        &format!("/runs/{run_id}"),
    ] {
        let (status, page, _) = alice.get(path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {page}");
        for href in page.split("href=\"").skip(1) {
            assert!(
                href.starts_with("/cron"),
                "{path}: a link outside the sub-path: {href}"
            );
        }
    }
    let (_, timeline, _) = alice.get("/timeline").await;
    assert!(
        timeline.contains("<svg") && timeline.contains("tick"),
        "{timeline}"
    );
    // The calendar: tick's slots by day and hour, ok ones among them (a busy schedule: fewer
    // days than asked, said so); the density: tick fires in every minute of the day.
    let (_, calendar, _) = alice.get("/jobs/tick/calendar?days=30").await;
    assert!(
        calendar.contains("<table class=\"heatmap\">")
            && calendar.contains("<td class=\"")
            // Some slot ran ok (a cell shows the worst of its slots: one missed one before the
            // daemons were up colours the hour as missed).
            && !calendar.contains("<span class=\"swatch ok\"></span> ok 0<")
            && calendar.contains("This schedule is busy: only the last "),
        "{calendar}"
    );
    let (_, density, _) = alice.get("/density").await;
    assert!(
        density.contains("Busiest minutes")
            && density.contains("<a href=\"/cron/jobs/tick\">tick</a>"),
        "{density}"
    );
    let (_, audit_page, _) = alice.get("/audit?job=tick").await;
    assert!(audit_page.contains("web:alice"), "{audit_page}");
    let (_, run_page, _) = alice.get(&format!("/runs/{run_id}")).await;
    assert!(
        run_page.contains("&lt;b&gt;tick&lt;/b&gt;") && run_page.contains("Fencing token"),
        "{run_page}"
    );
    let (status, output, headers) = alice.get(&format!("/runs/{run_id}/output")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(output, "<b>tick</b>\n");
    assert!(
        headers["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment")
    );
    assert_eq!(alice.get("/runs/999999999").await.0, StatusCode::NOT_FOUND);
    api_matches_its_description(&alice, run_id).await;
    runs_are_browsed_by_cursor_and_filter(&alice, &store).await;
    live_stream_sends_runs_and_resumes(&alice).await;

    // Breaking a lock: admins only, after a confirmation; audited.
    let holder = std::process::Command::new(env!("CARGO_BIN_EXE_sqlcron"))
        .arg("--config")
        .arg(dir.path().join("n1.toml"))
        .args(["lock", "nightly", "--lease", "3s", "--", "sleep", "60"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let holder = std::sync::Mutex::new(crate::util::KillOnDrop(holder));
    eventually(Duration::from_secs(20), "the lock is held", || async {
        let (_, page, _) = alice.get("/locks").await;
        (page.contains("nightly") && page.contains("badge holding")).then_some(())
    })
    .await;
    let r = alice
        .post("/locks/nightly/break", &[("confirm", "yes")], None)
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.text().await.unwrap().contains("needs the admin role"));
    let mut ada = Browser::new(p1);
    assert_eq!(
        ada.sign_in("ada", "ada-secret-1").await,
        StatusCode::SEE_OTHER
    );
    let (_, locks, _) = ada.get("/locks").await;
    assert!(locks.contains("/cron/locks/nightly/break"), "{locks}");
    let (status, confirm, _) = ada.get("/locks/nightly/break").await;
    assert_eq!(status, StatusCode::OK);
    assert!(confirm.contains("cannot be undone"), "{confirm}");
    let r = ada.post("/locks/nightly/break", &[], None).await;
    assert_eq!(
        r.status(),
        StatusCode::BAD_REQUEST,
        "no confirmation, no break"
    );
    let r = ada
        .post("/locks/nightly/break", &[("confirm", "yes")], None)
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    eventually(
        Duration::from_secs(20),
        "the broken holder stops",
        || async { holder.lock().unwrap().0.try_wait().unwrap().map(|_| ()) },
    )
    .await;
    let trail = store.audit_log(Some("nightly"), 5).await.unwrap();
    assert!(
        trail
            .iter()
            .any(|a| a.action == "lock_break" && a.who == "web:ada"),
        "{trail:?}"
    );

    // API tokens: made with the CLI, stored hashed, valid on every node, exempt from the
    // origin check (a browser never sends them by itself), revoked at once; audited.
    let config = dir.path().join("n1.toml");
    let config = config.to_str().unwrap();
    let out = sqlcron(&["--config", config, "web-token", "ci", "--role", "operator"]);
    assert!(out.status.success(), "{}", crate::util::stderr(&out));
    let token = crate::util::stdout(&out).trim().to_string();
    assert!(
        token.starts_with("sqlcron_") && token.len() == 8 + 12 + 1 + 64,
        "{token}"
    );
    let bearer = |port: u16, path: &str, token: &str| {
        alice
            .client
            .get(format!("http://127.0.0.1:{port}/cron{path}"))
            .header("authorization", format!("Bearer {token}"))
            .send()
    };
    assert_eq!(
        bearer(p2, "/api/v1/jobs", &token).await.unwrap().status(),
        StatusCode::OK
    );
    let forged = format!("{}0", &token[..token.len() - 1]);
    let forged = if forged == token {
        format!("{}1", &token[..token.len() - 1])
    } else {
        forged
    };
    assert_eq!(
        bearer(p1, "/api/v1/jobs", &forged).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    let r = alice
        .client
        .post(format!("{}/jobs/tick/pause", alice.base))
        .header("authorization", format!("Bearer {token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(!store.job("tick").await.unwrap().unwrap().enabled);
    assert!(
        store
            .set_enabled(
                "tick",
                true,
                &sqlcron::model::actor::Actor {
                    who: "test".into(),
                    host: None,
                    pid: None,
                }
            )
            .await
            .unwrap()
    );
    let trail = store.audit_log(Some("tick"), 10).await.unwrap();
    assert!(
        trail
            .iter()
            .any(|a| a.action == "pause" && a.who == "web:token:ci"),
        "{trail:?}"
    );
    let out = sqlcron(&["--config", config, "web-token", "ci"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a second token of one name is refused"
    );
    let out = sqlcron(&["--config", config, "web-token", "ci", "--revoke"]);
    assert!(out.status.success(), "{}", crate::util::stderr(&out));
    assert_eq!(
        bearer(p1, "/api/v1/jobs", &token).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    let out = sqlcron(&["--config", config, "web-token", "short", "--expires", "1s"]);
    let short = crate::util::stdout(&out).trim().to_string();
    eventually(
        Duration::from_secs(10),
        "the short token expires",
        || async {
            (bearer(p1, "/api/v1/jobs", &short).await.ok()?.status() == StatusCode::UNAUTHORIZED)
                .then_some(())
        },
    )
    .await;
    let tokens = store.audit_log(Some("ci"), 5).await.unwrap();
    assert!(
        tokens.iter().any(|a| a.action == "web_token_create")
            && tokens.iter().any(|a| a.action == "web_token_revoke"),
        "{tokens:?}"
    );

    // A new password in the users file ends the sessions made with the old one, on every node,
    // without a restart; the new one signs in.
    std::fs::write(
        &users,
        user_line("alice", "operator", "alice-new-secret") + &others,
    )
    .unwrap();
    eventually(
        Duration::from_secs(10),
        "the old session is refused on both nodes",
        || async {
            let (a, _, _) = alice.get("/jobs").await;
            let (b, _, _) = alice_on_n2.get("/jobs").await;
            (a == StatusCode::SEE_OTHER && b == StatusCode::SEE_OTHER).then_some(())
        },
    )
    .await;
    assert_eq!(
        victor.get("/jobs").await.0,
        StatusCode::OK,
        "victor's password did not change"
    );
    assert_eq!(
        alice.sign_in("alice", "alice-secret").await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        alice.sign_in("alice", "alice-new-secret").await,
        StatusCode::SEE_OTHER
    );

    // The job's command is shown escaped, never as markup.
    let (_, page, _) = alice.get("/jobs/tick").await;
    assert!(
        page.contains("&lt;b&gt;tick&lt;/b&gt;") && !page.contains("<b>tick</b>"),
        "{page}"
    );

    // One client address holds at most MAX_PER_CLIENT connections; n2 trusts no proxy, so
    // 127.0.0.1 is an ordinary client there. The next one is closed at once, and its places
    // come back when the client lets go.
    {
        use std::io::Read;
        let held: Vec<std::net::TcpStream> = (0..sqlcron::service::web::MAX_PER_CLIENT)
            .map(|_| std::net::TcpStream::connect(("127.0.0.1", p2)).unwrap())
            .collect();
        let mut extra = std::net::TcpStream::connect(("127.0.0.1", p2)).unwrap();
        extra
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(
            extra.read(&mut byte).unwrap_or(1),
            0,
            "one connection too many is closed at once"
        );
        drop(held);
        eventually(Duration::from_secs(10), "places given back", || async {
            let r = reqwest::Client::new()
                .get(format!("http://127.0.0.1:{p2}/cron/login"))
                .send()
                .await
                .ok()?;
            (r.status() == StatusCode::OK).then_some(())
        })
        .await;
    }

    // A body promised and never sent: the request ends within the body timeout, not the
    // connection's lifetime.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", p1))
            .await
            .unwrap();
        s.write_all(
            b"POST /cron/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nuser=",
        )
        .await
        .unwrap();
        let mut reply = vec![0u8; 256];
        let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut reply))
            .await
            .expect("an answer within the body timeout")
            .unwrap();
        let reply = String::from_utf8_lossy(&reply[..n]);
        assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    }

    // Signing out ends the session on every node, and the live streams it opened.
    let mut live = alice
        .client
        .get(format!("{}/api/v1/stream", alice.base))
        .header("cookie", alice.cookie.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), StatusCode::OK);
    assert_eq!(
        alice.post("/logout", &[], None).await.status(),
        StatusCode::SEE_OTHER
    );
    assert_eq!(alice_on_n2.get("/jobs").await.0, StatusCode::SEE_OTHER);
    // Within 5 s (issue 50, point 10: it took 7 s): the stream asks every 2 s.
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Ok(Some(_)) = live.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "the stream outlived its session by 5 s");

    // Failed sign-ins: unknown names share one count; once it is spent, an unknown name and a
    // known one get the same answer, and so does a blocked known name with its right password.
    let mut guesser = Browser::new(p2);
    for i in 0..5 {
        assert_eq!(
            guesser.sign_in(&format!("nobody{i}"), "x").await,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(
        guesser.sign_in("nobody9", "x").await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        guesser.sign_in("victor", "x").await,
        StatusCode::UNAUTHORIZED
    );
    for _ in 0..4 {
        guesser.sign_in("victor", "x").await;
    }
    assert_eq!(
        guesser.sign_in("victor", "victor-secret").await,
        StatusCode::UNAUTHORIZED,
        "a blocked name is refused even with its password"
    );
    assert!(guesser.cookie.is_none());
    store.close().await;
}

/// `sqlcron check` of a configuration with this `[web]` section: its exit code and what it said.
fn check_web(dir: &std::path::Path, web: &str) -> (Option<i32>, String) {
    let path = dir.join("c.toml");
    let text = format!(
        "[database]\nurl = \"sqlite://{}/x.db\"\n[web]\n{web}",
        dir.display()
    );
    std::fs::write(&path, text).unwrap();
    let out = sqlcron(&["--config", path.to_str().unwrap(), "check"]);
    let said = crate::util::stderr(&out) + &crate::util::stdout(&out);
    (out.status.code(), said)
}

/// A listener beyond this host needs a users file; `check` says which key to set. An anonymous
/// visitor may only read.
#[test]
fn a_dashboard_beyond_this_host_needs_users() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = check_web(dir.path(), "listen = \"0.0.0.0:8080\"\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("[web] listen") && err.contains("users_file"),
        "{err}"
    );
    // Nor may an anonymous visitor on loopback act: every account on the host, and every job
    // running on it, is one (a job running as nobody created a job that ran as root).
    for role in ["operator", "admin"] {
        let web = format!("listen = \"127.0.0.1:8080\"\nanonymous_role = \"{role}\"\n");
        let (code, err) = check_web(dir.path(), &web);
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains("[web] anonymous_role") && err.contains("every account on this host"),
            "{err}"
        );
    }
}

/// Each path of docs/openapi.json answers what its schema says: every required property, none
/// it does not name, of the named type.
async fn api_matches_its_description(b: &Browser, run_id: i64) {
    let spec: serde_json::Value =
        serde_json::from_str(include_str!("../../docs/openapi.json")).unwrap();
    for (path, item) in spec["paths"].as_object().unwrap() {
        let schema = &item["get"]["responses"]["200"]["content"]["application/json"]["schema"];
        if schema.is_null() {
            continue; // the event stream, tested on its own
        }
        let url = path
            .trim_start_matches("/cron")
            .replace("{name}", "tick")
            .replace("{id}", &run_id.to_string());
        let (status, body, _) = b.get(&url).await;
        assert_eq!(status, StatusCode::OK, "{url}: {body}");
        let value: serde_json::Value = serde_json::from_str(&body).unwrap();
        conforms(&spec, schema, &value, &url);
    }
}

fn conforms(spec: &serde_json::Value, schema: &serde_json::Value, v: &serde_json::Value, at: &str) {
    let schema = match schema["$ref"].as_str() {
        Some(r) => {
            let name = r.rsplit('/').next().unwrap();
            &spec["components"]["schemas"][name]
        }
        None => schema,
    };
    let types: Vec<&str> = match &schema["type"] {
        serde_json::Value::String(t) => vec![t.as_str()],
        serde_json::Value::Array(ts) => ts.iter().filter_map(|t| t.as_str()).collect(),
        _ => vec![],
    };
    let actual = match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(n) if n.is_i64() => "integer",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    };
    assert!(
        types.contains(&actual),
        "{at}: {actual} where the description says {types:?}: {v}"
    );
    if let serde_json::Value::Object(map) = v {
        let props = schema["properties"].as_object().unwrap();
        for key in map.keys() {
            assert!(
                props.contains_key(key),
                "{at}: {key} is not in the description"
            );
        }
        for key in schema["required"].as_array().unwrap() {
            assert!(
                map.contains_key(key.as_str().unwrap()),
                "{at}: {key} is missing"
            );
        }
        for (key, value) in map {
            conforms(spec, &props[key], value, &format!("{at}.{key}"));
        }
    }
    if let serde_json::Value::Array(items) = v {
        for (i, item) in items.iter().enumerate() {
            conforms(spec, &schema["items"], item, &format!("{at}[{i}]"));
        }
    }
}

/// The runs view and `/api/v1/runs`: `older` links walk a job's history down to its first run
/// (each run once), the filter stays in every link, and a filter that cannot be read is
/// refused with the reason.
async fn runs_are_browsed_by_cursor_and_filter(b: &Browser, store: &sqlcron::store::Store) {
    eventually(Duration::from_secs(30), "three runs of tick", || async {
        (store.history(Some("tick"), 10).await.ok()?.len() >= 3).then_some(())
    })
    .await;
    let (status, body, _) = b.get("/api/v1/runs?job=tick&limit=2").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut page: serde_json::Value = serde_json::from_str(&body).unwrap();
    let newest = page["runs"][0]["id"].as_i64().unwrap();
    let mut seen = vec![];
    loop {
        for r in page["runs"].as_array().unwrap() {
            assert_eq!(r["job"], "tick");
            seen.push(r["id"].as_i64().unwrap());
        }
        let Some(older) = page["older"].as_str() else {
            break;
        };
        assert!(
            older.starts_with("/cron/api/v1/runs?job=tick&before="),
            "{older}"
        );
        assert!(older.ends_with("&limit=2"), "{older}");
        let (_, body, _) = b.get(older.trim_start_matches("/cron")).await;
        page = serde_json::from_str(&body).unwrap();
    }
    let mut recorded: Vec<i64> = store
        .history(Some("tick"), 100_000)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .filter(|id| *id <= newest)
        .collect();
    recorded.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(
        seen, recorded,
        "each run of tick once, newest first, to the first"
    );
    assert!(seen.len() >= 3, "{seen:?}");

    let (status, view, _) = b.get("/runs?job=tick&outcome=ok&since=1h").await;
    assert_eq!(status, StatusCode::OK);
    assert!(view.contains("Runs of tick"), "{view}");
    assert!(
        view.contains(&format!("href=\"/cron/runs/{newest}\"")),
        "the newest run is listed: {view}"
    );
    assert!(
        view.contains("/cron/runs?job=tick&amp;outcome=ok&amp;since=1h&amp;after=0"),
        "{view}"
    );
    let (_, failed, _) = b.get("/runs?job=tick&outcome=failed").await;
    assert!(failed.contains("No run matches."), "{failed}");
    let (status, body, _) = b.get("/api/v1/runs?outcome=weird").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("not one of ok, failed"), "{body}");
    assert_eq!(
        b.get("/runs?since=yesterday").await.0,
        StatusCode::BAD_REQUEST
    );

    // The job list's filter: slow never ran (so is not failing), tick has.
    let (status, list, _) = b.get("/jobs?state=idle&sort=next&q=slo").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert!(list.contains("1 job matches"), "{list}");
    assert!(list.contains("href=\"/cron/jobs/slow\""), "{list}");
    let (_, body, _) = b.get("/api/v1/jobs?q=ti&state=failing").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["total"], 0, "{body}");
    let (status, body, _) = b.get("/api/v1/jobs?state=sleepy").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

/// The event stream sends a `run` event for runs anywhere in the cluster (`tick` runs every two
/// seconds), and one that reconnects with an old `Last-Event-ID` is sent what it missed first.
async fn live_stream_sends_runs_and_resumes(b: &Browser) {
    async fn first_event(b: &Browser, last: Option<&str>) -> (String, String) {
        let mut r = b
            .client
            .get(format!("{}/api/v1/stream", b.base))
            .header("cookie", b.cookie.clone().unwrap());
        if let Some(l) = last {
            r = r.header("last-event-id", l);
        }
        let mut resp = r.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(
            resp.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        let mut text = String::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let chunk = tokio::time::timeout_at(deadline, resp.chunk())
                .await
                .expect("a run event within 30 s")
                .unwrap()
                .expect("the stream stays open");
            text.push_str(&String::from_utf8_lossy(&chunk));
            if let Some(event) = text.split("\n\n").find(|e| e.contains("event: run")) {
                let field = |name: &str| {
                    event
                        .lines()
                        .find_map(|l| l.strip_prefix(name))
                        .map(|v| v.trim().to_string())
                        .unwrap()
                };
                return (field("id:"), field("data:"));
            }
        }
    }
    let (id, data) = first_event(b, None).await;
    let run: serde_json::Value = serde_json::from_str(&data).unwrap();
    assert_eq!(run["job"], "tick", "{data}");
    assert_eq!(id.split('.').count(), 3, "{id}");
    // An event is a Run (docs/openapi.json): its instants are RFC 3339, as everywhere.
    for at in ["slot", "started"] {
        let text = run[at].as_str().unwrap_or_else(|| panic!("{at}: {data}"));
        assert!(
            chrono::DateTime::parse_from_rfc3339(text).is_ok(),
            "{at}: {data}"
        );
    }
    // From the beginning: the oldest record comes first, at once.
    let (_, data) = first_event(b, Some("0.0.0")).await;
    let oldest: serde_json::Value = serde_json::from_str(&data).unwrap();
    assert!(
        oldest["id"].as_i64() <= run["id"].as_i64(),
        "{oldest} after {run}"
    );
}

/// A single-sign-on header needs the users it names; proxies are addresses.
#[test]
fn single_sign_on_needs_users_and_proxies_are_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = check_web(
        dir.path(),
        "listen = \"127.0.0.1:8080\"\nsso_header = \"X-Remote-User\"\n\
         trusted_proxies = [\"proxy.example\"]\n",
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("[web] sso_header") && err.contains("users_file"),
        "{err}"
    );
    assert!(
        err.contains("[web] trusted_proxies") && err.contains("proxy.example"),
        "{err}"
    );
}

/// Issue 50, points 3, 5 and 6: an address over 8 KB with a session cookie is answered 414 at
/// once (it got no reply at all); the overview counts every running job (its list stopped at
/// 20); a running job's "Next" says it runs now and names its next slot, not the lease's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_counts_every_run_and_long_addresses_are_refused() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(&users, user_line("alice", "operator", "alice-secret")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o600)).unwrap();
    let port = free_port();
    const JOBS: usize = 24;
    let mut extra = format!(
        "max_parallel = 32\n[web]\nlisten = \"127.0.0.1:{port}\"\nbase_path = \"/cron\"\nusers_file = \"{}\"\n",
        users.display()
    );
    for i in 0..JOBS {
        extra.push_str(&format!(
            "[[job]]\nname = \"r{i:02}\"\nschedule = \"*/2 * * * * *\"\ncommand = \"sleep 30\"\n"
        ));
    }
    let _node = DaemonProcess::start(dir.path(), "n1", &node_config(&db.url, "n1", &extra));
    let mut alice = Browser::new(port);
    eventually(Duration::from_secs(30), "the dashboard answers", || async {
        alice
            .client
            .get(format!("{}/login", alice.base))
            .send()
            .await
            .ok()
            .filter(|r| r.status() == StatusCode::OK)
            .map(|_| ())
    })
    .await;
    assert_eq!(
        alice.sign_in("alice", "alice-secret").await,
        StatusCode::SEE_OTHER
    );
    eventually(Duration::from_secs(30), "every job running", || async {
        let jobs = store.jobs().await.ok()?;
        (jobs.iter().filter(|j| j.exec_by.is_some()).count() == JOBS).then_some(())
    })
    .await;
    let (status, page, _) = alice.get("").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains(&format!("<span class=\"big\">{JOBS}</span> running now")),
        "{page}"
    );
    let (_, job, _) = alice.get("/jobs/r00").await;
    assert!(job.contains("running now; then "), "{job}");

    // An address over 8 KB, with the session cookie: 414, at once.
    let long = format!("/jobs?q={}", "a".repeat(9000));
    let asked = std::time::Instant::now();
    let resp = alice
        .client
        .get(format!("{}{long}", alice.base))
        .header("cookie", alice.cookie.clone().unwrap())
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::URI_TOO_LONG);
    assert!(asked.elapsed() < Duration::from_secs(3));
    store.close().await;
}
