//! A job's placement changed by a writer as a node claims it. On MySQL/MariaDB the claim and the
//! read of the claimed rows are two statements, and a writer may move the job to another node
//! between them: the node then holds a row whose placement, as it reads it, excludes it. It hands
//! the row over unrun, and the node the placement names runs it. A trigger of the test stands for
//! the writer, moving the job within the claim's own statement (on PostgreSQL too, whose
//! `RETURNING` then hands the node the moved row). SQLite claims and reads in one statement with
//! one writer at a time: the race cannot happen there.

use std::time::Duration;

use sqlcron::store::Dialect;

use crate::util::{DaemonProcess, RunLog, TestDb, count_lines, eventually, node_config};

for_each_server!(
    a_job_placed_elsewhere_as_it_is_claimed_is_handed_over_unrun,
    a_hand_over_refused_by_the_database_leaves_the_row_to_its_lease,
);

async fn a_job_placed_elsewhere_as_it_is_claimed_is_handed_over_unrun(dialect: Dialect) {
    let (db, dir, runs, store) = moving_job(dialect).await;
    let a = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", ""));
    eventually(Duration::from_secs(40), "a's hand-over", || async {
        a.log_text()
            .contains("a claimed row's placement excludes this node")
            .then_some(())
    })
    .await;
    // `a` goes on with the job any node runs, and never runs the moved one.
    let base = runs.count("any a");
    eventually(Duration::from_secs(30), "two more runs on a", || async {
        (runs.count("any a") >= base + 2).then_some(())
    })
    .await;
    let text = runs.text();
    assert_eq!(count_lines(&text, "moved a"), 0, "{text}");
    assert_eq!(
        store
            .scalar_i64("SELECT COUNT(*) FROM cron_runs WHERE job_name = 'moved'")
            .await
            .unwrap(),
        Some(0),
        "a run of the moved job was recorded"
    );

    // The node the placement names takes it over and runs it.
    b_runs_it_a_never_did(&db, dir.path(), &runs, a).await;
    store.close().await;
}

/// A database with `moved`, placed on `a`, and `any`, run by any node, each second, each
/// writing its name and node to the run log (in the directory returned), and `mover` in place.
async fn moving_job(
    dialect: Dialect,
) -> (TestDb, tempfile::TempDir, RunLog, sqlcron::store::Store) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let runs = RunLog::in_dir(dir.path());
    let store = db.store().await;
    let line = format!("echo $SQLCRON_JOB $SQLCRON_NODE >> {}", runs.0.display());
    // `keeps`, disabled, keeps b's placement value in use: the change of the placement by the
    // test's trigger (`mover`) is no `UPDATE OF placement`, which adds the value on PostgreSQL.
    store
        .execute_raw(&format!(
            r#"INSERT INTO cron_table (name, schedule, command, placement, enabled) VALUES
               ('moved', '* * * * * *', '{line}', '{{"nodes":["a"]}}', 1),
               ('any', '* * * * * *', '{line}', NULL, 1),
               ('keeps', '* * * * * *', 'true', '{{"nodes":["b"]}}', 0)"#
        ))
        .await
        .unwrap();
    for sql in mover(dialect) {
        store.execute_raw(sql).await.unwrap();
    }
    (db, dir, runs, store)
}

/// The writer: the claim of `moved` (its holder set) moves it to `b` in the same statement.
fn mover(dialect: Dialect) -> &'static [&'static str] {
    match dialect {
        Dialect::Postgres => &[
            r#"CREATE FUNCTION test_move() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN
                   IF NEW.name = 'moved' AND NEW.exec_by IS NOT NULL AND OLD.exec_by IS NULL THEN
                       NEW.placement := '{"nodes":["b"]}';
                   END IF;
                   RETURN NEW;
               END $$"#,
            "CREATE TRIGGER test_move BEFORE UPDATE ON cron_table FOR EACH ROW \
             EXECUTE FUNCTION test_move()",
        ],
        Dialect::Mysql => &[
            r#"CREATE TRIGGER test_move BEFORE UPDATE ON cron_table FOR EACH ROW
               BEGIN
                   IF NEW.name = 'moved' AND NEW.exec_by IS NOT NULL AND OLD.exec_by IS NULL THEN
                       SET NEW.placement = '{"nodes":["b"]}';
                   END IF;
               END"#,
        ],
        Dialect::Sqlite => unreachable!("the race needs two statements"),
    }
}

/// The hand-over itself fails (a trigger of the test refuses it, as a database error would):
/// the node does not run the row and does not extend its lease (it supervises no run of it), so
/// the lease runs out and the node the placement names takes it over.
async fn a_hand_over_refused_by_the_database_leaves_the_row_to_its_lease(dialect: Dialect) {
    let (db, dir, runs, store) = moving_job(dialect).await;
    // The hand-over: `a`'s update that keeps the token and sets the due time to the end of the
    // lease (`next_exec = lease_until = now`); `a` extends no lease of a row it does not run.
    let refuse: &[&str] = match dialect {
        Dialect::Postgres => &[
            "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'hand-over refused by the test'; END $$",
            "CREATE TRIGGER test_refuse BEFORE UPDATE ON cron_table FOR EACH ROW \
             WHEN (NEW.name = 'moved' AND NEW.exec_by = 'a' AND NEW.token = OLD.token \
                   AND NEW.next_exec = NEW.lease_until) \
             EXECUTE FUNCTION test_refuse()",
        ],
        _ => &[
            "CREATE TRIGGER test_refuse BEFORE UPDATE ON cron_table FOR EACH ROW \
             BEGIN IF NEW.name = 'moved' AND NEW.exec_by = 'a' AND NEW.token = OLD.token \
                   AND NEW.next_exec = NEW.lease_until THEN \
             SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'hand-over refused by the test'; END IF; END",
        ],
    };
    for sql in refuse {
        store.execute_raw(sql).await.unwrap();
    }
    let a = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", ""));
    eventually(Duration::from_secs(40), "a's failed hand-over", || async {
        a.log_text()
            .contains("could not hand the row over; its lease will run out")
            .then_some(())
    })
    .await;
    b_runs_it_a_never_did(&db, dir.path(), &runs, a).await;
    store.close().await;
}

/// Starts `b`, waits for its run of `moved` (after `a`'s lease at most), stops both, and checks
/// that `a` never ran it.
async fn b_runs_it_a_never_did(
    db: &TestDb,
    dir: &std::path::Path,
    runs: &RunLog,
    a: DaemonProcess,
) {
    let b = DaemonProcess::start(dir, "b", &node_config(&db.url, "b", ""));
    eventually(
        Duration::from_secs(60),
        "the moved job's run on b",
        || async { (runs.count("moved b") >= 1).then_some(()) },
    )
    .await;
    for d in [a, b] {
        let log = d.log_text();
        assert!(d.stop().success(), "{log}");
    }
    let text = runs.text();
    assert_eq!(count_lines(&text, "moved a"), 0, "{text}");
}
