//! A single job's start lateness on a node that has long been quiet (`cargo bench --bench daemon
//! -- quiet`): such a node has given its lease extension's connection back
//! (`daemon/lease_connection.rs`), and its next claim waits for the connection to open again.
//!
//! One node, 1,000 other jobs not due, `lease = "2s"` (the connection goes back after thirty
//! leases, 60 s) and `poll_interval = "500ms"`, so that the node knows each slot before it comes
//! (wake-ups on where the database has them). Each of `SQLCRON_BENCH_QUIET_TRIES` (5) tries runs
//! three one-off jobs, each inserted at least 3 s before its slot (`@at`, a whole second), and
//! takes the start lateness (the start record minus the slot, both by the database's clock) of
//! each:
//! - **after a give-back**: inserted once the node has logged that the connection went back
//!   (or after 70 s of quiet, for a build that keeps it);
//! - **a lease after the last claim**: 3 s after that run (the connection is confirmed first,
//!   taken from the lease thread's pool);
//! - **within a lease**: the next whole second at least 0.6 s after that run's start (no look).

use std::time::{Duration, Instant};

use sqlcron::store::{Dialect, Store};

use super::{Db, FAR, env_number, fill, percentile, start_daemon, stop, wait_ready};

/// How many lines of `log` contain `what`.
fn count(log: &std::path::Path, what: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(what))
        .count()
}

/// Inserts one-off job `job` due at the first whole second `ahead_ms` or more from now (database
/// clock: an `@at` slot is a whole second).
async fn insert_due(store: &Store, job: &str, ahead_ms: i64) {
    let slot = (store.now().await.unwrap() + ahead_ms + 999) / 1000 * 1000;
    let at = chrono::DateTime::from_timestamp_millis(slot)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    store
        .execute_raw(&format!(
            "INSERT INTO cron_table (name, schedule, command) VALUES ('{job}', '@at {at}', 'true')"
        ))
        .await
        .unwrap();
}

/// `job`'s run as it was recorded: its start and its lateness (start minus slot, both by the
/// database's clock), waited for up to 30 s.
async fn started(store: &Store, job: &str) -> (i64, f64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let h = store.history(Some(job), 10).await.unwrap();
        if let Some((s, slot)) = h.iter().find_map(|r| r.started.map(|s| (s, r.slot))) {
            return (s, (s - slot) as f64);
        }
        assert!(Instant::now() < deadline, "{job} did not start");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub(super) async fn quiet_lateness(dialect: Dialect) {
    let tries = env_number("SQLCRON_BENCH_QUIET_TRIES", 5);
    let db = Db::new(dialect).await;
    let store = db.store().await;
    fill(&store, dialect, "idle", 1_000, FAR, 1_000, "true").await;
    let dir = tempfile::tempdir().unwrap();
    let me = sqlcron::exec::account::current().expect("the bench user's account");
    let extra = format!(
        "[daemon]\nlease = \"2s\"\npoll_interval = \"500ms\"\ndefault_user = \"{0}\"\n\
         allowed_users = [\"{0}\"]\n",
        me.name
    );
    let mut d = start_daemon(
        dir.path(),
        "quiet",
        &db.url,
        &extra,
        "info,sqlcron::daemon::lease_connection=debug",
    );
    wait_ready(&d).await;
    let closed = "the lease extension's connection closed";
    let opened = "the lease extension's connection opened before a claim";
    let (mut after_give_back, mut after_a_lease, mut within) = (vec![], vec![], vec![]);
    let mut gave_back = 0;
    for i in 0..tries {
        // Wait for the give-back (the first try: after the node's first claim, the warm-up's).
        if i == 0 {
            insert_due(&store, "warm", 1_000).await;
            started(&store, "warm").await;
        }
        // A build that keeps the connection for the node's life (the code before) never logs
        // the give-back: it is then given the same time of quiet.
        let before = count(&d.log, closed);
        let quiet_since = Instant::now();
        while count(&d.log, closed) == before && quiet_since.elapsed() < Duration::from_secs(70) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let given_back = count(&d.log, closed) > before;
        let opened_before = count(&d.log, opened);
        let job = format!("gb{i}");
        insert_due(&store, &job, 3_000).await;
        after_give_back.push(started(&store, &job).await.1);
        assert!(
            !given_back || count(&d.log, opened) > opened_before,
            "the claim after a give-back did not open the connection"
        );
        gave_back += usize::from(given_back);
        let job = format!("lease{i}");
        insert_due(&store, &job, 3_000).await;
        let (s, late) = started(&store, &job).await;
        after_a_lease.push(late);
        // The next whole second at least 0.6 s after that start (the node looks every 0.5 s):
        // at most 1.6 s after it, within the 2 s lease.
        let job = format!("within{i}");
        let ahead = (s + 600 - store.now().await.unwrap()).max(0);
        insert_due(&store, &job, ahead).await;
        within.push(started(&store, &job).await.1);
    }
    stop(&mut d);
    for (what, v) in [
        ("after a give-back", &mut after_give_back),
        ("a lease after", &mut after_a_lease),
        ("within a lease", &mut within),
    ] {
        v.sort_by(f64::total_cmp);
        println!(
            "quiet      {:<8} {:<18} p50 {:>5.0} ms  max {:>5.0} ms  ({} tries, {gave_back} \
             give-backs: {:?})",
            dialect.name(),
            what,
            percentile(v, 0.5),
            v.last().copied().unwrap_or(f64::NAN),
            v.len(),
            v
        );
    }
    store.close().await;
    db.drop_db().await;
}
