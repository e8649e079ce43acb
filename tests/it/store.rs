//! The store conformance suite: every case runs against SQLite, PostgreSQL and MariaDB/MySQL.

use std::time::Duration;

use sqlcron::store::{
    Dialect, Extended, Fenced, PARKED, Release, ReleaseOf, RunKey, RunResult, Store,
};

use crate::util::TestDb;

for_each_dialect!(
    a_planted_row_hides_no_lost_claim_from_the_padded_extension,
    concurrent_migrations_do_not_collide,
    sql_row_gets_prepared_and_claimed_once,
    claims_race_without_duplicates,
    writes_are_fenced_by_the_claim_token,
    run_is_recorded_once_per_slot_and_attempt,
    run_starts_are_recorded_together_and_fenced_each,
    releases_written_together_are_fenced_each_and_all_or_nothing,
    a_batch_of_releases_writes_what_single_releases_write,
    schedule_change_with_sql_resets_next_exec,
    expired_lease_is_taken_over_with_the_previous_holder_visible,
    a_claimed_row_is_taken_over_only_when_its_lease_ends,
    extend_reports_lost_claims,
    toml_apply_creates_updates_and_removes_only_toml_jobs,
    names_the_database_takes_for_one_are_reported_not_fatal,
    nodes_applying_one_file_at_once_create_each_job_once,
    pool_deferral_keeps_the_slot_and_a_lost_rerun,
    claim_leaves_out_rows_the_node_supervises,
    a_drained_node_claims_nothing_whatever_its_peek_said,
    park_is_fenced_and_any_definition_fix_unparks,
    each_later_definition_column_unparks_and_is_audited_and_a_run_is_not,
    output_the_database_cannot_store_is_made_storable,
    previous_run_is_found_by_token_order_across_a_takeover_chain,
    fencing_token_never_decreases_when_a_row_is_recreated,
    toml_update_keeps_a_pause,
    statement_timeout_bounds_every_statement_and_says_so,
    running_lists_the_rows_held_now,
);

async fn insert(store: &Store, name: &str, schedule: &str, command: &str) {
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('{name}', '{schedule}', '{command}')"
        ))
        .await
        .unwrap();
}

/// Makes a row due now (by the database clock).
async fn make_due(store: &Store, name: &str) {
    let now = store.now().await.unwrap();
    store
        .execute_raw(&format!(
            "UPDATE cron_table SET next_exec = {}, slot = {} WHERE name = '{name}'",
            now - 1000,
            now - 1000
        ))
        .await
        .unwrap();
}

async fn concurrent_migrations_do_not_collide(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let stores: Vec<Store> = (0..3)
        .map(|_| Store::connect(&crate::util::db_url(&db.url), 2).unwrap())
        .collect();
    let results = futures_join_all(stores.iter().map(|s| s.migrate())).await;
    for r in results {
        r.unwrap();
    }
    // And again: idempotent.
    stores[0].migrate().await.unwrap();
    assert_eq!(
        stores[0]
            .scalar_i64("SELECT COUNT(*) FROM cron_table")
            .await
            .unwrap(),
        Some(0)
    );
}

async fn futures_join_all<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let handles: Vec<_> = futs.collect();
    let mut out = Vec::new();
    // Poll them concurrently on this task.
    let mut pinned: Vec<_> = handles.into_iter().map(Box::pin).collect();
    let mut results: Vec<Option<F::Output>> = (0..pinned.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in pinned.iter_mut().enumerate() {
            if results[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => results[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    for r in results {
        out.push(r.unwrap());
    }
    out
}

async fn sql_row_gets_prepared_and_claimed_once(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    insert(&store, "hello", "* * * * *", "echo hi").await;
    let peek = store.peek("a", &[], true).await.unwrap();
    assert!(peek.pending_prepare);
    assert_eq!(peek.next_due, None);
    let rows = store.rows_to_prepare(10).await.unwrap();
    assert_eq!(rows.len(), 1);
    let first_slot = peek.now + 60_000;
    assert!(
        store
            .set_prepared(rows[0].id, first_slot, first_slot)
            .await
            .unwrap()
    );
    // A second node racing to prepare the same row does nothing.
    assert!(!store.set_prepared(rows[0].id, 1, 1).await.unwrap());
    let peek = store.peek("a", &[], true).await.unwrap();
    assert!(!peek.pending_prepare);
    assert_eq!(peek.next_due, Some(first_slot));
    // Not due yet: nothing to claim.
    let (_, claimed) = store.claim("a", 10, Duration::from_secs(10)).await.unwrap();
    assert!(claimed.is_empty());
    make_due(&store, "hello").await;
    let (now, claimed) = store.claim("a", 10, Duration::from_secs(10)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let row = &claimed[0];
    assert_eq!(row.exec_by.as_deref(), Some("a"));
    assert_eq!(row.prev_exec_by, None);
    assert_eq!(row.token, 1);
    let now = now.unwrap();
    let lease = row.lease_until.unwrap();
    assert!((lease - now - 10_000).abs() < 50, "lease {lease} now {now}");
    // Claimed rows are not due for anyone else.
    let (_, again) = store.claim("b", 10, Duration::from_secs(10)).await.unwrap();
    assert!(again.is_empty());
}

async fn claims_race_without_duplicates(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    for i in 0..60 {
        insert(&store, &format!("j{i}"), "* * * * *", "true").await;
    }
    let now = store.now().await.unwrap();
    store
        .execute_raw(&format!(
            "UPDATE cron_table SET next_exec = {}, slot = {}",
            now - 1000,
            now - 1000
        ))
        .await
        .unwrap();
    // Four claimers, each taking up to 7 rows per round, until nothing is left.
    let mut handles = Vec::new();
    for c in 0..4 {
        let store = Store::connect(&crate::util::db_url(&db.url), 2).unwrap();
        handles.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..40 {
                match store
                    .claim(&format!("node{c}"), 7, Duration::from_secs(30))
                    .await
                {
                    Ok((_, rows)) => got.extend(rows.into_iter().map(|r| r.name)),
                    // MySQL may report a deadlock between concurrent claims: a retryable error.
                    Err(e) => eprintln!("claim error (retried): {e}"),
                }
            }
            got
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    let unique: std::collections::HashSet<_> = all.iter().cloned().collect();
    assert_eq!(all.len(), unique.len(), "a row was claimed twice");
    assert_eq!(unique.len(), 60, "every row is claimed");
}

async fn writes_are_fenced_by_the_claim_token(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    insert(&store, "f", "* * * * *", "true").await;
    make_due(&store, "f").await;
    let (_, rows) = store.claim("a", 1, Duration::from_secs(10)).await.unwrap();
    let row = &rows[0];
    let release = Release {
        slot: 5,
        attempts: 0,
        next_exec: 5,
        clear_run_now: false,
        outcome: None,
    };
    assert_eq!(
        store
            .release(row.id, "a", row.token + 1, &release, None)
            .await
            .unwrap(),
        Fenced::Lost
    );
    assert_eq!(
        store
            .release(row.id, "b", row.token, &release, None)
            .await
            .unwrap(),
        Fenced::Lost
    );
    assert_eq!(
        store
            .release(row.id, "a", row.token, &release, None)
            .await
            .unwrap(),
        Fenced::Done
    );
    let after = store.job("f").await.unwrap().unwrap();
    assert_eq!(after.exec_by, None);
    assert_eq!(after.next_exec, Some(5));
    // Released twice: the second is lost.
    assert_eq!(
        store
            .release(row.id, "a", row.token, &release, None)
            .await
            .unwrap(),
        Fenced::Lost
    );
}

async fn run_is_recorded_once_per_slot_and_attempt(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    insert(&store, "r", "* * * * *", "true").await;
    make_due(&store, "r").await;
    let (_, rows) = store.claim("a", 1, Duration::from_secs(10)).await.unwrap();
    let row = &rows[0];
    let key = RunKey {
        job: "r".into(),
        slot: 1_000,
        attempt: 1,
    };
    assert_eq!(
        store.start_run(row.id, "a", row.token, &key).await.unwrap(),
        Fenced::Done
    );
    // Issue 9 (3): a start retried after its reply was lost finds its own record and goes on;
    // a unique violation alone is not taken as proof of anything.
    assert_eq!(
        store.start_run(row.id, "a", row.token, &key).await.unwrap(),
        Fenced::Done
    );
    assert_eq!(
        store
            .scalar_i64("SELECT COUNT(*) FROM cron_runs")
            .await
            .unwrap(),
        Some(1)
    );
    // The same run planned under a later claim: the record belongs to another token.
    store
        .execute_raw("UPDATE cron_table SET token = token + 1")
        .await
        .unwrap();
    assert_eq!(
        store
            .start_run(row.id, "a", row.token + 1, &key)
            .await
            .unwrap(),
        Fenced::Conflict
    );
    store
        .execute_raw("UPDATE cron_table SET token = token - 1")
        .await
        .unwrap();
    if dialect == Dialect::Postgres {
        // A record planted at the sequence's next id (the daemon's credential can): the
        // violation is of the primary key, not of this run's key, and no record of this run
        // exists. An error, not a run taken for another claim's; the next try gets the id after.
        store
            .execute_raw(
                "INSERT INTO cron_runs (id, job_name, slot, attempt, outcome) \
                 SELECT last_value + 1, 'planted', 0, 0, 'ok' FROM cron_runs_id_seq",
            )
            .await
            .unwrap();
        let second = RunKey {
            attempt: 2,
            ..key.clone()
        };
        let planted = store.start_run(row.id, "a", row.token, &second).await;
        assert!(
            planted
                .as_ref()
                .is_err_and(|e| e.is_unique_violation() && e.to_string().contains("pkey")),
            "{planted:?}"
        );
        assert_eq!(
            store
                .start_run(row.id, "a", row.token, &second)
                .await
                .unwrap(),
            Fenced::Done
        );
        store
            .execute_raw("DELETE FROM cron_runs WHERE job_name = 'planted' OR attempt = 2")
            .await
            .unwrap();
    }
    // The history line ends with the outcome.
    let release = Release {
        slot: 61_000,
        attempts: 0,
        next_exec: 61_000,
        clear_run_now: false,
        outcome: Some(RunResult {
            outcome: sqlcron::model::job::Outcome::Ok,
            exit_code: Some(0),
            signal: None,
            started: 1_000,
            output: "out\n".into(),
            message: None,
        }),
    };
    assert_eq!(
        store
            .release(row.id, "a", row.token, &release, Some(&key))
            .await
            .unwrap(),
        Fenced::Done
    );
    let history = store.history(Some("r"), 10).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].outcome, "ok");
    assert_eq!(history[0].output.as_deref(), Some("out\n"));
    assert_eq!(history[0].token, Some(row.token));
    let job = store.job("r").await.unwrap().unwrap();
    assert_eq!(job.last_status.as_deref(), Some("ok"));
    assert_eq!(job.last_exit, Some(0));
}

async fn run_starts_are_recorded_together_and_fenced_each(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    for name in ["s1", "s2", "s3"] {
        insert(&store, name, "* * * * *", "true").await;
        make_due(&store, name).await;
    }
    let (_, rows) = store.claim("a", 3, Duration::from_secs(10)).await.unwrap();
    assert_eq!(rows.len(), 3);
    let keys: Vec<RunKey> = rows
        .iter()
        .map(|r| RunKey {
            job: r.name.clone(),
            slot: 1_000,
            attempt: 1,
        })
        .collect();
    // Another node's name does not pass the fence.
    let all: Vec<(i64, i64, &RunKey)> = rows
        .iter()
        .zip(&keys)
        .map(|(r, k)| (r.id, r.token, k))
        .collect();
    assert_eq!(
        store.start_runs("b", &all).await.unwrap(),
        vec![false, false, false]
    );
    // The second claim is stale (its token moved on): only that run is refused.
    let starts: Vec<(i64, i64, &RunKey)> = rows
        .iter()
        .zip(&keys)
        .enumerate()
        .map(|(i, (r, k))| (r.id, if i == 1 { r.token + 1 } else { r.token }, k))
        .collect();
    assert_eq!(
        store.start_runs("a", &starts).await.unwrap(),
        vec![true, false, true]
    );
    let recorded = store
        .scalar_i64("SELECT COUNT(*) FROM cron_runs WHERE outcome = 'running' AND node = 'a'")
        .await
        .unwrap();
    assert_eq!(recorded, Some(2));
    let first = store.history(Some(&rows[0].name), 10).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].token, Some(rows[0].token));
    assert_eq!((first[0].slot, first[0].attempt), (1_000, 1));
    // Recording a run twice is refused by the unique key, for the whole statement.
    let again = [
        (rows[0].id, rows[0].token, &keys[0]),
        (rows[1].id, rows[1].token, &keys[1]),
    ];
    let err = store.start_runs("a", &again).await.unwrap_err();
    assert!(err.is_unique_violation(), "{err}");
    assert_eq!(
        store.history(Some(&rows[1].name), 10).await.unwrap().len(),
        0
    );
}

/// Releases written in one transaction (the burst path, `daemon/release_batch.rs`): each is
/// fenced by its own row and token, a stale one writes nothing of its own while the others
/// land, and a batch that fails part way writes nothing at all (each is then written alone).
async fn releases_written_together_are_fenced_each_and_all_or_nothing(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    for name in ["b1", "b2", "b3"] {
        insert(&store, name, "* * * * *", "true").await;
        make_due(&store, name).await;
    }
    let (rows, keys) = crate::util::claim_and_start(&store, "a", 3, 1_000).await;
    assert_eq!(rows.len(), 3);
    let releases: Vec<Release> = ["one\n", "two\n", "three\n"]
        .iter()
        .map(|o| crate::util::ok_release(61_000, o))
        .collect();
    // The three releases, the one at `stale` under a token that is no longer the claim's.
    let batch = |stale: usize| -> Vec<ReleaseOf<'_>> {
        rows.iter()
            .zip(&keys)
            .zip(&releases)
            .enumerate()
            .map(|(i, ((r, k), rel))| ReleaseOf {
                id: r.id,
                token: if i == stale { r.token + 1 } else { r.token },
                release: rel,
                run: Some(k),
            })
            .collect()
    };
    // The second claim is stale (its token is not the claim's): neither its run's end nor its
    // release is written; the others land.
    assert_eq!(
        store.release_together("a", &batch(1)).await.unwrap(),
        vec![Fenced::Done, Fenced::Lost, Fenced::Done]
    );
    for (i, r) in rows.iter().enumerate() {
        let history = store.history(Some(&r.name), 10).await.unwrap();
        let job = store.job(&r.name).await.unwrap().unwrap();
        if i == 1 {
            assert_eq!(history[0].outcome, "running", "{}", r.name);
            assert_eq!(job.exec_by.as_deref(), Some("a"));
        } else {
            assert_eq!(history[0].outcome, "ok", "{}", r.name);
            assert_eq!(history[0].token, Some(r.token));
            assert_eq!(job.exec_by, None);
            assert_eq!(job.next_exec, Some(61_000));
            assert_eq!(job.last_status.as_deref(), Some("ok"));
        }
    }
    assert_eq!(
        store.history(Some(&rows[2].name), 1).await.unwrap()[0]
            .output
            .as_deref(),
        Some("three\n")
    );
    // Written again (a lost reply, retried): nothing is ours any more, nothing changes.
    assert_eq!(
        store.release_together("a", &batch(1)).await.unwrap(),
        vec![Fenced::Lost, Fenced::Lost, Fenced::Lost]
    );

    // All or nothing: when the second release fails (a trigger of the test refuses slot 666),
    // the first is not written either; both runs stay running and both rows claimed.
    let refuse: &[&str] = match dialect {
        Dialect::Sqlite => &[
            "CREATE TRIGGER test_refuse BEFORE UPDATE OF slot ON cron_table \
             WHEN NEW.slot = 666 BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
        ],
        Dialect::Postgres => &[
            "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'refused by the test'; END $$",
            "CREATE TRIGGER test_refuse BEFORE UPDATE ON cron_table FOR EACH ROW \
             WHEN (NEW.slot = 666) EXECUTE FUNCTION test_refuse()",
        ],
        Dialect::Mysql => &[
            "CREATE TRIGGER test_refuse BEFORE UPDATE ON cron_table FOR EACH ROW \
             BEGIN IF NEW.slot = 666 THEN \
             SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the test'; END IF; END",
        ],
    };
    for sql in refuse {
        store.execute_raw(sql).await.unwrap();
    }
    for name in ["b1", "b3"] {
        make_due(&store, name).await;
    }
    let (again, again_keys) = crate::util::claim_and_start(&store, "a", 3, 2_000).await;
    assert_eq!(again.len(), 2);
    let refused = Release {
        slot: 666,
        ..releases[1].clone()
    };
    let failing = [
        ReleaseOf {
            id: again[0].id,
            token: again[0].token,
            release: &releases[0],
            run: Some(&again_keys[0]),
        },
        ReleaseOf {
            id: again[1].id,
            token: again[1].token,
            release: &refused,
            run: Some(&again_keys[1]),
        },
    ];
    let err = store.release_together("a", &failing).await.unwrap_err();
    assert!(err.to_string().contains("refused by the test"), "{err}");
    for (r, k) in again.iter().zip(&again_keys) {
        let job = store.job(&r.name).await.unwrap().unwrap();
        assert_eq!(job.exec_by.as_deref(), Some("a"), "{} was released", r.name);
        let runs = store.runs_between(&r.name, k.slot, k.slot).await.unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].outcome, "running", "{}'s run was ended", r.name);
    }
    // Each alone, as the daemon then writes them: the good one lands.
    assert_eq!(
        store
            .release(
                again[0].id,
                "a",
                again[0].token,
                &releases[0],
                Some(&again_keys[0])
            )
            .await
            .unwrap(),
        Fenced::Done
    );
}

async fn schedule_change_with_sql_resets_next_exec(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    insert(&store, "s", "0 0 1 1 *", "true").await;
    let row = store.rows_to_prepare(10).await.unwrap().remove(0);
    store.set_prepared(row.id, 1_000, 1_000).await.unwrap();
    // Same schedule written again: nothing changes.
    store
        .execute_raw("UPDATE cron_table SET schedule = '0 0 1 1 *' WHERE name = 's'")
        .await
        .unwrap();
    assert_eq!(
        store.job("s").await.unwrap().unwrap().next_exec,
        Some(1_000)
    );
    // A new schedule: re-prepared.
    store
        .execute_raw("UPDATE cron_table SET schedule = '*/5 * * * *' WHERE name = 's'")
        .await
        .unwrap();
    assert_eq!(store.job("s").await.unwrap().unwrap().next_exec, None);
    assert!(store.peek("a", &[], true).await.unwrap().pending_prepare);
    // An invalid row is parked with its error, and a fix clears it.
    store
        .set_invalid(row.id, Some(row.signature.as_deref()), "schedule: bad")
        .await
        .unwrap();
    let parked = store.job("s").await.unwrap().unwrap();
    assert_eq!(parked.next_exec, Some(PARKED));
    assert_eq!(parked.error.as_deref(), Some("schedule: bad"));
    store
        .execute_raw("UPDATE cron_table SET command = 'echo fixed' WHERE name = 's'")
        .await
        .unwrap();
    let fixed = store.job("s").await.unwrap().unwrap();
    assert_eq!(fixed.error, None);
    assert_eq!(fixed.next_exec, None);
    // A claimed row is marked dirty instead (its lease stays in next_exec).
    store.set_prepared(row.id, 1_000, 1_000).await.unwrap();
    let (_, rows) = store.claim("a", 1, Duration::from_secs(10)).await.unwrap();
    assert_eq!(rows.len(), 1);
    store
        .execute_raw("UPDATE cron_table SET timezone = 'Asia/Tokyo' WHERE name = 's'")
        .await
        .unwrap();
    let claimed = store.job("s").await.unwrap().unwrap();
    assert!(claimed.dirty);
    assert!(claimed.next_exec.is_some());
    let release = Release {
        slot: 2_000,
        attempts: 0,
        next_exec: 2_000,
        clear_run_now: false,
        outcome: None,
    };
    store
        .release(rows[0].id, "a", rows[0].token, &release, None)
        .await
        .unwrap();
    let released = store.job("s").await.unwrap().unwrap();
    assert_eq!(released.next_exec, None, "re-prepared after release");
    assert!(!released.dirty);
}

async fn expired_lease_is_taken_over_with_the_previous_holder_visible(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    insert(&store, "t", "* * * * *", "true").await;
    make_due(&store, "t").await;
    let (_, rows) = store.claim("a", 1, Duration::from_millis(1)).await.unwrap();
    let first = rows[0].clone();
    // The lease of 1 ms has ended by the time the database answers the next statement.
    let second = crate::util::eventually(Duration::from_secs(5), "lease expiry", || async {
        let (_, rows) = store.claim("b", 1, Duration::from_secs(10)).await.unwrap();
        rows.into_iter().next()
    })
    .await;
    assert_eq!(second.prev_exec_by.as_deref(), Some("a"));
    let now_row = store.job("t").await.unwrap().unwrap();
    assert_eq!(now_row.exec_by.as_deref(), Some("b"));
    assert_eq!(now_row.prev_exec_by.as_deref(), Some("a"));
    assert_eq!(now_row.token, first.token + 1);
    // The old holder's fenced writes are refused.
    let release = Release {
        slot: 0,
        attempts: 0,
        next_exec: 0,
        clear_run_now: false,
        outcome: None,
    };
    assert_eq!(
        store
            .release(first.id, "a", first.token, &release, None)
            .await
            .unwrap(),
        Fenced::Lost
    );
}

/// A claimed row whose `next_exec` something else moved earlier (an operator's SQL, or a bug
/// like the pool wake-up that once did it) stays its holder's until the lease ends; a row
/// handed over at shutdown (lease ended now) and a hand-written claim without a lease are
/// taken at once.
async fn a_claimed_row_is_taken_over_only_when_its_lease_ends(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    insert(&store, "held", "* * * * *", "true").await;
    insert(&store, "handed", "* * * * *", "true").await;
    insert(&store, "by_hand", "* * * * *", "true").await;
    make_due(&store, "held").await;
    make_due(&store, "handed").await;
    let (_, rows) = store.claim("a", 10, Duration::from_secs(60)).await.unwrap();
    assert_eq!(rows.len(), 2);
    let held = rows.iter().find(|r| r.name == "held").unwrap().clone();
    let handed = rows.iter().find(|r| r.name == "handed").unwrap().clone();
    let now = store.now().await.unwrap();
    store
        .execute_raw(&format!(
            "UPDATE cron_table SET next_exec = {} WHERE name = 'held'",
            now - 5000
        ))
        .await
        .unwrap();
    store
        .release_for_takeover(handed.id, "a", handed.token)
        .await
        .unwrap();
    store
        .execute_raw(&format!(
            "UPDATE cron_table SET next_exec = {}, slot = {}, exec_by = 'gone', lease_until = NULL \
             WHERE name = 'by_hand'",
            now - 1000,
            now - 1000
        ))
        .await
        .unwrap();
    // With a row left out (no row's id): the claim's other form.
    let (_, rows) = store
        .claim_excluding("b", 10, Duration::from_secs(60), &[-5], &[])
        .await
        .unwrap();
    let mut names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        ["by_hand", "handed"],
        "the row still leased is not taken"
    );
    let row = store.job("held").await.unwrap().unwrap();
    assert_eq!(row.exec_by.as_deref(), Some("a"));
    assert_eq!(row.token, held.token);
}

/// The lease extension's list is padded to a power of two. Padded with a made-up pair (-1, -1),
/// a row a database writer plants with that id, token and the node's name counted as one of the
/// node's runs, and with three held runs one lost claim went unnoticed.
async fn a_planted_row_hides_no_lost_claim_from_the_padded_extension(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    for name in ["p1", "p2", "p3"] {
        insert(&store, name, "* * * * *", "true").await;
        make_due(&store, name).await;
    }
    let (_, rows) = store.claim("a", 3, Duration::from_secs(10)).await.unwrap();
    assert_eq!(rows.len(), 3);
    let held: Vec<(i64, i64)> = rows.iter().map(|r| (r.id, r.token)).collect();
    store
        .execute_raw(
            "INSERT INTO cron_table (id, name, schedule, command, token, exec_by) \
             VALUES (-1, 'planted', '* * * * *', 'true', -1, 'a')",
        )
        .await
        .unwrap();
    store
        .execute_raw("UPDATE cron_table SET token = token + 1, exec_by = 'b' WHERE name = 'p3'")
        .await
        .unwrap();
    let found = store
        .extend("a", &held, Duration::from_secs(20))
        .await
        .unwrap();
    let p3 = rows.iter().find(|r| r.name == "p3").unwrap().id;
    assert_eq!(found.lost, vec![p3]);
}

async fn extend_reports_lost_claims(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    insert(&store, "e1", "* * * * *", "true").await;
    insert(&store, "e2", "* * * * *", "true").await;
    make_due(&store, "e1").await;
    make_due(&store, "e2").await;
    let (_, rows) = store.claim("a", 2, Duration::from_secs(10)).await.unwrap();
    assert_eq!(rows.len(), 2);
    let held: Vec<(i64, i64)> = rows.iter().map(|r| (r.id, r.token)).collect();
    assert_eq!(
        store
            .extend("a", &held, Duration::from_secs(20))
            .await
            .unwrap(),
        Extended::default()
    );
    let extended = store.job("e1").await.unwrap().unwrap();
    let now = store.now().await.unwrap();
    assert!(extended.lease_until.unwrap() > now + 15_000);
    // Someone else takes e2 (simulated by bumping its token).
    store
        .execute_raw("UPDATE cron_table SET token = token + 1, exec_by = 'b' WHERE name = 'e2'")
        .await
        .unwrap();
    let found = store
        .extend("a", &held, Duration::from_secs(20))
        .await
        .unwrap();
    let e2 = rows.iter().find(|r| r.name == "e2").unwrap().id;
    let e1 = rows.iter().find(|r| r.name == "e1").unwrap().id;
    assert_eq!(found.lost, vec![e2]);
    assert!(found.stopping.is_empty());
    // A stop asked for e1: the extension names it, and still extends its lease (the run is
    // stopped and recorded under a lease of its own); a job nobody holds cannot be stopped.
    let actor = sqlcron::model::actor::Actor {
        who: "test".into(),
        host: None,
        pid: None,
    };
    // With the token of a claim that is not the one holding it (the stop page's run ended and
    // the next slot's began), nothing is asked.
    let token = store.job("e1").await.unwrap().unwrap().token;
    assert!(
        !store
            .request_stop("e1", Some(token + 1), &actor)
            .await
            .unwrap()
    );
    assert!(store.request_stop("e1", Some(token), &actor).await.unwrap());
    assert!(!store.request_stop("e2-gone", None, &actor).await.unwrap());
    let before = store.job("e1").await.unwrap().unwrap().lease_until.unwrap();
    let e1_held = *held.iter().find(|(id, _)| *id == e1).unwrap();
    let found = store
        .extend("a", &[e1_held], Duration::from_secs(40))
        .await
        .unwrap();
    assert_eq!(
        found,
        Extended {
            lost: vec![],
            stopping: vec![e1]
        }
    );
    assert!(store.job("e1").await.unwrap().unwrap().lease_until.unwrap() > before);
    assert!(
        store
            .audit_log(Some("e1"), 5)
            .await
            .unwrap()
            .iter()
            .any(|a| a.action == "stop" && a.who == "test")
    );
    // A later claim of e1 has another token: the old request stops nothing.
    store
        .execute_raw("UPDATE cron_table SET token = token + 1 WHERE name = 'e1'")
        .await
        .unwrap();
    let found = store
        .extend("a", &[(e1, e1_held.1 + 1)], Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(found, Extended::default());
}

/// Issue 52 (4): three nodes starting at once on an empty database apply the same file at the
/// same moment. Each apply read the table before the others' inserts, so all but one met a
/// unique-key violation ("create TOML job: duplicate key"), logged at ERROR on a clean start.
/// Now every apply succeeds, each job is created once, and its creation is audited once; the
/// calendars, applied just before the jobs at a start, the same.
async fn nodes_applying_one_file_at_once_create_each_job_once(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let stores = [db.store().await, db.store().await, db.store().await];
    for round in 0..3 {
        let jobs: Vec<sqlcron::model::job::JobSpec> = (0..60)
            .map(|i| sqlcron::model::job::JobSpec {
                name: format!("r{round}-job-{i}"),
                schedule: "@daily".into(),
                command: Some("true".into()),
                enabled: true,
                ..Default::default()
            })
            .collect();
        let actor = sqlcron::exec::account::this_process(None);
        // The calendars are applied first, as a starting node does: the same race.
        let calendars: Vec<(String, String)> = (0..20)
            .map(|i| {
                (
                    format!("r{round}-cal-{i}"),
                    "2026-12-25 Christmas".to_string(),
                )
            })
            .collect();
        let (a, b, c) = tokio::join!(
            stores[0].apply_calendars(&calendars, &actor),
            stores[1].apply_calendars(&calendars, &actor),
            stores[2].apply_calendars(&calendars, &actor),
        );
        for r in [a, b, c] {
            r.expect("a calendar apply beside others' succeeds");
        }
        let (a, b, c) = tokio::join!(
            stores[0].apply_toml(&jobs, false, &actor),
            stores[1].apply_toml(&jobs, false, &actor),
            stores[2].apply_toml(&jobs, false, &actor),
        );
        let created: usize = [a, b, c]
            .into_iter()
            .map(|r| r.expect("an apply beside others' succeeds").created.len())
            .sum();
        assert_eq!(created, jobs.len(), "round {round}: each job created once");
        let audited = stores[0]
            .audit_log(None, 10_000)
            .await
            .unwrap()
            .iter()
            .filter(|r| {
                r.action == "apply_create"
                    && r.job
                        .as_deref()
                        .is_some_and(|j| j.starts_with(&format!("r{round}-")))
            })
            .count();
        assert_eq!(
            audited,
            jobs.len(),
            "round {round}: one audit row per creation"
        );
    }
    // The same change of a file applied by three nodes at once: each job updated, or removed,
    // and audited once (before, each node that read the old definition wrote its own update and
    // audit row). Round 2's jobs (the ones left) change; then half of them go.
    let actor = sqlcron::exec::account::this_process(None);
    let file = |count: usize, schedule: &str| -> Vec<sqlcron::model::job::JobSpec> {
        (0..count)
            .map(|i| sqlcron::model::job::JobSpec {
                name: format!("r2-job-{i}"),
                schedule: schedule.into(),
                command: Some("true".into()),
                enabled: true,
                ..Default::default()
            })
            .collect()
    };
    let audited = |log: &[sqlcron::store::AuditRow], action: &str| {
        log.iter()
            .filter(|r| {
                r.action == action && r.job.as_deref().is_some_and(|j| j.starts_with("r2-"))
            })
            .count()
    };
    let changed = file(60, "@hourly");
    let (a, b, c) = tokio::join!(
        stores[0].apply_toml(&changed, false, &actor),
        stores[1].apply_toml(&changed, false, &actor),
        stores[2].apply_toml(&changed, false, &actor),
    );
    let updated: usize = [a, b, c]
        .into_iter()
        .map(|r| r.expect("an update beside others' succeeds").updated.len())
        .sum();
    assert_eq!(updated, 60, "each job updated once");
    let log = stores[0].audit_log(None, 10_000).await.unwrap();
    assert_eq!(
        audited(&log, "apply_update"),
        60,
        "one audit row per update"
    );
    // The same for a changed calendar (round 2's, the ones left).
    let cals: Vec<(String, String)> = (0..20)
        .map(|i| (format!("r2-cal-{i}"), "2026-12-26 Boxing Day".to_string()))
        .collect();
    let before = stores[0]
        .audit_log(None, 10_000)
        .await
        .unwrap()
        .iter()
        .filter(|r| r.action == "calendar_write")
        .count();
    let (a, b, c) = tokio::join!(
        stores[0].apply_calendars(&cals, &actor),
        stores[1].apply_calendars(&cals, &actor),
        stores[2].apply_calendars(&cals, &actor),
    );
    let written: usize = [a, b, c]
        .into_iter()
        .map(|r| {
            r.expect("a calendar change beside others' succeeds")
                .written
                .len()
        })
        .sum();
    assert_eq!(written, 20, "each calendar written once");
    let after = stores[0]
        .audit_log(None, 10_000)
        .await
        .unwrap()
        .iter()
        .filter(|r| r.action == "calendar_write")
        .count();
    assert_eq!(after - before, 20, "one audit row per calendar change");
    let fewer = file(30, "@hourly");
    let (a, b, c) = tokio::join!(
        stores[0].apply_toml(&fewer, false, &actor),
        stores[1].apply_toml(&fewer, false, &actor),
        stores[2].apply_toml(&fewer, false, &actor),
    );
    let removed: usize = [a, b, c]
        .into_iter()
        .map(|r| r.expect("a removal beside others' succeeds").removed.len())
        .sum();
    assert_eq!(removed, 30, "each job removed once");
    let log = stores[0].audit_log(None, 10_000).await.unwrap();
    assert_eq!(
        audited(&log, "apply_remove"),
        30,
        "one audit row per removal"
    );
    for s in stores {
        s.close().await;
    }
}

/// MySQL and MariaDB compare names without case: a TOML job `report` beside a row `Report`
/// made with SQL, or two TOML jobs `Backup` and `backup`, failed the apply's insert on the
/// unique key at every try, and the node never started ("database not ready; retrying").
/// Such a job is left alone and reported now; the other databases take both names.
async fn names_the_database_takes_for_one_are_reported_not_fatal(dialect: Dialect) {
    use sqlcron::config::{Environment, parse};
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    insert(&store, "Report", "@daily", "true").await;
    let file = parse(
        "[[job]]\nname=\"Backup\"\nschedule=\"@daily\"\ncommand=\"true\"\n\
         [[job]]\nname=\"backup\"\nschedule=\"@daily\"\ncommand=\"true\"\n\
         [[job]]\nname=\"report\"\nschedule=\"@daily\"\ncommand=\"true\"\n\
         [[job]]\nname=\"other\"\nschedule=\"@daily\"\ncommand=\"true\"\n",
        std::path::Path::new("t.toml"),
        &Environment::default(),
    )
    .unwrap();
    let actor = sqlcron::exec::account::this_process(None);
    let r = store.apply_toml(&file.jobs, false, &actor).await.unwrap();
    let names = store
        .scalars::<String>("SELECT name FROM cron_table ORDER BY id")
        .await
        .unwrap();
    if dialect == Dialect::Mysql {
        assert_eq!(r.created, ["Backup", "other"]);
        assert_eq!(
            r.twins,
            [
                ("backup".to_string(), "Backup".to_string()),
                ("report".to_string(), "Report".to_string())
            ]
        );
        assert_eq!(names, ["Report", "Backup", "other"]);
    } else {
        assert_eq!(r.created, ["Backup", "backup", "report", "other"]);
        assert!(r.twins.is_empty());
        assert_eq!(names.len(), 5);
    }
    // Applied again: nothing more, and no error.
    let again = store.apply_toml(&file.jobs, false, &actor).await.unwrap();
    assert!(
        again.created.is_empty() && again.updated.is_empty(),
        "{again:?}"
    );
    assert_eq!(again.twins.len(), r.twins.len());
    // A file that renames `Backup` to `backup` (only the case): the old row goes first, and the
    // new one is made (the twin of the row removed in the same apply was made neither).
    let renamed = parse(
        "[[job]]\nname=\"backup\"\nschedule=\"@daily\"\ncommand=\"true\"\n",
        std::path::Path::new("t.toml"),
        &Environment::default(),
    )
    .unwrap();
    // A dry run says what the apply does: no twin of a row it would remove.
    let dry = store.apply_toml(&renamed.jobs, true, &actor).await.unwrap();
    assert!(dry.twins.is_empty(), "{dry:?}");
    let r = store
        .apply_toml(&renamed.jobs, false, &actor)
        .await
        .unwrap();
    assert!(r.twins.is_empty(), "{r:?}");
    assert_eq!(
        (dry.created, dry.removed),
        (r.created.clone(), r.removed.clone())
    );
    assert!(r.removed.contains(&"Backup".to_string()), "{r:?}");
    let made: &[&str] = if dialect == Dialect::Mysql {
        &["backup"]
    } else {
        &[]
    };
    assert_eq!(r.created, made, "{r:?}");
    // Names compared byte for byte on every database.
    let exactly = |table: &str, name: &str| match dialect {
        Dialect::Mysql => format!(
            "SELECT COUNT(*) FROM {table} WHERE CAST(name AS BINARY) = CAST('{name}' AS BINARY)"
        ),
        _ => format!("SELECT COUNT(*) FROM {table} WHERE name = '{name}'"),
    };
    let count = |sql: String| {
        let store = &store;
        async move { store.scalar_i64(&sql).await.unwrap().unwrap() }
    };
    assert_eq!(count(exactly("cron_table", "backup")).await, 1);
    assert_eq!(count(exactly("cron_table", "Backup")).await, 0);
    // A calendar written with SQL whose name has a trailing space: MySQL compares names
    // without it, and the TOML's calendar of that name failed its insert at every try. There
    // it is given the file's name and entries, which the jobs look up by that exact name.
    store
        .execute_raw(
            "INSERT INTO cron_calendars (name, entries) VALUES ('holidays ', '2000-01-01 x')",
        )
        .await
        .unwrap();
    let defs = [("holidays".to_string(), "2001-01-01 y".to_string())];
    let c = store.apply_calendars(&defs, &actor).await.unwrap();
    assert_eq!(c.written, ["holidays"]);
    assert_eq!(count(exactly("cron_calendars", "holidays")).await, 1);
    let named = store
        .calendars_named(&["holidays".to_string()])
        .await
        .unwrap();
    assert_eq!(named.len(), 1);
    assert_eq!(
        (named[0].name.as_str(), named[0].entries.as_str()),
        ("holidays", "2001-01-01 y")
    );
    // The same for a start-rate budget: the nodes look a budget up by its exact name.
    store
        .execute_raw(
            "INSERT INTO cron_start_rate (name, per_second, burst, tat) VALUES ('cluster ', 1, 1, 0)",
        )
        .await
        .unwrap();
    let rates = std::collections::BTreeMap::from([(
        "cluster".to_string(),
        Some(sqlcron::model::start_rate::Rate {
            per_second: 5.0,
            burst: 2,
        }),
    )]);
    store.apply_start_rates(&rates).await.unwrap();
    assert_eq!(count(exactly("cron_start_rate", "cluster")).await, 1);
    // A run record at 2^62 and none below the row's wrapped token 1: that record is the
    // previous run (its holder died; the takeover accounts for it).
    store
        .execute_raw(&format!(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, outcome) \
             VALUES ('wrapped', 5, 1, 'gone', {}, 1, 'running')",
            1i64 << 62
        ))
        .await
        .unwrap();
    let previous = store.previous_run("wrapped", 1).await.unwrap().unwrap();
    assert_eq!((previous.slot, previous.token), (5, 1 << 62));
    assert!(store.previous_run("nothing", 1).await.unwrap().is_none());
    // Tokens a writer set below the wrap's end (2^61 to 2^62 are the wrap's) or, on SQLite, as
    // text (ordered above every number there): not a run before any, and not an error that
    // left the takeover's claim for good.
    store
        .execute_raw(&format!(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, outcome) \
             VALUES ('planted', 5, 1, 'gone', {}, 1, 'running')",
            (1i64 << 61) - 1
        ))
        .await
        .unwrap();
    if dialect == Dialect::Sqlite {
        store
            .execute_raw(
                "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, outcome) \
                 VALUES ('planted', 6, 1, 'gone', 'x', 1, 'running')",
            )
            .await
            .unwrap();
    }
    assert!(store.previous_run("planted", 1).await.unwrap().is_none());
    // Below the token, a record whose slot a writer made text (SQLite) is no run before it;
    // one whose outcome is not UTF-8 (SQLite, MariaDB) is read with replacements. Either
    // failed the look, and the takeover left its claim for good.
    let (slot_a, outcome_a, outcome_b) = match dialect {
        Dialect::Sqlite => ("'x'", "'running'", "CAST(X'FF' AS TEXT)"),
        Dialect::Mysql => ("7", "X'EDA080'", "'ok'"),
        Dialect::Postgres => ("7", "'running'", "'ok'"),
    };
    store
        .execute_raw(&format!(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, token, started, outcome) \
             VALUES ('odd', {slot_a}, 1, 'gone', 3, 1, {outcome_a}), \
             ('odd', 6, 1, 'gone', 2, 1, {outcome_b})"
        ))
        .await
        .unwrap();
    let previous = store.previous_run("odd", 4).await.unwrap().unwrap();
    let expected = if dialect == Dialect::Sqlite { 2 } else { 3 };
    assert_eq!(previous.token, expected, "{previous:?}");
    // A MySQL calendar twin the file's calendar was given the name of is not then removed as
    // a calendar the file no longer defines (it was, in the same apply).
    if dialect != Dialect::Mysql {
        // (There the row made with SQL is a row of its own, from before.)
        store
            .execute_raw("DELETE FROM cron_calendars WHERE name = 'holidays '")
            .await
            .unwrap();
    }
    store
        .execute_raw("UPDATE cron_calendars SET name = 'holidays ' WHERE name = 'holidays'")
        .await
        .unwrap();
    let c = store.apply_calendars(&defs, &actor).await.unwrap();
    assert_eq!(c.written, ["holidays"], "{c:?}");
    assert_eq!(count(exactly("cron_calendars", "holidays")).await, 1);
    assert_eq!(
        store
            .calendars_named(&["holidays".to_string()])
            .await
            .unwrap()
            .len(),
        1
    );
    store.close().await;
}

async fn toml_apply_creates_updates_and_removes_only_toml_jobs(dialect: Dialect) {
    use sqlcron::config::{Environment, parse};
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    insert(&store, "from-sql", "@daily", "true").await;
    let v1 = parse(
        "[[job]]\nname=\"a\"\nschedule=\"@hourly\"\ncommand=\"true\"\nretries=2\n[[job]]\nname=\"b\"\nschedule=\"@daily\"\nargv=[\"/bin/echo\",\"x\"]\nenv={K=\"v\"}\n[[job]]\nname=\"from-sql\"\nschedule=\"@daily\"\ncommand=\"false\"\n",
        std::path::Path::new("t.toml"),
        &Environment::default(),
    )
    .unwrap();
    let dry = store
        .apply_toml(&v1.jobs, true, &sqlcron::exec::account::this_process(None))
        .await
        .unwrap();
    assert_eq!(dry.created, vec!["a", "b"]);
    assert_eq!(
        store.jobs().await.unwrap().len(),
        1,
        "dry run changes nothing"
    );
    let r = store
        .apply_toml(&v1.jobs, false, &sqlcron::exec::account::this_process(None))
        .await
        .unwrap();
    assert_eq!(r.created, vec!["a", "b"]);
    assert_eq!(r.conflicts, vec!["from-sql"]);
    let a = store.job("a").await.unwrap().unwrap();
    assert_eq!(a.source, "toml");
    assert_eq!(
        a.policy.get("retries").cloned().flatten().as_deref(),
        Some("2")
    );
    let b = store.job("b").await.unwrap().unwrap();
    assert_eq!(b.argv.as_deref(), Some("[\"/bin/echo\",\"x\"]"));
    assert_eq!(b.env.as_deref(), Some("{\"K\":\"v\"}"));
    // Unchanged: nothing to do.
    let again = store
        .apply_toml(&v1.jobs, false, &sqlcron::exec::account::this_process(None))
        .await
        .unwrap();
    assert!(again.created.is_empty() && again.updated.is_empty() && again.removed.is_empty());
    let v2 = parse(
        "[[job]]\nname=\"a\"\nschedule=\"*/5 * * * *\"\ncommand=\"true\"\n",
        std::path::Path::new("t.toml"),
        &Environment::default(),
    )
    .unwrap();
    let r = store
        .apply_toml(&v2.jobs, false, &sqlcron::exec::account::this_process(None))
        .await
        .unwrap();
    assert_eq!(r.updated, vec!["a"]);
    assert_eq!(r.removed, vec!["b"]);
    let names: Vec<String> = store
        .jobs()
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.name)
        .collect();
    assert_eq!(names, vec!["a", "from-sql"]);
    let a = store.job("a").await.unwrap().unwrap();
    assert_eq!(a.schedule, "*/5 * * * *");
    assert_eq!(a.policy.get("retries").cloned().flatten(), None);
}

async fn pool_deferral_keeps_the_slot_and_a_lost_rerun(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let pools = std::collections::BTreeMap::from([("p".to_string(), 1u32)]);
    store.apply_pools(&pools).await.unwrap();
    insert(&store, "a", "* * * * *", "true").await;
    insert(&store, "b", "* * * * *", "true").await;
    store
        .execute_raw("UPDATE cron_table SET pool = 'p'")
        .await
        .unwrap();
    make_due(&store, "a").await;
    make_due(&store, "b").await;
    let (_, rows) = store.claim("n", 2, Duration::from_secs(10)).await.unwrap();
    assert_eq!(rows.len(), 2);
    let (first, second) = if (rows[0].claimed_at, rows[0].id) <= (rows[1].claimed_at, rows[1].id) {
        (&rows[0], &rows[1])
    } else {
        (&rows[1], &rows[0])
    };
    // Pool of one: the earlier claim runs, the later waits.
    assert_eq!(
        store
            .pool_admit(first.id, "p", first.claimed_at.unwrap())
            .await
            .unwrap(),
        Some(true)
    );
    assert_eq!(
        store
            .pool_admit(second.id, "p", second.claimed_at.unwrap())
            .await
            .unwrap(),
        Some(false)
    );
    assert_eq!(store.pool_admit(second.id, "nope", 0).await.unwrap(), None);
    // Both claims live in a pool of one: no room; an unknown pool has none either.
    assert!(!store.pool_has_room("p").await.unwrap());
    assert!(!store.pool_has_room("nope").await.unwrap());
    // Deferred while owing a lost run's rerun: the row remembers it.
    let fenced = store
        .defer_for_pool(
            second.id,
            "n",
            second.token,
            Duration::from_secs(1),
            Some((1_000, 1)),
        )
        .await
        .unwrap();
    assert_eq!(fenced, Fenced::Done);
    let waiting = store.job(&second.name).await.unwrap().unwrap();
    assert_eq!(
        (waiting.pool_wait, waiting.slot, waiting.attempt),
        (sqlcron::store::PoolWait::OwesRerun, Some(1_000), 1)
    );
    assert_eq!(waiting.exec_by, None);
    // One live claim left, the pool's size: still no room.
    assert!(!store.pool_has_room("p").await.unwrap());
    // A plain deferral keeps the slot; a release clears the wait.
    let fenced = store
        .defer_for_pool(first.id, "n", first.token, Duration::from_secs(1), None)
        .await
        .unwrap();
    assert_eq!(fenced, Fenced::Done);
    // No live claim: a place is free, and the longest waiter (the lost run's older slot) is
    // brought forward, one at a time.
    assert!(store.pool_has_room("p").await.unwrap());
    assert_eq!(store.pool_place_freed("p").await.unwrap(), 1);
    let plain = store.job(&first.name).await.unwrap().unwrap();
    assert_eq!(
        (plain.pool_wait, plain.slot),
        (sqlcron::store::PoolWait::Waiting, first.slot)
    );
    store
        .execute_raw(&format!(
            "UPDATE cron_table SET next_exec = 0 WHERE id = {}",
            first.id
        ))
        .await
        .unwrap();
    let (_, again) = store.claim("n", 1, Duration::from_secs(10)).await.unwrap();
    let release = Release {
        slot: 5,
        attempts: 0,
        next_exec: 5,
        clear_run_now: false,
        outcome: None,
    };
    store
        .release(again[0].id, "n", again[0].token, &release, None)
        .await
        .unwrap();
    assert_eq!(
        store.job(&again[0].name).await.unwrap().unwrap().pool_wait,
        sqlcron::store::PoolWait::No
    );
}

/// Issue 9 (1): a node never claims a row it still supervises.
async fn claim_leaves_out_rows_the_node_supervises(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    insert(&store, "x", "* * * * *", "true").await;
    insert(&store, "y", "* * * * *", "true").await;
    make_due(&store, "x").await;
    make_due(&store, "y").await;
    let x = store.job("x").await.unwrap().unwrap();
    let (_, rows) = store
        .claim_excluding("a", 10, Duration::from_secs(10), &[x.id], &[])
        .await
        .unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["y"]);
    let (_, rows) = store
        .claim_excluding("a", 10, Duration::from_secs(10), &[x.id, rows[0].id], &[])
        .await
        .unwrap();
    assert!(rows.is_empty());
    let (_, rows) = store.claim("a", 10, Duration::from_secs(10)).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].name, "x");
}

/// The claim itself reads the node's drain flag: a pass acting on a peek taken before the drain
/// (or on a reused one) claims nothing once the flag is written, so `drain --wait` cannot see
/// the node idle while a claim of it is still to come.
async fn a_drained_node_claims_nothing_whatever_its_peek_said(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    store.register_node("a", "host", 1, "", &[]).await.unwrap();
    store.register_node("b", "host", 2, "", &[]).await.unwrap();
    insert(&store, "x", "* * * * *", "true").await;
    make_due(&store, "x").await;
    let peek = store.peek("a", &[], true).await.unwrap();
    assert!(!peek.drain);
    assert!(peek.next_due.is_some_and(|d| d <= peek.now));
    let actor = sqlcron::model::actor::Actor {
        who: "test".into(),
        host: None,
        pid: None,
    };
    assert!(store.set_drain("a", true, &actor).await.unwrap());
    let (_, rows) = store.claim("a", 10, Duration::from_secs(10)).await.unwrap();
    assert!(rows.is_empty(), "a drained node claimed {rows:?}");
    let x = store.job("x").await.unwrap().unwrap();
    let placements = ["p".to_string()];
    let (_, rows) = store
        .claim_excluding("a", 10, Duration::from_secs(10), &[x.id + 1], &placements)
        .await
        .unwrap();
    assert!(rows.is_empty(), "a drained node claimed {rows:?}");
    assert_eq!(store.running_on("a").await.unwrap(), 0);
    // Another node is not held back by it, and the node claims again once undrained.
    let (_, rows) = store.claim("b", 10, Duration::from_secs(10)).await.unwrap();
    assert_eq!(rows.len(), 1);
    make_due(&store, "x").await;
    store
        .execute_raw("UPDATE cron_table SET exec_by = NULL, lease_until = NULL")
        .await
        .unwrap();
    assert!(store.set_drain("a", false, &actor).await.unwrap());
    let (_, rows) = store.claim("a", 10, Duration::from_secs(10)).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].exec_by.as_deref(), Some("a"));
}

/// Issue 9 (8): parking is one fenced write, and a fix to any definition or policy column of a
/// parked row un-parks it; the same change on a healthy row keeps its schedule state.
async fn park_is_fenced_and_any_definition_fix_unparks(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    insert(&store, "p", "* * * * *", "true").await;
    insert(&store, "h", "* * * * *", "true").await;
    make_due(&store, "p").await;
    let (_, rows) = store.claim("a", 1, Duration::from_secs(10)).await.unwrap();
    let row = &rows[0];
    assert_eq!(
        store.park(row.id, "a", row.token + 1, "bad").await.unwrap(),
        Fenced::Lost
    );
    assert_eq!(
        store.park(row.id, "b", row.token, "bad").await.unwrap(),
        Fenced::Lost
    );
    assert_eq!(
        store
            .park(row.id, "a", row.token, "env: not a JSON object")
            .await
            .unwrap(),
        Fenced::Done
    );
    let parked = store.job("p").await.unwrap().unwrap();
    assert_eq!(parked.next_exec, Some(PARKED));
    assert_eq!(parked.exec_by, None);
    assert_eq!(parked.error.as_deref(), Some("env: not a JSON object"));
    for fix in [
        "env = '{}'",
        "workdir = '/tmp'",
        "retries = 2",
        "pool = 'p1'",
        "on_lease_lost = 'ignore'",
    ] {
        store
            .execute_raw(&format!(
                "UPDATE cron_table SET error = 'still bad', next_exec = {PARKED} WHERE name = 'p'"
            ))
            .await
            .unwrap();
        store
            .execute_raw(&format!("UPDATE cron_table SET {fix} WHERE name = 'p'"))
            .await
            .unwrap();
        let row = store.job("p").await.unwrap().unwrap();
        assert_eq!((row.next_exec, row.error.as_deref()), (None, None), "{fix}");
    }
    // A healthy row keeps its state when a policy column changes.
    store
        .execute_raw(
            "UPDATE cron_table SET next_exec = 5000, slot = 5000, attempt = 1 WHERE name = 'h'",
        )
        .await
        .unwrap();
    store
        .execute_raw("UPDATE cron_table SET retries = 3, env = '{}' WHERE name = 'h'")
        .await
        .unwrap();
    let h = store.job("h").await.unwrap().unwrap();
    assert_eq!(
        (h.next_exec, h.slot, h.attempt),
        (Some(5000), Some(5000), 1)
    );
}

/// The columns added after the first schema, changed with SQL: each un-parks a parked row and
/// is written to the audit trail (a signature too: it decides whether nodes that require one run
/// the row, migration 0024/0021/0022); a
/// claim and a release of the row write nothing to the audit trail and keep the slot they set.
/// On MySQL every one of them goes through the one guarded trigger per event (migration 0020).
async fn each_later_definition_column_unparks_and_is_audited_and_a_run_is_not(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    insert(&store, "p", "* * * * *", "true").await;
    let audited = |store: &Store| {
        let store = store.clone();
        async move {
            let mut log = store.audit_log(Some("p"), 100).await.unwrap();
            log.retain(|a| a.action == "sql_update");
            log.sort_by_key(|a| a.id);
            log.into_iter()
                .map(|a| a.detail.unwrap_or_default())
                .collect::<Vec<_>>()
        }
    };
    let columns: [(&str, &str, Option<&str>); 8] = [
        ("alerts", "'{}'", Some("alerts")),
        ("placement", "'zone-a'", Some("placement")),
        ("overlap", "'forbid'", Some("overlap")),
        ("http", "'{}'", Some("http")),
        ("signature", "'sig'", Some("signature")),
        ("calendars", "'[]'", Some("calendars")),
        ("requires", "'[]'", Some("requires")),
        ("after_jobs", "'[]'", Some("after")),
    ];
    for (column, value, word) in columns {
        store
            .execute_raw(&format!(
                "UPDATE cron_table SET error = 'bad', next_exec = {PARKED} WHERE name = 'p'"
            ))
            .await
            .unwrap();
        let before = audited(&store).await.len();
        store
            .execute_raw(&format!(
                "UPDATE cron_table SET {column} = {value} WHERE name = 'p'"
            ))
            .await
            .unwrap();
        let row = store.job("p").await.unwrap().unwrap();
        assert_eq!(
            (row.next_exec, row.error.as_deref()),
            (None, None),
            "{column} un-parks"
        );
        let log = audited(&store).await;
        match word {
            Some(word) => {
                assert_eq!(log.len(), before + 1, "{column}: {log:?}");
                assert!(log[before].contains(word), "{column}: {log:?}");
            }
            None => assert_eq!(log.len(), before, "{column}: {log:?}"),
        }
    }
    // A run: claimed, started, released. No audit row, and the release's next slot stands. (Its
    // placement away first: a claim takes a placed row only with its value.)
    store
        .execute_raw("UPDATE cron_table SET placement = NULL WHERE name = 'p'")
        .await
        .unwrap();
    let before = audited(&store).await.len();
    make_due(&store, "p").await;
    let (rows, keys) = crate::util::claim_and_start(&store, "a", 1, 1_000).await;
    assert_eq!(rows.len(), 1);
    let release = crate::util::ok_release(61_000, "ran\n");
    assert_eq!(
        store
            .release(rows[0].id, "a", rows[0].token, &release, Some(&keys[0]))
            .await
            .unwrap(),
        Fenced::Done
    );
    let row = store.job("p").await.unwrap().unwrap();
    assert_eq!((row.next_exec, row.exec_by), (Some(61_000), None));
    assert_eq!(audited(&store).await.len(), before);
}

/// Issue 9 (2): output with NUL bytes (PostgreSQL's `text` refuses them) or larger than the
/// dialect stores is written, not retried until the lease is lost.
async fn output_the_database_cannot_store_is_made_storable(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    insert(&store, "n", "* * * * *", "true").await;
    make_due(&store, "n").await;
    let (_, rows) = store.claim("a", 1, Duration::from_secs(10)).await.unwrap();
    let row = &rows[0];
    let key = RunKey {
        job: "n".into(),
        slot: 1_000,
        attempt: 1,
    };
    store.start_run(row.id, "a", row.token, &key).await.unwrap();
    let big = "é".repeat(dialect.output_max()); // twice the limit in bytes
    let release = Release {
        slot: 61_000,
        attempts: 0,
        next_exec: 61_000,
        clear_run_now: false,
        outcome: Some(RunResult {
            outcome: sqlcron::model::job::Outcome::Ok,
            exit_code: Some(0),
            signal: None,
            started: 1_000,
            output: format!("{big}a\0b\u{FFFD}\n"),
            message: Some("m\0".into()),
        }),
    };
    assert_eq!(
        store
            .release(row.id, "a", row.token, &release, Some(&key))
            .await
            .unwrap(),
        Fenced::Done
    );
    let h = store.history(Some("n"), 1).await.unwrap().remove(0);
    let out = h.output.unwrap();
    assert!(
        out.ends_with("a\u{FFFD}b\u{FFFD}\n"),
        "{}",
        &out[out.len() - 20..]
    );
    assert!(out.len() <= dialect.output_max());
    assert!(out.len() > dialect.output_max() - 4);
    assert_eq!(h.message.as_deref(), Some("m\u{FFFD}"));
}

/// Issue 9 (4): the run a takeover must account for is found by token order, whatever the
/// holders in between did (a chain: A started it, B claimed and started nothing, C looks).
async fn previous_run_is_found_by_token_order_across_a_takeover_chain(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    insert(&store, "c", "* * * * *", "true").await;
    make_due(&store, "c").await;
    let (_, a) = store.claim("A", 1, Duration::from_millis(1)).await.unwrap();
    let key = RunKey {
        job: "c".into(),
        slot: 1_000,
        attempt: 1,
    };
    store
        .start_run(a[0].id, "A", a[0].token, &key)
        .await
        .unwrap();
    let mut last = a[0].clone();
    for node in ["B", "C"] {
        store
            .execute_raw("UPDATE cron_table SET next_exec = 0, lease_until = 0")
            .await
            .unwrap();
        let (_, rows) = store.claim(node, 1, Duration::from_secs(10)).await.unwrap();
        last = rows[0].clone();
    }
    assert_eq!(last.token, a[0].token + 2);
    assert_eq!(last.prev_exec_by.as_deref(), Some("B"));
    let prev = store.previous_run("c", last.token).await.unwrap().unwrap();
    assert_eq!(
        (prev.slot, prev.attempt, prev.token),
        (1_000, 1, a[0].token)
    );
    assert_eq!(prev.outcome, Ok(sqlcron::model::job::Outcome::Running));
    assert_eq!(store.previous_run("c", a[0].token).await.unwrap(), None);
}

/// Issue 9 (11): a job deleted and created again keeps a fencing token above every token its
/// history holds, so a job's own storage never sees the token go back.
async fn fencing_token_never_decreases_when_a_row_is_recreated(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    store
        .execute_raw(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, token, outcome) \
             VALUES ('t', 1000, 1, 'a', 41, 'ok')",
        )
        .await
        .unwrap();
    insert(&store, "t", "* * * * *", "true").await;
    let row = store.rows_to_prepare(10).await.unwrap().remove(0);
    assert_eq!(row.token, 0);
    assert!(store.set_prepared(row.id, 1_000, 1_000).await.unwrap());
    make_due(&store, "t").await;
    let (_, rows) = store.claim("a", 1, Duration::from_secs(10)).await.unwrap();
    assert_eq!(rows[0].token, 42);
    // A writer who sets the token back (a daemon column an editor's UPDATE reaches): clearing
    // next_exec, as docs/http-jobs.md says, prepares the row above its history's tokens again.
    store
        .execute_raw(
            "INSERT INTO cron_runs (job_name, slot, attempt, node, token, outcome) \
             VALUES ('t', 2000, 1, 'a', 42, 'ok')",
        )
        .await
        .unwrap();
    store
        .execute_raw(
            "UPDATE cron_table SET token = 0, exec_by = NULL, lease_until = NULL, \
             next_exec = NULL WHERE name = 't'",
        )
        .await
        .unwrap();
    let row = store.rows_to_prepare(10).await.unwrap().remove(0);
    assert!(store.set_prepared(row.id, 3_000, 3_000).await.unwrap());
    make_due(&store, "t").await;
    let (_, rows) = store.claim("a", 1, Duration::from_secs(10)).await.unwrap();
    assert_eq!(rows[0].token, 43);
}

/// Issue 9 (11): applying a changed TOML job keeps a pause made with `sqlcron pause`; a change
/// of the TOML's own `enabled` still applies.
async fn toml_update_keeps_a_pause(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let job = |command: &str, enabled: bool| sqlcron::model::job::JobSpec {
        name: "k".into(),
        schedule: "@daily".into(),
        timezone: None,
        command: Some(command.into()),
        argv: None,
        env: Default::default(),
        workdir: None,
        enabled,
        pool: None,
        overrides: Default::default(),
        ..Default::default()
    };
    store
        .apply_toml(
            &[job("true", true)],
            false,
            &sqlcron::exec::account::this_process(None),
        )
        .await
        .unwrap();
    assert!(
        store
            .set_enabled("k", false, &sqlcron::exec::account::this_process(None))
            .await
            .unwrap()
    );
    let report = store
        .apply_toml(
            &[job("echo changed", true)],
            false,
            &sqlcron::exec::account::this_process(None),
        )
        .await
        .unwrap();
    assert_eq!(report.updated, ["k"]);
    let row = store.job("k").await.unwrap().unwrap();
    assert_eq!(row.command.as_deref(), Some("echo changed"));
    assert!(!row.enabled, "the pause survives an update");
    store
        .apply_toml(
            &[job("echo changed", false)],
            false,
            &sqlcron::exec::account::this_process(None),
        )
        .await
        .unwrap();
    store
        .apply_toml(
            &[job("echo changed", true)],
            false,
            &sqlcron::exec::account::this_process(None),
        )
        .await
        .unwrap();
    assert!(
        store.job("k").await.unwrap().unwrap().enabled,
        "the TOML turned it on"
    );
}

/// Issue 9 (5, 9): the daemon's connections carry a statement and lock-wait timeout, and a
/// statement that runs into it is reported as a timeout, not as "database unreachable".
async fn statement_timeout_bounds_every_statement_and_says_so(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    db.store().await;
    let timeout = Duration::from_millis(800);
    let store = Store::connect_with(&crate::util::db_url(&db.url), 2, Some(timeout)).unwrap();
    insert(&store, "t", "* * * * *", "true").await;
    // Another connection holds the row (SQLite: the database) in an open transaction.
    let pool = sqlx::AnyPool::connect(&db.url).await.unwrap();
    let mut lock = pool.begin().await.unwrap();
    sqlx::query("UPDATE cron_table SET workdir = workdir WHERE name = 't'")
        .execute(&mut *lock)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = store
        .execute_raw("UPDATE cron_table SET workdir = '/x' WHERE name = 't'")
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.kind(), "timeout", "{err}");
    assert!(took < Duration::from_secs(5), "waited {took:?}");
    lock.rollback().await.unwrap();
    pool.close().await;
    // A statement that runs long is bounded too (SQLite has no such statement to run).
    let slow = match dialect {
        Dialect::Postgres => Some("SELECT pg_sleep(3)"),
        Dialect::Mysql => Some("SELECT SLEEP(3) FROM cron_table"),
        Dialect::Sqlite => None,
    };
    if let Some(slow) = slow {
        let started = std::time::Instant::now();
        let outcome = store.execute_raw(slow).await;
        assert!(
            started.elapsed() < Duration::from_millis(2500),
            "{outcome:?}"
        );
        if let Err(e) = outcome {
            assert_eq!(e.kind(), "timeout", "{e}");
        }
    }
    // No server at all: unreachable.
    let gone = Store::connect(
        &crate::util::db_url(&format!(
            "postgres://postgres@127.0.0.1:{}/x",
            crate::util::free_port()
        )),
        1,
    )
    .unwrap();
    assert_eq!(gone.now().await.unwrap_err().kind(), "unreachable");
}

/// Issue 9 (9): a deadlock is reported as a deadlock (PostgreSQL and MariaDB detect it and fail
/// one of the two transactions), not as "database unreachable".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlock_is_reported_as_a_deadlock() {
    for dialect in [Dialect::Postgres, Dialect::Mysql] {
        let db = TestDb::new(dialect).await;
        let store = db.store().await;
        insert(&store, "a", "* * * * *", "true").await;
        insert(&store, "b", "* * * * *", "true").await;
        let pool = sqlx::AnyPool::connect(&db.url).await.unwrap();
        let mut one = pool.begin().await.unwrap();
        let mut two = pool.begin().await.unwrap();
        let touch =
            |job: &str| format!("UPDATE cron_table SET workdir = '/{job}' WHERE name = '{job}'");
        sqlx::query(sqlx::AssertSqlSafe(touch("a")))
            .execute(&mut *one)
            .await
            .unwrap();
        sqlx::query(sqlx::AssertSqlSafe(touch("b")))
            .execute(&mut *two)
            .await
            .unwrap();
        let first = async {
            let r = sqlx::query(sqlx::AssertSqlSafe(touch("b")))
                .execute(&mut *one)
                .await;
            (r, one)
        };
        let second = async {
            // Let the first one wait on the lock before closing the cycle.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let r = sqlx::query(sqlx::AssertSqlSafe(touch("a")))
                .execute(&mut *two)
                .await;
            (r, two)
        };
        let ((r1, one), (r2, two)) = tokio::join!(first, second);
        let failed = [r1.err(), r2.err()]
            .into_iter()
            .flatten()
            .next()
            .expect("one deadlocked");
        let err = sqlcron::store::StoreError::Sql {
            dialect: dialect.name(),
            op: "test",
            source: failed,
        };
        assert_eq!(err.kind(), "deadlock", "{dialect:?}: {err}");
        let _ = one.rollback().await;
        let _ = two.rollback().await;
        pool.close().await;
    }
}

/// Issue 29: a batch (multi-row statements on PostgreSQL and SQLite) writes to each row and run
/// exactly what the same releases written one by one write: a run's end with its outcome, a
/// release without a run (the history untouched), a failed run with a message, a manual run
/// that clears `run_now`, and a row changed with SQL meanwhile (`dirty`: its slot is
/// recomputed).
async fn a_batch_of_releases_writes_what_single_releases_write(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let failed = Release {
        slot: 62_000,
        attempts: 1,
        next_exec: 70_000,
        clear_run_now: false,
        outcome: Some(RunResult {
            outcome: sqlcron::model::job::Outcome::Failed,
            exit_code: Some(3),
            signal: None,
            started: 1_500,
            output: "oops\n".into(),
            message: Some("exit status 3".into()),
        }),
    };
    let manual = Release {
        clear_run_now: true,
        ..crate::util::ok_release(80_000, "by hand\n")
    };
    let quiet = Release {
        outcome: None,
        ..crate::util::ok_release(90_000, "")
    };
    let ok = crate::util::ok_release(61_000, "fine\n");
    // Much output, not all of it ASCII: written whole, like a single release writes it.
    let big = crate::util::ok_release(63_000, &"ünïcode line of output\n".repeat(20_000));
    // (release, whether its run's end is recorded, whether the row was made dirty meanwhile,
    // whether a manual run was asked for meanwhile)
    let cases: [(&Release, bool, bool, bool); 7] = [
        (&ok, true, false, false),
        (&quiet, false, false, false),
        (&failed, true, false, false),
        (&manual, true, false, false),
        (&ok, true, true, false),
        (&big, true, false, false),
        (&ok, true, false, true),
    ];
    let mut seen = Vec::new();
    for (set, together) in [("alone", false), ("batch", true)] {
        for (i, (release, _, _, _)) in cases.iter().enumerate() {
            let name = format!("{set}{i}");
            insert(&store, &name, "* * * * *", "true").await;
            make_due(&store, &name).await;
            if release.clear_run_now {
                store
                    .execute_raw(&format!(
                        "UPDATE cron_table SET run_now = 1 WHERE name = '{name}'"
                    ))
                    .await
                    .unwrap();
            }
        }
        let (mut rows, mut keys) = crate::util::claim_and_start(&store, "a", 10, 1_000).await;
        assert_eq!(rows.len(), cases.len(), "{set}");
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|&i| rows[i].name.clone());
        rows = order.iter().map(|&i| rows[i].clone()).collect();
        keys = order.iter().map(|&i| keys[i].clone()).collect();
        for (r, (_, _, dirty, asked)) in rows.iter().zip(&cases) {
            for (meanwhile, set) in [(dirty, "dirty = 1"), (asked, "run_now = 1")] {
                if *meanwhile {
                    store
                        .execute_raw(&format!("UPDATE cron_table SET {set} WHERE id = {}", r.id))
                        .await
                        .unwrap();
                }
            }
        }
        let batch: Vec<ReleaseOf<'_>> = rows
            .iter()
            .zip(&keys)
            .zip(&cases)
            .map(|((r, k), (release, run, _, _))| ReleaseOf {
                id: r.id,
                token: r.token,
                release,
                run: run.then_some(k),
            })
            .collect();
        let fenced = if together {
            store.release_together("a", &batch).await.unwrap()
        } else {
            let mut each = Vec::new();
            for b in &batch {
                each.push(
                    store
                        .release(b.id, "a", b.token, b.release, b.run)
                        .await
                        .unwrap(),
                );
            }
            each
        };
        assert_eq!(fenced, vec![Fenced::Done; cases.len()], "{set}");
        let mut written = Vec::new();
        for r in &rows {
            let j = store.job(&r.name).await.unwrap().unwrap();
            let h = &store.history(Some(&r.name), 1).await.unwrap()[0];
            // A manual run asked for meanwhile is due at once, by the database clock.
            let next_exec = j.next_exec.map(|n| {
                if n > 1_000_000_000_000 {
                    "now".to_string()
                } else {
                    n.to_string()
                }
            });
            written.push(format!(
                "next_exec={:?} slot={:?} attempt={} exec_by={:?} run_now={} status={:?} \
                 exit={:?} start={:?} node={:?} | {} {:?} {:?} {:?} ended={}",
                next_exec,
                j.slot,
                j.attempt,
                j.exec_by,
                j.run_now,
                j.last_status,
                j.last_exit,
                j.last_start,
                j.last_node,
                h.outcome,
                h.exit_code,
                h.output.as_deref().map(|o| if o.len() > 100 {
                    format!("{} bytes of {:?}", o.len(), &o[..25])
                } else {
                    o.to_string()
                }),
                h.message,
                h.ended.is_some(),
            ));
        }
        seen.push(written);
        // Their next slots are long past: out of the way of the next set's claim.
        store
            .execute_raw(&format!(
                "UPDATE cron_table SET enabled = 0 WHERE name LIKE '{set}%'"
            ))
            .await
            .unwrap();
    }
    for (alone, together) in seen[0].iter().zip(&seen[1]) {
        assert_eq!(alone, together, "a batch writes what single releases write");
    }
    // And what they write is what was asked.
    assert!(
        seen[1][0].contains("next_exec=Some(\"61000\")"),
        "{}",
        seen[1][0]
    );
    assert!(seen[1][1].contains("| running"), "{}", seen[1][1]);
    assert!(seen[1][2].contains("| failed Some(3)"), "{}", seen[1][2]);
    assert!(seen[1][3].contains("run_now=false"), "{}", seen[1][3]);
    assert!(seen[1][4].contains("next_exec=None"), "{}", seen[1][4]);
    assert!(
        seen[1][5].contains("| ok Some(0) Some(\"500000 bytes of "),
        "the whole output: {}",
        seen[1][5]
    );
    assert!(
        seen[1][6].contains("next_exec=Some(\"now\")"),
        "{}",
        seen[1][6]
    );
}

/// A freed pool place wakes only a row still waiting when it is written. On PostgreSQL the
/// wake-up's subquery reads its statement's snapshot: a row claimed meanwhile (its claim holding
/// the row's lock until it commits) was made due at once, and the claim was taken over while its
/// run went on, two runs of one slot (seen as `locks::postgres::pool_of_two_across_three_nodes`
/// under load). Here the claim holds the lock while the wake-up waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_waiter_claimed_meanwhile_is_not_woken() {
    use sqlx::Connection;
    let db = TestDb::new(Dialect::Postgres).await;
    let store = db.store().await;
    insert(&store, "w", "* * * * *", "true").await;
    store
        .execute_raw(
            "UPDATE cron_table SET pool = 'p', pool_wait = 1, slot = 1000, \
             next_exec = CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS BIGINT) + 60000 \
             WHERE name = 'w'",
        )
        .await
        .unwrap();
    let mut claimer = sqlx::PgConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql(
        "BEGIN; UPDATE cron_table SET exec_by = 'n', token = token + 1, \
         lease_until = 9000000000000, next_exec = 9000000000000 WHERE name = 'w'",
    )
    .execute(&mut claimer)
    .await
    .unwrap();
    let waker = store.clone();
    let woken = tokio::spawn(async move { waker.pool_place_freed("p").await });
    // The wake-up waits for the claim's row lock.
    crate::util::eventually(Duration::from_secs(10), "the wake-up waits", || async {
        let n = store
            .scalar_i64(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock' AND query LIKE 'UPDATE cron_table SET next_exec%'",
            )
            .await
            .unwrap();
        (n == Some(1)).then_some(())
    })
    .await;
    sqlx::raw_sql("COMMIT").execute(&mut claimer).await.unwrap();
    assert_eq!(
        woken.await.unwrap().unwrap(),
        0,
        "a claimed row is not woken"
    );
    let row = store.job("w").await.unwrap().unwrap();
    assert_eq!(
        (row.exec_by.as_deref(), row.next_exec),
        (Some("n"), Some(9_000_000_000_000)),
        "the claim's lease end stands"
    );
    claimer.close().await.unwrap();
    store.close().await;
}

/// The dashboard's "Running now" (`Store::running`) lists the rows a node holds, by name, and
/// not once they are released. It was always empty on PostgreSQL and SQLite, which never set
/// the `claim_id` it read.
async fn running_lists_the_rows_held_now(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    for name in ["b", "a", "idle"] {
        insert(&store, name, "* * * * *", "true").await;
    }
    make_due(&store, "a").await;
    make_due(&store, "b").await;
    assert!(store.running(20).await.unwrap().is_empty());
    let (rows, keys) = crate::util::claim_and_start(&store, "n1", 10, 1_000).await;
    assert_eq!(rows.len(), 2);
    let names =
        |rows: Vec<sqlcron::store::JobRow>| rows.into_iter().map(|r| r.name).collect::<Vec<_>>();
    assert_eq!(names(store.running(20).await.unwrap()), ["a", "b"]);
    assert_eq!(names(store.running(1).await.unwrap()), ["a"]);
    let a = rows.iter().position(|r| r.name == "a").unwrap();
    let release = crate::util::ok_release(61_000, "");
    assert_eq!(
        store
            .release(rows[a].id, "n1", rows[a].token, &release, Some(&keys[a]))
            .await
            .unwrap(),
        Fenced::Done
    );
    assert_eq!(names(store.running(20).await.unwrap()), ["b"]);
}

/// A row another session holds (an operator's transaction left open in a console, a node's
/// release or lease extension in flight). PostgreSQL's claim skips it (`SKIP LOCKED`) and takes
/// the other due rows at once, and the held row once it is let go. MySQL's claim waits for it,
/// at most the lock timeout, and fails with an error of kind `timeout`, having claimed nothing;
/// its sessions run at READ COMMITTED, so that claims take no locks between the due rows
/// (docs/databases.md). SQLite has one writer at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_another_session_holds_is_skipped_or_waited_for_within_the_lock_timeout() {
    for dialect in [Dialect::Postgres, Dialect::Mysql] {
        let db = TestDb::new(dialect).await;
        db.store().await;
        let store = Store::connect_with(
            &crate::util::db_url(&db.url),
            2,
            Some(Duration::from_secs(2)),
        )
        .unwrap();
        if dialect == Dialect::Mysql {
            let level = store
                .scalar_i64("SELECT @@session.tx_isolation = 'READ-COMMITTED'")
                .await
                .unwrap();
            assert_eq!(level, Some(1), "the session's isolation level");
        }
        for name in ["d1", "d2", "d3", "d4"] {
            insert(&store, name, "* * * * *", "true").await;
            make_due(&store, name).await;
        }
        let token = store.job("d2").await.unwrap().unwrap().token;
        let pool = sqlx::AnyPool::connect(&db.url).await.unwrap();
        let mut console = pool.begin().await.unwrap();
        sqlx::query("UPDATE cron_table SET workdir = workdir WHERE name = 'd2'")
            .execute(&mut *console)
            .await
            .unwrap();
        let claimed = store.claim("a", 16, Duration::from_secs(30)).await;
        let first: Vec<String> = match dialect {
            Dialect::Mysql => {
                let err = claimed.unwrap_err();
                assert_eq!(err.kind(), "timeout", "{err}");
                vec![]
            }
            _ => {
                let mut got: Vec<String> = claimed.unwrap().1.into_iter().map(|r| r.name).collect();
                got.sort();
                assert_eq!(got, ["d1", "d3", "d4"], "{dialect:?}");
                got
            }
        };
        console.rollback().await.unwrap();
        let (_, rows) = store.claim("b", 16, Duration::from_secs(30)).await.unwrap();
        let mut got: Vec<String> = first
            .into_iter()
            .chain(rows.into_iter().map(|r| r.name))
            .collect();
        got.sort();
        assert_eq!(
            got,
            ["d1", "d2", "d3", "d4"],
            "{dialect:?}: each row claimed once"
        );
        let d2 = store.job("d2").await.unwrap().unwrap();
        assert_eq!(d2.exec_by.as_deref(), Some("b"), "{dialect:?}");
        assert_eq!(d2.token, token + 1, "{dialect:?}");
        pool.close().await;
        store.close().await;
    }
}
