//! Calendars on a cluster: a holiday's slots skipped and recorded once with the calendar and its
//! label, a calendar made with SQL seen by every node (a job naming a missing one parked until it
//! exists), and a slot outside a window deferred to the window's opening and run there once.
//! The DST rules at a window's edge are the pure model's (`model/calendars.rs` tests).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::DateTime;
use sqlcron::store::{Dialect, Store};

use crate::util::{DaemonProcess, TestDb, eventually, node_config, sqlcron, stderr, stdout};

for_each_dialect!(
    a_holiday_is_skipped_once_and_a_sql_calendar_unparks_its_jobs,
    a_slot_outside_the_window_is_deferred_to_the_opening_and_runs_once,
);

/// `ms` as a local time of a calendar entry (UTC).
fn local(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string()
}

/// Runs of `job` by slot: (attempt, outcome) of each, once one of them satisfies `done`.
async fn runs_until(
    store: &Store,
    job: &str,
    what: &str,
    done: impl Fn(&BTreeMap<i64, Vec<String>>) -> bool,
) -> Vec<sqlcron::model::history::HistoryRow> {
    eventually(Duration::from_secs(90), what, || async {
        let h = store.history(Some(job), 1000).await.ok()?;
        let mut by_slot: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        for r in h.iter().filter(|r| r.outcome != "skipped") {
            by_slot.entry(r.slot).or_default().push(r.outcome.clone());
        }
        done(&by_slot).then_some(h)
    })
    .await
}

/// Each slot ran once (one ok record, no other attempt).
fn each_slot_once(history: &[sqlcron::model::history::HistoryRow]) {
    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    for r in history.iter().filter(|r| r.outcome != "skipped") {
        *seen.entry(r.slot).or_default() += 1;
    }
    for (slot, n) in seen {
        assert_eq!(n, 1, "slot {slot} recorded {n} times: {history:?}");
    }
}

async fn a_holiday_is_skipped_once_and_a_sql_calendar_unparks_its_jobs(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    // A four-second holiday, far enough ahead for two daemons to start.
    let t0 = (store.now().await.unwrap() / 1000 + 8) * 1000;
    let jobs = format!(
        "[[calendar]]\nname = \"holidays\"\nentries = [\"{}..{} Test holiday\"]\n\
         [[job]]\nname = \"tick\"\nschedule = \"@every 1s\"\ncommand = \"true\"\nskip_on = [\"holidays\"]\n",
        local(t0),
        local(t0 + 4000)
    );
    let nodes: Vec<DaemonProcess> = ["n1", "n2"]
        .iter()
        .map(|n| DaemonProcess::start(dir.path(), n, &node_config(&db.url, n, &jobs)))
        .collect();
    let history = runs_until(&store, "tick", "runs after the holiday", |s| {
        s.keys().any(|slot| *slot >= t0 + 6000)
    })
    .await;
    let skipped: Vec<_> = history.iter().filter(|r| r.outcome == "skipped").collect();
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    let day = local(t0)[..10].to_string();
    assert_eq!(
        skipped[0].message.as_deref(),
        Some(format!("calendar: {day} is Test holiday in holidays").as_str())
    );
    assert_eq!(
        (
            skipped[0].slot,
            skipped[0].skipped_count,
            skipped[0].skipped_last
        ),
        (t0, Some(4), Some(t0 + 3000))
    );
    assert!(
        !history
            .iter()
            .any(|r| r.outcome != "skipped" && (t0..t0 + 4000).contains(&r.slot)),
        "a slot of the holiday ran: {history:?}"
    );
    assert!(
        history
            .iter()
            .any(|r| r.outcome == "ok" && r.slot == t0 + 4000),
        "the first slot after the holiday ran: {history:?}"
    );
    each_slot_once(&history);
    // explain names the calendar for each slot it touched.
    let conf = dir.path().join("n1.toml");
    let out = sqlcron(&[
        "--config",
        conf.to_str().unwrap(),
        "explain",
        "tick",
        "--from",
        &DateTime::from_timestamp_millis(t0 - 1000)
            .unwrap()
            .to_rfc3339(),
        "--to",
        &DateTime::from_timestamp_millis(t0 + 4000)
            .unwrap()
            .to_rfc3339(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(
        text.matches(&format!("skipped: {day} is Test holiday in holidays"))
            .count(),
        4,
        "{text}"
    );

    // status shows the job's calendars and each calendar.
    let out = sqlcron(&["--config", conf.to_str().unwrap(), "status"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("@every 1s (UTC), skip_on holidays"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("holidays ") && l.contains(" toml ")),
        "{text}"
    );

    // A row made with SQL names a calendar nobody defined: parked, with the key to fix.
    store
        .execute_raw(
            "INSERT INTO cron_table (name, schedule, command, calendars) \
             VALUES ('by-sql', '@every 1s', 'true', '{\"skip_on\": [\"later\"]}')",
        )
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "the row parked", || async {
        let row = store.job("by-sql").await.ok()??;
        row.error
            .filter(|e| e.contains("calendar \"later\" is not defined"))
            .map(|_| ())
    })
    .await;
    // The calendar made with SQL unparks it, and every node reads it.
    store
        .execute_raw(
            "INSERT INTO cron_calendars (name, entries) VALUES ('later', '2000-01-01 Long ago')",
        )
        .await
        .unwrap();
    runs_until(&store, "by-sql", "the unparked row ran", |s| {
        s.values().any(|o| o.contains(&"ok".to_string()))
    })
    .await;
    // A change of a row's calendars with SQL is in the audit trail.
    store
        .execute_raw("UPDATE cron_table SET calendars = '{\"skip_on\": []}' WHERE name = 'by-sql'")
        .await
        .unwrap();
    let audit = store.audit_log(Some("by-sql"), 20).await.unwrap();
    assert!(
        audit.iter().any(|a| a.action == "sql_update"
            && a.detail.as_deref().is_some_and(|d| d.contains("calendars"))),
        "{audit:?}"
    );
    for n in nodes {
        let log = n.log_text();
        assert!(n.stop().success(), "{log}");
    }
}

async fn a_slot_outside_the_window_is_deferred_to_the_opening_and_runs_once(dialect: Dialect) {
    let db = TestDb::new(dialect).await;
    let store = db.store().await;
    let dir = tempfile::tempdir().unwrap();
    // The window opens at an odd second: not a slot of the job (every 2 s, even seconds).
    let mut t0 = (store.now().await.unwrap() / 1000 + 8) * 1000;
    if t0 % 2000 == 0 {
        t0 += 1000;
    }
    let jobs = format!(
        "[[calendar]]\nname = \"window\"\nentries = [\"{}..{} Maintenance\"]\n\
         [[job]]\nname = \"load\"\nschedule = \"@every 2s\"\ncommand = \"true\"\n\
         only_in = [\"window\"]\ndefer = true\n",
        local(t0),
        local(t0 + 60_000)
    );
    let nodes: Vec<DaemonProcess> = ["n1", "n2"]
        .iter()
        .map(|n| DaemonProcess::start(dir.path(), n, &node_config(&db.url, n, &jobs)))
        .collect();
    let history = runs_until(&store, "load", "runs inside the window", |s| {
        s.keys().any(|slot| *slot >= t0 + 5000)
    })
    .await;
    each_slot_once(&history);
    let ran: Vec<i64> = history
        .iter()
        .filter(|r| r.outcome != "skipped")
        .map(|r| r.slot)
        .collect();
    assert!(
        ran.iter().all(|s| *s >= t0),
        "a slot before the window ran: {ran:?}"
    );
    assert!(
        history.iter().any(|r| r.slot == t0 && r.outcome == "ok"),
        "the deferred run at the opening: {history:?}"
    );
    let deferred: Vec<_> = history.iter().filter(|r| r.outcome == "skipped").collect();
    assert!(!deferred.is_empty(), "{history:?}");
    for d in &deferred {
        assert!(
            d.message
                .as_deref()
                .is_some_and(|m| m.starts_with("deferred: outside window; runs at the opening")),
            "{d:?}"
        );
        assert!(d.skipped_last.unwrap_or(d.slot) < t0, "{d:?}");
    }
    for n in nodes {
        let log = n.log_text();
        assert!(n.stop().success(), "{log}");
    }
}
