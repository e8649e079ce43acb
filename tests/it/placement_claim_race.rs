//! A job's placement changed by a writer as a node claims it. On MySQL/MariaDB the claim and the
//! read of the claimed rows are two statements, and a writer may move the job to another node
//! between them: the node then holds a row whose placement, as it reads it, excludes it. It hands
//! the row over unrun, and the node the placement names runs it. A trigger of the test stands for
//! the writer, moving the job within the claim's own statement (on PostgreSQL too, whose
//! `RETURNING` then hands the node the moved row). SQLite claims and reads in one statement with
//! one writer at a time: the race cannot happen there.

use std::time::Duration;

use sqlcron::store::Dialect;

use crate::util::{DaemonProcess, TestDb, eventually, node_config};

mod postgres {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_placed_elsewhere_as_it_is_claimed_is_handed_over_unrun() {
        super::a_job_placed_elsewhere_as_it_is_claimed_is_handed_over_unrun(
            sqlcron::store::Dialect::Postgres,
        )
        .await
    }
}

mod mysql {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_placed_elsewhere_as_it_is_claimed_is_handed_over_unrun() {
        super::a_job_placed_elsewhere_as_it_is_claimed_is_handed_over_unrun(
            sqlcron::store::Dialect::Mysql,
        )
        .await
    }
}

async fn a_job_placed_elsewhere_as_it_is_claimed_is_handed_over_unrun(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs.txt");
    let store = db.store().await;
    let line = format!("echo $SQLCRON_JOB $SQLCRON_NODE >> {}", out.display());
    // `keeps`, disabled, keeps b's placement value in use: the trigger's change of the placement
    // below is no `UPDATE OF placement`, which adds the value on PostgreSQL.
    store
        .execute_raw(&format!(
            r#"INSERT INTO cron_table (name, schedule, command, placement, enabled) VALUES
               ('moved', '* * * * * *', '{line}', '{{"nodes":["a"]}}', 1),
               ('any', '* * * * * *', '{line}', NULL, 1),
               ('keeps', '* * * * * *', 'true', '{{"nodes":["b"]}}', 0)"#
        ))
        .await
        .unwrap();
    // The writer: the claim of `moved` (its holder set) moves it to `b` in the same statement.
    let writer: &[&str] = match dialect {
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
    };
    for sql in writer {
        store.execute_raw(sql).await.unwrap();
    }
    let read = || std::fs::read_to_string(&out).unwrap_or_default();
    let count = |text: &str, what: &str| text.lines().filter(|l| *l == what).count();

    let a = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", ""));
    eventually(Duration::from_secs(40), "a's hand-over", || async {
        a.log_text()
            .contains("a claimed row's placement excludes this node")
            .then_some(())
    })
    .await;
    // `a` goes on with the job any node runs, and never runs the moved one.
    eventually(Duration::from_secs(30), "two more runs on a", || async {
        (count(&read(), "any a") >= 2).then_some(())
    })
    .await;
    let text = read();
    assert_eq!(count(&text, "moved a"), 0, "{text}");
    assert_eq!(
        store
            .scalar_i64("SELECT COUNT(*) FROM cron_runs WHERE job_name = 'moved'")
            .await
            .unwrap(),
        Some(0),
        "a run of the moved job was recorded"
    );

    // The node the placement names takes it over and runs it.
    let b = DaemonProcess::start(dir.path(), "b", &node_config(&db.url, "b", ""));
    eventually(
        Duration::from_secs(40),
        "the moved job's run on b",
        || async { (count(&read(), "moved b") >= 1).then_some(()) },
    )
    .await;
    for d in [a, b] {
        let log = d.log_text();
        assert!(d.stop().success(), "{log}");
    }
    assert_eq!(count(&read(), "moved a"), 0, "{}", read());
    store.close().await;
}
