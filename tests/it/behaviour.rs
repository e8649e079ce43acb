//! One daemon process against each database: SQL editing, bad rows, misfire, retries, timeouts
//! and the job-control commands.

use std::time::Duration;

use sqlcron::store::{Dialect, HistoryRow, Store};

use crate::util::{DaemonProcess, TestDb, eventually, node_config, sqlcron, stderr};

for_each_dialect!(
    sql_insert_runs_and_garbage_rows_are_isolated,
    schedule_change_with_sql_takes_effect,
    misfire_policies_after_an_outage,
    retries_back_off_and_count_attempts,
    timeout_stops_the_job,
    run_pause_and_resume_commands,
    numbers_a_writer_set_to_their_limit_stop_no_claim_and_no_alert,
);

async fn history(store: &Store, job: &str) -> Vec<HistoryRow> {
    let mut h = store.history(Some(job), 1000).await.unwrap();
    h.reverse();
    h
}

/// Numbers a writer set to the largest there is. A row's `token` (or, for a row being
/// prepared, its run records' highest token) made the claim's `token + 1` overflow on
/// PostgreSQL and MySQL: the whole claim failed on every node at every poll, and no job ran.
/// The alert duty's token failed its every take the same way, and its scan position, set in
/// the future, held the scan there; on SQLite a REAL `ended` in the records the scan reads
/// first stopped it too. Every job runs now, and the failure's alert is delivered.
async fn numbers_a_writer_set_to_their_limit_stop_no_claim_and_no_alert(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let store = db.store().await;
    let out = dir.path().join("runs.txt");
    let alerts = dir.path().join("alerts.txt");
    let max = i64::MAX;
    let now = store.now().await.unwrap();
    let mut plant = vec![
        format!(
            "INSERT INTO cron_table (name, schedule, command, next_exec, slot, token) \
             VALUES ('maxed', '* * * * * *', 'echo maxed >> {}', 1000, 1000, {max})",
            out.display()
        ),
        format!(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, ended, \
             outcome) VALUES ('prep', 1, 0, 'x', {max}, 1, 2, 'ok')"
        ),
        // And one just below the wrap: the row continued there, and its tokens wrapped into
        // those of its own history.
        format!(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, ended, \
             outcome) VALUES ('prep', 2, 0, 'x', {}, 1, 2, 'ok')",
            (1i64 << 62) - 1
        ),
        format!(
            "INSERT INTO cron_table (name, schedule, command) \
             VALUES ('prep', '* * * * * *', 'echo prep >> {}')",
            out.display()
        ),
        // A negative token and no record: the prepare set it to NULL, the column refused it,
        // and every node's tick failed on that row.
        format!(
            "INSERT INTO cron_table (name, schedule, command, token) \
             VALUES ('negative', '* * * * * *', 'echo negative >> {}', -5)",
            out.display()
        ),
        // A record ended at the end of time: the scan's position followed it there.
        format!(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, started, ended, outcome) \
             VALUES ('future', 1, 0, 'x', 1, {max}, 'ok')"
        ),
        // A success ended at the end of time: the dead-man's switch of its job took it for
        // the last one, and never fired.
        format!(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, started, ended, outcome) \
             VALUES ('silent', 1, 0, 'x', 1, {max}, 'ok')"
        ),
        // Held, by its lease, for ever by a node that does not exist.
        format!(
            "UPDATE cron_duties SET token = {max}, position = {max}, node = 'ghost', \
             lease_until = {max} WHERE name = 'alerts'"
        ),
    ];
    if dialect == Dialect::Sqlite {
        // Ended just now, as REAL numbers: the scan's first batch, none of it readable.
        plant.push(format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 600) \
             INSERT INTO cron_runs (job_name, slot, attempt, node, started, ended, outcome) \
             SELECT 'real', i, 0, 'n', 1, {now} + i + 0.5, 'ok' FROM n"
        ));
    }
    for sql in &plant {
        store.execute_raw(sql).await.unwrap();
    }
    // The failing job reads an env_file outside [security] file_dirs, as its TOML names it:
    // its own command hook runs with it too (it was refused the file, its command not
    // being the job's, and the hook never ran).
    let env_file = dir.path().join("bad.env");
    std::fs::write(&env_file, "HOOK_TOKEN=from-file\n").unwrap();
    let jobs = format!(
        "[[job]]\nname = \"good\"\nschedule = \"* * * * * *\"\ncommand = \"echo good >> {}\"\n\
         [[job]]\nname = \"bad\"\nschedule = \"* * * * * *\"\ncommand = \"false\"\n\
         env_file = \"{}\"\n\
         on_failure = {{ command = \"echo failed $HOOK_TOKEN >> {a}\" }}\n\
         [[job]]\nname = \"silent\"\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\nenabled = false\n\
         alert_after = \"3s\"\non_missed = {{ command = \"echo missed >> {a}\" }}\n",
        out.display(),
        env_file.display(),
        a = alerts.display()
    );
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&db.url, "n", &jobs));
    // Counted by the records that ended well (a line in the file comes before its record).
    let ended = |job: &'static str| {
        let store = &store;
        async move {
            store
                .scalar_i64(&format!(
                    "SELECT COUNT(*) FROM cron_runs WHERE job_name = '{job}' AND outcome = 'ok'"
                ))
                .await
                .unwrap()
                .unwrap_or(0)
        }
    };
    eventually(Duration::from_secs(30), "every job's runs", || async {
        (ended("good").await >= 2
            && ended("maxed").await >= 3
            && ended("prep").await >= 1
            && ended("negative").await >= 1)
            .then_some(())
    })
    .await;
    eventually(
        Duration::from_secs(30),
        "the failure's and the silence's alerts",
        || async {
            std::fs::read_to_string(&alerts)
                .is_ok_and(|a| a.contains("failed from-file") && a.contains("missed"))
                .then_some(())
        },
    )
    .await;
    // The row at the limit wrapped: its first run at 2^62, the next ones from 1 on.
    let tokens = store
        .scalars::<i64>(
            "SELECT token FROM cron_runs WHERE job_name = 'maxed' AND outcome = 'ok' ORDER BY id",
        )
        .await
        .unwrap();
    assert_eq!(tokens[..3], [1 << 62, 1, 2], "{tokens:?}");
    let tokens = store
        .scalars::<i64>("SELECT token FROM cron_table WHERE name IN ('maxed', 'prep')")
        .await
        .unwrap();
    assert!(tokens.iter().all(|t| *t <= 1 << 62), "{tokens:?}");
    // The row being prepared continued above its records' tokens that claims counted to only
    // (below 2^61), not above those a writer set.
    let prepared = store
        .scalars::<i64>(
            "SELECT token FROM cron_runs WHERE job_name = 'prep' AND outcome = 'ok' AND node = 'n'",
        )
        .await
        .unwrap();
    assert!(
        !prepared.is_empty() && prepared.iter().all(|t| *t < 1 << 61),
        "{prepared:?}"
    );
    // The duty's scan position is no further than the clock.
    let position = store
        .scalar_i64("SELECT position FROM cron_duties WHERE name = 'alerts'")
        .await
        .unwrap()
        .unwrap();
    assert!(position <= store.now().await.unwrap(), "{position}");
    let log = node.log_text();
    assert!(node.stop().success(), "{log}");
    store.close().await;
}

async fn sql_insert_runs_and_garbage_rows_are_isolated(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let store = db.store().await;
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&db.url, "n", ""));
    let out = dir.path().join("good.txt");
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('good', '* * * * * *', 'echo $SQLCRON_SLOT >> {}')",
            out.display()
        ))
        .await
        .unwrap();
    store
        .execute_raw("INSERT INTO cron_table (name, schedule, command) VALUES ('bad', 'every minute', 'true')")
        .await
        .unwrap();
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('empty', '* * * * *', '')",
        )
        .await
        .unwrap();
    store
        .execute_raw("INSERT INTO cron_table (name, schedule, command, timezone, retries) VALUES ('zone', '* * * * *', 'true', 'Mars/Base', 1)")
        .await
        .unwrap();
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command, argv) VALUES ('both', '* * * * * *', \
             'pg_dump app', '[\"sh\", \"-c\", \"echo argv >> {}\"]')",
            out.display()
        ))
        .await
        .unwrap();
    // Picked up within a poll interval of its first slot.
    eventually(Duration::from_secs(4), "the SQL job to run", || async {
        std::fs::read_to_string(&out).ok().filter(|t| !t.is_empty())
    })
    .await;
    let bad = eventually(Duration::from_secs(3), "bad row marked", || async {
        store.job("bad").await.unwrap().and_then(|j| j.error)
    })
    .await;
    assert!(bad.starts_with("schedule: expected 5 fields"), "{bad}");
    let empty = store.job("empty").await.unwrap().unwrap().error.unwrap();
    assert_eq!(empty, "command: is empty");
    let zone = store.job("zone").await.unwrap().unwrap().error.unwrap();
    assert!(zone.contains("unknown time zone \"Mars/Base\""), "{zone}");
    // A command and an argv both: argv ran while the dashboard and status showed the command.
    let both = eventually(Duration::from_secs(5), "a row with both marked", || async {
        store.job("both").await.unwrap().and_then(|j| j.error)
    })
    .await;
    assert_eq!(both, "argv: give one of command, argv or http, not both");
    // One log line per bad row, not one per poll.
    let good_runs_before = std::fs::read_to_string(&out).unwrap().lines().count();
    eventually(Duration::from_secs(5), "more good runs", || async {
        (std::fs::read_to_string(&out).unwrap().lines().count() >= good_runs_before + 2)
            .then_some(())
    })
    .await;
    let log = node.log_text();
    assert_eq!(log.matches("job row is invalid").count(), 4, "{log}");
    assert!(!std::fs::read_to_string(&out).unwrap().contains("argv"));
    // Fixing the row with SQL brings it back.
    let fixed = dir.path().join("fixed.txt");
    store
        .execute_raw(&format!(
            "UPDATE cron_table SET schedule = '* * * * * *', command = 'echo ok >> {}' WHERE name = 'bad'",
            fixed.display()
        ))
        .await
        .unwrap();
    eventually(Duration::from_secs(4), "the fixed job to run", || async {
        std::fs::read_to_string(&fixed).ok()
    })
    .await;
    assert_eq!(store.job("bad").await.unwrap().unwrap().error, None);
    assert!(node.stop().success());
}

async fn schedule_change_with_sql_takes_effect(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let store = db.store().await;
    let out = dir.path().join("c.txt");
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('c', '0 0 1 1 *', 'echo $SQLCRON_SLOT >> {}')",
            out.display()
        ))
        .await
        .unwrap();
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&db.url, "n", ""));
    let far = eventually(Duration::from_secs(4), "the yearly slot", || async {
        store.job("c").await.unwrap().and_then(|j| j.next_exec)
    })
    .await;
    let now = store.now().await.unwrap();
    assert!(far - now > 86_400_000, "next_exec should be far away");
    store
        .execute_raw("UPDATE cron_table SET schedule = '* * * * * *' WHERE name = 'c'")
        .await
        .unwrap();
    eventually(
        Duration::from_secs(4),
        "the new schedule to run",
        || async { std::fs::read_to_string(&out).ok() },
    )
    .await;
    assert!(node.stop().success());
}

async fn misfire_policies_after_an_outage(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let store = db.store().await;
    let now = store.now().await.unwrap();
    // Hourly at a minute half an hour away from now, so the latest due slot is ~30 min old
    // (missed) and the next one ~30 min ahead, whatever the time of the test.
    let minute_now = (now / 60_000) % 60;
    let minute = (minute_now + 30) % 60;
    let latest = {
        let hour_start = now - now.rem_euclid(3_600_000);
        let candidate = hour_start + minute * 60_000;
        if candidate > now {
            candidate - 3_600_000
        } else {
            candidate
        }
    };
    // The cluster was down for ten hours: the rows still wait for a slot 10 h back.
    let first = latest - 9 * 3_600_000;
    for (name, cols, vals) in [
        ("skip", "misfire", "'skip'"),
        ("once", "misfire", "'run_once'"),
        ("all", "misfire, max_catch_up", "'run_all', 3"),
        (
            "deadline",
            "misfire, max_catch_up, starting_deadline",
            "'run_all', 3, '5m'",
        ),
    ] {
        store
            .execute_raw(&format!(
                "INSERT INTO cron_table (name, schedule, command, slot, next_exec, {cols}) \
                 VALUES ('{name}', '{minute} * * * *', 'true', {first}, {first}, {vals})"
            ))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&db.url, "n", ""));
    let settled = |job: &'static str| {
        let store = store.clone();
        async move {
            eventually(Duration::from_secs(10), job, || async {
                let j = store.job(job).await.unwrap().unwrap();
                (j.exec_by.is_none() && j.slot.is_some_and(|s| s > now)).then_some(())
            })
            .await
        }
    };
    for job in ["skip", "once", "all", "deadline"] {
        settled(job).await;
    }
    let runs = |h: &[HistoryRow]| -> Vec<i64> {
        h.iter()
            .filter(|r| r.outcome == "ok")
            .map(|r| r.slot)
            .collect()
    };
    let skipped = |h: &[HistoryRow]| -> Vec<(i64, i64, i64)> {
        h.iter()
            .filter(|r| r.outcome == "skipped")
            .map(|r| (r.skipped_count.unwrap(), r.slot, r.skipped_last.unwrap()))
            .collect()
    };
    let h = history(&store, "skip").await;
    assert_eq!(runs(&h), Vec::<i64>::new());
    assert_eq!(skipped(&h), vec![(10, first, latest)]);
    let h = history(&store, "once").await;
    assert_eq!(runs(&h), vec![latest]);
    assert_eq!(skipped(&h), vec![(9, first, latest - 3_600_000)]);
    let h = history(&store, "all").await;
    assert_eq!(
        runs(&h),
        vec![latest - 7_200_000, latest - 3_600_000, latest],
        "oldest first, the newest max_catch_up"
    );
    assert_eq!(skipped(&h), vec![(7, first, latest - 3 * 3_600_000)]);
    let h = history(&store, "deadline").await;
    assert_eq!(
        runs(&h),
        Vec::<i64>::new(),
        "a starting_deadline is a hard limit"
    );
    assert_eq!(skipped(&h)[0].0, 10);
    assert!(node.stop().success());
}

async fn retries_back_off_and_count_attempts(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let store = db.store().await;
    let now = store.now().await.unwrap();
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command, retries, retry_backoff, slot, next_exec) \
             VALUES ('flaky', '0 0 1 1 *', 'echo attempt=$SQLCRON_ATTEMPT; exit 3', 2, '1s', {now}, {now})"
        ))
        .await
        .unwrap();
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&db.url, "n", ""));
    let h = eventually(Duration::from_secs(12), "three attempts", || async {
        let h = history(&store, "flaky").await;
        (h.iter().filter(|r| r.outcome == "failed").count() == 3).then_some(h)
    })
    .await;
    let attempts: Vec<i64> = h.iter().map(|r| r.attempt).collect();
    assert_eq!(attempts, vec![1, 2, 3]);
    for (i, r) in h.iter().enumerate() {
        assert_eq!(r.slot, now);
        assert_eq!(r.exit_code, Some(3));
        assert_eq!(
            r.output.as_deref(),
            Some(format!("attempt={}\n", i + 1).as_str())
        );
    }
    let gap1 = h[1].started.unwrap() - h[0].ended.unwrap();
    let gap2 = h[2].started.unwrap() - h[1].ended.unwrap();
    // The lower bounds are the backoff; the upper ones leave room for a claim delayed by a
    // loaded machine (the whole suite runs on two cores), not for a missed poll.
    assert!(
        (900..2_500).contains(&gap1),
        "first backoff {gap1} ms: {h:?}"
    );
    assert!(
        (1_900..3_500).contains(&gap2),
        "second backoff {gap2} ms: {h:?}"
    );
    // Then the row moves on to its next regular slot. Not always in the same commit as the
    // last run's end: a release retried after an error (a busy database on a loaded machine)
    // writes the end first and the row after it, so the test waits for the row.
    let row = eventually(Duration::from_secs(10), "the row released", || async {
        let row = store.job("flaky").await.unwrap()?;
        (row.exec_by.is_none()).then_some(row)
    })
    .await;
    assert!(row.slot.unwrap() > now, "{row:?}");
    assert_eq!(row.last_status.as_deref(), Some("failed"));
    assert!(node.stop().success());
}

async fn timeout_stops_the_job(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let store = db.store().await;
    let now = store.now().await.unwrap();
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command, timeout, kill_grace, slot, next_exec) \
             VALUES ('slow', '0 0 1 1 *', 'sleep 60', '1s', '1s', {now}, {now})"
        ))
        .await
        .unwrap();
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&db.url, "n", ""));
    let h = eventually(Duration::from_secs(8), "the timeout", || async {
        history(&store, "slow")
            .await
            .into_iter()
            .find(|r| r.outcome == "timeout")
    })
    .await;
    assert_eq!(h.signal, Some(libc::SIGTERM as i64));
    let took = h.ended.unwrap() - h.started.unwrap();
    assert!((900..3_000).contains(&took), "ran {took} ms");
    // Issue 51, point 13: a run that did not end ok is logged as a warning (it was INFO).
    let log = node.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("finished") && l.contains("timeout")),
        "{log}"
    );
    assert!(node.stop().success());
}

async fn run_pause_and_resume_commands(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.txt");
    let config = node_config(
        &db.url,
        "n",
        &format!(
            "[[job]]\nname = \"manual\"\nschedule = \"0 0 1 1 *\"\ncommand = \"echo $SQLCRON_SLOT >> {}\"\n",
            out.display()
        ),
    );
    let node = DaemonProcess::start(dir.path(), "n", &config);
    let cfg = dir.path().join("n.toml");
    let cfg = cfg.to_str().unwrap();
    let store = db.store().await;
    eventually(
        Duration::from_secs(5),
        "job applied and scheduled",
        || async { store.job("manual").await.unwrap().and_then(|j| j.next_exec) },
    )
    .await;
    let before = store.job("manual").await.unwrap().unwrap();
    let r = sqlcron(&["--config", cfg, "run", "manual"]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    eventually(Duration::from_secs(4), "the manual run", || async {
        std::fs::read_to_string(&out).ok()
    })
    .await;
    let after = eventually(Duration::from_secs(3), "release", || async {
        store
            .job("manual")
            .await
            .unwrap()
            .filter(|j| j.exec_by.is_none() && !j.run_now)
    })
    .await;
    assert_eq!(
        after.next_exec, before.next_exec,
        "the schedule is unchanged"
    );
    assert_eq!(after.slot, before.slot);

    let r = sqlcron(&["--config", cfg, "pause", "manual", "--reason", "disk swap"]);
    assert_eq!(r.status.code(), Some(0));
    assert!(!store.job("manual").await.unwrap().unwrap().enabled);
    let trail = store.audit_log(Some("manual"), 1).await.unwrap();
    assert_eq!(trail[0].action, "pause");
    assert!(
        trail[0]
            .detail
            .as_deref()
            .is_some_and(|d| d.starts_with("reason: disk swap")),
        "{trail:?}"
    );
    let r = sqlcron(&["--config", cfg, "resume", "manual"]);
    assert_eq!(r.status.code(), Some(0));
    assert!(store.job("manual").await.unwrap().unwrap().enabled);
    let r = sqlcron(&["--config", cfg, "pause", "nope"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(stderr(&r).contains("no job named \"nope\""));
    // Issue 51, point 14: a typo is one exit code (2) everywhere, with the closest name.
    for cmd in ["history", "explain", "run", "pause", "resume", "backfill"] {
        let mut args = vec!["--config", cfg, cmd, "manul"];
        if cmd == "backfill" {
            args.extend([
                "--from",
                "2026-01-01T00:00:00Z",
                "--to",
                "2026-01-02T00:00:00Z",
            ]);
        }
        let r = sqlcron(&args);
        assert_eq!(r.status.code(), Some(2), "{cmd}: {}", stderr(&r));
        assert!(
            stderr(&r).contains("no job named \"manul\" (did you mean \"manual\"?)"),
            "{cmd}: {}",
            stderr(&r)
        );
    }

    let r = sqlcron(&["--config", cfg, "status", "--json"]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    let status: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(status["jobs"][0]["name"], "manual");
    assert_eq!(status["nodes"][0]["name"], "n");
    assert_eq!(status["nodes"][0]["alive"], true);
    let r = sqlcron(&["--config", cfg, "history", "manual", "--json"]);
    let history: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(history[0]["outcome"], "ok");
    // Issue 51 (15): one spelling of an instant. The record's slot is, as text, the
    // SQLCRON_SLOT its run was given; the other instants are RFC 3339 too, as in status.
    let slot_env = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        history[0]["slot"].as_str(),
        Some(slot_env.trim()),
        "{history:#}"
    );
    for (json, at) in [
        (&history[0], "started"),
        (&history[0], "ended"),
        (&status, "now"),
    ] {
        let text = json[at]
            .as_str()
            .unwrap_or_else(|| panic!("{at}: {json:#}"));
        assert!(
            text.ends_with('Z') && chrono::DateTime::parse_from_rfc3339(text).is_ok(),
            "{at}: {text}"
        );
    }
    assert!(node.stop().success());
}

// SQLite keeps any bytes as text and MariaDB accepts encoded surrogates in utf8mb4; PostgreSQL
// refuses such text when it is written (checked below).
mod text_not_utf8 {
    use sqlcron::store::Dialect;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::rows_holding_text_that_is_not_utf8_are_parked_and_the_others_run(Dialect::Sqlite)
            .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql() {
        super::rows_holding_text_that_is_not_utf8_are_parked_and_the_others_run(Dialect::Mysql)
            .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_holder() {
        super::a_holder_that_is_not_utf8_costs_only_its_own_run(Dialect::Sqlite).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql_holder() {
        super::a_holder_that_is_not_utf8_costs_only_its_own_run(Dialect::Mysql).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_placement_pruning() {
        super::a_placement_value_that_is_not_utf8_holds_up_no_pruning(Dialect::Sqlite).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql_placement_pruning() {
        super::a_placement_value_that_is_not_utf8_holds_up_no_pruning(Dialect::Mysql).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_job_pages() {
        super::a_name_that_is_not_utf8_holds_up_no_walk_of_the_job_list(Dialect::Sqlite).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql_job_pages() {
        super::a_name_that_is_not_utf8_holds_up_no_walk_of_the_job_list(Dialect::Mysql).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_other_tables() {
        super::text_that_is_not_utf8_in_other_tables_holds_up_nothing_else(Dialect::Sqlite).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql_other_tables() {
        super::text_that_is_not_utf8_in_other_tables_holds_up_nothing_else(Dialect::Mysql).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_refuses_it() {
        let db = crate::util::TestDb::new(Dialect::Postgres).await;
        let store = db.store().await;
        let refused = store
            .execute_raw(
                "INSERT INTO cron_table (name, schedule, command) \
                 VALUES ('bad', '* * * * *', convert_from('\\xeda080'::bytea, 'UTF8'))",
            )
            .await
            .unwrap_err();
        assert!(
            refused.to_string().contains("invalid byte sequence"),
            "{refused}"
        );
        store.close().await;
    }
}

/// A row holding text that is not UTF-8 failed every read of the rows around it in the driver:
/// the daemon did not start ("read jobs for apply"), and a running one could claim, prepare and
/// peek nothing. Now each such read is made again with the text as bytes, and each bad value
/// parks its own row: written without `next_exec` (prepared), written due (claimed), with a
/// name that is not UTF-8 (the peek's label too), and a placement value no node can name.
async fn rows_holding_text_that_is_not_utf8_are_parked_and_the_others_run(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let store = db.store().await;
    let out = dir.path().join("good.txt");
    let bytes = |hex: &str| match dialect {
        Dialect::Mysql => format!("X'{hex}'"),
        _ => format!("CAST(X'{hex}' AS TEXT)"),
    };
    let (surrogate, named) = if dialect == Dialect::Mysql {
        ("EDA080", "6EEDA080")
    } else {
        ("FF", "6EFF")
    };
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command) \
             VALUES ('good', '* * * * * *', 'echo $SQLCRON_SLOT >> {}')",
            out.display()
        ))
        .await
        .unwrap();
    for sql in [
        format!(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('bad', '* * * * * *', {})",
            bytes(surrogate)
        ),
        format!(
            "INSERT INTO cron_table (name, schedule, command, env, next_exec, slot) \
             VALUES ('bad_due', '* * * * * *', 'true', {}, 1000, 1000)",
            bytes(surrogate)
        ),
        format!(
            "INSERT INTO cron_table (name, schedule, command, next_exec, slot) \
             VALUES ({}, '* * * * * *', 'true', 999, 999)",
            bytes(named)
        ),
        format!(
            "INSERT INTO cron_placements (placement) VALUES ({})",
            bytes(surrogate)
        ),
        // Read by every node at start and reload, and by the chains and their edges.
        format!(
            "INSERT INTO cron_calendars (name, entries) VALUES ({}, '2000-01-01 x')",
            bytes(named)
        ),
        format!(
            "INSERT INTO cron_table (name, schedule, command, after_jobs) \
             VALUES ({}, '* * * * *', 'true', '[\"lead\"]')",
            bytes(&format!("{named}6368")),
        ),
        // Read by every tick (the start rates) and at every start (the nodes).
        format!(
            "INSERT INTO cron_start_rate (name, per_second, burst, tat) VALUES ({}, 1, 1, 0)",
            bytes(named)
        ),
        format!(
            "INSERT INTO cron_nodes (name, host, version) VALUES ('other', 'h', {})",
            bytes(surrogate)
        ),
    ] {
        store.execute_raw(&sql).await.unwrap();
    }
    if dialect == Dialect::Sqlite {
        // SQLite keeps text in a number column, and orders it after every number: with no
        // number there, the peek's earliest event and earliest job were such text, and every
        // node's peek failed to read it.
        for sql in [
            "INSERT INTO cron_events (dedupe, job_name, kind, created, hook, payload, state, \
             next_try) VALUES ('d', 'good', 'failure', 0, 'h', '{}', 'pending', 'soon')",
            "INSERT INTO cron_table (name, schedule, command, next_exec) \
             VALUES ('texty', '0 0 1 1 *', 'true', CAST(X'FF' AS TEXT))",
            "UPDATE cron_nodes SET drain = CAST(X'FF' AS TEXT) WHERE name = 'other'",
            // Text in `token`: the row waited for preparation forever, unparked, and every
            // node looked for it again at each poll.
            "INSERT INTO cron_table (name, schedule, command, token) \
             VALUES ('bad_token', '* * * * *', 'true', CAST(X'FF' AS TEXT))",
        ] {
            store.execute_raw(sql).await.unwrap();
        }
    }
    // A chained job of the TOML: its edges and its chain are read beside the bad chained row.
    let follows = dir.path().join("follow.txt");
    // With the dashboard, whose every page is read below beside those rows.
    let users = dir.path().join("users");
    std::fs::write(
        &users,
        crate::web::user_line("alice", "operator", "alice-secret"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o600)).unwrap();
    let port = crate::util::free_port();
    // And a calendar of the TOML, applied beside the bad one at start (the bad calendar's read
    // as bytes once lost every calendar, and the apply wrote this one again: a unique key).
    let jobs = format!(
        "[web]\nlisten = \"127.0.0.1:{port}\"\nbase_path = \"/cron\"\nusers_file = \"{}\"\n\
         [[job]]\nname = \"lead\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
         [[job]]\nname = \"follow\"\nafter = [\"lead\"]\ncommand = \"echo x >> {}\"\n\
         [[calendar]]\nname = \"window\"\nentries = [\"weekly Sat 02:00-04:00 Maintenance\"]\n",
        users.display(),
        follows.display()
    );
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&db.url, "n", &jobs));
    let runs = || {
        std::fs::read_to_string(&out)
            .unwrap_or_default()
            .lines()
            .count()
    };
    eventually(Duration::from_secs(30), "the bad rows parked", || async {
        let parked = store
            .scalar_i64("SELECT COUNT(*) FROM cron_table WHERE error IS NOT NULL")
            .await
            .unwrap();
        let bad = if dialect == Dialect::Sqlite { 5 } else { 4 };
        (parked == Some(bad)).then_some(())
    })
    .await;
    let errors = store
        .scalars::<String>(
            "SELECT error FROM cron_table WHERE name IN ('bad', 'bad_due') ORDER BY name",
        )
        .await
        .unwrap();
    assert!(
        errors[0].starts_with("column command: ")
            && errors[0].ends_with("bytes that are not UTF-8"),
        "{errors:?}"
    );
    assert!(errors[1].starts_with("column env: "), "{errors:?}");
    // The good job goes on, and the operator's status reads every row.
    let before = runs();
    eventually(Duration::from_secs(10), "two more good runs", || async {
        (runs() >= before + 2).then_some(())
    })
    .await;
    eventually(
        Duration::from_secs(20),
        "the chained job's runs",
        || async {
            let n = std::fs::read_to_string(&follows)
                .unwrap_or_default()
                .lines()
                .count();
            (n >= 2).then_some(())
        },
    )
    .await;
    // Run records written with such text: one of the good job with its output, one of a row
    // chained to `lead` by its name (read by the chain's scan of lead's runs). They failed the
    // alert scan, the chains, `history` and the dashboard's runs of every job.
    for sql in [
        format!(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, started, ended, outcome, \
             output) VALUES ('good', 1, 0, 'x', 1, 2, 'failed', {})",
            bytes(surrogate)
        ),
        format!(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, started, ended, outcome) \
             VALUES ({}, 1, 0, 'x', 1, 2, 'ok')",
            bytes(&format!("6C6561642361667465722D31{surrogate}")),
        ),
    ] {
        store.execute_raw(&sql).await.unwrap();
    }
    let follows_now = std::fs::read_to_string(&follows)
        .unwrap_or_default()
        .lines()
        .count();
    eventually(
        Duration::from_secs(20),
        "the chained job's runs after those records",
        || async {
            let n = std::fs::read_to_string(&follows)
                .unwrap_or_default()
                .lines()
                .count();
            (n >= follows_now + 2).then_some(())
        },
    )
    .await;
    // Every page and API read of the dashboard answers beside those rows and records.
    let bad_run = store
        .scalar_i64("SELECT MAX(id) FROM cron_runs WHERE started = 1 AND job_name = 'good'")
        .await
        .unwrap()
        .unwrap();
    let mut alice = crate::web::Browser::new(port);
    assert_eq!(
        alice.sign_in("alice", "alice-secret").await,
        reqwest::StatusCode::SEE_OTHER
    );
    for page in [
        String::new(),
        "/jobs".into(),
        "/jobs?sort=next".into(),
        "/jobs/good".into(),
        "/jobs/bad_due".into(),
        "/jobs/good/calendar".into(),
        "/density".into(),
        "/runs".into(),
        "/runs?job=good".into(),
        "/runs?q=x".into(),
        format!("/runs/{bad_run}"),
        format!("/runs/{bad_run}/output"),
        "/timeline".into(),
        "/locks".into(),
        "/events".into(),
        "/audit".into(),
        "/nodes".into(),
        "/api/v1/jobs".into(),
        "/api/v1/jobs/good".into(),
        "/api/v1/jobs/good/slots".into(),
        "/api/v1/runs".into(),
        format!("/api/v1/runs/{bad_run}"),
        "/api/v1/nodes".into(),
        "/api/v1/locks".into(),
        "/api/v1/events".into(),
        "/api/v1/audit".into(),
    ] {
        let (status, body, _) = alice.get(&page).await;
        assert_eq!(status, reqwest::StatusCode::OK, "{page}: {body}");
    }
    let cli = cli_path(&dir, &db.url);
    for args in [&["history"][..], &["history", "good"]] {
        let history = sqlcron(&[&["--config", &cli][..], args].concat());
        assert!(history.status.success(), "{}", stderr(&history));
    }
    let audit = sqlcron(&["--config", &cli, "audit"]);
    assert!(audit.status.success(), "{}", stderr(&audit));
    let status = sqlcron(&["--config", &cli, "status"]);
    assert!(status.status.success(), "{}", stderr(&status));
    let said = crate::util::stdout(&status);
    assert!(said.contains("bad_due") && said.contains("good"), "{said}");
    // Long enough for the budgets to be read again twice (a look that found no budget it can
    // use is trusted for 5 s): their warnings are written once in ten minutes, not at each.
    let before = runs();
    eventually(Duration::from_secs(30), "twelve more good runs", || async {
        (runs() >= before + 12).then_some(())
    })
    .await;
    let log = node.log_text();
    for warning in [
        "this budget is not applied",
        "read again as bytes statement=\"read start rates\"",
    ] {
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(warning)).collect();
        assert_eq!(lines.len(), 1, "{warning}: {lines:#?}");
        assert!(lines[0].contains("held_back=0"), "{lines:?}");
    }
    assert_eq!(
        store
            .scalar_i64(
                "SELECT COUNT(*) FROM cron_runs WHERE job_name NOT IN ('good', 'lead') \
                 AND job_name NOT LIKE 'follow#after-%' AND started <> 1"
            )
            .await
            .unwrap(),
        Some(0),
        "{log}"
    );
    assert!(node.stop().success(), "{log}");
    // The TOML's calendar, stored beside the bad one, is overwritten with such bytes too.
    store
        .execute_raw(&format!(
            "UPDATE cron_calendars SET entries = {} WHERE name = 'window'",
            bytes(surrogate)
        ))
        .await
        .unwrap();
    // On SQLite a name written as a blob is kept as one, and no `name = ?` matches it: such a
    // row of a TOML's calendar (`spare`) failed the apply's fenced update, and one the TOML no
    // longer defines (`gone`) its removal, three times each: no node could start.
    let jobs = if dialect == Dialect::Sqlite {
        for sql in [
            "INSERT INTO cron_calendars (name, entries, from_toml) \
             VALUES (X'7370617265', '2000-01-01 x', 1)",
            "INSERT INTO cron_calendars (name, entries, from_toml) \
             VALUES (X'676F6E65', '2000-01-01 x', 1)",
        ] {
            store.execute_raw(sql).await.unwrap();
        }
        format!("{jobs}[[calendar]]\nname = \"spare\"\nentries = [\"2001-01-01 y\"]\n")
    } else {
        jobs
    };
    // Started again: the TOML's calendar is written anew (it was read as none, and its insert
    // failed on the unique key: no node could start), and the good job runs again.
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&db.url, "n", &jobs));
    let before = runs();
    eventually(
        Duration::from_secs(20),
        "good runs after a restart",
        || async { (runs() >= before + 2).then_some(()) },
    )
    .await;
    assert_eq!(
        store
            .scalar_i64(
                "SELECT COUNT(*) FROM cron_calendars WHERE name = 'window' \
                 AND entries LIKE 'weekly Sat%'"
            )
            .await
            .unwrap(),
        Some(1)
    );
    if dialect == Dialect::Sqlite {
        assert_eq!(
            store
                .scalar_i64(
                    "SELECT COUNT(*) FROM cron_calendars WHERE name = 'spare' \
                     AND entries = '2001-01-01 y' AND from_toml = 1"
                )
                .await
                .unwrap(),
            Some(1)
        );
    }
    let log = node.log_text();
    assert!(node.stop().success(), "{log}");
    store.close().await;
}

/// The pruning duty read the unused placement values as text: one value that is not UTF-8 failed
/// that read at every round, and no value was pruned while it was there. It is left alone now,
/// and the others go, across more than one batch.
async fn a_placement_value_that_is_not_utf8_holds_up_no_pruning(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let bad = if dialect == Dialect::Mysql {
        "X'EDA080'"
    } else {
        "CAST(X'FF' AS TEXT)"
    };
    let values: Vec<String> = (0..600).map(|i| format!("('v{i:03}')")).collect();
    store
        .execute_raw(&format!(
            "INSERT INTO cron_placements (placement) VALUES {}, ({bad})",
            values.join(", ")
        ))
        .await
        .unwrap();
    assert_eq!(store.prune_placements().await.unwrap(), 600);
    assert_eq!(
        store
            .scalar_i64("SELECT COUNT(*) FROM cron_placements")
            .await
            .unwrap(),
        Some(1)
    );
    store.close().await;
}

/// The job list's page after a row whose name is not UTF-8 (shown as `#id`) started after the
/// text `#id`: from the top again, so a walk of `/api/v1/jobs`'s pages never ended. Now it
/// starts after that row's name as the database holds it; both orders, a page of one row.
async fn a_name_that_is_not_utf8_holds_up_no_walk_of_the_job_list(dialect: Dialect) {
    use sqlcron::store::job_search::{JobFilter, JobSort};
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let bad = if dialect == Dialect::Mysql {
        "X'6EEDA080'"
    } else {
        "CAST(X'6EFF' AS TEXT)"
    };
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('a', '* * * * *', 'true'), \
             ('c', '* * * * *', 'true'), ({bad}, '* * * * *', 'true'), ('z', '* * * * *', 'true')"
        ))
        .await
        .unwrap();
    for sort in [JobSort::Name, JobSort::Next] {
        let (mut seen, mut after) = (vec![], None::<String>);
        for _ in 0..10 {
            let (page, total) = store
                .jobs_filtered(&JobFilter::default(), sort, after.as_deref(), 1)
                .await
                .unwrap();
            assert_eq!(total, 4);
            let Some(last) = page.last() else { break };
            seen.push(last.name.clone());
            after = Some(sort.cursor(last));
        }
        let bad_id = store
            .scalar_i64("SELECT id FROM cron_table WHERE name NOT IN ('a', 'c', 'z')")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(seen, ["a", "c", &format!("#{bad_id}"), "z"], "{sort:?}");
    }
    store.close().await;
}

/// The event deliveries, the watches of the missed-run alerts, the expiry of one-off jobs and
/// the locks each read text a writer could put there: one value that is not UTF-8 failed every
/// delivery claim of that event (claimed again at each lease's end), every round of the
/// watches and the expiry, and every `sqlcron lock` of that name and the list of locks.
async fn text_that_is_not_utf8_in_other_tables_holds_up_nothing_else(dialect: Dialect) {
    use sqlcron::model::actor::Actor;
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let bad = if dialect == Dialect::Mysql {
        "X'EDA080'"
    } else {
        "CAST(X'FF' AS TEXT)"
    };
    let named = if dialect == Dialect::Mysql {
        "X'6EEDA080'"
    } else {
        "CAST(X'6EFF' AS TEXT)"
    };
    // Leases that end in ten minutes: live (one further than 2h off was set by no holder).
    let live = store.now().await.unwrap() + 600_000;
    for sql in [
        format!(
            "INSERT INTO cron_events (dedupe, job_name, kind, created, hook, payload, state, \
             next_try) VALUES ('d', 'j', 'failure', 0, 'h', {bad}, 'pending', 0)"
        ),
        format!("INSERT INTO cron_watch (job_name, since) VALUES ({named}, 0), ('w', 0)"),
        format!(
            "INSERT INTO cron_lock_waiters (name, size, owner, host, state, enqueued_at, \
             acquired_at, lease_until) VALUES ('L', 1, {bad}, 'h', 'holding', 0, 0, 1), \
             ('M', 1, {bad}, 'h', 'waiting', 0, NULL, {live}), \
             ('K', 1, {bad}, 'h', 'holding', 0, 0, {live})"
        ),
        format!(
            "INSERT INTO cron_table (name, schedule, command, next_exec, source, last_end) \
             VALUES ({named}, '@at 2000-01-01T00:00:00Z', 'true', 9223372036854775807, 'sql', 1)"
        ),
    ] {
        store.execute_raw(&sql).await.unwrap();
    }
    let id = store
        .scalar_i64("SELECT id FROM cron_events")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(store.event_claim(id, "n", 60_000).await.unwrap(), None);
    let state = store
        .scalars::<String>("SELECT state FROM cron_events")
        .await
        .unwrap();
    assert_eq!(state, ["failed"]);
    let events = store.events(None, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert!(
        events[0]
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("the event cannot be read")),
        "{events:?}"
    );
    let watches = store.watch_rows().await.unwrap();
    assert_eq!(
        watches.iter().map(|w| w.job.as_str()).collect::<Vec<_>>(),
        ["w"]
    );
    let locks = store.locks().await.unwrap();
    assert_eq!(
        locks.iter().map(|l| l.name.as_str()).collect::<Vec<_>>(),
        ["K", "M"]
    );
    assert_eq!(store.lock_reap("L").await.unwrap(), 1);
    let actor = Actor {
        who: "test".into(),
        host: None,
        pid: None,
    };
    // `sqlcron unlock` of a lock whose holder's owner is such text.
    if dialect == Dialect::Sqlite {
        // And, on SQLite, whose pid is such text.
        store
            .execute_raw("UPDATE cron_lock_waiters SET pid = CAST(X'FF' AS TEXT) WHERE name = 'K'")
            .await
            .unwrap();
    }
    assert_eq!(store.lock_break("K", None, &actor).await.unwrap().len(), 1);
    // The broken holder's own release, recorded with its pid left out where it is text.
    let k = store
        .scalar_i64("SELECT id FROM cron_lock_waiters WHERE name = 'K'")
        .await
        .unwrap()
        .unwrap();
    store.lock_release(k).await.unwrap();
    assert_eq!(
        store
            .remove_done_one_offs(i64::MAX, &actor)
            .await
            .unwrap()
            .len(),
        1
    );
    if dialect == Dialect::Sqlite {
        // Run records whose numbers are text, more than a batch of the alert scan (500) and of
        // a chain's look (200): left out, they held both cursors where they were, for good.
        store
            .execute_raw(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 600) \
                 INSERT INTO cron_runs (job_name, slot, attempt, node, started, ended, outcome) \
                 SELECT 'up', 'x' || i, 0, 'n', 1, 10 + i, 'ok' FROM n",
            )
            .await
            .unwrap();
        let records = store.ended_records(0, (0, -1), 500).await.unwrap();
        assert_eq!(records.len(), 500);
        assert!(records.iter().all(|r| r.outcome == "unreadable"));
        let runs = store.upstream_runs("up", 0, 200).await.unwrap();
        assert_eq!(runs.len(), 200);
        assert!(runs.iter().all(|r| r.outcome == "unreadable"));
    }
    store.close().await;
}

/// A configuration for the CLI beside the test's node.
fn cli_path(dir: &tempfile::TempDir, url: &str) -> String {
    let cli = dir.path().join("cli.toml");
    std::fs::write(&cli, node_config(url, "cli", "")).unwrap();
    cli.display().to_string()
}

/// A holder's name written as bytes that are not UTF-8 on one running row: that row's lease is
/// not extended, and the check of which claims are gone read every held row's holder as text,
/// failed in the driver, and left the node's every run without a trusted lease (killed, lost).
/// The check compares the holder in the database now: only that run is lost.
async fn a_holder_that_is_not_utf8_costs_only_its_own_run(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let store = db.store().await;
    let out = dir.path().join("ends.txt");
    let line = format!("sleep 5; echo $SQLCRON_JOB >> {}", out.display());
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command, next_exec, slot) VALUES \
             ('a', '0 0 1 1 *', '{line}', 1000, 1000), ('b', '0 0 1 1 *', '{line}', 1000, 1000)"
        ))
        .await
        .unwrap();
    let node = DaemonProcess::start(dir.path(), "n", &node_config(&db.url, "n", ""));
    eventually(Duration::from_secs(20), "both running", || async {
        let n = store
            .scalar_i64("SELECT COUNT(*) FROM cron_runs WHERE outcome = 'running'")
            .await
            .unwrap();
        (n == Some(2)).then_some(())
    })
    .await;
    let bad = if dialect == Dialect::Mysql {
        "X'EDA080'"
    } else {
        "CAST(X'FF' AS TEXT)"
    };
    store
        .execute_raw(&format!(
            "UPDATE cron_table SET exec_by = {bad} WHERE name = 'a'"
        ))
        .await
        .unwrap();
    let outcome = eventually(Duration::from_secs(30), "b's run ended", || async {
        store
            .scalars::<String>(
                "SELECT outcome FROM cron_runs WHERE job_name = 'b' AND outcome <> 'skipped'",
            )
            .await
            .unwrap()
            .into_iter()
            .find(|o| o != "running")
    })
    .await;
    let log = node.log_text();
    assert_eq!(outcome, "ok", "{log}");
    assert!(node.stop().success(), "{log}");
    store.close().await;
}
