//! Alerts: which events a finished history record raises (`on_failure`, `on_success`,
//! `on_missed`, `on_recovery`), what an event says and the dead-man's switch (`alert_after`).
//! The settings behind them (hooks, `alert_after`, delivery) are in `hooks.rs`. Pure: no
//! database, no process, no network.
//!
//! How events are recorded and delivered exactly once cluster-wide is in `store/events.rs` and
//! `daemon/alerting.rs`; docs/alerts.md is the user's side.

use std::time::Duration;

use serde_json::{Value, json};

pub use crate::model::hooks::EventKind;
use crate::model::job::{Outcome, Policy};

/// A finished history record, as the event scan reads it (`cron_runs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub id: i64,
    pub job: String,
    pub slot: i64,
    pub attempt: i64,
    pub node: Option<String>,
    pub started: Option<i64>,
    pub ended: Option<i64>,
    pub outcome: String,
    pub exit_code: Option<i64>,
    pub signal: Option<i64>,
    pub output: Option<String>,
    pub skipped_count: Option<i64>,
    pub message: Option<String>,
}

fn outcome(r: &Record) -> Option<Outcome> {
    Outcome::parse(&r.outcome).ok()
}

/// Whether a lost run of `attempt` is run again (as `policy::plan_claim` decides).
pub fn lost_is_rerun(policy: &Policy, attempt: i64) -> bool {
    policy.rerun_lost && attempt < i64::from(policy.retries.max(1)) + 1
}

/// The events `record` raises. `earlier` holds the job's records before it (lower ids), newest
/// first; only a success looks at them, for `Recovery`.
pub fn events_for(record: &Record, earlier: &[Record], policy: &Policy) -> Vec<EventKind> {
    match outcome(record) {
        Some(Outcome::Ok) => {
            let mut events = vec![EventKind::Success];
            if is_recovery(record, earlier) {
                events.push(EventKind::Recovery);
            }
            events
        }
        Some(Outcome::Failed | Outcome::Timeout) if record.attempt > i64::from(policy.retries) => {
            vec![EventKind::Failure]
        }
        Some(Outcome::Skipped | Outcome::Abandoned) => vec![EventKind::Missed],
        Some(Outcome::Lost) if !lost_is_rerun(policy, record.attempt) => vec![EventKind::Missed],
        _ => vec![],
    }
}

/// A success is a recovery when the newest record of an earlier slot (that slot's final word)
/// ended badly: failed, timed out, lost or abandoned. Skipped slots do not count either way.
pub fn is_recovery(record: &Record, earlier: &[Record]) -> bool {
    earlier
        .iter()
        .filter(|r| r.slot != record.slot)
        .find_map(|r| match outcome(r) {
            Some(Outcome::Ok) => Some(false),
            Some(Outcome::Failed | Outcome::Timeout | Outcome::Lost | Outcome::Abandoned) => {
                Some(true)
            }
            _ => None,
        })
        .unwrap_or(false)
}

/// The key that makes an event unique: a record raises each kind once; a silence raises one
/// alert per last success (or per watch start when there was none).
pub fn dedupe_key(kind: EventKind, record_id: i64) -> String {
    format!("run:{record_id}:{}", kind.as_str())
}

pub fn overdue_key(job: &str, baseline: i64) -> String {
    format!("overdue:{baseline}:{job}")
}

/// Whether a job whose last success (or watch start) was at `baseline` is overdue at `now`.
pub fn overdue(baseline: i64, alert_after: Duration, now: i64) -> bool {
    now.saturating_sub(baseline) >= alert_after.as_millis() as i64
}

/// How far past the database's clock a watch's start or last success may be and still be a
/// node's: a record another server of a Galera cluster ended by a clock ahead.
pub const WATCH_CLOCK_SLACK_MS: i64 = 60_000;

/// How far past the database's clock a watch's state may be before it is taken for one no
/// node wrote: well beyond [`WATCH_CLOCK_SLACK_MS`], so that a clock read a little earlier, or
/// servers of a cluster a minute apart, never make a node's own state look forged.
pub const WATCH_BELIEVED_AHEAD_MS: i64 = 10 * 60_000;

/// Whether a dead-man's switch's state at `now` is one nodes wrote: a start or a last success
/// further in the future than [`WATCH_BELIEVED_AHEAD_MS`] was written with SQL, and kept the
/// job from ever being overdue (a `last_ok` at the largest number silenced it for good, and no
/// success moves `last_ok` back).
pub fn watch_believable(since: i64, last_ok: Option<i64>, now: i64) -> bool {
    let bound = now.saturating_add(WATCH_BELIEVED_AHEAD_MS);
    since <= bound && last_ok.is_none_or(|ok| ok <= bound)
}

/// Delay before delivery attempt `tries + 1`: 5 s doubling, at most 5 min.
pub fn delivery_backoff(tries: i64) -> Duration {
    let exp = u32::try_from(tries.saturating_sub(1).clamp(0, 6)).unwrap_or(6);
    Duration::from_secs(5 * 2u64.pow(exp)).min(Duration::from_secs(300))
}

/// RFC 3339 UTC, as `SQLCRON_SLOT` is written.
fn fmt_time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
        .unwrap_or_else(|| ms.to_string())
}

/// The JSON body of an event (the webhook's body; a command gets the same facts as
/// `SQLCRON_*` variables). `text` is a one-line summary, as chat webhooks (Slack) expect it.
pub fn record_payload(kind: EventKind, r: &Record) -> Value {
    let node = r.node.as_deref().unwrap_or("?");
    let slot = fmt_time(r.slot);
    let text = match kind {
        EventKind::Success => format!("sqlcron: {} succeeded on {node} (slot {slot})", r.job),
        EventKind::Recovery => format!("sqlcron: {} recovered on {node} (slot {slot})", r.job),
        EventKind::Failure => {
            let how = match (r.outcome.as_str(), r.exit_code, r.signal) {
                ("timeout", ..) => "timed out".to_string(),
                (_, Some(c), _) => format!("exit {c}"),
                (_, _, Some(s)) => format!("signal {s}"),
                _ => r.message.clone().unwrap_or_else(|| "not started".into()),
            };
            format!(
                "sqlcron: {} failed on {node} ({how}; slot {slot}, attempt {})",
                r.job, r.attempt
            )
        }
        EventKind::Missed => format!(
            "sqlcron: {} missed slot {slot}: {} ({})",
            r.job,
            r.outcome,
            r.message.as_deref().unwrap_or("no detail")
        ),
    };
    json!({
        "event": kind.as_str(),
        "job": r.job,
        "run_id": r.id,
        "slot": slot,
        "attempt": r.attempt,
        "node": r.node,
        "outcome": r.outcome,
        "exit_code": r.exit_code,
        "signal": r.signal,
        "started": r.started.map(fmt_time),
        "ended": r.ended.map(fmt_time),
        "duration_ms": r.started.zip(r.ended).map(|(s, e)| e - s),
        "skipped_count": r.skipped_count,
        "message": r.message,
        "output": r.output,
        "text": text,
    })
}

/// The body of a dead-man's switch alert (`missed`, outcome `overdue`).
pub fn overdue_payload(job: &str, last_success: Option<i64>, alert_after: Duration) -> Value {
    let after = crate::model::duration::format_duration(alert_after);
    let since = match last_success {
        Some(t) => format!("last success {}", fmt_time(t)),
        None => "no success recorded".into(),
    };
    json!({
        "event": EventKind::Missed.as_str(),
        "job": job,
        "outcome": "overdue",
        "last_success": last_success.map(fmt_time),
        "alert_after": after,
        "message": format!("no success for {after} ({since})"),
        "text": format!("sqlcron: {job} has not succeeded for {after} ({since})"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::hooks::*;

    #[test]
    fn a_watch_set_in_the_future_is_not_believed() {
        let now = 1_000_000;
        assert!(watch_believable(now, None, now));
        assert!(watch_believable(now - 5, Some(now + 60_000), now));
        assert!(watch_believable(now + 600_000, Some(now + 600_000), now));
        assert!(!watch_believable(now, Some(now + 600_001), now));
        assert!(!watch_believable(now + 600_001, None, now));
        assert!(!watch_believable(now, Some(i64::MAX), now));
        assert!(!watch_believable(i64::MAX, None, now));
        assert!(watch_believable(i64::MIN, Some(i64::MIN), i64::MAX));
    }

    fn rec(id: i64, slot: i64, attempt: i64, outcome: &str) -> Record {
        Record {
            id,
            job: "j".into(),
            slot,
            attempt,
            node: Some("a".into()),
            started: Some(slot),
            ended: Some(slot + 5),
            outcome: outcome.into(),
            exit_code: None,
            signal: None,
            output: None,
            skipped_count: None,
            message: None,
        }
    }

    fn retries(n: u32) -> Policy {
        Policy {
            retries: n,
            ..Policy::default()
        }
    }

    #[test]
    fn failure_fires_only_when_no_attempt_is_left() {
        assert_eq!(
            events_for(&rec(1, 10, 1, "failed"), &[], &retries(0)),
            vec![EventKind::Failure]
        );
        assert!(events_for(&rec(1, 10, 1, "failed"), &[], &retries(2)).is_empty());
        assert!(events_for(&rec(2, 10, 2, "timeout"), &[], &retries(2)).is_empty());
        assert_eq!(
            events_for(&rec(3, 10, 3, "timeout"), &[], &retries(2)),
            vec![EventKind::Failure]
        );
    }

    #[test]
    fn missed_for_skipped_abandoned_and_lost_without_rerun() {
        let p = retries(0);
        assert_eq!(
            events_for(&rec(1, 10, 0, "skipped"), &[], &p),
            vec![EventKind::Missed]
        );
        assert_eq!(
            events_for(&rec(1, 10, 2, "abandoned"), &[], &p),
            vec![EventKind::Missed]
        );
        // A lost run is rerun once even with retries = 0 ...
        assert!(events_for(&rec(1, 10, 1, "lost"), &[], &p).is_empty());
        // ... but not twice, and never with rerun_lost = false.
        assert_eq!(
            events_for(&rec(1, 10, 2, "lost"), &[], &p),
            vec![EventKind::Missed]
        );
        let once = Policy {
            rerun_lost: false,
            ..p
        };
        assert_eq!(
            events_for(&rec(1, 10, 1, "lost"), &[], &once),
            vec![EventKind::Missed]
        );
        assert!(events_for(&rec(1, 10, 1, "running"), &[], &once).is_empty());
    }

    #[test]
    fn recovery_is_the_first_success_after_a_slot_that_ended_badly() {
        let p = retries(1);
        let failed_slot = [rec(2, 20, 2, "failed"), rec(1, 20, 1, "failed")];
        assert_eq!(
            events_for(&rec(3, 30, 1, "ok"), &failed_slot, &p),
            vec![EventKind::Success, EventKind::Recovery]
        );
        // The slot before was retried into a success: no recovery.
        let retried = [rec(2, 20, 2, "ok"), rec(1, 20, 1, "failed")];
        assert_eq!(
            events_for(&rec(3, 30, 1, "ok"), &retried, &p),
            vec![EventKind::Success]
        );
        // A retry of the same slot that succeeds is no recovery by itself ...
        let same = [rec(1, 30, 1, "failed"), rec(0, 20, 1, "ok")];
        assert!(!is_recovery(&rec(2, 30, 2, "ok"), &same));
        // ... skipped summaries are looked through, and no history means no recovery.
        let skipped = [rec(2, 25, 0, "skipped"), rec(1, 20, 1, "abandoned")];
        assert!(is_recovery(&rec(3, 30, 1, "ok"), &skipped));
        assert!(!is_recovery(&rec(3, 30, 1, "ok"), &[]));
    }

    #[test]
    fn settings_round_trip_and_job_overrides_defaults() {
        let v: Value = serde_json::json!({
            "on_failure": "mail -s failed root",
            "on_success": false,
            "on_missed": { "url": "https://example.com/h", "headers": { "X-A": "1" } },
            "alert_after": "26h",
            "ping_url": "https://hc.example/ping/abc/"
        });
        let s = AlertSettings::from_json(&v).unwrap();
        assert_eq!(s.ping_url.as_deref(), Some("https://hc.example/ping/abc"));
        let again: Value = serde_json::from_str(&s.to_json().unwrap()).unwrap();
        assert_eq!(AlertSettings::from_json(&again).unwrap(), s);
        let defaults = AlertSettings {
            on_success: Setting::On(Hook::Command("true".into())),
            on_recovery: Setting::On(Hook::Command("echo back".into())),
            ..Default::default()
        };
        let a = s.resolve(&defaults);
        assert_eq!(
            a.on_failure,
            Some(Hook::Command("mail -s failed root".into()))
        );
        assert_eq!(a.on_success, None, "false turns a default off");
        assert_eq!(a.on_recovery, Some(Hook::Command("echo back".into())));
        assert_eq!(a.alert_after, Some(Duration::from_secs(26 * 3600)));
        for bad in [
            serde_json::json!({ "on_failure": 3 }),
            serde_json::json!({ "on_failure": { "url": "ftp://x" } }),
            serde_json::json!({ "on_failure": { "command": "x", "url": "http://x" } }),
            serde_json::json!({ "alert_after": "0s" }),
            serde_json::json!({ "on_fail": "x" }),
        ] {
            assert!(AlertSettings::from_json(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn overdue_and_backoff() {
        let day = Duration::from_secs(86_400);
        assert!(!overdue(0, day, 86_399_999));
        assert!(overdue(0, day, 86_400_000));
        assert_eq!(delivery_backoff(1), Duration::from_secs(5));
        assert_eq!(delivery_backoff(2), Duration::from_secs(10));
        assert_eq!(delivery_backoff(40), Duration::from_secs(300));
    }

    #[test]
    fn payload_has_a_text_line() {
        let mut r = rec(1, 0, 1, "failed");
        r.exit_code = Some(2);
        let p = record_payload(EventKind::Failure, &r);
        assert_eq!(p["event"], "failure");
        assert!(p["text"].as_str().unwrap().contains("exit 2"), "{p}");
        let o = overdue_payload("j", None, Duration::from_secs(60));
        assert_eq!(o["outcome"], "overdue");
    }
}
