//! HTTP jobs (`http = { url = ... }`) against a real local server, with real daemons.

use std::time::Duration;

use sqlcron::store::{Dialect, HistoryRow, Store};

use crate::http_server::TestServer;
use crate::util::{DaemonProcess, TestDb, eventually, make_due_now, node_config};

for_each_dialect!(
    http_jobs_answer_retry_time_out_and_follow_only_when_asked,
    a_lost_lease_cancels_the_request_and_the_takeover_keeps_its_key,
);

/// A job that runs only when a test makes it due.
fn http_job(name: &str, http: &str, extra: &str) -> String {
    format!("[[job]]\nname = \"{name}\"\nschedule = \"0 0 1 1 *\"\nhttp = {http}\n{extra}\n")
}

/// The history of `job` once it has `n` records, oldest attempt first.
async fn runs(store: &Store, job: &str, n: usize) -> Vec<HistoryRow> {
    eventually(
        Duration::from_secs(30),
        &format!("{n} records of {job}"),
        || async {
            let mut h = store.history(Some(job), 20).await.unwrap();
            h.retain(|r| r.outcome != "running");
            h.sort_by_key(|r| r.attempt);
            (h.len() >= n).then_some(h)
        },
    )
    .await
}

async fn http_jobs_answer_retry_time_out_and_follow_only_when_asked(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(None).await;
    let other = TestServer::start(None).await;
    let base = format!("http://127.0.0.1:{}", server.port);
    let jobs = [
        http_job(
            "hello",
            &format!(r#"{{ url = "{base}/ok", headers = {{ X-Team = "ops" }} }}"#),
            "",
        ),
        http_job(
            "flaky",
            &format!(r#"{{ url = "{base}/flaky" }}"#),
            "retries = 3\nretry_backoff = \"1s\"",
        ),
        http_job(
            "slow",
            &format!(r#"{{ url = "{base}/slow", timeout = "1s" }}"#),
            "",
        ),
        http_job("moved", &format!(r#"{{ url = "{base}/moved" }}"#), ""),
        http_job(
            "followed",
            &format!(r#"{{ url = "{base}/moved", method = "GET", redirects = 1 }}"#),
            "",
        ),
        http_job(
            "crossing",
            &format!(
                r#"{{ url = "{base}/away?to=http://127.0.0.1:{}/ok", method = "GET", redirects = 3, headers = {{ Authorization = "Bearer team-token" }} }}"#,
                other.port
            ),
            "",
        ),
        http_job(
            "custom",
            &format!(
                r#"{{ url = "{base}/ok", method = "PUT", body = "hello", success = [200, 200] }}"#
            ),
            "",
        ),
    ]
    .concat();
    let _a = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", &jobs));
    let store = db.store().await;
    let mut slots = std::collections::HashMap::new();
    for job in [
        "hello", "flaky", "slow", "moved", "followed", "crossing", "custom",
    ] {
        slots.insert(job, make_due_now(&store, job).await);
    }

    // A 2xx answer: the run is ok, its status and body are the output.
    let hello = runs(&store, "hello", 1).await;
    assert_eq!(hello[0].outcome, "ok", "{hello:?}");
    assert_eq!(hello[0].exit_code, Some(200));
    assert_eq!(hello[0].output.as_deref(), Some("HTTP 200 OK\nfine"));
    let seen = server.requests("/ok");
    let req = seen
        .iter()
        .find(|r| r.method == "POST")
        .expect("the hello request");
    assert_eq!(req.headers["x-team"], "ops");
    assert_eq!(req.headers["content-type"], "application/json");
    let slot_text = req.headers["sqlcron-slot"].clone();
    assert_eq!(
        req.headers["idempotency-key"],
        format!("hello/{slot_text}/1")
    );
    let token: i64 = req.headers["sqlcron-fencing-token"].parse().unwrap();
    assert_eq!(Some(token), hello[0].token);
    let body: serde_json::Value = serde_json::from_str(&req.body).unwrap();
    assert_eq!(body["job"], "hello");
    assert_eq!(body["slot"], slot_text.as_str());
    assert_eq!(body["attempt"], 1);
    assert_eq!(body["node"], "a");
    assert_eq!(body["fencing_token"], token);
    assert_eq!(
        chrono::DateTime::parse_from_rfc3339(&slot_text)
            .unwrap()
            .timestamp_millis(),
        slots["hello"]
    );

    // 5xx answers are failures, retried by the policy; each retry has its own key.
    let flaky = runs(&store, "flaky", 3).await;
    let outcomes: Vec<(&str, Option<i64>)> = flaky
        .iter()
        .map(|r| (r.outcome.as_str(), r.exit_code))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("failed", Some(503)),
            ("failed", Some(503)),
            ("ok", Some(200))
        ]
    );
    assert_eq!(
        flaky[0].output.as_deref(),
        Some("HTTP 503 Service Unavailable\nbusy")
    );
    let keys: Vec<String> = server
        .requests("/flaky")
        .iter()
        .map(|r| r.headers["idempotency-key"].clone())
        .collect();
    assert_eq!(keys.len(), 3);
    for (i, k) in keys.iter().enumerate() {
        assert!(k.ends_with(&format!("/{}", i + 1)), "{keys:?}");
    }

    // No answer within the target's timeout: the request is cancelled, the run timed out.
    let slow = runs(&store, "slow", 1).await;
    assert_eq!(slow[0].outcome, "timeout", "{slow:?}");
    assert!(
        slow[0]
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("no complete answer within 1s"),
        "{slow:?}"
    );

    // A redirect is an answer unless the job asks to follow it.
    let moved = runs(&store, "moved", 1).await;
    assert_eq!(
        (moved[0].outcome.as_str(), moved[0].exit_code),
        ("failed", Some(302))
    );
    let followed = runs(&store, "followed", 1).await;
    assert_eq!(
        (followed[0].outcome.as_str(), followed[0].exit_code),
        ("ok", Some(200)),
        "{followed:?}"
    );

    // A redirect to another origin is not followed: the job's headers never leave for it.
    let crossing = runs(&store, "crossing", 1).await;
    assert_eq!(crossing[0].outcome, "failed", "{crossing:?}");
    let message = crossing[0].message.clone().unwrap_or_default();
    assert!(
        message.contains("only redirects within the same origin"),
        "{message}"
    );
    assert!(
        other.requests("/ok").is_empty(),
        "the other origin was reached"
    );

    // The job's method and body, and a success range of one status.
    let custom = runs(&store, "custom", 1).await;
    assert_eq!(custom[0].outcome, "ok", "{custom:?}");
    let put = server
        .requests("/ok")
        .into_iter()
        .find(|r| r.method == "PUT")
        .expect("the PUT");
    assert_eq!(put.body, "hello");
    assert!(!put.headers.contains_key("content-type"));
    assert!(put.headers["idempotency-key"].starts_with("custom/"));

    // Rows written with SQL: the same JSON as the TOML table; a bad one is parked, not run.
    store
        .execute_raw(&format!(
            r#"INSERT INTO cron_table (name, schedule, http) VALUES ('by-sql', '0 0 1 1 *', '{{"url": "{base}/ok", "method": "PATCH"}}')"#
        ))
        .await
        .unwrap();
    store
        .execute_raw(
            r#"INSERT INTO cron_table (name, schedule, http) VALUES ('bad-sql', '* * * * * *', '{"url": 5}')"#,
        )
        .await
        .unwrap();
    make_due_now(&store, "by-sql").await;
    let by_sql = runs(&store, "by-sql", 1).await;
    assert_eq!(by_sql[0].outcome, "ok", "{by_sql:?}");
    assert!(server.requests("/ok").iter().any(|r| r.method == "PATCH"));
    let parked = eventually(Duration::from_secs(20), "the bad row parked", || async {
        store.job("bad-sql").await.unwrap().and_then(|r| r.error)
    })
    .await;
    assert!(parked.contains("http: url: 5 is not a string"), "{parked}");
}

async fn a_lost_lease_cancels_the_request_and_the_takeover_keeps_its_key(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(None).await;
    let job = http_job(
        "bill",
        &format!(
            r#"{{ url = "http://127.0.0.1:{}/slow-once" }}"#,
            server.port
        ),
        "timeout = \"2m\"",
    );
    let a = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", &job));
    let store = db.store().await;
    make_due_now(&store, "bill").await;
    let first = eventually(Duration::from_secs(20), "the first request", || async {
        server.requests("/slow-once").first().cloned()
    })
    .await;
    assert_eq!(first.headers["sqlcron-node"], "a");
    // Node a freezes with its request in flight; b takes the run over when the lease ends.
    a.signal(libc::SIGSTOP);
    let b = DaemonProcess::start(dir.path(), "b", &node_config(&db.url, "b", &job));
    let second = eventually(
        Duration::from_secs(30),
        "the takeover's request",
        || async { server.requests("/slow-once").get(1).cloned() },
    )
    .await;
    assert_eq!(second.headers["sqlcron-node"], "b");
    assert_eq!(
        second.headers["idempotency-key"], first.headers["idempotency-key"],
        "a rerun of a lost delivery repeats its key"
    );
    assert_eq!(second.headers["sqlcron-attempt"], "2");
    let (t1, t2): (i64, i64) = (
        first.headers["sqlcron-fencing-token"].parse().unwrap(),
        second.headers["sqlcron-fencing-token"].parse().unwrap(),
    );
    assert!(t2 > t1, "the new holder's token is higher: {t1} then {t2}");
    let history = runs(&store, "bill", 2).await;
    let outcomes: Vec<(&str, Option<&str>)> = history
        .iter()
        .map(|r| (r.outcome.as_str(), r.node.as_deref()))
        .collect();
    assert_eq!(outcomes, [("lost", Some("a")), ("ok", Some("b"))]);
    // Node a wakes, finds its lease lost and cancels its request without writing anything.
    a.signal(libc::SIGCONT);
    eventually(Duration::from_secs(15), "a's request cancelled", || async {
        (a.log_text().contains("request cancelled")
            || a.log_text().contains("run ended after its lease was lost"))
        .then_some(())
    })
    .await;
    eventually(
        Duration::from_secs(10),
        "the server sees the connection closed",
        || async {
            server
                .cancelled()
                .iter()
                .any(|c| c.starts_with("/slow-once "))
                .then_some(())
        },
    )
    .await;
    let after = runs(&store, "bill", 2).await;
    assert_eq!(after.len(), 2, "nothing more written: {after:?}");
    assert_eq!(server.requests("/slow-once").len(), 2);
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_jobs_trust_the_ca_file_or_the_system_roots() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    crate::tls::make_certs(dir.path());
    let server = TestServer::start_tls(dir.path()).await;
    let url = format!("https://localhost:{}/ok", server.port);
    let ca = dir.path().join("ca.pem");
    let other = dir.path().join("other-ca.pem");
    let jobs = [
        http_job(
            "trusted",
            &format!(r#"{{ url = "{url}", ca_file = "{}" }}"#, ca.display()),
            "",
        ),
        http_job("system", &format!(r#"{{ url = "{url}" }}"#), ""),
        // A host-local job's copy reads its TOML job's CA file as the job does.
        http_job(
            "local",
            &format!(r#"{{ url = "{url}", ca_file = "{}" }}"#, ca.display()),
            "run_on = \"every_node\"",
        ),
        http_job(
            "wrong-ca",
            &format!(r#"{{ url = "{url}", ca_file = "{}" }}"#, other.display()),
            "",
        ),
    ]
    .concat();
    let _a = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", &jobs));
    let store = db.store().await;
    eventually(Duration::from_secs(30), "the copy local@a", || async {
        store.job("local@a").await.unwrap().map(|_| ())
    })
    .await;
    for job in ["trusted", "system", "wrong-ca", "local@a"] {
        make_due_now(&store, job).await;
    }
    for job in ["trusted", "local@a"] {
        let trusted = runs(&store, job, 1).await;
        assert_eq!(trusted[0].outcome, "ok", "{trusted:?}");
        assert_eq!(trusted[0].output.as_deref(), Some("HTTP 200 OK\nfine"));
    }
    for job in ["system", "wrong-ca"] {
        let r = runs(&store, job, 1).await;
        assert_eq!(r[0].outcome, "failed", "{r:?}");
        let message = r[0].message.clone().unwrap_or_default();
        assert!(
            message.contains("certificate") || message.contains("UnknownIssuer"),
            "{job}: {message}"
        );
        assert_eq!(r[0].exit_code, None);
    }
    assert_eq!(
        server.requests("/ok").len(),
        2,
        "only the trusted job and the copy got through"
    );
}
