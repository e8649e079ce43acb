//! `requires = { job = "extract", within = "6h" }`: a scheduled job's slot runs only once its
//! upstream has succeeded within that time before the slot; until then the slot waits, at most
//! until its start deadline, and is then skipped with the reason. Pure: the last success of each
//! upstream and "now" come in as parameters. Also the cycle check over every job's upstreams.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::duration::{format_duration, parse_duration};

/// One upstream a job requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub job: String,
    /// How long before the slot a success still counts.
    pub within: Duration,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequirement {
    job: String,
    within: String,
}

/// Reads `cron_table.requires` (a JSON array of `{"job": ..., "within": ...}`) or the TOML's
/// `requires` (one table or an array of them, given here as JSON).
///
/// # Errors
/// What is not a requirement, naming the key.
pub fn from_json(value: &serde_json::Value) -> Result<Vec<Requirement>, String> {
    let list = match value {
        serde_json::Value::Array(a) => a.clone(),
        other => vec![other.clone()],
    };
    list.into_iter()
        .map(|v| {
            let raw: RawRequirement = serde_json::from_value(v).map_err(|e| {
                format!("expected {{ job = \"extract\", within = \"6h\" }} or a list of them ({e})")
            })?;
            crate::model::names::check_name(&raw.job, 200)?;
            let within = parse_duration(&raw.within).map_err(|e| format!("within: {e}"))?;
            if within.is_zero() {
                return Err("within: must be longer than 0s".into());
            }
            Ok(Requirement {
                job: raw.job,
                within,
            })
        })
        .collect()
}

/// The text of `cron_table.requires`; `None` for an empty list.
pub fn to_json(list: &[Requirement]) -> Option<String> {
    (!list.is_empty()).then(|| {
        let raw: Vec<RawRequirement> = list
            .iter()
            .map(|r| RawRequirement {
                job: r.job.clone(),
                within: format_duration(r.within),
            })
            .collect();
        serde_json::to_string(&raw).unwrap_or_default()
    })
}

/// What a due slot does about its upstreams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every upstream succeeded in time.
    Run,
    /// Wait: look again at `until` (ms), keeping the slot.
    Hold { until: i64 },
    /// The wait is over: skip the slot, recording why.
    Skip { message: String },
}

/// Decides about `slot` at `now`: `last_ok` holds each upstream's latest successful end (ms),
/// `None` if it never succeeded; the slot waits until `slot + limit`, looking again every
/// `recheck` (a look that would come after the limit is not waited for).
pub fn decide(
    slot: i64,
    now: i64,
    requires: &[Requirement],
    last_ok: &BTreeMap<String, Option<i64>>,
    limit: Duration,
    recheck: Duration,
) -> Verdict {
    let missing: Vec<&Requirement> = requires
        .iter()
        .filter(|r| {
            let since = slot.saturating_sub(r.within.as_millis() as i64);
            last_ok
                .get(&r.job)
                .copied()
                .flatten()
                .is_none_or(|ended| ended < since)
        })
        .collect();
    if missing.is_empty() {
        return Verdict::Run;
    }
    let until = now.saturating_add(recheck.as_millis() as i64);
    if until <= slot.saturating_add(limit.as_millis() as i64) {
        return Verdict::Hold { until };
    }
    let what: Vec<String> = missing
        .iter()
        .map(|r| {
            format!(
                "{} has not succeeded within {}",
                r.job,
                format_duration(r.within)
            )
        })
        .collect();
    let waited = Duration::from_millis(now.saturating_sub(slot).max(0) as u64 / 1000 * 1000);
    Verdict::Skip {
        message: format!(
            "requires: {} before the slot (waited {})",
            what.join(", "),
            format_duration(waited)
        ),
    }
}

/// What a slot that runs at `now` waited for: "waited 14m for extract" when it was held at
/// least one look (`recheck`) past its slot and an upstream's latest success came after the slot
/// (the slot could not run before it). `None` otherwise.
pub fn waited_for(
    slot: i64,
    now: i64,
    requires: &[Requirement],
    last_ok: &BTreeMap<String, Option<i64>>,
    recheck: Duration,
) -> Option<String> {
    let waited = now.saturating_sub(slot);
    if waited < recheck.as_millis() as i64 {
        return None;
    }
    let after: Vec<&str> = requires
        .iter()
        .filter(|r| {
            last_ok
                .get(&r.job)
                .copied()
                .flatten()
                .is_some_and(|ended| ended > slot)
        })
        .map(|r| r.job.as_str())
        .collect();
    if after.is_empty() {
        return None;
    }
    let waited = Duration::from_secs(waited as u64 / 1000);
    Some(format!(
        "waited {} for {}",
        format_duration(waited),
        after.join(", ")
    ))
}

/// A cycle of upstreams through `start` (`start → ... → start`), if there is one; `edges` maps
/// each job to the jobs it requires.
pub fn cycle_through(edges: &BTreeMap<String, Vec<String>>, start: &str) -> Option<Vec<String>> {
    fn walk(
        edges: &BTreeMap<String, Vec<String>>,
        start: &str,
        at: &str,
        path: &mut Vec<String>,
        seen: &mut std::collections::BTreeSet<String>,
    ) -> bool {
        for next in edges.get(at).into_iter().flatten() {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(edges, start, next, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_string()];
    let mut seen = std::collections::BTreeSet::new();
    walk(edges, start, start, &mut path, &mut seen).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: i64 = 60_000;

    fn req(job: &str, within: &str) -> Requirement {
        Requirement {
            job: job.into(),
            within: parse_duration(within).unwrap(),
        }
    }

    #[test]
    fn a_success_in_time_runs_else_the_slot_waits_then_skips() {
        let slot = 1_000 * M;
        let r = [req("extract", "6h")];
        let ok = |t: Option<i64>| BTreeMap::from([("extract".to_string(), t)]);
        let limit = Duration::from_secs(600);
        let recheck = Duration::from_secs(10);
        // Succeeded 5 h before the slot, or after it while the slot waited: run.
        assert_eq!(
            decide(slot, slot, &r, &ok(Some(slot - 300 * M)), limit, recheck),
            Verdict::Run
        );
        assert_eq!(
            decide(slot, slot + M, &r, &ok(Some(slot + 30_000)), limit, recheck),
            Verdict::Run
        );
        // Too old, or never: wait, looking again in 10 s.
        assert_eq!(
            decide(
                slot,
                slot + M,
                &r,
                &ok(Some(slot - 7 * 60 * M)),
                limit,
                recheck
            ),
            Verdict::Hold {
                until: slot + M + 10_000
            }
        );
        assert_eq!(
            decide(slot, slot, &r, &ok(None), limit, recheck),
            Verdict::Hold {
                until: slot + 10_000
            }
        );
        // The next look would come after the 10 minutes: skip now, saying why.
        assert_eq!(
            decide(slot, slot + 595_000, &r, &ok(None), limit, recheck),
            Verdict::Skip {
                message:
                    "requires: extract has not succeeded within 6h before the slot (waited 9m 55s)"
                        .into()
            }
        );
    }

    #[test]
    fn requirements_read_from_a_table_or_a_list_and_write_back() {
        let one = from_json(&serde_json::json!({"job": "extract", "within": "6h"})).unwrap();
        assert_eq!(one, vec![req("extract", "6h")]);
        let text = to_json(&one).unwrap();
        assert_eq!(
            from_json(&serde_json::from_str(&text).unwrap()).unwrap(),
            one
        );
        assert!(from_json(&serde_json::json!({"job": "x"})).is_err());
        assert!(from_json(&serde_json::json!({"job": "x", "within": "0s"})).is_err());
        assert!(from_json(&serde_json::json!([{"job": "a b", "within": "1h"}])).is_err());
        assert_eq!(to_json(&[]), None);
    }

    #[test]
    fn a_cycle_is_found_with_its_path() {
        let edges: BTreeMap<String, Vec<String>> = [
            ("load", vec!["transform"]),
            ("transform", vec!["extract"]),
            ("extract", vec!["load"]),
            ("report", vec!["load"]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
        .collect();
        assert_eq!(
            cycle_through(&edges, "load"),
            Some(vec![
                "load".into(),
                "transform".into(),
                "extract".into(),
                "load".into()
            ])
        );
        // report requires a job in a cycle, but is in none itself.
        assert_eq!(cycle_through(&edges, "report"), None);
    }

    #[test]
    fn a_slot_held_for_its_upstream_says_for_how_long() {
        let req = vec![Requirement {
            job: "extract".into(),
            within: Duration::from_secs(6 * 3600),
        }];
        let slot = 1_800_000_000_000;
        let mut last_ok = BTreeMap::new();
        // The upstream succeeded 14 minutes after the slot, which ran a moment later.
        last_ok.insert("extract".to_string(), Some(slot + 14 * 60_000));
        let one_s = Duration::from_secs(1);
        assert_eq!(
            waited_for(slot, slot + 14 * 60_000 + 300, &req, &last_ok, one_s).as_deref(),
            Some("waited 14m for extract")
        );
        // Claimed at its slot: it did not wait, whatever the upstream did since.
        assert_eq!(waited_for(slot, slot + 200, &req, &last_ok, one_s), None);
        // The upstream's success was before the slot: the lateness is not the upstream's.
        last_ok.insert("extract".to_string(), Some(slot - 1));
        assert_eq!(waited_for(slot, slot + 60_000, &req, &last_ok, one_s), None);
    }
}
