//! Issue 50, points 13 and 16: bulk actions act only after a confirmation page has shown the
//! exact jobs (ticked, or every job matching the filter, chosen on the server), at most 500,
//! each audit row naming one batch, and a form posted twice acts once; Run now and Resume have
//! their own page first, and Resume says what the misfire policy will do and offers to skip
//! what passed, fenced by what the page showed (the web and `sqlcron resume --skip-missed`).

use std::time::Duration;

use reqwest::StatusCode;
use sqlcron::store::Dialect;

use crate::util::{DaemonProcess, TestDb, eventually, free_port, node_config, sqlcron, stdout};
use crate::web::{Browser, user_line};

for_each_dialect!(bulk_and_resume_are_confirmed_and_fenced);

/// The hidden fields of the first form of `page` that has a `confirm` or `skip` field, as a
/// browser would post them (HTML entities of the values decoded).
pub fn hidden_fields(page: &str, marker: &str) -> Vec<(String, String)> {
    let start = page
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker} on the page: {page}"));
    let form_start = page[..start].rfind("<form").unwrap();
    let form_end = start + page[start..].find("</form>").unwrap();
    let form = &page[form_start..form_end];
    let attr = |tag: &str, name: &str| -> Option<String> {
        let key = format!("{name}=\"");
        let at = tag.find(&key)? + key.len();
        let v = &tag[at..at + tag[at..].find('"')?];
        Some(
            v.replace("&quot;", "\"")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&"),
        )
    };
    form.split("<input")
        .skip(1)
        .filter(|t| t.contains("type=\"hidden\""))
        .filter_map(|t| Some((attr(t, "name")?, attr(t, "value")?)))
        .collect()
}

fn tester() -> sqlcron::model::actor::Actor {
    sqlcron::model::actor::Actor {
        who: "test".into(),
        host: None,
        pid: None,
    }
}

async fn post_fields(b: &Browser, path: &str, fields: &[(String, String)]) -> reqwest::Response {
    let refs: Vec<(&str, &str)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    b.post(path, &refs, None).await
}

async fn bulk_and_resume_are_confirmed_and_fenced(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(
        &users,
        user_line("alice", "operator", "alice-secret")
            + &user_line("victor", "viewer", "victor-secret"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o600)).unwrap();
    let port = free_port();
    let mut jobs = String::from(
        "[[job]]\nname = \"tick\"\nschedule = \"* * * * *\"\ncommand = \"true\"\n\
         misfire = \"run_all\"\nmax_catch_up = 3\n",
    );
    for i in 1..=12 {
        jobs += &format!(
            "[[job]]\nname = \"batch-{i:02}\"\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n"
        );
    }
    let extra = format!(
        "[web]\nlisten = \"127.0.0.1:{port}\"\nbase_path = \"/cron/\"\nusers_file = \"{}\"\n{jobs}",
        users.display()
    );
    let config = node_config(&db.url, "n1", &extra);
    let node = DaemonProcess::start(dir.path(), "n1", &config);
    let cfg = dir.path().join("n1.toml");
    let mut alice = Browser::new(port);
    eventually(Duration::from_secs(30), "the dashboard answers", || async {
        reqwest::get(format!("http://127.0.0.1:{port}/cron/login"))
            .await
            .ok()
            .filter(|r| r.status().is_success())
            .map(|_| ())
    })
    .await;
    assert_eq!(
        alice.sign_in("alice", "alice-secret").await,
        StatusCode::SEE_OTHER
    );
    let mut victor = Browser::new(port);
    assert_eq!(
        victor.sign_in("victor", "victor-secret").await,
        StatusCode::SEE_OTHER
    );
    eventually(Duration::from_secs(30), "the jobs applied", || async {
        let (_, list, _) = alice.get("/jobs?q=batch-").await;
        list.contains("12 jobs match").then_some(())
    })
    .await;

    // Point 13: "all 12 matching" is chosen on the server by the filter; nothing happens until
    // the confirmation page's button, which names the exact jobs.
    let (_, list, _) = alice.get("/jobs?q=batch-").await;
    assert!(list.contains("all 12 matching"), "{list}");
    let ask = [("action", "pause"), ("all", "yes"), ("q", "batch-")];
    assert_eq!(
        victor.post("/jobs/bulk", &ask, None).await.status(),
        StatusCode::FORBIDDEN
    );
    let r = alice.post("/jobs/bulk", &ask, None).await;
    assert_eq!(r.status(), StatusCode::OK);
    let confirm = r.text().await.unwrap();
    assert!(
        confirm.contains("<strong>12</strong> job(s); 12 will change"),
        "{confirm}"
    );
    assert!(
        store.job("batch-01").await.unwrap().unwrap().enabled,
        "nothing done before the confirmation"
    );
    let mut form = hidden_fields(&confirm, "name=\"confirm\"");
    assert_eq!(form.iter().filter(|(k, _)| k == "job").count(), 12);
    let batch = form.iter().find(|(k, _)| k == "batch").unwrap().1.clone();
    form.push(("reason".into(), "disk swap".into()));
    // A viewer cannot post the confirmed form either.
    assert_eq!(
        post_fields(&victor, "/jobs/bulk", &form).await.status(),
        StatusCode::FORBIDDEN
    );
    let r = post_fields(&alice, "/jobs/bulk", &form).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await.unwrap().contains("Pause: 12 of 12 job(s)"));
    for i in 1..=12 {
        assert!(
            !store
                .job(&format!("batch-{i:02}"))
                .await
                .unwrap()
                .unwrap()
                .enabled
        );
    }
    let batch_rows = |trail: &[sqlcron::store::AuditRow]| {
        trail
            .iter()
            .filter(|a| {
                a.action == "pause"
                    && a.detail
                        .as_deref()
                        .is_some_and(|d| d.contains(&format!("batch {batch}")))
            })
            .count()
    };
    let trail = store.audit_log(None, 200).await.unwrap();
    assert_eq!(
        batch_rows(&trail),
        12,
        "one audit row per job, each naming the batch: {trail:?}"
    );
    assert!(
        trail.iter().any(|a| a.detail.as_deref().is_some_and(
            |d| d.starts_with(&format!("reason: disk swap (batch {batch}, 12 of 12)"))
        )),
        "{trail:?}"
    );
    // The same form again (a double click, a reload, a replay): nothing more is done or
    // recorded, the batch was applied.
    let r = post_fields(&alice, "/jobs/bulk", &form).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    // Even with the jobs resumed in between, a replayed batch acts on none of them.
    for i in 1..=12 {
        store
            .set_enabled(&format!("batch-{i:02}"), true, &tester())
            .await
            .unwrap();
    }
    assert_eq!(
        post_fields(&alice, "/jobs/bulk", &form).await.status(),
        StatusCode::CONFLICT
    );
    assert!(store.job("batch-01").await.unwrap().unwrap().enabled);
    // A reason cannot pose as another batch's.
    let mut posing = form.clone();
    posing.retain(|(k, _)| k != "batch" && k != "reason");
    posing.push(("batch".into(), "0123456789abcdef".into()));
    posing.push(("reason".into(), "x (batch ffffffffffffffff, 1 of 1)".into()));
    assert_eq!(
        post_fields(&alice, "/jobs/bulk", &posing).await.status(),
        StatusCode::BAD_REQUEST
    );
    // A page on another site cannot even have the confirmation drawn.
    assert_eq!(
        alice
            .post("/jobs/bulk", &ask, Some("http://evil.example"))
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(batch_rows(&store.audit_log(None, 200).await.unwrap()), 12);
    // A forged confirmation without a batch id is refused.
    let forged = [
        ("action", "resume"),
        ("confirm", "yes"),
        ("job", "batch-01"),
        ("seen", "0"),
    ];
    assert_eq!(
        alice.post("/jobs/bulk", &forged, None).await.status(),
        StatusCode::BAD_REQUEST
    );

    // The cap: 501 jobs matching cannot be acted on at once, and the list does not offer it.
    let values: Vec<String> = (0..501)
        .map(|i| format!("('cap-{i:03}', '0 0 1 1 *', 'true')"))
        .collect();
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command) VALUES {}",
            values.join(", ")
        ))
        .await
        .unwrap();
    let (_, list, _) = alice.get("/jobs?q=cap-").await;
    assert!(
        list.contains("501 jobs match") && !list.contains("all 501 matching"),
        "{list}"
    );
    let r = alice
        .post(
            "/jobs/bulk",
            &[("action", "pause"), ("all", "yes"), ("q", "cap-")],
            None,
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(
        r.text()
            .await
            .unwrap()
            .contains("501 jobs match: at most 500 at once")
    );

    // Point 16: Run now has its page (what runs, the one-click token); viewers are refused.
    let (status, page, _) = alice.get("/jobs/tick/run").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        page.contains("Run tick now?") && page.contains("name=\"seen\""),
        "{page}"
    );
    assert_eq!(victor.get("/jobs/tick/run").await.0, StatusCode::FORBIDDEN);
    // A paused job: its page says nothing runs it until the resume (it said an extra run
    // still ran, and nothing did); a post without the page's queue=yes (a page drawn before
    // the pause) adds nothing; bulk Run now leaves it alone rather than report it done.
    store
        .set_enabled("batch-01", false, &tester())
        .await
        .unwrap();
    let (_, page, _) = alice.get("/jobs/batch-01/run").await;
    assert!(
        page.contains("nothing runs it until it is resumed") && page.contains("name=\"queue\""),
        "{page}"
    );
    let seen = hidden_fields(&page, "name=\"seen\"")
        .into_iter()
        .find(|(k, _)| k == "seen")
        .unwrap()
        .1;
    let asked = || async { store.job("batch-01").await.unwrap().unwrap().run_now };
    assert_eq!(
        alice
            .post("/jobs/batch-01/run", &[("seen", seen.as_str())], None)
            .await
            .status(),
        StatusCode::CONFLICT
    );
    assert!(!asked().await);
    let r = alice
        .post(
            "/jobs/bulk",
            &[("action", "run"), ("job", "batch-01"), ("job", "batch-02")],
            None,
        )
        .await;
    let confirm = r.text().await.unwrap();
    assert!(
        confirm.contains("1 will change") && confirm.contains("left alone: paused"),
        "{confirm}"
    );
    let r = post_fields(
        &alice,
        "/jobs/bulk",
        &hidden_fields(&confirm, "name=\"confirm\""),
    )
    .await;
    let done = r.text().await.unwrap();
    assert!(done.contains("left alone (paused"), "{done}");
    assert!(!asked().await);
    // A job whose command a writer changed after the confirmation page was drawn is left
    // alone: no run of a command the operator never saw is asked for under their name.
    let r = alice
        .post(
            "/jobs/bulk",
            &[("action", "run"), ("job", "batch-03"), ("job", "batch-04")],
            None,
        )
        .await;
    let confirm = r.text().await.unwrap();
    let fields = hidden_fields(&confirm, "name=\"confirm\"");
    assert_eq!(
        fields.iter().filter(|(k, _)| k == "definition").count(),
        2,
        "{confirm}"
    );
    store
        .execute_raw("UPDATE cron_table SET command = 'echo planted' WHERE name = 'batch-03'")
        .await
        .unwrap();
    let done = post_fields(&alice, "/jobs/bulk", &fields)
        .await
        .text()
        .await
        .unwrap();
    assert!(
        done.contains("left alone (it changed since the confirmation page)")
            && done.contains("1 done, 1 left alone"),
        "{done}"
    );
    let store = &store;
    let job = |name: &'static str| async move { store.job(name).await.unwrap().unwrap() };
    assert!(
        !job("batch-03").await.run_now,
        "no run of the planted command"
    );
    let audited = store
        .scalar_i64("SELECT count(*) FROM cron_audit WHERE action = 'run' AND job = 'batch-03'")
        .await
        .unwrap();
    assert_eq!(audited, Some(0));
    // The other job of the batch, unchanged, got its run (it may have run already).
    eventually(Duration::from_secs(30), "batch-04 asked or run", || async {
        let j = job("batch-04").await;
        (j.run_now || j.last_start.is_some()).then_some(())
    })
    .await;
    assert_eq!(
        alice
            .post(
                "/jobs/batch-01/run",
                &[("seen", seen.as_str()), ("queue", "yes")],
                None
            )
            .await
            .status(),
        StatusCode::SEE_OTHER
    );
    assert!(asked().await, "queued for the resume");

    // Resume says what the misfire policy will do with what passed, and can skip it all.
    store.set_enabled("tick", false, &tester()).await.unwrap();
    eventually(Duration::from_secs(30), "tick idle", || async {
        store
            .job("tick")
            .await
            .unwrap()
            .unwrap()
            .exec_by
            .is_none()
            .then_some(())
    })
    .await;
    let paused_at_slot = |minutes_ago: i64| {
        let store = &store;
        async move {
            let now = store.now().await.unwrap();
            let slot = now / 60_000 * 60_000 - minutes_ago * 60_000;
            store
                .execute_raw(&format!(
                    "UPDATE cron_table SET slot = {slot}, attempt = 0, next_exec = {slot} WHERE name = 'tick'"
                ))
                .await
                .unwrap();
            slot
        }
    };
    let slot = paused_at_slot(10).await;
    let (_, page, _) = alice.get("/jobs/tick/resume").await;
    assert!(
        page.contains("slot(s) passed while it was paused. With misfire = run_all, max_catch_up = 3, 4 of them run, oldest first"),
        "{page}"
    );
    let skip = hidden_fields(&page, "name=\"skip\"");
    assert!(
        skip.contains(&("slot".into(), slot.to_string())),
        "{skip:?}"
    );
    // A page older than the row (its token changed) skips nothing.
    let stale: Vec<(String, String)> = skip
        .iter()
        .map(|(k, v)| {
            if k == "seen" {
                (k.clone(), (v.parse::<i64>().unwrap() + 1).to_string())
            } else {
                (k.clone(), v.clone())
            }
        })
        .collect();
    assert_eq!(
        post_fields(&alice, "/jobs/tick/resume", &stale)
            .await
            .status(),
        StatusCode::CONFLICT
    );
    assert!(!store.job("tick").await.unwrap().unwrap().enabled);
    assert_eq!(
        post_fields(&victor, "/jobs/tick/resume", &skip)
            .await
            .status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        post_fields(&alice, "/jobs/tick/resume", &skip)
            .await
            .status(),
        StatusCode::SEE_OTHER
    );
    let row = store.job("tick").await.unwrap().unwrap();
    let now = store.now().await.unwrap();
    assert!(
        row.enabled && row.slot.unwrap() > now - 60_000 && row.slot.unwrap() > slot,
        "{row:?}"
    );
    let skipped = store
        .scalar_i64(&format!(
            "SELECT skipped_count FROM cron_runs WHERE job_name = 'tick' AND outcome = 'skipped' AND slot = {slot}"
        ))
        .await
        .unwrap();
    assert!(
        skipped.is_some_and(|n| n >= 11),
        "one skipped line from the old slot: {skipped:?}"
    );
    let trail = store.audit_log(Some("tick"), 5).await.unwrap();
    assert!(
        trail[0].action == "resume"
            && trail[0].who == "web:alice"
            && trail[0]
                .detail
                .as_deref()
                .is_some_and(|d| d.starts_with("skipped 1")),
        "{trail:?}"
    );

    // The same from the command line.
    store.set_enabled("tick", false, &tester()).await.unwrap();
    eventually(Duration::from_secs(30), "tick idle again", || async {
        store
            .job("tick")
            .await
            .unwrap()
            .unwrap()
            .exec_by
            .is_none()
            .then_some(())
    })
    .await;
    let slot = paused_at_slot(5).await;
    let out = sqlcron(&[
        "--config",
        cfg.to_str().unwrap(),
        "resume",
        "tick",
        "--skip-missed",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("tick: resumed; "), "{}", stdout(&out));
    let row = store.job("tick").await.unwrap().unwrap();
    assert!(
        row.enabled && row.slot.unwrap() > slot + 5 * 60_000 - 1,
        "{row:?}"
    );
    store.set_enabled("tick", false, &tester()).await.unwrap();
    eventually(
        Duration::from_secs(30),
        "tick idle a third time",
        || async {
            store
                .job("tick")
                .await
                .unwrap()
                .unwrap()
                .exec_by
                .is_none()
                .then_some(())
        },
    )
    .await;
    paused_at_slot(3).await;
    let out = sqlcron(&["--config", cfg.to_str().unwrap(), "resume", "tick"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout(&out).contains("With misfire = run_all, max_catch_up = 3, 4 of them run"),
        "{}",
        stdout(&out)
    );
    // A skip never turns an every_node template into a job of its own, nor ends a one-off
    // without its run.
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command, run_on, enabled) \
             VALUES ('tmpl', '* * * * *', 'true', 'every_node', 0), \
                    ('once', '@at 2026-01-01T00:00:00Z', 'true', NULL, 0)",
        )
        .await
        .unwrap();
    for (job, says) in [
        ("tmpl", "every_node template"),
        ("once", "no slot after now"),
    ] {
        let out = sqlcron(&[
            "--config",
            cfg.to_str().unwrap(),
            "resume",
            job,
            "--skip-missed",
        ]);
        assert!(!out.status.success(), "{out:?}");
        assert!(crate::util::stderr(&out).contains(says), "{out:?}");
        assert!(!store.job(job).await.unwrap().unwrap().enabled);
        let (_, page, _) = alice.get(&format!("/jobs/{job}/resume")).await;
        assert!(
            !page.contains("name=\"skip\""),
            "no skip offered for {job}: {page}"
        );
    }
    drop(node);
}
