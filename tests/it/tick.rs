//! One pass of the poll loop, called directly: `Daemon::tick` against a real SQLite database.

use std::path::Path;

use sqlcron::config::{Environment, parse};
use sqlcron::daemon::Daemon;
use sqlcron::store::Dialect;
use tokio::task::JoinSet;

use crate::util::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tick_prepares_then_claims_and_runs_a_due_job() {
    let db = TestDb::new(Dialect::Sqlite).await;
    let store = db.store().await;
    let text = format!(
        "[database]\nurl = \"{}\"\n[node]\nname = \"t\"\n[daemon]\n{}\n[[job]]\nname = \"once\"\nschedule = \"0 0 1 1 *\"\ncommand = \"echo ticked\"\n",
        db.url,
        crate::util::default_user()
    );
    let config = parse(&text, Path::new("t.toml"), &Environment::default()).unwrap();
    let daemon = Daemon::new(store.clone(), config);
    daemon.apply_config().await.unwrap();
    let mut tasks = JoinSet::new();

    let first = daemon.tick(&mut tasks).await.unwrap();
    assert_eq!((first.prepared, first.claimed), (1, 0));
    let second = daemon.tick(&mut tasks).await.unwrap();
    assert_eq!(second.claimed, 0, "not due until next New Year");
    assert_eq!(second.next_job.as_deref(), Some("once"));

    let now = store.now().await.unwrap();
    store
        .execute_raw(&format!(
            "UPDATE cron_table SET slot = {now}, next_exec = {now}"
        ))
        .await
        .unwrap();
    let third = daemon.tick(&mut tasks).await.unwrap();
    assert_eq!(third.claimed, 1);
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let history = store.history(Some("once"), 10).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].outcome, "ok");
    assert_eq!(history[0].output.as_deref(), Some("ticked\n"));
    let row = store.job("once").await.unwrap().unwrap();
    assert!(row.exec_by.is_none());
    assert!(row.slot.unwrap() > now, "released to its next slot");
}
