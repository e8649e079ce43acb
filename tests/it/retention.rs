//! Issue 12 (1): history retention. The pruning duty is held by one node at a time and fences
//! every deletion; three daemons prune a history to its limits (by age, by count per job, the
//! audit trail) while a job keeps running every second, every one of its slots recorded once.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlcron::store::{Dialect, Duty, Pruned, Store};

use crate::util::{DaemonProcess, TestDb, eventually, node_config};

for_each_dialect!(
    the_duty_is_held_by_one_node_and_fences_deletions,
    three_nodes_prune_the_history_to_its_limits
);

const DAY: i64 = 86_400_000;

/// Inserts `n` finished runs of `job` with slots `first_slot + i * 1000` that ended at `ended`.
async fn insert_runs(store: &Store, job: &str, n: i64, first_slot: i64, ended: i64) {
    let cols = "job_name, slot, attempt, node, started, ended, outcome";
    let sql = match store.dialect() {
        Dialect::Postgres => format!(
            "INSERT INTO cron_runs ({cols}) SELECT '{job}', {first_slot} + g * 1000, 1, 'seed', \
             {ended}, {ended}, 'ok' FROM generate_series(0, {}) g",
            n - 1
        ),
        Dialect::Mysql => format!(
            "INSERT INTO cron_runs ({cols}) SELECT '{job}', {first_slot} + seq * 1000, 1, 'seed', \
             {ended}, {ended}, 'ok' FROM seq_0_to_{}",
            n - 1
        ),
        Dialect::Sqlite => format!(
            "WITH RECURSIVE g(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM g WHERE x < {}) \
             INSERT INTO cron_runs ({cols}) SELECT '{job}', {first_slot} + x * 1000, 1, 'seed', \
             {ended}, {ended}, 'ok' FROM g",
            n - 1
        ),
    };
    store.execute_raw(&sql).await.unwrap();
}

async fn count(store: &Store, sql: &str) -> i64 {
    store.scalar_i64(sql).await.unwrap().unwrap_or(0)
}

async fn the_duty_is_held_by_one_node_and_fences_deletions(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let now = store.now().await.unwrap();
    insert_runs(&store, "old", 10, now - 200 * DAY, now - 100 * DAY).await;
    let ids: Vec<i64> = store
        .prune_candidates_by_age(Pruned::Runs, now - 90 * DAY, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    assert_eq!(ids.len(), 10);

    let a = store
        .duty_take("history", "a", 60_000)
        .await
        .unwrap()
        .expect("a free duty is taken");
    assert_eq!(
        store.duty_take("history", "b", 60_000).await.unwrap(),
        None,
        "a held duty is not taken by another node"
    );
    // A node that does not hold the duty (or holds an older token) deletes nothing.
    let forged = Duty {
        node: "b".into(),
        ..a.clone()
    };
    assert_eq!(
        store
            .prune_rows(Pruned::Runs, &ids[..5], &forged)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store.prune_rows(Pruned::Runs, &ids[..5], &a).await.unwrap(),
        5
    );
    assert!(store.duty_extend(&a, 0).await.unwrap());

    // a's lease has ended: b takes the duty with a new token, and a is fenced out.
    let b = eventually(Duration::from_secs(5), "b takes the ended duty", || async {
        store.duty_take("history", "b", 60_000).await.unwrap()
    })
    .await;
    assert!(b.token > a.token);
    assert_eq!(
        store.prune_rows(Pruned::Runs, &ids[5..], &a).await.unwrap(),
        0
    );
    assert!(!store.duty_extend(&a, 60_000).await.unwrap());
    assert_eq!(count(&store, "SELECT COUNT(*) FROM cron_runs").await, 5);
    assert_eq!(
        store.prune_rows(Pruned::Runs, &ids[5..], &b).await.unwrap(),
        5
    );
    assert!(store.duty_done(&b, "10 runs").await.unwrap());
    let duties = store.duties().await.unwrap();
    let history = duties.iter().find(|d| d.name == "history").unwrap();
    assert_eq!(history.node.as_deref(), Some("b"));
    assert_eq!(history.last_result.as_deref(), Some("10 runs"));
    store.close().await;
}

async fn three_nodes_prune_the_history_to_its_limits(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let now = store.now().await.unwrap();
    // A job no longer defined, with runs older than `keep`; a defined job with more runs than
    // `keep_runs`, all recent; audit rows older than `keep_audit` and one recent.
    insert_runs(&store, "gone", 1_200, now - 200 * DAY, now - 100 * DAY).await;
    insert_runs(&store, "busy", 1_300, now - 3 * DAY, now - DAY).await;
    for (at, action) in [(now - 400 * DAY, "old"), (now - DAY, "recent")] {
        store
            .execute_raw(&format!(
                "INSERT INTO cron_audit (at, action, who) VALUES ({at}, '{action}', 'test')"
            ))
            .await
            .unwrap();
    }
    // Alert events: an old delivered one goes; an old one waiting for its next try stays.
    let later = (now + DAY).to_string();
    for (dedupe, state, next_try) in [
        ("old-sent", "sent", "NULL"),
        ("old-pending", "pending", later.as_str()),
    ] {
        store
            .execute_raw(&format!(
                "INSERT INTO cron_events (dedupe, job_name, kind, created, hook, payload, state, \
                 next_try) VALUES ('{dedupe}', 'gone', 'failure', {}, '', '{{}}', '{state}', \
                 {next_try})",
                now - 100 * DAY
            ))
            .await
            .unwrap();
    }
    let seeded_max: i64 = count(&store, "SELECT MAX(id) FROM cron_runs").await;

    let dir = tempfile::tempdir().unwrap();
    let jobs = "[history]\nkeep = \"30d\"\nkeep_runs = 1000\nkeep_audit = \"365d\"\n\
                prune_interval = \"1s\"\n\
                [[job]]\nname = \"busy\"\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
                [[job]]\nname = \"held\"\nschedule = \"* * * * * *\"\ncommand = \"sleep 600\"\n";
    let nodes: Vec<DaemonProcess> = (0..3)
        .map(|i| {
            let name = format!("r{i}");
            DaemonProcess::start(dir.path(), &name, &node_config(&db.url, &name, jobs))
        })
        .collect();
    // A job claimed nearly all the time (its one run takes minutes) is held to its count too,
    // all but its current slot's runs: its history is seeded once it is claimed (every run of a
    // claimed job was kept, the whole history of a job always running or waiting on a lock).
    eventually(Duration::from_secs(30), "held claimed", || async {
        (count(
            &store,
            "SELECT COUNT(*) FROM cron_table WHERE name = 'held' AND exec_by IS NOT NULL",
        )
        .await
            == 1)
            .then_some(())
    })
    .await;
    insert_runs(&store, "held", 1_300, now - 3 * DAY, now - DAY).await;
    eventually(
        Duration::from_secs(60),
        "the history pruned to its limits",
        || async {
            let gone = count(
                &store,
                "SELECT COUNT(*) FROM cron_runs WHERE job_name = 'gone'",
            )
            .await;
            let busy = count(
                &store,
                "SELECT COUNT(*) FROM cron_runs WHERE job_name = 'busy'",
            )
            .await;
            let audit = count(
                &store,
                "SELECT COUNT(*) FROM cron_audit WHERE action = 'old'",
            )
            .await;
            let events = count(
                &store,
                "SELECT COUNT(*) FROM cron_events WHERE dedupe = 'old-sent'",
            )
            .await;
            let held = count(
                &store,
                "SELECT COUNT(*) FROM cron_runs WHERE job_name = 'held'",
            )
            .await;
            let held_claimed = count(
                &store,
                "SELECT COUNT(*) FROM cron_table WHERE name = 'held' AND exec_by IS NOT NULL",
            )
            .await;
            (gone == 0
                && busy <= 1_000
                && held_claimed == 1
                && held <= 1_001
                && audit == 0
                && events == 0)
                .then_some(())
        },
    )
    .await;
    // Keep the job running over a few more rounds, then stop the nodes.
    let runs_now = count(
        &store,
        "SELECT COUNT(*) FROM cron_runs WHERE job_name = 'busy' AND node <> 'seed'",
    )
    .await;
    eventually(Duration::from_secs(30), "more runs of busy", || async {
        (count(
            &store,
            "SELECT COUNT(*) FROM cron_runs WHERE job_name = 'busy' AND node <> 'seed'",
        )
        .await
            >= runs_now + 3)
            .then_some(())
    })
    .await;
    for n in nodes {
        assert!(n.stop().success());
    }
    assert_eq!(
        count(
            &store,
            "SELECT COUNT(*) FROM cron_events WHERE dedupe = 'old-pending'"
        )
        .await,
        1,
        "an event still to be delivered is not pruned: {:?}",
        store.events(None, 10).await.unwrap()
    );

    // The newest runs stay: exactly the 1,000 newest of busy (the seeded ones pruned oldest
    // first), every run the nodes recorded among them.
    let kept = store.history(Some("busy"), 5_000).await.unwrap();
    let real: Vec<_> = kept
        .iter()
        .filter(|r| r.node.as_deref() != Some("seed"))
        .collect();
    assert!(
        kept.len() <= 1_000 + 3,
        "{} runs of busy kept; the limit is 1000 (plus the runs of the last round)",
        kept.len()
    );
    assert!(kept.len() >= 1_000, "only {} runs of busy kept", kept.len());
    let oldest_kept_seed = count(
        &store,
        "SELECT MIN(id) FROM cron_runs WHERE job_name = 'busy' AND node = 'seed'",
    )
    .await;
    let newest_seed = count(
        &store,
        "SELECT MAX(id) FROM cron_runs WHERE job_name = 'busy' AND node = 'seed'",
    )
    .await;
    if oldest_kept_seed > 0 {
        assert_eq!(
            count(
                &store,
                &format!(
                    "SELECT COUNT(*) FROM cron_runs WHERE job_name = 'busy' AND id BETWEEN {oldest_kept_seed} AND {newest_seed}"
                )
            )
            .await,
            newest_seed - oldest_kept_seed + 1,
            "the seeded runs kept are the newest, without holes"
        );
    }
    assert!(newest_seed <= seeded_max);
    // Pruning never held a claim back: every slot from the first run the nodes recorded to the
    // last is accounted for once (run, or skipped by the misfire policy on a slow machine).
    let mut per_slot: BTreeMap<i64, usize> = BTreeMap::new();
    for r in &real {
        let covered = match (r.outcome.as_str(), r.skipped_count, r.skipped_last) {
            ("skipped", Some(n), Some(last)) if n > 1 => (0..n)
                .map(|i| r.slot + i * (last - r.slot) / (n - 1))
                .collect(),
            _ => vec![r.slot],
        };
        for slot in covered {
            *per_slot.entry(slot).or_default() += 1;
        }
    }
    assert!(
        per_slot.values().all(|n| *n == 1),
        "a slot is accounted for twice: {per_slot:?}"
    );
    let slots: Vec<i64> = per_slot.keys().copied().collect();
    for w in slots.windows(2) {
        assert_eq!(w[1] - w[0], 1_000, "a slot is missing after {}", w[0]);
    }
    assert_eq!(
        count(
            &store,
            "SELECT COUNT(*) FROM cron_audit WHERE action = 'recent'"
        )
        .await,
        1
    );
    let duties = store.duties().await.unwrap();
    let duty = duties.iter().find(|d| d.name == "history").unwrap();
    assert!(duty.last_done.is_some(), "{duty:?}");
    store.close().await;
}
