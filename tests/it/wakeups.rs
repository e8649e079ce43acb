//! Wake-ups: with a 30 s poll interval, a change still starts a job at once (PostgreSQL
//! LISTEN/NOTIFY, SQLite inotify), and a killed LISTEN connection is replaced.

use std::time::Duration;

use sqlcron::store::{Dialect, Store};

use crate::util::{DaemonProcess, TestDb, default_user, eventually, sqlcron, stderr};

/// A node that polls only every 30 s.
fn slow_poll_config(url: &str, name: &str, jobs: &str) -> String {
    format!(
        "[database]\nurl = \"{url}\"\n[node]\nname = \"{name}\"\n[daemon]\n{}\n\
         poll_interval = \"30s\"\nlease = \"40s\"\nshutdown_grace = \"5s\"\n{jobs}\n",
        default_user()
    )
}

/// Inserts a one-off job due now (database clock) with SQL and returns how long after the
/// insert its run started, in ms of the database clock.
async fn insert_and_time_start(store: &Store, name: &str) -> i64 {
    let now = store.now().await.unwrap();
    let at = chrono::DateTime::from_timestamp_millis(now)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('{name}', '@at {at}', 'true')"
        ))
        .await
        .unwrap();
    let started = eventually(Duration::from_secs(20), "the run's start", || async {
        store
            .history(Some(name), 5)
            .await
            .unwrap()
            .into_iter()
            .find_map(|r| r.started)
    })
    .await;
    started - now
}

async fn a_change_starts_a_job_at_once_with_a_30s_poll(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let jobs = "[[job]]\nname = \"manual\"\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n";
    let a = DaemonProcess::start(dir.path(), "a", &slow_poll_config(&db.url, "a", jobs));
    let store = db.store().await;
    eventually(Duration::from_secs(20), "wake-ups on", || async {
        a.log_text().contains("wake-ups on").then_some(())
    })
    .await;
    // The start's first look is over: from here on only a wake-up is faster than 30 s.
    let took = insert_and_time_start(&store, "inserted").await;
    assert!(
        took < 1000,
        "an inserted job started {took} ms after the insert"
    );

    // `sqlcron run` wakes the node too.
    let cli = dir.path().join("cli.toml");
    std::fs::write(&cli, slow_poll_config(&db.url, "cli", "")).unwrap();
    let before = store.now().await.unwrap();
    let out = sqlcron(&["--config", cli.to_str().unwrap(), "run", "manual"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let started = eventually(Duration::from_secs(20), "the manual run", || async {
        store
            .history(Some("manual"), 5)
            .await
            .unwrap()
            .into_iter()
            .find_map(|r| r.started)
    })
    .await;
    assert!(
        started - before < 1000,
        "sqlcron run started {} ms later",
        started - before
    );

    if dialect == Dialect::Postgres {
        // The LISTEN connection is killed: the node listens again and stays fast.
        let killed: i64 = sqlx::query_scalar(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = 'sqlcron-wake a' AND datname = current_database()",
        )
        .fetch_one(&sqlx::PgPool::connect(&db.url).await.unwrap())
        .await
        .unwrap();
        assert_eq!(killed, 1, "one LISTEN connection");
        eventually(Duration::from_secs(20), "wake-ups on again", || async {
            (a.log_text().matches("wake-ups on").count() >= 2).then_some(())
        })
        .await;
        let took = insert_and_time_start(&store, "after-kill").await;
        assert!(
            took < 1000,
            "after the reconnect a job started {took} ms later"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_change_starts_a_job_at_once_with_a_30s_poll() {
    a_change_starts_a_job_at_once_with_a_30s_poll(Dialect::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_change_starts_a_job_at_once_with_a_30s_poll() {
    a_change_starts_a_job_at_once_with_a_30s_poll(Dialect::Postgres).await
}
