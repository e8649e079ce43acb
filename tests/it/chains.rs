//! Chains between jobs on three databases. `after`: a chain of three jobs runs each link once
//! for each upstream run, with the upstream's run in its environment, even when the node that
//! ran the upstream is killed right after it finished. `requires`: a slot whose upstream has not
//! succeeded waits for it up to its start deadline and is then skipped with the reason; a slot
//! held while the upstream succeeds runs; a row made with SQL that closes a cycle is parked.

use std::time::Duration;

use sqlcron::store::Dialect;

use crate::util::{DaemonProcess, TestDb, eventually, node_config, sqlcron, stderr, stdout};

for_each_dialect!(
    a_chain_of_three_runs_each_link_once_through_a_kill,
    a_slot_waits_for_its_upstream_then_runs_or_is_skipped,
    a_row_holding_a_triggers_name_lets_the_chain_go_on,
    a_chain_position_no_node_set_is_moved_to_the_latest,
);

/// `up`, run by hand, and `down`, chained to it, which writes each upstream run's id to `file`.
fn up_and_down(file: &std::path::Path) -> String {
    format!(
        "[[job]]\nname = \"up\"\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n\
         [[job]]\nname = \"down\"\nafter = [\"up\"]\n\
         command = \"echo \\\"$SQLCRON_UPSTREAM_RUN_ID\\\" >> {}\"\n",
        file.display()
    )
}

/// Runs `up` once more (its `round`th success) with `sqlcron run`; its run's history id.
async fn run_up(store: &sqlcron::store::Store, conf: &std::path::Path, round: usize) -> i64 {
    let out = sqlcron(&["--config", conf.to_str().unwrap(), "run", "up"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    eventually(Duration::from_secs(30), "up ran", || async {
        let h = store.history(Some("up"), 10).await.ok()?;
        (h.iter().filter(|r| r.outcome == "ok").count() == round).then(|| h[0].id)
    })
    .await
}

/// The lines a job's runs wrote.
fn lines(file: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

async fn a_chain_of_three_runs_each_link_once_through_a_kill(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let (t_file, l_file) = (dir.path().join("transform"), dir.path().join("load"));
    let record = |file: &std::path::Path| {
        format!(
            "echo \\\"$SQLCRON_UPSTREAM_JOB $SQLCRON_UPSTREAM_RUN_ID $SQLCRON_UPSTREAM_OUTCOME\\\" >> {}",
            file.display()
        )
    };
    let jobs = format!(
        "[[job]]\nname = \"extract\"\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n\
         on = {{ nodes = [\"n1\"] }}\n\
         [[job]]\nname = \"transform\"\nafter = [\"extract\"]\ncommand = \"{}\"\n\
         on = {{ nodes = [\"n2\"] }}\n\
         [[job]]\nname = \"load\"\nafter = [{{ job = \"transform\", on = \"done\" }}]\ncommand = \"{}\"\n\
         on = {{ nodes = [\"n2\"] }}\n",
        record(&t_file),
        record(&l_file)
    );
    let mut nodes: Vec<Option<DaemonProcess>> = ["n1", "n2"]
        .iter()
        .map(|n| {
            Some(DaemonProcess::start(
                dir.path(),
                n,
                &node_config(&db.url, n, &jobs),
            ))
        })
        .collect();
    let conf = dir.path().join("n1.toml");
    // Both nodes have looked at the chains (their cursors start at extract's latest run).
    eventually(Duration::from_secs(30), "the chains' cursors", || async {
        let rows = store.chain_rows().await.ok()?;
        (rows.len() == 2 && rows.iter().all(|r| r.cursor.is_some())).then_some(())
    })
    .await;
    // extract runs on n1, which is killed right after each of its runs; the chained runs are
    // n2's (a run killed with its node is run again, by design: here the chain's own runs are
    // kept apart from the kill, so that each runs exactly once).
    for round in 1..=2usize {
        if nodes[0].is_none() {
            nodes[0] = Some(DaemonProcess::start(
                dir.path(),
                &format!("n1-{round}"),
                &node_config(&db.url, "n1", &jobs),
            ));
        }
        let out = sqlcron(&["--config", conf.to_str().unwrap(), "run", "extract"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let extract = eventually(Duration::from_secs(30), "extract ran", || async {
            let h = store.history(Some("extract"), 10).await.ok()?;
            (h.iter().filter(|r| r.outcome == "ok").count() == round).then(|| h[0].clone())
        })
        .await;
        // The node that ran extract dies right after: the other one carries the chain on.
        assert_eq!(extract.node.as_deref(), Some("n1"));
        let mut victim = nodes[0].take().unwrap();
        victim.child.kill().unwrap();
        victim.child.wait().unwrap();
        let loads = eventually(Duration::from_secs(60), "the chain ran", || async {
            let l = lines(&l_file);
            (l.len() >= round).then_some(l)
        })
        .await;
        let transforms = lines(&t_file);
        assert_eq!(transforms.len(), round, "{transforms:?}");
        assert_eq!(transforms[round - 1], format!("extract {} ok", extract.id));
        let transform_run = store
            .history(None, 100)
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.job == format!("transform#after-{}", extract.id))
            .expect("transform's run for this extract run");
        assert_eq!(
            loads[round - 1],
            format!("transform {} ok", transform_run.id)
        );
    }
    // explain names the upstream run of each chained run; status draws the chain.
    let out = sqlcron(&["--config", conf.to_str().unwrap(), "explain", "load"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).matches("triggered by transform run ").count(),
        2,
        "{}",
        stdout(&out)
    );
    let out = sqlcron(&["--config", conf.to_str().unwrap(), "status"]);
    let text = stdout(&out);
    assert!(
        text.contains("extract\n└─ transform (after, on success)\n   └─ load (after, on done)\n"),
        "{text}"
    );
    // Settle, then each link ran once per upstream run.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let history = store.history(None, 100).await.unwrap();
    let shown: Vec<_> = history
        .iter()
        .map(|r| (r.id, &r.job, r.attempt, &r.outcome, &r.node))
        .collect();
    assert_eq!(lines(&t_file).len(), 2, "{:?} {shown:?}", lines(&t_file));
    assert_eq!(lines(&l_file).len(), 2, "{:?} {shown:?}", lines(&l_file));
    for r in history.iter().filter(|r| r.job.contains("#after-")) {
        assert_eq!(r.outcome, "ok", "{r:?}");
    }
    for n in nodes.into_iter().flatten() {
        let log = n.log_text();
        assert!(n.stop().success(), "{log}");
    }
}

async fn a_slot_waits_for_its_upstream_then_runs_or_is_skipped(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    // extract never falls due by itself: it runs when the test says so.
    let jobs = "[[job]]\nname = \"extract\"\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n\
                [[job]]\nname = \"load\"\nschedule = \"@every 10s\"\ncommand = \"true\"\n\
                starting_deadline = \"8s\"\nrequires = { job = \"extract\", within = \"1m\" }\n";
    let node = DaemonProcess::start(dir.path(), "n1", &node_config(&db.url, "n1", jobs));
    let conf = dir.path().join("n1.toml");
    // No success of extract: a slot of load waits, then is skipped, saying why.
    let skipped = eventually(Duration::from_secs(40), "a slot skipped", || async {
        let h = store.history(Some("load"), 50).await.ok()?;
        h.into_iter().find(|r| r.outcome == "skipped")
    })
    .await;
    let message = skipped.message.clone().unwrap_or_default();
    assert!(
        message
            .starts_with("requires: extract has not succeeded within 1m before the slot (waited "),
        "{message}"
    );
    let history = store.history(Some("load"), 50).await.unwrap();
    assert!(
        history.iter().all(|r| r.outcome == "skipped"),
        "load ran without its upstream: {history:?}"
    );
    let out = sqlcron(&[
        "--config",
        conf.to_str().unwrap(),
        "explain",
        "load",
        "--from",
        &chrono::DateTime::from_timestamp_millis(skipped.slot)
            .unwrap()
            .to_rfc3339(),
        "--to",
        &chrono::DateTime::from_timestamp_millis(skipped.slot)
            .unwrap()
            .to_rfc3339(),
    ]);
    assert!(
        stdout(&out).contains("skipped: extract has not succeeded within 1m"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    // A slot held for extract: due, no record, the row looking again later.
    let held = eventually(Duration::from_secs(30), "a slot held", || async {
        let now = store.now().await.ok()?;
        let row = store.job("load").await.ok()??;
        let slot = row.slot?;
        let recorded = store
            .history(Some("load"), 50)
            .await
            .ok()?
            .iter()
            .any(|r| r.slot == slot);
        (slot <= now && now - slot < 5_000 && !recorded && row.exec_by.is_none()).then_some(slot)
    })
    .await;
    // extract succeeds while it is held: the held slot runs.
    let out = sqlcron(&["--config", conf.to_str().unwrap(), "run", "extract"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ran = eventually(Duration::from_secs(30), "the held slot ran", || async {
        let h = store.history(Some("load"), 50).await.ok()?;
        h.into_iter()
            .find(|r| r.slot == held && r.outcome != "running")
    })
    .await;
    assert_eq!(ran.outcome, "ok", "{ran:?}");
    assert!(
        ran.started.unwrap() > held,
        "it started after the slot, once extract had succeeded: {ran:?}"
    );
    // explain says what the slot waited for.
    let at = chrono::DateTime::from_timestamp_millis(held)
        .unwrap()
        .to_rfc3339();
    let out = sqlcron(&[
        "--config",
        conf.to_str().unwrap(),
        "explain",
        "load",
        "--from",
        &at,
        "--to",
        &at,
    ]);
    assert!(
        stdout(&out).contains("s for extract)"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );

    // A row made with SQL that closes a cycle of upstreams is parked with the cycle.
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command, requires) \
             VALUES ('a', '@daily', 'true', '[{\"job\": \"b\", \"within\": \"1h\"}]')",
        )
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "a prepared", || async {
        store.job("a").await.ok()??.next_exec.map(|_| ())
    })
    .await;
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command, requires) \
             VALUES ('b', '@daily', 'true', '[{\"job\": \"a\", \"within\": \"1h\"}]')",
        )
        .await
        .unwrap();
    let error = eventually(Duration::from_secs(20), "b parked", || async {
        store.job("b").await.ok()??.error
    })
    .await;
    assert_eq!(error, "requires/after: a cycle: b → a → b");
    let log = node.log_text();
    assert!(node.stop().success(), "{log}");
}

/// A row made with SQL under the name a chain's next trigger needs (`down#after-<run id>`) is
/// not taken for that trigger: the chained run for that upstream run is not made, the warning
/// says so, and the chain goes on with the next upstream run (it once stopped there for good,
/// and ran the old trigger late once the row was gone).
async fn a_row_holding_a_triggers_name_lets_the_chain_go_on(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("down");
    // `down` reads an env_file outside [security] file_dirs: its chained rows
    // (`down#after-RUN`) read it as the TOML job named in this node's file.
    let env_file = dir.path().join("down.env");
    std::fs::write(&env_file, "FROM_FILE=read\n").unwrap();
    let jobs = up_and_down(&file).replace(
        "$SQLCRON_UPSTREAM_RUN_ID\\\"",
        "$SQLCRON_UPSTREAM_RUN_ID $FROM_FILE\\\"",
    ) + &format!("env_file = \"{}\"\n", env_file.display());
    assert!(jobs.contains("$FROM_FILE"), "{jobs}");
    let node = DaemonProcess::start(dir.path(), "n1", &node_config(&db.url, "n1", &jobs));
    let conf = dir.path().join("n1.toml");
    eventually(Duration::from_secs(30), "the chain's cursor", || async {
        let rows = store.chain_rows().await.ok()?;
        (rows.len() == 1 && rows[0].cursor.is_some()).then_some(())
    })
    .await;
    // Rows under every name the chain's first triggers could take, paused, made with SQL.
    let squatters: Vec<String> = (1..=200)
        .map(|i| format!("('down#after-{i}', '0 0 1 1 *', 'true', 0)"))
        .collect();
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command, enabled) VALUES {}",
            squatters.join(", ")
        ))
        .await
        .unwrap();
    let run_up = |round: usize| run_up(&store, &conf, round);
    let first = run_up(1).await;
    assert!(
        first <= 200,
        "the test's rows cover run ids up to 200: {first}"
    );
    let taken = format!("down#after-{first}");
    eventually(Duration::from_secs(30), "the warning", || async {
        let log = node.log_text();
        log.lines()
            .any(|l| l.contains("chained run not made") && l.contains(&taken))
            .then_some(())
    })
    .await;
    // The row under that name is left as it was.
    let row = store
        .job(&taken)
        .await
        .unwrap()
        .expect("the row made with SQL");
    assert!(!row.enabled, "{row:?}");
    store
        .execute_raw("DELETE FROM cron_table WHERE name LIKE 'down#after-%'")
        .await
        .unwrap();
    // The next upstream run is chained; the one whose trigger was taken is not run late.
    let second = run_up(2).await;
    let ran = eventually(Duration::from_secs(30), "down ran", || async {
        let l = lines(&file);
        (!l.is_empty()).then_some(l)
    })
    .await;
    assert_eq!(ran, vec![format!("{second} read")]);
    // No trigger was made for the first run since: its name is free, and nothing holds it.
    assert!(store.job(&taken).await.unwrap().is_none());
    let log = node.log_text();
    assert!(node.stop().success(), "{log}");
}

/// A chain's position set with SQL past every run record (the chain waited for good, silently,
/// as no run came after it), below 0 (every run of the history was looked at again) or not a
/// JSON object of numbers. A live node moves it at its next look where a new upstream starts:
/// after the upstream's latest run, or just before its run still going, which is then chained
/// when it ends (moved past it, that run was lost). The warning is written once, then held back.
/// A position past the upstream's last run but within the records (its runs pruned) is the
/// chain's own: left as it is. A record left `running` with no claim holds no new position.
async fn a_chain_position_no_node_set_is_moved_to_the_latest(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("down");
    let hold = dir.path().join("hold");
    // `up` goes on while the file `hold` is there.
    let jobs = up_and_down(&file).replacen(
        "command = \"true\"",
        &format!(
            "command = \"while [ -e {} ]; do sleep 0.05; done\"",
            hold.display()
        ),
        1,
    );
    let node = DaemonProcess::start(dir.path(), "n1", &node_config(&db.url, "n1", &jobs));
    let cursor = || async { store.chain_rows().await.ok()?.first()?.cursor.clone() };
    eventually(Duration::from_secs(30), "the chain's cursor", || async {
        cursor().await.map(|_| ())
    })
    .await;
    eventually(Duration::from_secs(30), "the node live", || async {
        let nodes = store
            .scalar_i64("SELECT COUNT(*) FROM cron_nodes WHERE name = 'n1'")
            .await
            .ok()??;
        (nodes == 1).then_some(())
    })
    .await;
    let conf = dir.path().join("n1.toml");
    let plant = |text: String| {
        let store = &store;
        async move {
            store
                .execute_raw(&format!(
                    "UPDATE cron_table SET chain_cursor = '{text}' WHERE name = 'down'"
                ))
                .await
                .unwrap();
        }
    };
    let mut seen: Vec<String> = vec![];
    for round in 1..=4 {
        let last = seen.last().cloned().unwrap_or_else(|| "0".into());
        let (planted, moved_to) = match round {
            1 => (format!("{{\"up\":{}}}", i64::MAX), last),
            2 => ("{\"up\":-1}".to_string(), last),
            3 => ("not a position".to_string(), last),
            // Past up's last run (the newest record is a chained run of down): not moved.
            _ => {
                let newest = store.scalar_i64("SELECT MAX(id) FROM cron_runs").await;
                let newest = newest.unwrap().unwrap().to_string();
                (format!("{{\"up\":{newest}}}"), newest)
            }
        };
        plant(planted.clone()).await;
        let want = format!("{{\"up\":{moved_to}}}");
        eventually(Duration::from_secs(30), "the position moved", || async {
            (cursor().await? == want).then_some(())
        })
        .await;
        let id = run_up(&store, &conf, round).await;
        seen.push(id.to_string());
        eventually(
            Duration::from_secs(30),
            "down ran for the new run",
            || async { (lines(&file) == seen).then_some(()) },
        )
        .await;
        assert_eq!(
            cursor().await,
            Some(format!("{{\"up\":{id}}}")),
            "{planted}"
        );
    }
    // A record left `running` by a row deleted while its run went on (its row is not claimed
    // with its token): the position is not put before it, where the chain waited for
    // good.
    let stale = stale_record(&store, 1).await;
    plant("{\"up\":-1}".to_string()).await;
    let want = format!("{{\"up\":{stale}}}");
    eventually(Duration::from_secs(30), "the position past it", || async {
        (cursor().await? == want).then_some(())
    })
    .await;
    let id = run_up(&store, &conf, 5).await;
    seen.push(id.to_string());
    eventually(Duration::from_secs(30), "down ran past it", || async {
        (lines(&file) == seen).then_some(())
    })
    .await;
    // A run of up still going when the position is set below 0: the position is put just
    // before it, and it is chained when it ends; neither a record left `running` below it
    // while up's row is claimed (with another token) nor a skipped slot's summary above it
    // (no finished run) moves the position elsewhere.
    let stale = stale_record(&store, 2).await;
    std::fs::write(&hold, "").unwrap();
    let mut going = std::process::Command::new(crate::util::sqlcron_bin())
        .args(["--config", conf.to_str().unwrap(), "run", "up"])
        .env_remove("SQLCRON_CONFIG")
        .env_remove("SQLCRON_DATABASE_URL")
        .env_remove("NOTIFY_SOCKET")
        .spawn()
        .unwrap();
    let running = eventually(Duration::from_secs(30), "up running", || async {
        store
            .scalar_i64(&format!(
                "SELECT MAX(id) FROM cron_runs WHERE job_name = 'up' AND outcome = 'running' \
                 AND id > {stale}"
            ))
            .await
            .ok()?
    })
    .await;
    store
        .execute_raw(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, started, ended, outcome) \
             VALUES ('up#after-1', 1, 0, 'n1', 0, 0, 'skipped')",
        )
        .await
        .unwrap();
    plant("{\"up\":-1}".to_string()).await;
    let want = format!("{{\"up\":{}}}", running - 1);
    eventually(
        Duration::from_secs(30),
        "the position before the run",
        || async { (cursor().await? == want).then_some(()) },
    )
    .await;
    std::fs::remove_file(&hold).unwrap();
    assert!(going.wait().unwrap().success());
    seen.push(running.to_string());
    eventually(
        Duration::from_secs(30),
        "down ran for the run that was going",
        || async { (lines(&file) == seen).then_some(()) },
    )
    .await;
    let log = node.log_text();
    assert!(node.stop().success(), "{log}");
    // Written once, then held back: the first of rounds 1, 2 and the last.
    assert_eq!(warned_in(&log), 1, "{log}");
    let unreadable = log
        .lines()
        .filter(|l| l.contains("a chain's position that cannot be read"))
        .count();
    assert_eq!(unreadable, 1, "{log}");
    // No upstream run was chained twice.
    assert_eq!(lines(&file), seen);
}

/// A record of `up` left `running` with a token no claim holds (for slot `slot`); its id.
async fn stale_record(store: &sqlcron::store::Store, slot: i64) -> i64 {
    store
        .execute_raw(&format!(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, outcome) \
             VALUES ('up', {slot}, 0, 'gone', {}, 0, 'running')",
            424_241 + slot
        ))
        .await
        .unwrap();
    store
        .scalar_i64("SELECT MAX(id) FROM cron_runs WHERE job_name = 'up'")
        .await
        .unwrap()
        .unwrap()
}

fn warned_in(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("a chain's position below 0 or past every run record"))
        .count()
}
