//! Issue 12 (2): `sqlcron explain` on a real history, made by two real daemons: a run that
//! failed and was retried, slots skipped after an outage (both nodes frozen), a run lost with its
//! node (SIGKILL) and rerun by the other, and the DST note of a spring-forward day.

use std::time::Duration;

use sqlcron::store::{Dialect, Store};

use crate::util::{DaemonProcess, TestDb, eventually, node_config, sqlcron, stderr, stdout};

for_each_dialect!(explain_tells_what_happened_to_each_slot);

/// `sqlcron explain JOB --json ARGS...` with `config`: the parsed answer.
fn explain_json(config: &str, job: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--config", config, "explain", job, "--json"];
    all.extend_from_slice(args);
    let out = sqlcron(&all);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
}

/// The explained slots whose state is `state` and whose runs have exactly these outcomes.
fn slots_with<'a>(
    v: &'a serde_json::Value,
    state: &str,
    outcomes: &[&str],
) -> Vec<&'a serde_json::Value> {
    v["slots"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| {
            s["state"] == state
                && s["runs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["outcome"].as_str().unwrap())
                    .eq(outcomes.iter().copied())
        })
        .collect()
}

async fn outcomes(store: &Store, job: &str) -> Vec<(i64, i64, String)> {
    store
        .history(Some(job), 1_000)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.slot, r.attempt, r.outcome))
        .collect()
}

async fn explain_tells_what_happened_to_each_slot(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let jobs = format!(
        "[[job]]\nname = \"flaky\"\nschedule = \"*/2 * * * * *\"\nretries = 1\nretry_backoff = \"500ms\"\n\
         command = \"[ -e {d}/flaky.$SQLCRON_SLOT ] || {{ touch {d}/flaky.$SQLCRON_SLOT; exit 3; }}\"\n\
         [[job]]\nname = \"skipper\"\nschedule = \"* * * * * *\"\nmisfire = \"skip\"\n\
         starting_deadline = \"1s\"\ncommand = \"true\"\n\
         [[job]]\nname = \"long\"\nschedule = \"*/5 * * * * *\"\n\
         command = \"if [ -e {d}/go ]; then rm {d}/go; echo $SQLCRON_NODE > {d}/started; sleep 60; fi\"\n\
         [[job]]\nname = \"dst\"\nschedule = \"30 2 * * *\"\ntimezone = \"Europe/Berlin\"\ncommand = \"true\"\n"
    );
    let mut nodes: Vec<Option<DaemonProcess>> = ["e1", "e2"]
        .iter()
        .map(|n| {
            Some(DaemonProcess::start(
                dir.path(),
                n,
                &node_config(&db.url, n, &jobs),
            ))
        })
        .collect();
    let config = dir.path().join("e1.toml").display().to_string();

    // A failed run retried with success.
    eventually(
        Duration::from_secs(60),
        "flaky failed and retried",
        || async {
            let h = outcomes(&store, "flaky").await;
            h.iter()
                .any(|(slot, _, o)| {
                    o == "ok" && h.iter().any(|(s, _, o2)| s == slot && o2 == "failed")
                })
                .then_some(())
        },
    )
    .await;

    // An outage: both nodes frozen for longer than the starting deadline.
    eventually(Duration::from_secs(60), "skipper runs", || async {
        outcomes(&store, "skipper")
            .await
            .iter()
            .any(|r| r.2 == "ok")
            .then_some(())
    })
    .await;
    for n in nodes.iter().flatten() {
        n.signal(libc::SIGSTOP);
    }
    std::thread::sleep(Duration::from_secs(4));
    for n in nodes.iter().flatten() {
        n.signal(libc::SIGCONT);
    }
    eventually(
        Duration::from_secs(60),
        "skipped slots recorded",
        || async {
            outcomes(&store, "skipper")
                .await
                .iter()
                .any(|r| r.2 == "skipped")
                .then_some(())
        },
    )
    .await;

    // A run lost with its node and rerun by the other.
    std::fs::write(dir.path().join("go"), "").unwrap();
    let started = dir.path().join("started");
    let victim = eventually(Duration::from_secs(60), "long started", || async {
        std::fs::read_to_string(&started)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    })
    .await;
    let i = if victim == "e1" { 0 } else { 1 };
    let mut killed = nodes[i].take().unwrap();
    killed.signal(libc::SIGKILL);
    let _ = killed.child.wait();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    eventually(Duration::from_secs(61), "long rerun", || async {
        let h = outcomes(&store, "long").await;
        if std::time::Instant::now() > deadline {
            let logs: Vec<String> = nodes.iter().flatten().map(|n| n.log_text()).collect();
            let tail: Vec<&str> = logs
                .iter()
                .flat_map(|l| l.lines().filter(|x| x.contains("long")).rev().take(3))
                .collect();
            panic!(
                "no rerun of long after its node was killed: {h:?}\n{}",
                tail.join("\n")
            );
        }
        h.iter()
            .any(|(slot, a, o)| {
                o == "ok" && *a >= 2 && h.iter().any(|(s, _, o2)| s == slot && o2 == "lost")
            })
            .then_some(())
    })
    .await;
    let survivor = nodes[1 - i].take().unwrap();

    let flaky = explain_json(&config, "flaky", &[]);
    // Issue 26 (9): the default range starts when the job was created (this test made it),
    // not a day ago with thousands of slots before its first.
    let created = store.created_at("flaky").await.unwrap().unwrap();
    // Issue 51 (15): every JSON instant is RFC 3339 UTC, spelled as SQLCRON_SLOT is.
    assert_eq!(
        flaky["from"].as_str(),
        Some(sqlcron::model::json_time::rfc3339(created).as_str()),
        "{flaky:#}"
    );
    let retried = slots_with(&flaky, "ok", &["failed", "ok"]);
    assert!(!retried.is_empty(), "{flaky:#}");
    assert!(
        retried[0]["text"]
            .as_str()
            .unwrap()
            .contains("retried: ok on")
    );
    assert_eq!(
        flaky["slots"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["state"] == "scheduled")
            .count(),
        3,
        "the next three fire times"
    );

    let skipper = explain_json(&config, "skipper", &[]);
    let skipped: Vec<_> = skipper["slots"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["state"] == "skipped")
        .collect();
    assert!(!skipped.is_empty(), "{skipper:#}");
    assert!(
        skipped[0]["text"]
            .as_str()
            .unwrap()
            .contains("misfire = skip"),
        "{skipper:#}"
    );

    let long = explain_json(&config, "long", &[]);
    let lost = format!("lost (its node stopped renewing the lease) on {victim}");
    assert!(
        slots_with(&long, "ok", &["lost", "ok"]).iter().any(|s| {
            let text = s["text"].as_str().unwrap();
            text.contains(&lost) && text.contains("rerun: ok on")
        }),
        "{long:#}"
    );

    let out = sqlcron(&[
        "--config",
        &config,
        "explain",
        "dst",
        "--from",
        "2026-03-28",
        "--to",
        "2026-03-30T12:00",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("2026-03-29T03:00:00+02:00"), "{text}");
    assert!(
        text.contains("note: 02:30 does not exist on 2026-03-29 in Europe/Berlin: runs at 03:00"),
        "{text}"
    );
    let bad = sqlcron(&["--config", &config, "explain", "nosuch"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("no job named \"nosuch\""));

    assert!(survivor.stop().success());
    store.close().await;
}
