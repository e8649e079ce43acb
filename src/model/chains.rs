//! `after = ["extract"]`: a job that runs once for each finished run of its upstream that
//! matches (`on = "success" | "failure" | "done"`). Pure: which upstream runs, read in the order
//! of their history ids from a job's cursor on, become triggers, and what a trigger's own row is
//! called and carries. See docs/chains.md.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::duration::{format_duration, parse_duration};

/// Which finished runs of an upstream trigger the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum On {
    /// `ok`.
    Success,
    /// `failed` or `timeout`.
    Failure,
    /// Any of those.
    Done,
}

impl On {
    pub fn parse(text: &str) -> Result<On, String> {
        match text {
            "success" => Ok(On::Success),
            "failure" => Ok(On::Failure),
            "done" => Ok(On::Done),
            other => Err(format!("on: \"{other}\" must be success, failure or done")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            On::Success => "success",
            On::Failure => "failure",
            On::Done => "done",
        }
    }

    /// Whether a run that ended with `outcome` triggers.
    pub fn matches(self, outcome: &str) -> bool {
        let failed = outcome == "failed" || outcome == "timeout";
        match self {
            On::Success => outcome == "ok",
            On::Failure => failed,
            On::Done => outcome == "ok" || failed,
        }
    }
}

/// One upstream of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct After {
    pub job: String,
    pub on: On,
    /// A run that ended longer ago than this when it is noticed does not run the job (its
    /// trigger is recorded as skipped).
    pub within: Option<Duration>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAfter {
    job: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    on: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    within: Option<String>,
}

/// Reads `after`: a list of job names or of `{ job, on, within }` tables (TOML given as JSON,
/// or `cron_table.after`).
///
/// # Errors
/// What is not an upstream, naming the key.
pub fn from_json(value: &serde_json::Value) -> Result<Vec<After>, String> {
    let serde_json::Value::Array(list) = value else {
        return Err(
            "expected a list such as [\"extract\"] or [{ job = \"extract\", on = \"success\" }]"
                .into(),
        );
    };
    let mut seen = std::collections::BTreeSet::new();
    list.iter()
        .map(|v| {
            let raw: RawAfter = match v {
                serde_json::Value::String(job) => RawAfter {
                    job: job.clone(),
                    on: None,
                    within: None,
                },
                other => serde_json::from_value(other.clone()).map_err(|e| {
                    format!("expected a job name or {{ job = \"extract\", on = \"success\", within = \"1h\" }} ({e})")
                })?,
            };
            crate::model::names::check_name(&raw.job, 200)?;
            if !seen.insert(raw.job.clone()) {
                return Err(format!("\"{}\" is named twice", raw.job));
            }
            let on = raw.on.as_deref().map_or(Ok(On::Success), On::parse)?;
            let within = raw
                .within
                .as_deref()
                .map(|w| parse_duration(w).map_err(|e| format!("within: {e}")))
                .transpose()?;
            Ok(After {
                job: raw.job,
                on,
                within,
            })
        })
        .collect()
}

/// The text of `cron_table.after`; `None` for an empty list.
pub fn to_json(list: &[After]) -> Option<String> {
    (!list.is_empty()).then(|| {
        let raw: Vec<RawAfter> = list
            .iter()
            .map(|a| RawAfter {
                job: a.job.clone(),
                on: Some(a.on.as_str().into()),
                within: a.within.map(format_duration),
            })
            .collect();
        serde_json::to_string(&raw).unwrap_or_default()
    })
}

/// An upstream run as the history holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamRun {
    pub id: i64,
    pub job: String,
    pub slot: i64,
    pub outcome: String,
    pub ended: Option<i64>,
}

/// A finished upstream run the job runs for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    pub run: UpstreamRun,
    /// The upstream ended longer ago than `within`: recorded, not run.
    pub stale: bool,
}

/// Outcomes a run's record holds for good (a `running` record may still change).
fn finished(outcome: &str) -> bool {
    outcome != "running"
}

/// From the runs of `after.job` with ids above the cursor, in id order: the triggers, and the
/// new cursor (the last id looked at for good; it stops before a run still `running`, which a
/// later look sees finished).
pub fn triggers(after: &After, runs: &[UpstreamRun], cursor: i64, now: i64) -> (Vec<Trigger>, i64) {
    let mut out = vec![];
    let start = cursor;
    let mut cursor = cursor;
    for run in runs.iter().filter(|r| r.id > start) {
        if !finished(&run.outcome) {
            break;
        }
        cursor = run.id;
        // Summaries of skipped slots and abandoned retries are not runs.
        if run.outcome == "skipped" || run.outcome == "abandoned" || !after.on.matches(&run.outcome)
        {
            continue;
        }
        let stale = after.within.is_some_and(|w| {
            run.ended
                .is_some_and(|e| now.saturating_sub(e) > w.as_millis() as i64)
        });
        out.push(Trigger {
            run: run.clone(),
            stale,
        });
    }
    (out, cursor)
}

/// Whether a chain's position `at` was set by no node: below 0, or past `newest_run`, the
/// newest run record's id read in the same statement (a position the chain set is a run id it
/// read, never above it, whatever was pruned since).
pub fn set_by_no_node(at: i64, newest_run: i64) -> bool {
    !(0..=newest_run).contains(&at)
}

/// The longest name of a job with `after`: its chained rows add `#after-` and a history id
/// (up to 19 digits) and must fit the 191 characters MySQL allows a name.
pub const MAX_CHAINED_NAME: usize = 160;

/// The name of the row that runs `job` for the upstream run `run_id`.
pub fn trigger_name(job: &str, run_id: i64) -> String {
    format!("{job}#after-{run_id}")
}

/// The job a trigger row runs for (`load#after-12` → `load`), if `name` is one.
pub fn triggered_job(name: &str) -> Option<&str> {
    let (job, id) = name.rsplit_once("#after-")?;
    id.parse::<i64>().ok().map(|_| job)
}

/// What a trigger row carries about its upstream (`cron_table.upstream`), and the run's
/// `SQLCRON_UPSTREAM_*` variables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upstream {
    pub job: String,
    pub slot: i64,
    pub run_id: i64,
    pub outcome: String,
}

impl Upstream {
    /// A chained row's run stands for its job's (`load#after-12` → `load`).
    pub fn of(run: &UpstreamRun) -> Upstream {
        Upstream {
            job: triggered_job(&run.job).unwrap_or(&run.job).to_string(),
            slot: run.slot,
            run_id: run.id,
            outcome: run.outcome.clone(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn from_json(text: &str) -> Option<Upstream> {
        serde_json::from_str(text).ok()
    }

    /// `SQLCRON_UPSTREAM_JOB`, `_SLOT` (RFC 3339, UTC, spelt as `SQLCRON_SLOT` is: whole
    /// seconds without a fraction, so that a script can compare the two), `_RUN_ID`,
    /// `_OUTCOME`.
    pub fn env(&self) -> Vec<(String, String)> {
        let slot = chrono::DateTime::from_timestamp_millis(self.slot)
            .unwrap_or_default()
            .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
        vec![
            ("SQLCRON_UPSTREAM_JOB".into(), self.job.clone()),
            ("SQLCRON_UPSTREAM_SLOT".into(), slot),
            ("SQLCRON_UPSTREAM_RUN_ID".into(), self.run_id.to_string()),
            ("SQLCRON_UPSTREAM_OUTCOME".into(), self.outcome.clone()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: i64, outcome: &str, ended: i64) -> UpstreamRun {
        UpstreamRun {
            id,
            job: "extract".into(),
            slot: ended - 1000,
            outcome: outcome.into(),
            ended: Some(ended),
        }
    }

    #[test]
    fn upstreams_read_from_names_or_tables() {
        let list = from_json(
            &serde_json::json!(["extract", {"job": "clean", "on": "failure", "within": "1h"}]),
        )
        .unwrap();
        assert_eq!(
            list[0],
            After {
                job: "extract".into(),
                on: On::Success,
                within: None
            }
        );
        assert_eq!(list[1].on, On::Failure);
        assert_eq!(list[1].within, Some(Duration::from_secs(3600)));
        assert_eq!(
            from_json(&serde_json::from_str(&to_json(&list).unwrap()).unwrap()).unwrap(),
            list
        );
        assert!(from_json(&serde_json::json!("extract")).is_err());
        assert!(from_json(&serde_json::json!([{"job": "x", "on": "always"}])).is_err());
        assert!(from_json(&serde_json::json!([{"job": "x", "when": "1h"}])).is_err());
    }

    #[test]
    fn a_position_below_0_or_past_the_newest_run_was_set_by_no_node() {
        assert!(!set_by_no_node(0, 0), "a chain started before any run");
        assert!(!set_by_no_node(7, 7));
        assert!(
            !set_by_no_node(3, 7),
            "within the records, its runs pruned or not"
        );
        assert!(set_by_no_node(8, 7));
        assert!(set_by_no_node(-1, 7));
        assert!(set_by_no_node(i64::MAX, 7));
        assert!(set_by_no_node(i64::MIN, i64::MAX));
        assert!(
            set_by_no_node(1, 0),
            "every record deleted, or ids that started again"
        );
    }

    #[test]
    fn finished_matching_runs_trigger_in_order_and_the_cursor_stops_at_a_running_one() {
        let success = After {
            job: "extract".into(),
            on: On::Success,
            within: None,
        };
        let runs = vec![
            run(10, "ok", 1_000),
            run(11, "skipped", 1_100),
            run(12, "failed", 2_000),
            run(13, "ok", 3_000),
            run(14, "running", 4_000),
            run(15, "ok", 5_000),
        ];
        let (t, cursor) = triggers(&success, &runs, 10, 6_000);
        assert_eq!(t.iter().map(|t| t.run.id).collect::<Vec<_>>(), vec![13]);
        assert_eq!(cursor, 13);
        let done = After {
            on: On::Done,
            ..success.clone()
        };
        let (t, _) = triggers(&done, &runs, 0, 6_000);
        assert_eq!(
            t.iter().map(|t| t.run.id).collect::<Vec<_>>(),
            vec![10, 12, 13]
        );
        // A record the store could not read (`unreadable`) is passed over: no trigger, and the
        // cursor goes on past it.
        let unread = [run(20, "unreadable", 0), run(21, "ok", 7_000)];
        let (t, cursor) = triggers(&done, &unread, 15, 8_000);
        assert_eq!(t.iter().map(|t| t.run.id).collect::<Vec<_>>(), vec![21]);
        assert_eq!(cursor, 21);
        assert_eq!(triggers(&done, &unread[..1], 15, 8_000), (vec![], 20));
        let failure = After {
            on: On::Failure,
            ..success.clone()
        };
        assert_eq!(triggers(&failure, &runs, 0, 6_000).0.len(), 1);
        // Older than within when noticed: a stale trigger, recorded and not run.
        let recent = After {
            within: Some(Duration::from_secs(2)),
            ..success
        };
        let (t, _) = triggers(&recent, &runs, 0, 4_500);
        assert_eq!(
            t.iter().map(|t| (t.run.id, t.stale)).collect::<Vec<_>>(),
            vec![(10, true), (13, false)]
        );
    }

    #[test]
    fn trigger_rows_are_named_for_their_upstream_run() {
        assert_eq!(trigger_name("load", 42), "load#after-42");
        assert_eq!(triggered_job("load#after-42"), Some("load"));
        assert_eq!(triggered_job("load#after-x"), None);
        assert_eq!(triggered_job("load"), None);
        let up = Upstream {
            job: "extract".into(),
            slot: 0,
            run_id: 42,
            outcome: "ok".into(),
        };
        assert_eq!(Upstream::from_json(&up.to_json()), Some(up.clone()));
        assert!(up.env().contains(&(
            "SQLCRON_UPSTREAM_SLOT".into(),
            "1970-01-01T00:00:00Z".into()
        )));
        // The same spelling as SQLCRON_SLOT's for the same instant.
        let at = Upstream {
            slot: 1_774_746_000_250,
            ..up.clone()
        };
        assert!(at.env().contains(&(
            "SQLCRON_UPSTREAM_SLOT".into(),
            "2026-03-29T01:00:00.250Z".into()
        )));
    }
}
