//! The peek, an idle node's one look at the table each poll: what it finds among a fleet's
//! placed rows, (MySQL/MariaDB, where idle nodes poll) how few rows it reads for it, and the
//! count of the live nodes it takes only when asked.

use sqlcron::store::{Dialect, Store};

use crate::util::TestDb;

for_each_dialect!(
    the_peek_finds_the_earliest_row_the_node_may_run_among_other_nodes_rows,
    the_peek_counts_the_live_nodes_only_when_asked,
);

mod mysql_reads {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_peek_reads_no_row_of_another_node() {
        super::the_peek_reads_no_row_of_another_node().await
    }
}

const OTHERS: usize = 200;

fn mine() -> String {
    r#"{"nodes":["me"]}"#.to_string()
}

/// `OTHERS` rows each placed on another node, due at `at` (before anything of this node's, as
/// each node's copy of an `every_node` job is), one row any node may run due at `cluster_at`,
/// and this node's own row due at `own_at`, named with a space and a non-ASCII letter.
async fn fleet_rows(store: &Store, at: i64, cluster_at: i64, own_at: i64) {
    let row = |name: &str, due: i64, placement: Option<&str>| {
        format!(
            "('{name}', '0 0 1 1 *', 'true', {due}, {due}, {})",
            placement.map_or("NULL".to_string(), |p| format!("'{p}'"))
        )
    };
    let mut values: Vec<String> = (0..OTHERS)
        .map(|i| {
            row(
                &format!("copy@o{i}"),
                at,
                Some(&format!(r#"{{"nodes":["o{i}"]}}"#)),
            )
        })
        .collect();
    values.push(row("cluster", cluster_at, None));
    values.push(row("mine — backup", own_at, Some(&mine())));
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command, next_exec, slot, placement) VALUES {}",
            values.join(", ")
        ))
        .await
        .unwrap();
}

async fn set_due(store: &Store, name: &str, at: i64) {
    store
        .execute_raw(&format!(
            "UPDATE cron_table SET next_exec = {at}, slot = {at} WHERE name = '{name}'"
        ))
        .await
        .unwrap();
}

async fn the_peek_finds_the_earliest_row_the_node_may_run_among_other_nodes_rows(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let now = store.now().await.unwrap();
    let (soon, cluster_at, own_at) = (now + 1_000, now + 300_000, now + 200_000);
    fleet_rows(&store, soon, cluster_at, own_at).await;
    let placements = [mine()];
    let due = |peek: sqlcron::store::Peek| (peek.next_due, peek.next_name);

    // Its own row comes first, whatever the other nodes' rows before it.
    let peek = store.peek("me", &placements, false).await.unwrap();
    assert_eq!(due(peek), (Some(own_at), Some("mine — backup".into())));
    // Then the row any node may run, once its own is later.
    set_due(&store, "mine — backup", now + 400_000).await;
    let peek = store.peek("me", &placements, false).await.unwrap();
    assert_eq!(due(peek), (Some(cluster_at), Some("cluster".into())));
    // A node that matches no placement value sees only that row.
    let peek = store.peek("me", &[], false).await.unwrap();
    assert_eq!(due(peek), (Some(cluster_at), Some("cluster".into())));
    // A row written with SQL due long ago (a negative time) is due, and named.
    set_due(&store, "cluster", -5).await;
    let peek = store.peek("me", &placements, false).await.unwrap();
    assert_eq!(due(peek), (Some(-5), Some("cluster".into())));
    set_due(&store, "cluster", 0).await;
    let peek = store.peek("me", &[], false).await.unwrap();
    assert_eq!(due(peek), (Some(0), Some("cluster".into())));
    // Nothing of its own or anybody's: nothing due, whatever the other nodes have.
    store
        .execute_raw("UPDATE cron_table SET enabled = 0 WHERE name IN ('cluster', 'mine — backup')")
        .await
        .unwrap();
    let peek = store.peek("me", &placements, false).await.unwrap();
    assert_eq!(due(peek), (None, None));
    store.close().await;
}

async fn the_peek_counts_the_live_nodes_only_when_asked(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    store.register_node("me", "host", 1, "", &[]).await.unwrap();
    let peek = store.peek("me", &[], true).await.unwrap();
    assert_eq!(peek.alive, Some(1));
    let peek = store.peek("me", &[], false).await.unwrap();
    assert_eq!(peek.alive, None);
    store.close().await;
}

/// The rows a MariaDB session's statements have had the engine hand over so far (an index
/// entry the engine itself skips, by a condition on the index's own columns, is not one).
async fn rows_handed_over(store: &Store) -> i64 {
    store
        .scalar_i64(
            "SELECT CAST(SUM(VARIABLE_VALUE) AS SIGNED) FROM information_schema.SESSION_STATUS \
             WHERE VARIABLE_NAME IN ('HANDLER_READ_NEXT', 'HANDLER_READ_PREV', \
             'HANDLER_READ_KEY', 'HANDLER_READ_FIRST', 'HANDLER_READ_RND_NEXT')",
        )
        .await
        .unwrap()
        .unwrap_or(0)
}

/// Before migration `mysql/0030`, a node's peek read every other node's placed row due before
/// its own, twice: two rows per node of the fleet at each poll, besides the count of the
/// placement values (about one per node in a fleet of host-local jobs).
async fn the_peek_reads_no_row_of_another_node() {
    let db = TestDb::new(Dialect::Mysql).await;
    db.store().await.close().await;
    // One connection: the counters read are the peek's session's.
    let store = Store::connect(&crate::util::db_url(&db.url), 1).unwrap();
    let now = store.now().await.unwrap();
    fleet_rows(&store, now + 1_000, now + 300_000, now + 200_000).await;
    let placements = [mine()];
    store.peek("me", &placements, true).await.unwrap();
    let before = rows_handed_over(&store).await;
    let peek = store.peek("me", &placements, false).await.unwrap();
    let read = rows_handed_over(&store).await - before;
    assert_eq!(peek.next_name.as_deref(), Some("mine — backup"));
    // What the peek still reads a row per value for: the count of the placement values, by
    // which a node learns of a new one at its next poll.
    let values = store
        .scalar_i64("SELECT COUNT(*) FROM cron_placements")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(values, OTHERS as i64 + 1);
    assert!(
        read <= values + 20,
        "the peek read {read} rows, {values} of them the placement values', with {OTHERS} \
         other nodes' rows due before its own"
    );
    // Many rows of the node's own value (a job placed by a tag, say, on most nodes), the
    // earliest due first: the peek does not read them all to find it.
    let many = 3_000;
    let rows: Vec<String> = (0..many)
        .map(|i| {
            format!(
                "('tagged {i}', '0 0 1 1 *', 'true', {due}, {due}, '{}')",
                mine(),
                due = now + 500_000 + i
            )
        })
        .collect();
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command, next_exec, slot, placement) VALUES {}",
            rows.join(", ")
        ))
        .await
        .unwrap();
    store.execute_raw("ANALYZE TABLE cron_table").await.unwrap();
    store.peek("me", &placements, false).await.unwrap();
    let before = rows_handed_over(&store).await;
    let peek = store.peek("me", &placements, false).await.unwrap();
    let read = rows_handed_over(&store).await - before;
    assert_eq!(peek.next_name.as_deref(), Some("mine — backup"));
    assert!(
        read <= values + 20 + OTHERS as i64,
        "the peek read {read} rows with {many} rows of the node's own value"
    );
    store.close().await;
}
