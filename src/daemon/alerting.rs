//! Making alert events: one node at a time (the `alerts` duty) reads the history's newly ended
//! records and records the events they raise (`alerts::events_for`), and checks every watched
//! job's dead-man's switch. Delivery is in `delivery.rs`, on every node.
//!
//! The scan follows `cron_runs.ended` from the duty's `position`, and rereads the last
//! [`OVERLAP_MS`] each round: a record ended by a statement that committed after a later one
//! is still seen. An event's unique `dedupe` key makes a record read twice (in the overlap, or
//! by a new holder of the duty) one event.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Shared;
use super::decode::{resolve, row_alerts};
use crate::model::alerts::{self, EventKind, Record};
use crate::model::hooks::Alerts;
use crate::model::job::Policy;
use crate::store::{Duty, NewEvent, StoreError};

/// The event scan's duty in `cron_duties`.
pub const ALERTS_DUTY: &str = "alerts";
/// How far back each round rereads the history.
const OVERLAP_MS: i64 = 60_000;
/// Records read per statement.
const SCAN_BATCH: i64 = 500;
/// Earlier records read to decide a recovery.
const RECOVERY_LOOKBACK: i64 = 20;
/// How often the dead-man's switches are checked, and whether anything is configured.
const WATCH_INTERVAL: Duration = Duration::from_secs(2);
/// While no job has alerts: how often a node looks whether one has now (one statement; on
/// PostgreSQL and SQLite a partial index answers it), and how often the duty holder moves the
/// scan's position up to the clock, so that hooks set later do not fire for runs that ended long
/// before (at most this plus the scan's overlap window before). A hook set while none was
/// configured still reports the runs that ended since the position last moved.
const IDLE_CHECK: Duration = Duration::from_secs(60);
const IDLE_ADVANCE: Duration = Duration::from_secs(300);

/// The scan's memory between rounds on this node.
#[derive(Default)]
struct Scan {
    /// Records handled in the overlap window, by id, with their end.
    seen: HashMap<i64, i64>,
    /// When the dead-man's switches were last checked.
    last_watch: Option<Instant>,
    /// Whether any job has alerts (checked every [`WATCH_INTERVAL`], or [`IDLE_CHECK`] while
    /// none has).
    configured: bool,
    /// When the position was last moved up while nothing is configured.
    last_advance: Option<Instant>,
}

pub(super) async fn alerting_loop(shared: Arc<Shared>) {
    let mut scan = Scan::default();
    loop {
        let poll = shared.config().daemon.poll_interval;
        // While no job has alerts the loop only checks now and then: drawn apart from the
        // node's other looks (`pool_trim::apart`); with alerts, every poll interval.
        let wait = if scan.configured {
            poll
        } else {
            super::pool_trim::apart_now(poll)
        };
        tokio::time::sleep(wait).await;
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        if let Err(e) = round(&shared, &mut scan).await {
            tracing::warn!(error = %e, "alert scan stopped by a database error");
            shared.metrics.database_error(e.kind());
        }
    }
}

/// A job's alerts and policy as the scan needs them.
struct JobAlerts {
    alerts: Alerts,
    policy: Policy,
}

async fn round(shared: &Shared, scan: &mut Scan) -> Result<(), StoreError> {
    let config = shared.config();
    let store = &shared.store;
    let every = if scan.configured {
        WATCH_INTERVAL
    } else {
        IDLE_CHECK
    };
    let check_watch = scan.last_watch.is_none_or(|t| t.elapsed() >= every);
    if check_watch {
        scan.configured = !config.alert_defaults.is_empty() || store.any_job_alerts().await?;
    }
    if !scan.configured {
        if check_watch {
            scan.last_watch = Some(Instant::now());
        }
        if scan
            .last_advance
            .is_some_and(|t| t.elapsed() < IDLE_ADVANCE)
        {
            return Ok(());
        }
        scan.last_advance = Some(Instant::now());
    }
    let lease_ms = config.daemon.lease.as_millis() as i64;
    let Some(duty) = store.duty_take(ALERTS_DUTY, &shared.node, lease_ms).await? else {
        scan.seen.clear();
        return Ok(());
    };
    let now = store.now().await?;
    if !scan.configured {
        // Nothing to alert on: the scan keeps up with the clock, so that hooks set later do
        // not fire for runs that ended before.
        scan.last_watch = Some(Instant::now());
        store.set_duty_position(&duty, now).await?;
        return Ok(());
    }
    let give_up = config.delivery.give_up_after.as_millis() as i64;
    // Never ahead of the clock: a position a writer set in the future (the largest number)
    // held the scan there, and every alert of every job with it.
    let position = store
        .duty_position(ALERTS_DUTY)
        .await?
        .unwrap_or(now)
        .min(now);
    let from = position.max(now - give_up) - OVERLAP_MS;
    let mut jobs: HashMap<String, Option<JobAlerts>> = HashMap::new();
    let mut after = (from, -1);
    let mut newest = position;
    loop {
        let records = store.ended_records(from, after, SCAN_BATCH).await?;
        for r in &records {
            let ended = r.ended.unwrap_or(from);
            after = (ended, r.id);
            // A record ended in the future (a writer's) moves the position no further than now.
            newest = newest.max(ended.min(now));
            if scan.seen.contains_key(&r.id) {
                continue;
            }
            if !jobs.contains_key(&r.job) {
                let info = job_alerts(shared, &r.job).await?;
                jobs.insert(r.job.clone(), info);
            }
            if let Some(Some(info)) = jobs.get(&r.job) {
                record_events(shared, &duty, r, info).await?;
            }
            scan.seen.insert(r.id, ended);
        }
        if (records.len() as i64) < SCAN_BATCH {
            break;
        }
    }
    if !store.set_duty_position(&duty, newest).await? {
        return Ok(());
    }
    scan.seen.retain(|_, ended| *ended >= newest - OVERLAP_MS);
    if check_watch {
        scan.last_watch = Some(Instant::now());
        watch(shared).await?;
    }
    Ok(())
}

/// The alerts and policy of `job` now; `None` when it has no row, or a row that cannot run
/// (parked: its error says why).
async fn job_alerts(shared: &Shared, job: &str) -> Result<Option<JobAlerts>, StoreError> {
    let config = shared.config();
    let Some(row) = shared.store.job(job).await? else {
        return Ok(None);
    };
    let (Ok((_, policy)), Ok(settings)) = (resolve(&row, &config.defaults), row_alerts(&row))
    else {
        return Ok(None);
    };
    Ok(Some(JobAlerts {
        alerts: settings.resolve(&config.alert_defaults),
        policy,
    }))
}

/// Records the events `r` raises for which the job has a hook, and notes a success for its
/// dead-man's switch.
async fn record_events(
    shared: &Shared,
    duty: &Duty,
    r: &Record,
    info: &JobAlerts,
) -> Result<(), StoreError> {
    let store = &shared.store;
    if r.outcome == "ok"
        && info.alerts.alert_after.is_some()
        && let Some(ended) = r.ended
    {
        store.watch_ok(&r.job, ended).await?;
    }
    let wants_recovery = r.outcome == "ok" && info.alerts.on_recovery.is_some();
    let earlier = if wants_recovery {
        store
            .records_before(&r.job, r.id, RECOVERY_LOOKBACK)
            .await?
    } else {
        vec![]
    };
    for kind in alerts::events_for(r, &earlier, &info.policy) {
        let Some(hook) = info.alerts.hook(kind) else {
            continue;
        };
        let event = NewEvent {
            dedupe: alerts::dedupe_key(kind, r.id),
            job: r.job.clone(),
            kind: kind.as_str().into(),
            run_id: Some(r.id),
            hook: hook.encode(),
            payload: alerts::record_payload(kind, r).to_string(),
        };
        if store.event_create(&event).await? {
            shared.events.notify_one();
            tracing::info!(job = %r.job, event = kind.as_str(), run = r.id, duty_token = duty.token, "alert event recorded");
            shared.metrics.alert(&r.job, kind.as_str());
        }
    }
    Ok(())
}

/// The dead-man's switches: every job with `alert_after` that has not succeeded for that long
/// raises one `missed` event per silence (per last success).
async fn watch(shared: &Shared) -> Result<(), StoreError> {
    let config = shared.config();
    let store = &shared.store;
    let watches: HashMap<String, crate::store::WatchRow> = store
        .watch_rows()
        .await?
        .into_iter()
        .map(|w| (w.job.clone(), w))
        .collect();
    let jobs = store.jobs().await?;
    // The clock after the reads, not the scan's at its start: a success the scan noted while
    // it ran is never ahead of it.
    let now = store.now().await?;
    for row in jobs {
        let Ok(settings) = row_alerts(&row) else {
            continue;
        };
        let alerts = settings.resolve(&config.alert_defaults);
        let Some(after) = alerts.alert_after else {
            continue;
        };
        let Some(w) = watches.get(&row.name) else {
            store.watch_start(&row.name).await?;
            continue;
        };
        // A state no node wrote (numbers that cannot be read, a start or success in the
        // future) is started again: the switch counts from now, not silenced for good.
        if w.unreadable || !alerts::watch_believable(w.since, w.last_ok, now) {
            tracing::warn!(job = %row.name, "a dead-man's switch whose state no node wrote (cron_watch: numbers that cannot be read, or a time in the future); started again from now");
            store.watch_restart(&row.name).await?;
            continue;
        }
        let baseline = w.last_ok.map_or(w.since, |ok| ok.max(w.since));
        if !alerts::overdue(baseline, after, now) || w.fired_for == Some(baseline) {
            continue;
        }
        let kind = EventKind::Missed;
        let event = NewEvent {
            dedupe: alerts::overdue_key(&row.name, baseline),
            job: row.name.clone(),
            kind: kind.as_str().into(),
            run_id: None,
            hook: alerts
                .on_missed
                .as_ref()
                .map(|h| h.encode())
                .unwrap_or_default(),
            payload: alerts::overdue_payload(&row.name, w.last_ok, after).to_string(),
        };
        if store.event_create(&event).await? {
            shared.events.notify_one();
            tracing::error!(job = %row.name, alert_after = %crate::model::duration::format_duration(after), "job has not succeeded within alert_after");
            shared.metrics.alert(&row.name, "overdue");
        }
        store.watch_fired(&row.name, baseline).await?;
    }
    Ok(())
}
