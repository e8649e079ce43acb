//! The connections a store and a daemon hold: what a quiet node gives back, and connections to
//! a server that said it takes no writes or has left its cluster, which are not used again
//! (src/store/connect.rs, src/daemon/pool_trim.rs, docs/fleet.md).

use std::time::Duration;

use sqlcron::store::{Dialect, Store};

use crate::util::{DaemonProcess, TestDb, db_url, default_user, eventually};

/// This connection's id on the server.
fn id_sql(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => "SELECT CAST(pg_backend_pid() AS BIGINT)",
        _ => "SELECT CAST(CONNECTION_ID() AS SIGNED)",
    }
}

/// Connections open to `db`, counted through a connection of its own (not counted).
async fn server_connections(db: &TestDb) -> i64 {
    let sql = match db.dialect {
        Dialect::Postgres => format!(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = '{}' AND pid <> pg_backend_pid()",
            db.name
        ),
        _ => format!(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = '{}' \
             AND ID <> CONNECTION_ID()",
            db.name
        ),
    };
    let counter = Store::connect(&db_url(&db.url), 1).unwrap();
    let n = counter.scalar_i64(&sql).await.unwrap().unwrap_or(0);
    counter.close().await;
    n
}

/// A server's answer that it has left its cluster (a Galera node cut off; PostgreSQL shutting
/// down) or takes no writes, as an error raised by a statement.
fn says(dialect: Dialect, what: &str) -> String {
    match (dialect, what) {
        (Dialect::Postgres, "left") => "DO $$ BEGIN RAISE EXCEPTION 'terminating connection due \
             to administrator command' USING ERRCODE = '57P01'; END $$"
            .into(),
        (Dialect::Postgres, _) => "DO $$ BEGIN RAISE EXCEPTION 'cannot execute UPDATE in a \
             read-only transaction' USING ERRCODE = '25006'; END $$"
            .into(),
        (_, "left") => "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'WSREP has not yet prepared \
             node for application use'"
            .into(),
        _ => "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'The MariaDB server is running with the \
             --read-only option so it cannot execute this statement'"
            .into(),
    }
}

async fn a_server_that_left_its_cluster_is_not_asked_again_on_the_same_connection(
    dialect: Dialect,
) {
    let db = TestDb::new(dialect).await;
    let store = Store::connect(&db_url(&db.url), 1).unwrap();
    let id = || async { store.scalar_i64(id_sql(dialect)).await.unwrap().unwrap() };
    let first = id().await;
    assert_eq!(id().await, first, "a pool of one keeps its connection");
    // An error about the statement says nothing about the connection: it is kept.
    let e = store
        .execute_raw("SELECT * FROM no_such_table")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "refused", "{e}");
    assert_eq!(
        id().await,
        first,
        "a refused statement's connection is kept"
    );
    // The server says it has left its cluster: its connection is not used again.
    let e = store.execute_raw(&says(dialect, "left")).await.unwrap_err();
    assert_eq!(e.kind(), "unreachable", "{e}");
    let second = id().await;
    assert_ne!(
        second, first,
        "the connection to a server that left its cluster was used again"
    );
    assert_eq!(id().await, second, "the new connection is kept");
    // Or that it takes no writes (on a pool of its own: a second mark within 30 s is not
    // taken, so that a server that stays so is not reconnected to with every statement).
    store.close().await;
    let store = Store::connect(&db_url(&db.url), 1).unwrap();
    let first = store.scalar_i64(id_sql(dialect)).await.unwrap().unwrap();
    let e = store
        .execute_raw(&says(dialect, "read-only"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "read-only", "{e}");
    let second = store.scalar_i64(id_sql(dialect)).await.unwrap().unwrap();
    assert_ne!(
        second, first,
        "the connection to a read-only server was used again"
    );
    // Within 30 s of that, the next such answer keeps the new connection.
    let _ = store.execute_raw(&says(dialect, "left")).await.unwrap_err();
    let third = store.scalar_i64(id_sql(dialect)).await.unwrap().unwrap();
    if dialect == Dialect::Mysql {
        assert_eq!(third, second, "a second mark within 30 s was taken");
    }
    store.close().await;
}

/// `Store::trim_idle` closes idle connections beyond the number kept, never one in use.
async fn trimming_closes_idle_connections_only(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = Store::connect(&db_url(&db.url), 4).unwrap();
    if dialect == Dialect::Sqlite {
        store.scalar_i64("SELECT 1").await.unwrap();
        // The connections the pool holds (idle or not: the statement's connection comes back
        // to the pool a moment after its answer, so the idle count may move meanwhile).
        let before = store.pool_size().0;
        assert_eq!(store.trim_idle(0).await, 0, "SQLite's connections are kept");
        assert_eq!(store.pool_size().0, before);
        return;
    }
    let sleep = match dialect {
        Dialect::Postgres => "SELECT pg_sleep(0.3)",
        _ => "SELECT SLEEP(0.3)",
    };
    // Four statements at once: four connections.
    let (a, b, c, d) = tokio::join!(
        store.execute_raw(sleep),
        store.execute_raw(sleep),
        store.execute_raw(sleep),
        store.execute_raw(sleep)
    );
    for r in [a, b, c, d] {
        r.unwrap();
    }
    // (A connection goes back to the pool a moment after its statement's answer.)
    eventually(Duration::from_secs(5), "four idle connections", || async {
        (store.pool_size() == (4, 4)).then_some(())
    })
    .await;
    assert_eq!(server_connections(&db).await, 4);
    assert_eq!(store.trim_idle(2).await, 2);
    assert_eq!(store.pool_size().0, 2);
    eventually(
        Duration::from_secs(10),
        "two connections on the server",
        || async { (server_connections(&db).await == 2).then_some(()) },
    )
    .await;
    // One of the two in use: only the idle one goes.
    let long = match dialect {
        Dialect::Postgres => "SELECT pg_sleep(1.5)",
        _ => "SELECT SLEEP(1.5)",
    };
    let busy = {
        let store = store.clone();
        tokio::spawn(async move { store.execute_raw(long).await })
    };
    eventually(Duration::from_secs(5), "a connection in use", || async {
        (store.pool_size().1 == 1).then_some(())
    })
    .await;
    assert_eq!(
        store.trim_idle(0).await,
        1,
        "only the idle connection is closed"
    );
    busy.await
        .unwrap()
        .expect("the statement in use ran to its end");
    eventually(
        Duration::from_secs(5),
        "the one in use back in the pool",
        || async { (store.pool_size() == (1, 1)).then_some(()) },
    )
    .await;
    store.close().await;
}

/// A quiet node's statements in a row share one connection: each waits for the one before
/// to come back to the pool (a round trip later) instead of opening another.
async fn a_quiet_store_sends_statements_in_a_row_on_one_connection(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = Store::connect(&db_url(&db.url), 4).unwrap();
    store.set_quiet(true);
    // Which connection each of 100 statements in a row ran on. Without the wait they take
    // turns on two; a ping slower than the wait (a loaded machine) may still open a second.
    let mut on: std::collections::HashMap<i64, usize> = Default::default();
    for _ in 0..100 {
        let id = store.scalar_i64(id_sql(dialect)).await.unwrap().unwrap();
        *on.entry(id).or_default() += 1;
    }
    let most = on.values().copied().max().unwrap_or(0);
    assert!(most >= 95, "statements in a row by connection: {on:?}");
    // Two at once still take two: a connection in use is not waited for past a moment.
    let sleep = match dialect {
        Dialect::Postgres => "SELECT pg_sleep(0.3)",
        _ => "SELECT SLEEP(0.3)",
    };
    let (a, b) = tokio::join!(store.execute_raw(sleep), store.execute_raw(sleep));
    a.unwrap();
    b.unwrap();
    assert_eq!(store.pool_size().0, 2);
    store.close().await;
}

/// A daemon whose runs were extended, once it has held no run for half a minute, keeps one
/// pooled connection, the lease extension's one and, on PostgreSQL, its LISTEN: its start
/// opened two pooled ones at once (the node-name check), which it gives back. After thirty
/// leases without a run it gives back the lease extension's connection too, and opens it again
/// before its next claim, whose run is extended as before.
async fn a_quiet_node_keeps_one_pooled_connection(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[database]\nurl = \"{}\"\npool_size = 4\n[node]\nname = \"quiet\"\n[daemon]\n{}\n\
         poll_interval = \"500ms\"\nlease = \"2s\"\nshutdown_grace = \"5s\"\n",
        db.url,
        default_user()
    );
    let node = DaemonProcess::start(dir.path(), "quiet", &config);
    let store = db.store().await;
    eventually(Duration::from_secs(20), "the node registered", || async {
        (!store.nodes().await.unwrap().is_empty()).then_some(())
    })
    .await;
    // Runs at once, each longer than a lease extension's interval (0.67 s).
    let due_now = |store: Store, names: Vec<String>| async move {
        let now = store.now().await.unwrap();
        let at = chrono::DateTime::from_timestamp_millis(now)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        for name in names {
            store
                .execute_raw(&format!(
                    "INSERT INTO cron_table (name, schedule, command) \
                     VALUES ('{name}', '@at {at}', 'sleep 2')"
                ))
                .await
                .unwrap();
        }
    };
    let ended = |store: Store, n: usize| async move {
        let runs = store.history(None, 10).await.unwrap();
        (runs.iter().filter(|r| r.ended.is_some()).count() == n).then_some(runs)
    };
    due_now(store.clone(), (0..4).map(|i| format!("busy{i}")).collect()).await;
    eventually(Duration::from_secs(30), "four runs ended", || {
        ended(store.clone(), 4)
    })
    .await;
    // The test's own connections are not counted.
    store.close().await;
    // One pooled, the lease extension's (kept for now), and the LISTEN.
    let listen = i64::from(dialect == Dialect::Postgres);
    eventually(
        Duration::from_secs(50),
        &format!("{} connections of a quiet node", 2 + listen),
        || async { (server_connections(&db).await == 2 + listen).then_some(()) },
    )
    .await;
    assert!(
        node.log_text().contains("idle pooled connections closed"),
        "the node gave back what its start and its runs opened"
    );
    // Thirty leases (60 s) after the last run: the lease extension's goes back.
    eventually(
        Duration::from_secs(90),
        &format!(
            "{} connections of a node quiet for thirty leases",
            1 + listen
        ),
        || async { (server_connections(&db).await == 1 + listen).then_some(()) },
    )
    .await;
    assert!(
        node.log_text()
            .contains("its lease extension's connection goes back"),
        "{}",
        node.log_text()
    );
    let store = db.store().await;
    due_now(store.clone(), vec!["later".into()]).await;
    let runs = eventually(Duration::from_secs(30), "the later run ended", || {
        ended(store.clone(), 5)
    })
    .await;
    let log = node.log_text();
    node.stop();
    let later: Vec<_> = runs.iter().filter(|r| r.job == "later").collect();
    assert_eq!(later.len(), 1, "{runs:?}");
    assert_eq!(
        later[0].outcome, "ok",
        "extended past its claim's trust window:\n{log}"
    );
    assert_eq!(
        log.matches("the lease extension's connection opened before a claim")
            .count(),
        2,
        "opened before the first claim and again after the give-back:\n{log}"
    );
}

mod postgres {
    use sqlcron::store::Dialect::Postgres;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_quiet_node_keeps_one_pooled_connection() {
        super::a_quiet_node_keeps_one_pooled_connection(Postgres).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_quiet_store_sends_statements_in_a_row_on_one_connection() {
        super::a_quiet_store_sends_statements_in_a_row_on_one_connection(Postgres).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_that_left_its_cluster_is_not_asked_again_on_the_same_connection() {
        super::a_server_that_left_its_cluster_is_not_asked_again_on_the_same_connection(Postgres)
            .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn trimming_closes_idle_connections_only() {
        super::trimming_closes_idle_connections_only(Postgres).await
    }
}

mod mysql {
    use sqlcron::store::Dialect::Mysql;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_quiet_node_keeps_one_pooled_connection() {
        super::a_quiet_node_keeps_one_pooled_connection(Mysql).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_quiet_store_sends_statements_in_a_row_on_one_connection() {
        super::a_quiet_store_sends_statements_in_a_row_on_one_connection(Mysql).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_that_left_its_cluster_is_not_asked_again_on_the_same_connection() {
        super::a_server_that_left_its_cluster_is_not_asked_again_on_the_same_connection(Mysql).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn trimming_closes_idle_connections_only() {
        super::trimming_closes_idle_connections_only(Mysql).await
    }
}

mod sqlite {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn trimming_closes_idle_connections_only() {
        super::trimming_closes_idle_connections_only(sqlcron::store::Dialect::Sqlite).await
    }
}
