//! One-off (`@at`), interval (`@every`) and hashed (`H`) schedules, and the overlap policy,
//! with real daemons.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlcron::store::Dialect;

use crate::util::{DaemonProcess, TestDb, eventually, node_config, sqlcron, stderr, stdout};

for_each_dialect!(
    one_off_killed_mid_run_reruns_once_then_never,
    every_and_h_slots_are_the_same_on_every_node,
    replace_stops_a_run_that_outlives_its_period,
    backfill_runs_each_missing_slot_once,
);

async fn one_off_killed_mid_run_reruns_once_then_never(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let a = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", ""));
    let b = DaemonProcess::start(dir.path(), "b", &node_config(&db.url, "b", ""));
    let store = db.store().await;
    eventually(Duration::from_secs(20), "both nodes registered", || async {
        store
            .nodes()
            .await
            .ok()
            .filter(|n| n.len() == 2)
            .map(|_| ())
    })
    .await;
    let cli = dir.path().join("cli.toml");
    std::fs::write(&cli, node_config(&db.url, "cli", "")).unwrap();
    let script = format!(
        "echo start $SQLCRON_NODE $SQLCRON_ATTEMPT $SQLCRON_SLOT >> {0}; sleep 4; echo end $SQLCRON_NODE $SQLCRON_ATTEMPT >> {0}",
        out.display()
    );
    let made = sqlcron(&[
        "--config",
        cli.to_str().unwrap(),
        "at",
        "+2s",
        "--name",
        "once",
        "--",
        &script,
    ]);
    assert!(made.status.success(), "{}", stderr(&made));
    assert!(
        stdout(&made).contains("once: runs once at"),
        "{}",
        stdout(&made)
    );
    // The name is taken now.
    let again = sqlcron(&[
        "--config",
        cli.to_str().unwrap(),
        "at",
        "now",
        "--name",
        "once",
        "--",
        "true",
    ]);
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    let read = || std::fs::read_to_string(&out).unwrap_or_default();
    let first = eventually(Duration::from_secs(20), "the one-off's start", || async {
        read()
            .lines()
            .find(|l| l.starts_with("start "))
            .map(str::to_string)
    })
    .await;
    let f: Vec<&str> = first.split_whitespace().collect();
    assert_eq!(f[2], "1", "{first}");
    let (victim, survivor) = if f[1] == "a" { (a, b) } else { (b, a) };
    eventually(
        Duration::from_secs(5),
        "the job's process handed over",
        || async {
            victim
                .log_text()
                .contains("job process started")
                .then_some(())
        },
    )
    .await;
    victim.signal(libc::SIGKILL);
    // The survivor takes over after the lease and reruns the one slot once.
    eventually(Duration::from_secs(30), "the rerun's end", || async {
        read()
            .lines()
            .any(|l| l == format!("end {} 2", survivor.name))
            .then_some(())
    })
    .await;
    let row = eventually(Duration::from_secs(10), "the row marked done", || async {
        store
            .job("once")
            .await
            .unwrap()
            .filter(|r| r.next_exec == Some(i64::MAX) && r.exec_by.is_none())
    })
    .await;
    assert_eq!(row.last_status.as_deref(), Some("ok"));
    // Never again: four more polls of the survivor (1 s apart) start nothing. The wait is the
    // test's subject, not a synchronisation.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let text = read();
    let starts: Vec<&str> = text.lines().filter(|l| l.starts_with("start ")).collect();
    assert_eq!(starts.len(), 2, "one start and one rerun:\n{text}");
    assert_eq!(
        starts[0].split(' ').nth(3),
        starts[1].split(' ').nth(3),
        "same slot"
    );
    let outcomes: Vec<String> = store
        .history(Some("once"), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|h| format!("{} {}", h.attempt, h.outcome))
        .collect();
    assert_eq!(outcomes, ["2 ok", "1 lost"], "newest first");
    let status = sqlcron(&["--config", cli.to_str().unwrap(), "status"]);
    let line = stdout(&status)
        .lines()
        .find(|l| l.starts_with("once "))
        .unwrap_or_default()
        .to_string();
    assert!(line.contains(" done "), "{line}");
    // Retention removes it once past [history] keep, and audits the removal.
    let now = store.now().await.unwrap();
    let removed = store
        .remove_done_one_offs(now + 1, &sqlcron::exec::account::this_process(Some("test")))
        .await
        .unwrap();
    assert_eq!(removed, ["once"]);
    assert!(store.job("once").await.unwrap().is_none());
    let audit = store.audit_log(Some("once"), 10).await.unwrap();
    let actions: Vec<&str> = audit.iter().map(|r| r.action.as_str()).collect();
    assert_eq!(actions, ["expired", "at"], "{audit:?}");
    let log = survivor.log_text();
    let status = survivor.stop();
    assert!(status.success(), "{log}");
}

async fn every_and_h_slots_are_the_same_on_every_node(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let line = format!(
        "echo $SQLCRON_JOB $SQLCRON_SLOT $SQLCRON_NODE >> {}",
        out.display()
    );
    let jobs = format!(
        "[[job]]\nname = \"every3\"\nschedule = \"@every 3s\"\ncommand = \"{line}\"\n\
         [[job]]\nname = \"every2-anchored\"\nschedule = \"@every 2s anchor 2026-01-01T00:00:01Z\"\ncommand = \"{line}\"\n\
         [[job]]\nname = \"hashed\"\nschedule = \"H/4 * * * * *\"\ncommand = \"{line}\"\n"
    );
    let nodes: Vec<DaemonProcess> = ["a", "b", "c"]
        .iter()
        .map(|n| DaemonProcess::start(dir.path(), n, &node_config(&db.url, n, &jobs)))
        .collect();
    let read = || std::fs::read_to_string(&out).unwrap_or_default();
    eventually(Duration::from_secs(40), "five runs of each job", || async {
        let text = read();
        ["every3", "every2-anchored", "hashed"]
            .iter()
            .all(|j| {
                text.lines()
                    .filter(|l| l.starts_with(&format!("{j} ")))
                    .count()
                    >= 5
            })
            .then_some(())
    })
    .await;
    for node in nodes {
        let log = node.log_text();
        assert!(node.stop().success(), "{log}");
    }
    // The hashed job's offset in each 4 s group: what `sqlcron next --job hashed` resolves.
    let next = sqlcron(&["next", "H/4 * * * * *", "--job", "hashed", "--count", "2"]);
    assert!(next.status.success(), "{}", stderr(&next));
    let resolved = stderr(&next);
    let offset: i64 = resolved
        .split(" is ")
        .nth(1)
        .and_then(|r| r.split('-').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("resolved expression in {resolved:?}"));
    let mut seen: BTreeMap<(String, i64), usize> = BTreeMap::new();
    for l in read().lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let t = chrono::DateTime::parse_from_rfc3339(f[1])
            .unwrap()
            .timestamp();
        *seen.entry((f[0].to_string(), t)).or_default() += 1;
        match f[0] {
            "every3" => assert_eq!(t.rem_euclid(3), 0, "{l}"),
            "every2-anchored" => assert_eq!(t.rem_euclid(2), 1, "{l}"),
            "hashed" => assert_eq!(t.rem_euclid(60).rem_euclid(4), offset, "{l}"),
            other => panic!("unexpected job {other}"),
        }
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "slots run twice: {twice:?}");
}

async fn replace_stops_a_run_that_outlives_its_period(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let jobs = format!(
        "[[job]]\nname = \"slow\"\nschedule = \"@every 3s\"\noverlap = \"replace\"\nkill_grace = \"1s\"\n\
         command = \"echo start $SQLCRON_SLOT $SQLCRON_NODE >> {0}; trap 'echo term $SQLCRON_SLOT >> {0}; exit 143' TERM; sleep 20 & wait; echo end >> {0}\"\n",
        out.display()
    );
    let a = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", &jobs));
    let b = DaemonProcess::start(dir.path(), "b", &node_config(&db.url, "b", &jobs));
    let store = db.store().await;
    let history = eventually(Duration::from_secs(40), "three replaced runs", || async {
        let h = store.history(Some("slow"), 50).await.ok()?;
        (h.iter().filter(|r| r.outcome == "replaced").count() >= 3).then_some(h)
    })
    .await;
    for d in [a, b] {
        let log = d.log_text();
        assert!(d.stop().success(), "{log}");
    }
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(!text.contains("end"), "no run outlived its period:\n{text}");
    // Each replaced run was stopped with SIGTERM and the next slot started after it: the
    // starts are consecutive slots, 3 s apart, one each.
    let starts: Vec<i64> = text
        .lines()
        .filter(|l| l.starts_with("start "))
        .map(|l| {
            let slot = l.split(' ').nth(1).unwrap();
            chrono::DateTime::parse_from_rfc3339(slot)
                .unwrap()
                .timestamp()
        })
        .collect();
    for w in starts.windows(2) {
        assert_eq!(w[1] - w[0], 3, "consecutive slots, once each: {starts:?}");
    }
    let replaced: Vec<_> = history.iter().filter(|r| r.outcome == "replaced").collect();
    for r in &replaced {
        assert_eq!(r.attempt, 1, "a replaced run is not retried: {r:?}");
    }
    let terms = text.lines().filter(|l| l.starts_with("term ")).count();
    assert!(
        terms >= replaced.len(),
        "each replaced run got SIGTERM:\n{text}"
    );
}

async fn backfill_runs_each_missing_slot_once(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    // Hourly and paused: its past slots exist, none of them ran. The defaults' deadline must
    // not drop the backfilled slots, hours late by definition.
    let jobs = format!(
        "[defaults]\nstarting_deadline = \"5m\"\n\n[[job]]\nname = \"etl\"\nschedule = \"0 * * * *\"\nenabled = false\n\
         command = \"echo start $SQLCRON_SLOT $SQLCRON_NODE >> {0}; sleep 0.3; echo end $SQLCRON_SLOT >> {0}\"\n",
        out.display()
    );
    let nodes: Vec<DaemonProcess> = ["a", "b", "c"]
        .iter()
        .map(|n| DaemonProcess::start(dir.path(), n, &node_config(&db.url, n, &jobs)))
        .collect();
    let store = db.store().await;
    eventually(Duration::from_secs(20), "the job row", || async {
        store.job("etl").await.ok().flatten().map(|_| ())
    })
    .await;
    let now = store.now().await.unwrap();
    let hour = 3_600_000;
    let last = now - now.rem_euclid(hour);
    let first = last - 10 * hour;
    // One of the eleven slots ran already.
    store
        .execute_raw(&format!(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, ended, outcome) \
             VALUES ('etl', {}, 1, 'old', 1, {0}, {0}, 'ok')",
            first + 3 * hour
        ))
        .await
        .unwrap();
    let cli = dir.path().join("cli.toml");
    std::fs::write(&cli, node_config(&db.url, "cli", "")).unwrap();
    let ms = |t: i64| {
        chrono::DateTime::from_timestamp_millis(t)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let (from, to) = (ms(first), ms(last));
    let args = [
        "--config",
        cli.to_str().unwrap(),
        "backfill",
        "etl",
        "--from",
        &from,
        "--to",
        &to,
    ];
    let dry = sqlcron(&[&args[..], &["--dry-run"]].concat());
    assert!(dry.status.success(), "{}", stderr(&dry));
    assert!(
        stdout(&dry).contains("11 slot(s) in the range, 1 already ran successfully, 10 would run"),
        "{}",
        stdout(&dry)
    );
    let queued = sqlcron(&args);
    assert!(queued.status.success(), "{}", stderr(&queued));
    assert!(stdout(&queued).contains("10 queued"), "{}", stdout(&queued));
    let read = || std::fs::read_to_string(&out).unwrap_or_default();
    eventually(Duration::from_secs(60), "ten backfilled runs", || async {
        (read().lines().filter(|l| l.starts_with("end ")).count() >= 10).then_some(())
    })
    .await;
    // Asked again: nothing is left to run.
    let again = sqlcron(&args);
    assert!(
        stdout(&again).contains("11 already ran successfully, 0 queued"),
        "{}",
        stdout(&again)
    );
    // A backfill queues only the definition it planned: a row changed after the plan was read
    // (between two of a long backfill's inserts) gets no run of the changed definition.
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command, enabled) \
             VALUES ('fenced', '0 * * * *', 'true', 0)",
        )
        .await
        .unwrap();
    let planned = store.job("fenced").await.unwrap().unwrap();
    store
        .execute_raw("UPDATE cron_table SET command = 'echo changed' WHERE name = 'fenced'")
        .await
        .unwrap();
    let actor = sqlcron::exec::account::this_process(None);
    let slots = [first, first + hour];
    let stopped = sqlcron::store::backfill_plan::queue(&store, &planned, &slots, &actor)
        .await
        .unwrap();
    assert!(stopped.changed && stopped.queued.is_empty());
    let made = store
        .scalar_i64("SELECT COUNT(*) FROM cron_table WHERE name LIKE 'fenced#%'")
        .await
        .unwrap();
    assert_eq!(made, Some(0), "a changed row was queued");
    let fresh = store.job("fenced").await.unwrap().unwrap();
    let queued = sqlcron::store::backfill_plan::queue(&store, &fresh, &slots[..1], &actor)
        .await
        .unwrap();
    assert!(!queued.changed && queued.queued.len() == 1 && queued.queued[0].created);
    // The wait is the test's subject: nothing more runs.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for n in nodes {
        let log = n.log_text();
        assert!(n.stop().success(), "{log}");
    }
    let text = read();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 20, "ten runs, once each:\n{text}");
    // One at a time (a pool of one), each slot once. (Queued oldest first; a pool's waits may
    // reorder their starts, see README "Schedules".)
    let mut seen = std::collections::BTreeSet::new();
    for pair in lines.chunks(2) {
        let start: Vec<&str> = pair[0].split(' ').collect();
        assert_eq!(start[0], "start", "{text}");
        assert_eq!(
            pair[1],
            format!("end {}", start[1]),
            "runs did not overlap:\n{text}"
        );
        assert!(seen.insert(start[1].to_string()), "each slot once:\n{text}");
    }
    assert_eq!(seen.len(), 10);
    assert!(
        !text.contains(&ms(first + 3 * hour)),
        "the slot that ran is not rerun"
    );
}
