//! The cluster-wide start rate (`[cluster] max_starts_per_second`): three daemons sharing one
//! budget start 2,000 due jobs at the set rate (never above it by more than 10 % in any 5-second
//! window), oldest slot first, each once, none lost; a
//! pool's own budget spaces its jobs further; `explain` says how long the rate held a run.

use std::collections::BTreeSet;
use std::time::Duration;

use sqlcron::store::{Dialect, Store};

use crate::util::{DaemonProcess, TestDb, eventually, node_config, sqlcron, stderr, stdout};

for_each_dialect!(
    three_nodes_share_one_start_rate_oldest_slot_first,
    rows_taken_over_start_at_the_rate_too,
    a_dead_nodes_runs_are_taken_over_at_the_rate,
);

const JOBS: i64 = 2_000;
const POOLED: i64 = 12;
const RATE: i64 = 100;

/// Rows `prefix1..=prefixN`, due at `base + i` ms (slot order = name order), in `pool`.
async fn fill(store: &Store, dialect: Dialect, prefix: &str, n: i64, base: i64, pool: &str) {
    let pool = if pool.is_empty() {
        "NULL".to_string()
    } else {
        format!("'{pool}'")
    };
    let sql = match dialect {
        Dialect::Postgres => format!(
            "INSERT INTO cron_table (name, schedule, command, slot, next_exec, pool) \
             SELECT '{prefix}' || g, '0 0 1 1 *', 'true', {base} + g, {base} + g, {pool} \
             FROM generate_series(1, {n}) g"
        ),
        Dialect::Mysql => format!(
            "INSERT INTO cron_table (name, schedule, command, slot, next_exec, pool) \
             SELECT CONCAT('{prefix}', seq), '0 0 1 1 *', 'true', {base} + seq, {base} + seq, {pool} \
             FROM seq_1_to_{n}"
        ),
        Dialect::Sqlite => format!(
            "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < {n}) \
             INSERT INTO cron_table (name, schedule, command, slot, next_exec, pool) \
             SELECT '{prefix}' || x, '0 0 1 1 *', 'true', {base} + x, {base} + x, {pool} FROM g"
        ),
    };
    store.execute_raw(&sql).await.unwrap();
}

/// (job, slot, started, outcome) of every run record.
async fn runs(store: &Store) -> Vec<(String, i64, i64, String)> {
    store
        .history(None, 10_000)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.job, r.slot, r.started.unwrap_or(0), r.outcome))
        .collect()
}

async fn three_nodes_share_one_start_rate_oldest_slot_first(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        "max_parallel = 32\n[pools]\nslow = 100\n\
         [cluster]\nmax_starts_per_second = {RATE}\nburst = 10\n\
         [cluster.pools.slow]\nmax_starts_per_second = 2\nburst = 1\n"
    );
    let nodes: Vec<DaemonProcess> = ["r1", "r2", "r3"]
        .iter()
        .map(|n| DaemonProcess::start(dir.path(), n, &node_config(&db.url, n, &extra)))
        .collect();
    let conf = dir.path().join("r1.toml");
    eventually(Duration::from_secs(60), "three nodes up", || async {
        let up = store
            .scalar_i64("SELECT COUNT(*) FROM cron_nodes WHERE stopped IS NULL")
            .await
            .ok()??;
        let budgets = store
            .scalar_i64("SELECT COUNT(*) FROM cron_start_rate")
            .await
            .ok()??;
        (up == 3 && budgets == 2).then_some(())
    })
    .await;

    // 2,000 jobs due within two seconds, each its own slot; a dozen more in the slow pool.
    let now = store.now().await.unwrap();
    let base = now + 1_000;
    fill(&store, dialect, "rated", JOBS, base, "").await;
    fill(&store, dialect, "pooled", POOLED, base, "slow").await;
    let total = (JOBS + POOLED) as usize;
    let all = eventually(Duration::from_secs(120), "every job run", || async {
        let r = runs(&store).await;
        (r.iter().filter(|r| r.3 == "ok").count() >= total).then_some(r)
    })
    .await;
    // Let a duplicate, if any, show.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all = {
        let again = runs(&store).await;
        assert!(again.len() >= all.len());
        again
    };

    // Each job once, none lost.
    assert_eq!(all.len(), total, "one record per job");
    let names: BTreeSet<&str> = all.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(names.len(), total, "each job once");
    assert!(all.iter().all(|r| r.3 == "ok"), "every run ok");

    // The rate: in each whole five-second window from the first start, the set rate within 10 %.
    let mut starts: Vec<i64> = all.iter().map(|r| r.2).collect();
    starts.sort();
    let first = starts[0];
    let last = *starts.last().unwrap();
    // Whole windows up to the start a burst before the last (a straggler, such as a row whose
    // claim had to be taken over, does not open windows of its own).
    let windows = (starts[starts.len() - 11] - first) / 5_000;
    assert!(windows >= 3, "the starts took {} ms", last - first);
    let counts: Vec<i64> = (0..windows)
        .map(|w| {
            let from = first + w * 5_000;
            starts
                .iter()
                .filter(|s| **s >= from && **s < from + 5_000)
                .count() as i64
        })
        .collect();
    println!(
        "start rate {}: {total} starts in {} ms; per 5-s window {counts:?}",
        dialect.name(),
        last - first
    );
    // The ceiling holds in every window (10 % over at most: the burst, and turns given in
    // one window and started in the next). The budget is also used: on average 85 % of the
    // rate at least. How close each window comes to the rate from below depends on the machine
    // (three daemons beside the rest of the suite on two cores): the rate is a ceiling.
    let want = RATE * 5;
    for (w, n) in counts.iter().enumerate() {
        assert!(
            *n * 10 <= want * 11,
            "window {w}: {n} starts, the rate allows {want}: {counts:?}"
        );
    }
    let mean = counts.iter().sum::<i64>() as f64 / counts.len() as f64;
    assert!(
        mean >= want as f64 * 0.85,
        "{mean:.0} starts per window on average, the rate allows {want}: {counts:?}"
    );

    // Oldest slot first: the job with the r-th oldest slot starts about r / rate after the
    // first start (the nodes take turns a second ahead at most).
    let mut rated: Vec<&(String, i64, i64, String)> =
        all.iter().filter(|r| r.0.starts_with("rated")).collect();
    rated.sort_by_key(|r| r.1);
    let mut worst = 0;
    for (rank, r) in rated.iter().enumerate() {
        let expected = first + rank as i64 * 1000 / RATE;
        worst = worst.max((r.2 - expected).abs());
    }
    println!(
        "start rate {}: worst distance from the place in slot order {worst} ms",
        dialect.name()
    );
    assert!(
        worst <= 3_000,
        "a job started {worst} ms away from its place in slot order"
    );

    // The slow pool (2 a second, one at once): its k-th start is given the turn k × 500 ms
    // after the first's. A start may come after its turn (a loaded machine), never before: the
    // first start was late by less than 1.5 s.
    let mut pooled: Vec<i64> = all
        .iter()
        .filter(|r| r.0.starts_with("pooled"))
        .map(|r| r.2)
        .collect();
    pooled.sort();
    for (k, at) in pooled.iter().enumerate() {
        assert!(
            at - pooled[0] >= k as i64 * 500 - 1_500,
            "pooled start {k} came {} ms after the first: {pooled:?}",
            at - pooled[0]
        );
    }

    // explain says how long the rate held one of the last jobs.
    let out = sqlcron(&[
        "--config",
        conf.to_str().unwrap(),
        "explain",
        &format!("rated{JOBS}"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let held = text
        .split("held ")
        .nth(1)
        .and_then(|t| t.split(" s by the start rate").next())
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no hold in:\n{text}"));
    assert!(held >= 10.0, "{text}");

    for n in nodes {
        let log = n.log_text();
        assert!(n.stop().success(), "{log}");
    }
    store.close().await;
}

/// A pool limited to 2 starts a second, one at once (claims are not cut to a pool's room, so a
/// node may claim more of its rows than the pool has turns for).
const SLOW_POOL: &str = "max_parallel = 16\n[pools]\np = 100\n\
                         [cluster.pools.p]\nmax_starts_per_second = 2\nburst = 1\n";

/// Waits for `node`'s budget (the pool's) to be written.
async fn budget_written(store: &Store) {
    eventually(Duration::from_secs(60), "the pool's budget", || async {
        let budgets = store
            .scalar_i64("SELECT COUNT(*) FROM cron_start_rate")
            .await
            .ok()??;
        (budgets == 1).then_some(())
    })
    .await;
}

/// At most the burst, one more per 500 ms, and one for a start late after its turn, in any
/// span of `starts` (sorted); and they are spread as the rate spreads them.
fn at_two_a_second(starts: &[i64]) {
    let spread: Vec<i64> = starts.iter().map(|s| s - starts[0]).collect();
    for i in 0..starts.len() {
        for j in i + 1..starts.len() {
            let allowed = 2 + (starts[j] - starts[i]) / 500;
            assert!(
                (j - i) as i64 <= allowed,
                "starts {i} to {j} within {} ms: {spread:?}",
                starts[j] - starts[i]
            );
        }
    }
    let n = starts.len() as i64;
    assert!(spread[starts.len() - 1] >= (n - 3) * 500, "{spread:?}");
}

/// Rows taken over from another node were never handed back (they may owe a rerun only a
/// takeover's look can tell): those the budget had no turn for went at its next room without
/// one, so a writer who set `exec_by` on many due rows of a pool had them start at once, above
/// the pool's rate. They are now handed back as they were (claimed by that node, no lease) and
/// taken over again at their turn: each runs once, at the rate.
async fn rows_taken_over_start_at_the_rate_too(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let node = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", SLOW_POOL));
    budget_written(&store).await;
    // Eight due rows of the pool that look claimed by a node whose lease ended long ago.
    let now = store.now().await.unwrap();
    for i in 1..=8 {
        let slot = now - 1_000 + i;
        store
            .execute_raw(&format!(
                "INSERT INTO cron_table (name, schedule, command, pool, slot, next_exec, exec_by, \
                 lease_until, token) VALUES ('taken{i}', '0 0 1 1 *', 'true', 'p', {slot}, \
                 {slot}, 'ghost', 1, 1)"
            ))
            .await
            .unwrap();
    }
    let all = eventually(Duration::from_secs(60), "every row run", || async {
        let r = runs(&store).await;
        (r.iter().filter(|r| r.3 == "ok").count() >= 8).then_some(r)
    })
    .await;
    assert_eq!(all.len(), 8, "each row run once: {all:?}");
    let mut starts: Vec<i64> = all.iter().map(|r| r.2).collect();
    starts.sort();
    at_two_a_second(&starts);
    let log = node.log_text();
    assert!(node.stop().success(), "{log}");
    store.close().await;
}

/// A node dies (SIGKILL) running six jobs of the rated pool; the node that takes them over
/// reruns each once (`rerun_lost`), at the pool's rate: the takeovers it has no turn for go
/// back as takeovers and are taken over again, each lost run recorded once.
async fn a_dead_nodes_runs_are_taken_over_at_the_rate(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    let a = DaemonProcess::start(dir.path(), "a", &node_config(&db.url, "a", SLOW_POOL));
    budget_written(&store).await;
    let now = store.now().await.unwrap();
    for i in 1..=6 {
        let slot = now - 1_000 + i;
        store
            .execute_raw(&format!(
                "INSERT INTO cron_table (name, schedule, command, pool, slot, next_exec) \
                 VALUES ('long{i}', '0 0 1 1 *', 'sleep 600', 'p', {slot}, {slot})"
            ))
            .await
            .unwrap();
    }
    eventually(Duration::from_secs(60), "six runs going on a", || async {
        let r = runs(&store).await;
        (r.iter().filter(|r| r.3 == "running").count() == 6).then_some(())
    })
    .await;
    a.signal(libc::SIGKILL);
    drop(a);
    let b = DaemonProcess::start(dir.path(), "b", &node_config(&db.url, "b", SLOW_POOL));
    let all = eventually(Duration::from_secs(90), "six reruns going on b", || async {
        let r = runs(&store).await;
        let lost = r.iter().filter(|r| r.3 == "lost").count();
        let rerun = r.iter().filter(|r| r.3 == "running").count();
        (lost == 6 && rerun == 6).then_some(r)
    })
    .await;
    // Each slot: its lost run and one rerun, nothing more.
    for i in 1..=6 {
        let name = format!("long{i}");
        let mine: Vec<_> = all.iter().filter(|r| r.0 == name).collect();
        assert_eq!(mine.len(), 2, "{mine:?}");
    }
    let mut starts: Vec<i64> = all
        .iter()
        .filter(|r| r.3 == "running")
        .map(|r| r.2)
        .collect();
    starts.sort();
    at_two_a_second(&starts);
    let log = b.log_text();
    assert!(b.stop().success(), "{log}");
    store.close().await;
}
