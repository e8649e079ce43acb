//! The pruning duty's tidying of `cron_placements` against writers of `cron_table`: a value a
//! row is being written with (its transaction still open) is never deleted, and the round does
//! not wait for that writer; values no row uses are deleted.

use std::time::Duration;

use sqlcron::store::{Dialect, Store};
use sqlx::{Connection, Executor};

use crate::util::TestDb;

for_each_dialect!(
    a_value_a_row_is_being_written_with_is_not_pruned,
    values_no_row_uses_are_pruned_and_values_in_use_put_back,
);

// SQLite has one writer at a time: no round runs beside an open writer there.
mod postgres_paging {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn values_past_a_batch_a_writer_holds_are_pruned() {
        super::values_past_a_batch_a_writer_holds_are_pruned(sqlcron::store::Dialect::Postgres)
            .await
    }
}

mod mysql_paging {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn values_past_a_batch_a_writer_holds_are_pruned() {
        super::values_past_a_batch_a_writer_holds_are_pruned(sqlcron::store::Dialect::Mysql).await
    }
}

const VALUE: &str = r#"{"nodes":["b"]}"#;

fn insert(name: &str, placement: &str) -> String {
    format!(
        "INSERT INTO cron_table (name, schedule, command, next_exec, slot, placement) \
         VALUES ('{name}', '0 0 1 1 *', 'true', 0, 0, '{placement}')"
    )
}

/// A round of the pruning duty's tidying: (deleted, restored).
async fn tidy(store: &Store) -> Result<(u64, u64), sqlcron::store::StoreError> {
    let restored = store.restore_placements().await?;
    Ok((store.prune_placements().await?, restored))
}

async fn values(store: &Store) -> Vec<String> {
    store
        .scalars::<String>("SELECT placement FROM cron_placements ORDER BY placement")
        .await
        .unwrap()
}

/// A value an earlier row used (no row uses it now, so the round's first read finds it unused)
/// and a writer inserting a row with it, not yet committed, as the round runs. The single
/// `DELETE ... WHERE NOT EXISTS` of before deleted it on PostgreSQL (the trigger's
/// `ON CONFLICT DO NOTHING` locked nothing), and on MySQL/MariaDB waited for the writer and
/// deleted it then: the job was placed on a value no node knew until the next round.
async fn a_value_a_row_is_being_written_with_is_not_pruned(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    store.execute_raw(&insert("old", VALUE)).await.unwrap();
    store
        .execute_raw("DELETE FROM cron_table WHERE name = 'old'")
        .await
        .unwrap();
    assert_eq!(values(&store).await, [VALUE]);

    sqlx::any::install_default_drivers();
    let mut writer = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    let mut tx = writer.begin().await.unwrap();
    tx.execute(sqlx::AssertSqlSafe(insert("new", VALUE)))
        .await
        .unwrap();

    let round = tokio::time::timeout(Duration::from_secs(30), tidy(&store))
        .await
        .expect("the round waited for the writer");
    match (dialect, round) {
        (_, Ok((deleted, _))) => assert_eq!(deleted, 0, "the value in use was deleted"),
        // SQLite has one writer at a time: the round waits for the open transaction up to
        // `busy_timeout` and gives up, deleting nothing.
        (Dialect::Sqlite, Err(e)) => assert!(e.to_string().contains("locked"), "{e}"),
        (_, Err(e)) => panic!("the round failed: {e}"),
    }
    // Writers of rows with the same value do not wait for each other (the lock is shared).
    if dialect != Dialect::Sqlite {
        tokio::time::timeout(
            Duration::from_secs(20),
            store.execute_raw(&insert("beside", VALUE)),
        )
        .await
        .expect("a writer waited for another writer of the same value")
        .unwrap();
    }
    tx.commit().await.unwrap();
    assert_eq!(
        values(&store).await,
        [VALUE],
        "the row committed with a value that is gone"
    );

    // Once the rows are gone, the value goes at the next round.
    store
        .execute_raw("DELETE FROM cron_table WHERE name IN ('new', 'beside')")
        .await
        .unwrap();
    assert_eq!(tidy(&store).await.unwrap(), (1, 0));
    assert!(values(&store).await.is_empty());
    writer.close().await.unwrap();
}

/// More unused values than one batch, a value in use kept, and a value in use that went
/// missing put back.
async fn values_no_row_uses_are_pruned_and_values_in_use_put_back(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let junk: Vec<String> = (0..1_200)
        .map(|i| format!(r#"('{{"nodes":["n{i}"]}}')"#))
        .collect();
    store
        .execute_raw(&format!(
            "INSERT INTO cron_placements (placement) VALUES {}",
            junk.join(", ")
        ))
        .await
        .unwrap();
    store.execute_raw(&insert("kept", VALUE)).await.unwrap();
    let missing = r#"{"tags":["gpu"]}"#;
    store
        .execute_raw(&insert("restored", missing))
        .await
        .unwrap();
    store
        .execute_raw(&format!(
            "DELETE FROM cron_placements WHERE placement = '{missing}'"
        ))
        .await
        .unwrap();

    assert_eq!(tidy(&store).await.unwrap(), (1_200, 1));
    assert_eq!(values(&store).await, [VALUE, missing]);
}

/// A whole batch of values (the 500 that sort first) is held by an open writer whose rows use
/// them: the round skips them and goes on to the unused values after them.
async fn values_past_a_batch_a_writer_holds_are_pruned(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let value = |prefix: &str, i: usize| format!(r#"{{"nodes":["{prefix}{i:03}"]}}"#);
    let held: Vec<String> = (0..500).map(|i| value("a", i)).collect();
    let unused: Vec<String> = (0..100).map(|i| value("b", i)).collect();
    store
        .execute_raw(&format!(
            "INSERT INTO cron_placements (placement) VALUES {}",
            held.iter()
                .chain(&unused)
                .map(|v| format!("('{v}')"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .await
        .unwrap();
    sqlx::any::install_default_drivers();
    let mut writer = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    let mut tx = writer.begin().await.unwrap();
    let rows: Vec<String> = held
        .iter()
        .enumerate()
        .map(|(i, v)| format!("('h{i}', '0 0 1 1 *', 'true', 0, 0, '{v}')"))
        .collect();
    tx.execute(sqlx::AssertSqlSafe(format!(
        "INSERT INTO cron_table (name, schedule, command, next_exec, slot, placement) VALUES {}",
        rows.join(", ")
    )))
    .await
    .unwrap();
    let round = tokio::time::timeout(Duration::from_secs(30), tidy(&store))
        .await
        .expect("the round waited for the writer")
        .unwrap();
    assert_eq!(round, (100, 0));
    tx.commit().await.unwrap();
    assert_eq!(values(&store).await, held);
    writer.close().await.unwrap();
}
