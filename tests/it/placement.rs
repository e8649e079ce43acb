//! Placement (`[node] tags`, a job's `on`) and drain, with real daemons.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use sqlcron::store::Dialect;

use crate::util::{
    DaemonProcess, RunLog, TestDb, count_lines, eventually, node_config, sqlcron, stderr, stdout,
};

for_each_dialect!(
    only_matching_nodes_run_a_placed_job,
    a_drained_node_finishes_its_run_and_claims_nothing_more,
    drain_wait_returns_once_the_runs_have_ended,
    every_node_job_runs_each_slot_once_on_each_node,
    copies_of_a_removed_template_go_even_on_a_node_that_is_gone,
    an_orphan_named_like_a_template_but_for_case_goes_and_an_unreadable_row_stays,
    an_idle_heartbeat_reads_no_templates_and_a_change_still_reaches_the_copy,
    a_flood_of_placement_values_is_bounded_and_pruned,
    a_placed_job_runs_nowhere_else_when_a_writer_deletes_the_placement_values,
    a_placement_value_differing_in_case_stands_for_no_other,
    an_overlong_placement_written_with_sql_is_parked_with_its_reason,
);

// PostgreSQL keeps no text that is not UTF-8.
mod placement_not_text {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::a_placement_that_is_not_utf8_text_parks_its_row(sqlcron::store::Dialect::Sqlite)
            .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mysql() {
        super::a_placement_that_is_not_utf8_text_parks_its_row(sqlcron::store::Dialect::Mysql).await
    }
}

// The node's side alone (the same on every database): one is enough for a test of a minute.
mod placement_swap {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_value_swapped_for_another_between_two_peeks_is_learnt_within_a_minute() {
        super::a_value_swapped_for_another_between_two_peeks_is_learnt_within_a_minute(
            sqlcron::store::Dialect::Sqlite,
        )
        .await
    }
}

// PostgreSQL's planner alone (MySQL's and SQLite's plans of the same statements are the
// ordered scans they were: docs/benchmarks.md).
mod no_value_plans {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_with_no_value_claims_and_peeks_in_order_on_a_table_without_statistics() {
        super::a_node_with_no_value_claims_and_peeks_in_order_on_a_table_without_statistics().await
    }
}

/// A node that knows of no placement value claims with `placement IS NULL`. Without
/// statistics PostgreSQL guesses that 0.5 % of the rows match it, and planned the claim it keeps
/// for the prepared statement as a read and a sort of every due row (20,000 here); the partial
/// index `cron_table_due_anyone` keeps it (and the peek) an ordered index scan that stops after
/// the rows it takes.
async fn a_node_with_no_value_claims_and_peeks_in_order_on_a_table_without_statistics() {
    use sqlcron::store::dialect::{claim_sql, peek_sql};
    use sqlx::{AssertSqlSafe, Connection};
    let db = TestDb::new(Dialect::Postgres).await;
    let store = db.store().await;
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command, next_exec, slot) \
             SELECT 'j' || g, '* * * * *', 'true', g, g FROM generate_series(1, 20000) g",
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .scalar_i64("SELECT COUNT(*) FROM pg_stats WHERE tablename = 'cron_table'")
            .await
            .unwrap(),
        Some(0),
        "no statistics yet"
    );
    // One session: the plan kept for a prepared statement, made without its values.
    let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("SET plan_cache_mode = force_generic_plan")
        .execute(&mut conn)
        .await
        .unwrap();
    for (what, sql, values) in [
        (
            "claim",
            claim_sql(Dialect::Postgres, 0, 0),
            "'n', 10000, 10000, 'n', 16",
        ),
        ("peek", peek_sql(Dialect::Postgres, 0, false), "'n'"),
    ] {
        sqlx::raw_sql(AssertSqlSafe(format!("PREPARE {what} AS {sql}")))
            .execute(&mut conn)
            .await
            .unwrap();
        let plan: Vec<String> =
            sqlx::query_scalar(AssertSqlSafe(format!("EXPLAIN EXECUTE {what}({values})")))
                .fetch_all(&mut conn)
                .await
                .unwrap();
        let plan = plan.join("\n");
        assert!(!plan.contains("Sort"), "{what}: {plan}");
        assert!(plan.contains("cron_table_due_anyone"), "{what}: {plan}");
    }
    conn.close().await.unwrap();
    store.close().await;
}

/// A node notices new placement values by their number at each peek. One deleted (no row used
/// it: the housekeeping's) and another added between two of its peeks leave the number as it
/// was; the node reads the values again at least once a minute, so a job placed on it with the
/// new value runs then, not never.
async fn a_value_swapped_for_another_between_two_peeks_is_learnt_within_a_minute(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let store = db.store().await;
    store
        .execute_raw(
            r#"INSERT INTO cron_table (name, schedule, command, placement)
               VALUES ('elsewhere', '* * * * * *', 'true', '{"nodes":["x"]}')"#,
        )
        .await
        .unwrap();
    let node = DaemonProcess::start(dir.path(), "n1", &node_config(&db.url, "n1", ""));
    eventually(
        Duration::from_secs(30),
        "the node's read of the one value",
        || async {
            let log = node.log_text();
            log.lines()
                .any(|l| l.contains("placements read") && l.contains("values=1"))
                .then_some(())
        },
    )
    .await;
    // In one transaction: no peek sees the values between.
    store
        .execute_raw(&format!(
            r#"BEGIN;
               DELETE FROM cron_table WHERE name = 'elsewhere';
               DELETE FROM cron_placements;
               INSERT INTO cron_table (name, schedule, command, placement)
               VALUES ('mine', '* * * * * *', 'echo ran >> {}', '{{"nodes":["n1"]}}');
               COMMIT;"#,
            out.display()
        ))
        .await
        .unwrap();
    assert_eq!(
        store
            .scalar_i64("SELECT COUNT(*) FROM cron_placements")
            .await
            .unwrap(),
        Some(1)
    );
    eventually(
        Duration::from_secs(90),
        "a run of the job placed with the new value",
        || async {
            std::fs::read_to_string(&out)
                .is_ok_and(|t| t.contains("ran"))
                .then_some(())
        },
    )
    .await;
    drop(node);
    store.close().await;
}

/// A database writer deletes every row of `cron_placements` (as a tired operator tidying up
/// might): the nodes then know of no placement value in use. A node that claimed without any
/// placement condition then would run every placed job; the claim still leaves out every row
/// with a placement it has not read, so the job pinned to `b` never runs on `a`. It waits until
/// the values are back (the housekeeping's), then runs on `b` again.
async fn a_placed_job_runs_nowhere_else_when_a_writer_deletes_the_placement_values(
    dialect: Dialect,
) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let runs = RunLog::in_dir(dir.path());
    let store = db.store().await;
    let line = format!("echo $SQLCRON_JOB $SQLCRON_NODE >> {}", runs.0.display());
    store
        .execute_raw(&format!(
            r#"INSERT INTO cron_table (name, schedule, command, placement) VALUES
               ('pinned', '* * * * * *', '{line}', '{{"nodes":["b"]}}'),
               ('any', '* * * * * *', '{line}', NULL)"#
        ))
        .await
        .unwrap();
    let daemons: Vec<DaemonProcess> = ["a", "b"]
        .iter()
        .map(|n| DaemonProcess::start(dir.path(), n, &node_config(&db.url, n, "")))
        .collect();
    let runs_of_any = |text: &str| count_lines(text, "any a") + count_lines(text, "any b");
    eventually(Duration::from_secs(40), "runs of both jobs", || async {
        let text = runs.text();
        (count_lines(&text, "pinned b") >= 2 && runs_of_any(&text) >= 2).then_some(())
    })
    .await;
    // After the pruning duty's first round (the next is `prune_interval`, 10 minutes, away): the
    // values stay deleted for the rest of the test. Each node tries the duty once at its start:
    // a node that tried after the other's round had ended takes a round of its own, so both
    // nodes' first tries are waited for.
    eventually(
        Duration::from_secs(30),
        "each node's first pruning try",
        || async {
            daemons
                .iter()
                .all(|d| {
                    let log = d.log_text();
                    log.contains("history pruning round done")
                        || log.contains("history pruning: another node holds the duty")
                })
                .then_some(())
        },
    )
    .await;
    store
        .execute_raw("DELETE FROM cron_placements")
        .await
        .unwrap();
    let deleted = runs.text();
    eventually(
        Duration::from_secs(30),
        "both nodes' read of no value",
        || async {
            daemons
                .iter()
                .all(|d| {
                    d.log_text()
                        .lines()
                        .any(|l| l.contains("placements read") && l.contains("values=0"))
                })
                .then_some(())
        },
    )
    .await;
    // Both nodes claim on: five more seconds of the job any node runs.
    let base = runs_of_any(&runs.text());
    eventually(
        Duration::from_secs(30),
        "runs with no value known",
        || async { (runs_of_any(&runs.text()) >= base + 5).then_some(()) },
    )
    .await;
    let text = runs.text();
    assert_eq!(
        store
            .scalar_i64("SELECT COUNT(*) FROM cron_placements")
            .await
            .unwrap(),
        Some(0),
        "the values stayed deleted throughout"
    );
    assert_eq!(count_lines(&text, "pinned a"), 0, "{text}");
    // No node knows the value: the pinned job waits.
    assert!(
        count_lines(&text, "pinned b") <= count_lines(&deleted, "pinned b") + 2,
        "{text}"
    );
    // The value back (the housekeeping puts back a value a row uses): `b` runs it again.
    store
        .execute_raw(r#"INSERT INTO cron_placements (placement) VALUES ('{"nodes":["b"]}')"#)
        .await
        .unwrap();
    let before = count_lines(&runs.text(), "pinned b");
    eventually(
        Duration::from_secs(30),
        "the pinned job's runs on b again",
        || async { (count_lines(&runs.text(), "pinned b") >= before + 2).then_some(()) },
    )
    .await;
    for d in daemons {
        let log = d.log_text();
        assert!(d.stop().success(), "{log}");
    }
    assert_eq!(count_lines(&runs.text(), "pinned a"), 0, "{}", runs.text());
    store.close().await;
}

/// A value in `cron_placements` that no node can parse (`"Nodes"` is no key) is matched by every
/// node, so that one of them parks a row that has it. Written before the value of a job placed
/// on `b` is in use (an editor may insert values), it stands for no other value: under MySQL's
/// default collation `placement IN (...)` was blind to case, and every node ran the job. Nor do
/// two jobs placed on the tags `GPU` and `gpu` share a value.
async fn a_placement_value_differing_in_case_stands_for_no_other(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let runs = RunLog::in_dir(dir.path());
    let store = db.store().await;
    let line = format!("echo $SQLCRON_JOB $SQLCRON_NODE >> {}", runs.0.display());
    store
        .execute_raw(r#"INSERT INTO cron_placements (placement) VALUES ('{"Nodes":["b"]}')"#)
        .await
        .unwrap();
    store
        .execute_raw(&format!(
            r#"INSERT INTO cron_table (name, schedule, command, placement) VALUES
               ('pinned', '* * * * * *', '{line}', '{{"nodes":["b"]}}'),
               ('upper', '* * * * * *', '{line}', '{{"tags":["GPU"]}}'),
               ('lower', '* * * * * *', '{line}', '{{"tags":["gpu"]}}')"#
        ))
        .await
        .unwrap();
    // Four values, each its own.
    assert_eq!(
        store
            .scalar_i64("SELECT COUNT(*) FROM cron_placements")
            .await
            .unwrap(),
        Some(4)
    );
    let daemons: Vec<DaemonProcess> = [("a", "\"gpu\""), ("b", "")]
        .iter()
        .map(|(n, tags)| DaemonProcess::start(dir.path(), n, &node_with_tags(&db.url, n, tags, "")))
        .collect();
    eventually(Duration::from_secs(40), "runs on both nodes", || async {
        let text = runs.text();
        (count_lines(&text, "pinned b") >= 3 && count_lines(&text, "lower a") >= 3).then_some(())
    })
    .await;
    for d in daemons {
        let log = d.log_text();
        assert!(d.stop().success(), "{log}");
    }
    let text = runs.text();
    for wrong in ["pinned a", "upper a", "upper b", "lower b"] {
        assert_eq!(count_lines(&text, wrong), 0, "{wrong}: {text}");
    }
    store.close().await;
}

fn node_with_tags(url: &str, name: &str, tags: &str, jobs: &str) -> String {
    node_config(url, name, &format!("{jobs}\n")).replacen(
        &format!("name = \"{name}\"\n"),
        &format!("name = \"{name}\"\ntags = [{tags}]\n"),
        1,
    )
}

/// `sqlcron status` output, through a configuration of its own.
fn status(dir: &std::path::Path, url: &str) -> String {
    let cli = dir.join("cli.toml");
    std::fs::write(&cli, node_config(url, "cli", "")).unwrap();
    let out = sqlcron(&["--config", cli.to_str().unwrap(), "status"]);
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

fn cli(dir: &std::path::Path, url: &str, args: &[&str]) -> std::process::Output {
    let cli = dir.join("cli.toml");
    std::fs::write(&cli, node_config(url, "cli", "")).unwrap();
    let mut all = vec!["--config", cli.to_str().unwrap()];
    all.extend_from_slice(args);
    sqlcron(&all)
}

async fn only_matching_nodes_run_a_placed_job(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let line = format!("echo $SQLCRON_JOB $SQLCRON_NODE >> {}", out.display());
    let job = |name: &str, on: &str| {
        format!(
            "[[job]]\nname = \"{name}\"\nschedule = \"* * * * * *\"\ncommand = \"{line}\"\n{on}\n"
        )
    };
    let jobs = [
        job("gpu", "on = { tags = [\"gpu\"] }"),
        job("eu", "on = { tags = [\"eu\"] }"),
        job(
            "gpu-eu-web",
            "on = { tags = [\"eu\", \"gpu\"], nodes = [\"web-*\"] }",
        ),
        job("named", "on = { nodes = [\"batch-?\"] }"),
        job("nowhere", "on = { tags = [\"tpu\"] }"),
        job("any", ""),
    ]
    .concat();
    let nodes = [
        ("web-1", "\"gpu\", \"eu\""),
        ("web-2", "\"eu\""),
        ("batch-1", ""),
    ];
    let daemons: Vec<DaemonProcess> = nodes
        .iter()
        .map(|(n, tags)| {
            DaemonProcess::start(dir.path(), n, &node_with_tags(&db.url, n, tags, &jobs))
        })
        .collect();
    let read = || std::fs::read_to_string(&out).unwrap_or_default();
    let runs = |text: &str| {
        let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for l in text.lines() {
            let (j, n) = l.split_once(' ').unwrap();
            m.entry(j.to_string()).or_default().push(n.to_string());
        }
        m
    };
    eventually(
        Duration::from_secs(40),
        "runs of every placeable job",
        || async {
            let m = runs(&read());
            ["gpu", "eu", "gpu-eu-web", "named", "any"]
                .iter()
                .all(|j| m.get(*j).is_some_and(|v| v.len() >= 5))
                .then_some(())
        },
    )
    .await;
    let text = status(dir.path(), &db.url);
    let nowhere = text
        .lines()
        .find(|l| l.starts_with("nowhere "))
        .unwrap_or_default();
    assert!(
        nowhere.contains("no live node matches (tags tpu)"),
        "{text}"
    );
    let gpu = text
        .lines()
        .find(|l| l.starts_with("gpu "))
        .unwrap_or_default();
    assert!(!gpu.contains("no live node"), "{text}");
    let web1 = text
        .lines()
        .find(|l| l.starts_with("web-1 "))
        .unwrap_or_default();
    assert!(web1.contains("eu,gpu"), "node tags shown: {text}");
    let explain = cli(dir.path(), &db.url, &["explain", "nowhere"]);
    assert!(
        stdout(&explain)
            .contains("will not run until a node matches: no live node matches (tags tpu)"),
        "{}",
        stdout(&explain)
    );
    // Moved with SQL to a placement nobody used before: the nodes learn the new value.
    let store = db.store().await;
    store
        .execute_raw(
            r#"UPDATE cron_table SET placement = '{"nodes":["web-2"]}' WHERE name = 'nowhere'"#,
        )
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "the moved job's runs", || async {
        runs(&read())
            .get("nowhere")
            .is_some_and(|v| v.len() >= 3)
            .then_some(())
    })
    .await;
    for d in daemons {
        let log = d.log_text();
        assert!(d.stop().success(), "{log}");
    }
    let allowed: BTreeMap<&str, BTreeSet<&str>> = [
        ("gpu", BTreeSet::from(["web-1"])),
        ("eu", BTreeSet::from(["web-1", "web-2"])),
        ("gpu-eu-web", BTreeSet::from(["web-1"])),
        ("named", BTreeSet::from(["batch-1"])),
        ("nowhere", BTreeSet::from(["web-2"])),
        ("any", BTreeSet::from(["web-1", "web-2", "batch-1"])),
    ]
    .into();
    for (job, ran_on) in runs(&read()) {
        for n in &ran_on {
            assert!(
                allowed[job.as_str()].contains(n.as_str()),
                "{job} ran on {n}"
            );
        }
    }
}

/// `drain --wait` returns only after the node's run has ended and been released, and says so.
async fn drain_wait_returns_once_the_runs_have_ended(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let jobs = format!(
        "[[job]]\nname = \"long\"\nschedule = \"@every 2s\"\ncommand = \"echo start >> {0}; sleep 3; echo end >> {0}\"\n",
        out.display()
    );
    let a = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", &jobs));
    let read = || std::fs::read_to_string(&out).unwrap_or_default();
    eventually(Duration::from_secs(20), "a first start", || async {
        read().lines().any(|l| l == "start").then_some(())
    })
    .await;
    let waited = cli(dir.path(), &db.url, &["drain", "--wait", &a.name]);
    assert!(waited.status.success(), "{}", stderr(&waited));
    let said = stdout(&waited);
    assert!(said.contains("1 run(s) still going"), "{said}");
    assert!(
        said.trim_end().ends_with(&format!("{}: idle", a.name)),
        "{said}"
    );
    // Every run that started has ended by then, and the history holds no running run.
    let text = read();
    let starts = text.lines().filter(|l| *l == "start").count();
    let ends = text.lines().filter(|l| *l == "end").count();
    assert_eq!(starts, ends, "{text}");
    let store = db.store().await;
    let running = store
        .scalar_i64("SELECT COUNT(*) FROM cron_runs WHERE outcome = 'running'")
        .await
        .unwrap();
    assert_eq!(running, Some(0));
    // An idle node's wait ends at once (after its one look).
    let again = cli(dir.path(), &db.url, &["drain", "--wait", &a.name]);
    assert!(
        stdout(&again).contains("0 run(s) still going"),
        "{}",
        stdout(&again)
    );
    assert!(
        stdout(&again).trim_end().ends_with("idle"),
        "{}",
        stdout(&again)
    );
}

async fn a_drained_node_finishes_its_run_and_claims_nothing_more(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let jobs = format!(
        "[[job]]\nname = \"long\"\nschedule = \"@every 2s\"\ncommand = \"echo start $SQLCRON_NODE >> {0}; sleep 3; echo end $SQLCRON_NODE >> {0}\"\n",
        out.display()
    );
    let a = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", &jobs));
    let b = DaemonProcess::start(dir.path(), "b", &node_config(&db.url, "b", &jobs));
    let read = || std::fs::read_to_string(&out).unwrap_or_default();
    let first = eventually(Duration::from_secs(20), "a first start", || async {
        read()
            .lines()
            .find(|l| l.starts_with("start "))
            .map(|l| l[6..].to_string())
    })
    .await;
    let (x, y) = if first == "a" { (&a, &b) } else { (&b, &a) };
    let drained = cli(dir.path(), &db.url, &["drain", &x.name]);
    assert!(drained.status.success(), "{}", stderr(&drained));
    assert!(
        stdout(&drained).contains("1 run(s) still going"),
        "{}",
        stdout(&drained)
    );
    let text = status(dir.path(), &db.url);
    let row = text
        .lines()
        .find(|l| l.starts_with(&format!("{} ", x.name)))
        .unwrap_or_default();
    assert!(row.contains("draining (1 running)"), "{text}");
    // The run in progress ends normally on the drained node.
    let starts_at_drain = read()
        .lines()
        .filter(|l| *l == format!("start {}", x.name))
        .count();
    eventually(
        Duration::from_secs(10),
        "the drained node's run to end",
        || async {
            read()
                .lines()
                .any(|l| *l == format!("end {}", x.name))
                .then_some(())
        },
    )
    .await;
    // SIGUSR2 drains the other node too: then nothing runs at all.
    y.signal(libc::SIGUSR2);
    eventually(Duration::from_secs(10), "both drained and idle", || async {
        let t = status(dir.path(), &db.url);
        let drained = t.lines().filter(|l| l.contains(" drained ")).count();
        (drained == 2).then_some(())
    })
    .await;
    let quiet_from = read().lines().count();
    // Three slots pass with both nodes drained. The wait is the test's subject.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let text = read();
    assert_eq!(
        text.lines().count(),
        quiet_from,
        "nothing starts while drained:\n{text}"
    );
    assert_eq!(
        text.lines()
            .filter(|l| *l == format!("start {}", x.name))
            .count(),
        starts_at_drain,
        "the drained node started nothing more"
    );
    // Undrained (the command on one, SIGUSR1 on the other), both claim again.
    let undrained = cli(dir.path(), &db.url, &["undrain", &x.name]);
    assert!(undrained.status.success(), "{}", stderr(&undrained));
    eventually(Duration::from_secs(15), "a start after undrain", || async {
        read()
            .lines()
            .skip(quiet_from)
            .any(|l| l.starts_with("start "))
            .then_some(())
    })
    .await;
    y.signal(libc::SIGUSR1);
    eventually(Duration::from_secs(10), "the signal's undrain", || async {
        let t = status(dir.path(), &db.url);
        (!t.contains(" drained ") && !t.contains("draining")).then_some(())
    })
    .await;
    let unknown = cli(dir.path(), &db.url, &["drain", "no-such-node"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", stderr(&unknown));
    let store = db.store().await;
    let audit = store.audit_log(None, 50).await.unwrap();
    let actions: Vec<&str> = audit
        .iter()
        .filter(|r| r.action.contains("drain"))
        .map(|r| r.action.as_str())
        .collect();
    assert_eq!(
        actions,
        ["undrain", "undrain", "drain", "drain"],
        "{audit:?}"
    );
    for d in [a, b] {
        let log = d.log_text();
        assert!(d.stop().success(), "{log}");
    }
}

async fn every_node_job_runs_each_slot_once_on_each_node(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let jobs = format!(
        "[[job]]\nname = \"local\"\nschedule = \"* * * * * *\"\nrun_on = \"every_node\"\n\
         starting_deadline = \"2s\"\ncommand = \"echo $SQLCRON_JOB $SQLCRON_SLOT $SQLCRON_NODE >> {}\"\n",
        out.display()
    );
    let config = |n: &str| node_config(&db.url, n, &jobs);
    let a = DaemonProcess::start(dir.path(), "a", &config("a"));
    let b = DaemonProcess::start(dir.path(), "b", &config("b"));
    let c = DaemonProcess::start(dir.path(), "c", &config("c"));
    let read = || std::fs::read_to_string(&out).unwrap_or_default();
    let per_node = |text: &str, node: &str| {
        text.lines()
            .filter(|l| l.ends_with(&format!(" {node}")))
            .count()
    };
    eventually(Duration::from_secs(30), "runs on every node", || async {
        let t = read();
        ["a", "b", "c"]
            .iter()
            .all(|n| per_node(&t, n) >= 4)
            .then_some(())
    })
    .await;
    let text = status(dir.path(), &db.url);
    assert!(
        text.lines()
            .any(|l| l.starts_with("local ") && l.contains("on every node")),
        "{text}"
    );
    c.signal(libc::SIGKILL);
    drop(c);
    let store = db.store().await;
    let down_from = store.now().await.unwrap();
    // c stays down for six slots; a and b go on. The wait is the test's subject.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let c = DaemonProcess::start(dir.path(), "c-again", &config("c"));
    let history = eventually(Duration::from_secs(30), "c's misses recorded", || async {
        let h = store.history(Some("local@c"), 200).await.ok()?;
        let skipped = h
            .iter()
            .any(|r| r.outcome == "skipped" && r.slot >= down_from - 1_000);
        let ran_after = h
            .iter()
            .any(|r| r.outcome == "ok" && r.slot > down_from + 6_000);
        (skipped && ran_after).then_some(h)
    })
    .await;
    for d in [a, b, c] {
        let log = d.log_text();
        assert!(d.stop().success(), "{log}");
    }
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    for l in read().lines() {
        let f: Vec<&str> = l.split(' ').collect();
        assert_eq!(
            f[0],
            format!("local@{}", f[2]),
            "a copy ran on its own node only: {l}"
        );
        *seen
            .entry((f[0].to_string(), f[1].to_string()))
            .or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "slots run twice on one node: {twice:?}");
    for node in ["a", "b"] {
        let slots: BTreeSet<i64> = seen
            .keys()
            .filter(|(j, _)| *j == format!("local@{node}"))
            .map(|(_, s)| chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp())
            .collect();
        let (first, last) = (*slots.first().unwrap(), *slots.last().unwrap());
        // A slot not run is one the history reports as skipped (a node more than the starting
        // deadline late on a loaded machine); a slot neither run nor reported is lost.
        let own = store
            .history(Some(&format!("local@{node}")), 1_000)
            .await
            .unwrap();
        let reported = |t: i64| {
            own.iter().any(|r| {
                r.outcome == "skipped"
                    && r.slot / 1000 <= t
                    && t <= r.skipped_last.unwrap_or(r.slot) / 1000
            })
        };
        let lost: Vec<i64> = (first..=last)
            .filter(|t| !slots.contains(t) && !reported(*t))
            .collect();
        assert!(lost.is_empty(), "{node} lost {lost:?}: {own:?}");
    }
    let skipped = history.iter().find(|r| r.outcome == "skipped").unwrap();
    assert!(skipped.skipped_count.unwrap_or(0) >= 3, "{skipped:?}");
}

/// The names of the host-local copies (`job@node`) in the table, sorted.
async fn copy_names(store: &sqlcron::store::Store) -> Vec<String> {
    let mut n: Vec<String> = store
        .jobs()
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.name)
        .filter(|n| n.contains('@'))
        .collect();
    n.sort();
    n
}

/// Each node reads only its own copies with each sync (issue 53: every node reading the whole
/// fleet's copies after each heartbeat was most of an idle server's time). The copies of a
/// template that is removed still go, a stopped node's too: the node that sees the templates'
/// names change looks for orphaned copies, whichever node they belong to.
async fn copies_of_a_removed_template_go_even_on_a_node_that_is_gone(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let store = db.store().await;
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command, run_on) \
             VALUES ('keep', '0 0 1 1 *', 'true', 'every_node'), \
                    ('gone', '0 0 1 1 *', 'true', 'every_node'), \
                    ('x@y', '0 0 1 1 *', 'true', 'every_node')",
        )
        .await
        .unwrap();
    // And its copies made before such names were refused go, a gone node's too.
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command, template, source) \
             VALUES ('x@y@a', '0 0 1 1 *', 'true', 'x@y', 'copy'), \
                    ('x@y@gone', '0 0 1 1 *', 'true', 'x@y', 'copy')",
        )
        .await
        .unwrap();
    let names = || copy_names(&store);
    let a = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", ""));
    let b = DaemonProcess::start(dir.path(), "b", &node_config(&db.url, "b", ""));
    // A template written with SQL whose name holds an @ gets no copy: `x@y@a` would also be
    // the copy of a template `x` on a node `y@a`, and the two nodes would rewrite it in turn.
    let all = ["gone@a", "gone@b", "keep@a", "keep@b", "x@y"];
    eventually(Duration::from_secs(30), "each node's copies", || async {
        (names().await == all).then_some(())
    })
    .await;
    let b_log = b.log_text();
    assert!(b.stop().success(), "{b_log}");
    store
        .execute_raw("DELETE FROM cron_table WHERE name = 'gone'")
        .await
        .unwrap();
    eventually(
        Duration::from_secs(30),
        "the removed template's copies gone",
        || async { (names().await == ["keep@a", "keep@b", "x@y"]).then_some(()) },
    )
    .await;
    let log = a.log_text();
    assert!(
        log.contains("host-local copy removed: its job is gone"),
        "{log}"
    );
    assert_eq!(
        log.matches("may not contain @").count(),
        1,
        "the template named with an @, said once: {log}"
    );
    let both = format!("{log}{b_log}");
    assert_eq!(
        both.matches("host-local copy removed: its job's name holds an @")
            .count(),
        2,
        "{both}"
    );
    assert!(a.stop().success(), "{log}");
}

/// A heartbeat reads the templates and copies only when the audit trail shows a definition
/// changed (its newest row id: from the heartbeat's UPDATE on PostgreSQL and SQLite, from the
/// last peek on MySQL), and a template's change still reaches the node's copy within a
/// heartbeat or two.
async fn an_idle_heartbeat_reads_no_templates_and_a_change_still_reaches_the_copy(
    dialect: Dialect,
) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let store = db.store().await;
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command, run_on) \
             VALUES ('tpl', '0 0 1 1 *', 'true', 'every_node')",
        )
        .await
        .unwrap();
    let a = DaemonProcess::start_with_env(
        dir.path(),
        "a",
        &node_config(&db.url, "a", ""),
        &[("RUST_LOG", "sqlcron=debug,sqlx::query=trace")],
    );
    let command = |name: &'static str| {
        let store = &store;
        async move {
            store
                .jobs()
                .await
                .unwrap()
                .into_iter()
                .find(|j| j.name == name)
                .and_then(|j| j.command)
        }
    };
    eventually(Duration::from_secs(30), "the node's copy", || async {
        command("tpl@a").await.filter(|c| c == "true")
    })
    .await;
    // From here, the statements of five heartbeats.
    let from = a.log_text().len();
    let counts = || {
        let log = a.log_text();
        let after = &log[from.min(log.len())..];
        // One trace line per statement (its summary and its text both name it).
        let beats = after
            .lines()
            .filter(|l| l.contains("sqlx::query") && l.contains("UPDATE cron_nodes SET last_seen"))
            .count();
        let reads = after
            .lines()
            .filter(|l| {
                l.contains("sqlx::query") && l.contains("run_on = 'every_node' ORDER BY name")
            })
            .count();
        (beats, reads)
    };
    let (beats, reads) = eventually(Duration::from_secs(40), "five heartbeats", || async {
        let c = counts();
        (c.0 >= 5).then_some(c)
    })
    .await;
    // The node's own copy, made after its first sync, may call for one more.
    assert!(
        reads <= 1,
        "{reads} template reads in {beats} idle heartbeats"
    );
    store
        .execute_raw("UPDATE cron_table SET command = 'echo changed' WHERE name = 'tpl'")
        .await
        .unwrap();
    eventually(
        Duration::from_secs(15),
        "the change in the copy",
        || async { command("tpl@a").await.filter(|c| c == "echo changed") },
    )
    .await;
    // The line comes after the commit the read above saw: wait for it.
    eventually(
        Duration::from_secs(10),
        "the copy's update logged",
        || async {
            a.log_text()
                .contains("host-local copy updated")
                .then_some(())
        },
    )
    .await;
    let log = a.log_text();
    assert!(a.stop().success(), "{log}");
}

/// A copy whose template differs from an existing template only in case is a copy of a template
/// that is gone (MySQL's default collation ignores case, and once kept such a copy for good);
/// and a row whose template cannot be read as text (a blob written with SQL, on SQLite) is left
/// alone and logged, while the node still syncs its copies.
async fn an_orphan_named_like_a_template_but_for_case_goes_and_an_unreadable_row_stays(
    dialect: Dialect,
) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let store = db.store().await;
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command, run_on) \
             VALUES ('keep', '0 0 1 1 *', 'true', 'every_node')",
        )
        .await
        .unwrap();
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command, template, source) \
             VALUES ('KEEP@gone', '0 0 1 1 *', 'true', 'KEEP', 'copy')",
        )
        .await
        .unwrap();
    if dialect == Dialect::Sqlite {
        store
            .execute_raw(
                "INSERT INTO cron_table (name, schedule, command, template, source) \
                 VALUES ('blob@gone', '0 0 1 1 *', 'true', X'FF00FE', 'copy')",
            )
            .await
            .unwrap();
    }
    let names = || copy_names(&store);
    let a = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", ""));
    // (The unreadable row is counted apart.)
    eventually(
        Duration::from_secs(30),
        "the orphan gone, the copy made",
        || async {
            let mut n = names().await;
            n.retain(|n| n != "blob@gone");
            (n == ["keep@a"]).then_some(())
        },
    )
    .await;
    let log = a.log_text();
    assert!(
        log.contains("host-local copy removed: its job is gone"),
        "{log}"
    );
    if dialect == Dialect::Sqlite {
        assert!(
            log.contains("cron_table row cannot be read; left alone"),
            "{log}"
        );
        let blob = store
            .scalar_i64("SELECT COUNT(*) FROM cron_table WHERE name = 'blob@gone'")
            .await
            .unwrap();
        assert_eq!(blob, Some(1), "the unreadable row is left alone");
    }
    assert!(a.stop().success(), "{log}");
}

/// Issue 25 (14): 33,000 placement values no row uses (values that do not parse, which every
/// node matches) made every peek bind more parameters than the database allows, and the node
/// reported a database outage forever. Now a node filters by at most `MAX_MATCHING` values and
/// keeps running its jobs, and the history pruning removes the values no row uses.
async fn a_flood_of_placement_values_is_bounded_and_pruned(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let jobs = "[history]\nprune_interval = \"2s\"\n\
                [[job]]\nname = \"steady\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
                [[job]]\nname = \"placed\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
                on = { tags = [\"a\"] }\n";
    let _node = DaemonProcess::start(
        dir.path(),
        "n1",
        &node_with_tags(&db.url, "n1", "\"a\"", jobs),
    );
    let flood = match dialect {
        Dialect::Postgres => "INSERT INTO cron_placements (placement) \
             SELECT 'garbage-' || g FROM generate_series(1, 33000) g"
            .to_string(),
        Dialect::Sqlite => "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n \
             WHERE i < 33000) INSERT INTO cron_placements (placement) \
             SELECT 'garbage-' || i FROM n"
            .to_string(),
        Dialect::Mysql => "INSERT INTO cron_placements (placement) \
             SELECT CONCAT('garbage-', seq) FROM seq_1_to_33000"
            .to_string(),
    };
    let runs = |job: &'static str| {
        let store = &store;
        async move {
            store
                .history(Some(job), 1000)
                .await
                .unwrap()
                .iter()
                .filter(|r| r.outcome == "ok")
                .count()
        }
    };
    eventually(Duration::from_secs(30), "both jobs ran", || async {
        (runs("steady").await > 0 && runs("placed").await > 0).then_some(())
    })
    .await;
    store.execute_raw(&flood).await.unwrap();
    let (steady, placed) = (runs("steady").await, runs("placed").await);
    eventually(
        Duration::from_secs(30),
        "jobs run on after the flood, and the unused values are pruned",
        || async {
            let left = store
                .scalar_i64("SELECT COUNT(*) FROM cron_placements")
                .await
                .unwrap()
                .unwrap_or(-1);
            (runs("steady").await >= steady + 2 && runs("placed").await >= placed + 2 && left == 1)
                .then_some(())
        },
    )
    .await;
    store.close().await;
}

/// A placement longer than MySQL/MariaDB keep in `cron_placements` (700 characters; padded
/// with spaces, it parses as a short one): cut there, its value matched no row and no node
/// claimed the job, nor parked it. Now it is refused as it is read, on every database: the row
/// is parked with the reason, whether a node prepares it (`long`, written without `next_exec`)
/// or only claims it (`long_due`, written due, its value cut mid-word on MySQL: that row is
/// `placed = 0` there, migration `mysql/0032`).
async fn an_overlong_placement_written_with_sql_is_parked_with_its_reason(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let store = db.store().await;
    let long = format!(r#"{{"nodes":["b"{}]}}"#, " ".repeat(800));
    let long_due = format!(r#"{{"nodes":["b"],"tags":["{}"]}}"#, "t".repeat(800));
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command, placement) \
             VALUES ('long', '* * * * * *', 'true', '{long}')"
        ))
        .await
        .unwrap();
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command, next_exec, slot, placement) \
             VALUES ('long_due', '* * * * * *', 'true', 1000, 1000, '{long_due}')"
        ))
        .await
        .unwrap();
    let node = DaemonProcess::start(dir.path(), "b", &node_config(&db.url, "b", ""));
    let errors = eventually(Duration::from_secs(40), "both rows parked", || async {
        let errors = store
            .scalars::<Option<String>>(
                "SELECT error FROM cron_table WHERE name IN ('long', 'long_due') ORDER BY name",
            )
            .await
            .unwrap();
        errors.iter().all(Option::is_some).then_some(errors)
    })
    .await;
    for error in errors.into_iter().flatten() {
        assert!(error.contains("longer than 700 characters"), "{error}");
    }
    // Nothing ran.
    let runs = store
        .scalar_i64("SELECT COUNT(*) FROM cron_runs")
        .await
        .unwrap();
    assert_eq!(runs, Some(0));
    // A round of the pruning duty leaves nothing to put back: on MySQL the value cut to 700
    // characters matches no row and goes, and is not written again, cut, at each round.
    store.prune_placements().await.unwrap();
    assert_eq!(store.restore_placements().await.unwrap(), 0);
    let log = node.log_text();
    assert!(node.stop().success(), "{log}");
    store.close().await;
}

/// A row written with SQL, already due, whose placement is not UTF-8 text (SQLite keeps any
/// bytes as text, MariaDB an encoded surrogate): no node can name the value in its claim, so
/// none claimed the row to park it, as it parks a placement that does not parse; it waited
/// unseen. The nodes park it with the reason; the other jobs run.
async fn a_placement_that_is_not_utf8_text_parks_its_row(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let store = db.store().await;
    // And the same bytes with a trailing space: MariaDB's key of the values in use keeps one
    // of the two (its collation pads); the other row is parked too.
    let (garbled, spaced) = match dialect {
        Dialect::Sqlite => ("CAST(X'7BFF7D' AS TEXT)", "CAST(X'7BFF7D20' AS TEXT)"),
        _ => (
            "CAST(X'7BEDA0807D' AS CHAR CHARACTER SET utf8mb4)",
            "CAST(X'7BEDA0807D20' AS CHAR CHARACTER SET utf8mb4)",
        ),
    };
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command, next_exec, slot, placement) \
             VALUES ('garbled', '* * * * * *', 'true', 1000, 1000, {garbled}), \
                    ('garbled2', '* * * * * *', 'true', 1000, 1000, {spaced})"
        ))
        .await
        .unwrap();
    let node = DaemonProcess::start(
        dir.path(),
        "b",
        &node_config(
            &db.url,
            "b",
            "[[job]]\nname = \"plain\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n",
        ),
    );
    let errors = eventually(Duration::from_secs(40), "the rows parked", || async {
        let errors: Vec<String> = store
            .scalars::<Option<String>>(&format!(
                "SELECT error FROM cron_table WHERE name IN ('garbled', 'garbled2') \
                 AND next_exec = {}",
                sqlcron::store::PARKED
            ))
            .await
            .unwrap()
            .into_iter()
            .flatten()
            .collect();
        (errors.len() == 2).then_some(errors)
    })
    .await;
    for error in errors {
        assert!(error.contains("not UTF-8"), "{error}");
    }
    eventually(Duration::from_secs(30), "plain runs", || async {
        (store
            .scalar_i64("SELECT COUNT(*) FROM cron_runs WHERE job_name = 'plain'")
            .await
            .unwrap()
            .unwrap_or(0)
            >= 2)
            .then_some(())
    })
    .await;
    let runs = store
        .scalar_i64("SELECT COUNT(*) FROM cron_runs WHERE job_name LIKE 'garbled%'")
        .await
        .unwrap();
    assert_eq!(runs, Some(0));
    let log = node.log_text();
    // Once for each value in use (SQLite keeps both), not again at each read of the values.
    let values = if dialect == Dialect::Sqlite { 2 } else { 1 };
    assert_eq!(
        log.matches("placement is not UTF-8 text parked").count(),
        values,
        "{log}"
    );
    assert!(node.stop().success(), "{log}");
    store.close().await;
}
