//! `sqlcron status`: jobs (where they may run, whether a live node can), nodes (tags, drained,
//! runs in progress), configuration drift.

use serde::Serialize;

use crate::config::Config;
use crate::daemon;
use crate::model::job::Outcome;
use crate::model::placement::{NodeOffer, Placement, unplaceable};
use crate::store::{JobRow, Store};

use super::{Failure, fmt_ms};

#[derive(Serialize)]
struct JobStatus {
    name: String,
    schedule: String,
    timezone: String,
    enabled: bool,
    source: String,
    next_run: Option<String>,
    /// Milliseconds from now to `next_run` (negative: due, waiting for a node).
    next_in_ms: Option<i64>,
    /// Milliseconds since the last run ended.
    last_end_ago_ms: Option<i64>,
    /// The schedule has no slot left (a one-off that ran).
    done: bool,
    /// `run_on = "every_node"`: this row is a template; each node runs its copy `name@node`.
    every_node: bool,
    /// On a copy: the template's name.
    template: Option<String>,
    running_on: Option<String>,
    running_since: Option<String>,
    lease_until: Option<String>,
    attempt: i64,
    last_status: Option<String>,
    last_exit: Option<i64>,
    last_end: Option<String>,
    error: Option<String>,
    /// `on = {...}` as written for people (`tags gpu, nodes web-*`); `None`: any node.
    placement: Option<String>,
    /// Set when no live, undrained node matches the placement: "no live node matches (...)".
    unplaceable: Option<String>,
}

#[derive(Serialize)]
struct NodeStatus {
    name: String,
    host: Option<String>,
    pid: Option<i64>,
    version: Option<String>,
    alive: bool,
    last_seen: Option<String>,
    tags: Vec<String>,
    /// Drained (`sqlcron drain`): claims nothing new.
    drained: bool,
    /// Runs it holds now.
    running: usize,
}

#[derive(Serialize)]
pub(super) struct Drift {
    pub(super) job: String,
    /// Node name → the job's fingerprint there ("absent" when the node's file lacks it).
    pub(super) nodes: std::collections::BTreeMap<String, String>,
}

#[derive(Serialize)]
struct Status {
    now: String,
    jobs: Vec<JobStatus>,
    nodes: Vec<NodeStatus>,
    drift: Vec<Drift>,
}

fn job_status(row: &JobRow, config: &Config, now: i64, offers: &[NodeOffer]) -> JobStatus {
    let running = row.exec_by.is_some() && row.lease_until.is_some_and(|l| l > now);
    let next_ms = if running || row.error.is_some() {
        row.slot.filter(|_| running)
    } else {
        row.next_exec.filter(|n| *n != i64::MAX)
    };
    JobStatus {
        name: row.name.clone(),
        schedule: row.schedule.clone(),
        timezone: row
            .timezone
            .clone()
            .unwrap_or_else(|| config.defaults.timezone.clone()),
        enabled: row.enabled,
        source: row.source.clone(),
        next_run: if running || row.error.is_some() {
            row.slot.filter(|_| running).map(daemon::fmt_ms)
        } else {
            row.next_exec
                .filter(|n| *n != i64::MAX)
                .map(|n| fmt_ms(Some(n)))
        },
        next_in_ms: next_ms.map(|n| n - now),
        last_end_ago_ms: row.last_end.map(|e| now - e),
        done: row.next_exec == Some(i64::MAX)
            && !running
            && row.run_on.as_deref() != Some("every_node"),
        every_node: row.run_on.as_deref() == Some("every_node"),
        template: row.template.clone(),
        running_on: running.then(|| row.exec_by.clone()).flatten(),
        running_since: running
            .then(|| row.last_start.map(daemon::fmt_ms))
            .flatten(),
        lease_until: running
            .then(|| row.lease_until.map(daemon::fmt_ms))
            .flatten(),
        attempt: row.attempt,
        last_status: row
            .last_status
            .clone()
            .filter(|s| Outcome::parse(s) != Ok(Outcome::Running) || running),
        last_exit: row.last_exit,
        last_end: row.last_end.map(daemon::fmt_ms),
        error: row.error.clone(),
        placement: row
            .placement
            .as_deref()
            .map(|p| Placement::from_json(p).map_or_else(|e| e, |p| p.describe())),
        unplaceable: unplaceable(row.placement.as_deref(), offers),
    }
}

pub async fn run(store: &Store, config: &Config, json: bool) -> Result<u8, Failure> {
    let now = store.now().await.map_err(Failure::runtime)?;
    let rows = store.jobs().await.map_err(Failure::runtime)?;
    let nodes = store.nodes().await.map_err(Failure::runtime)?;
    let alive = |n: &crate::store::NodeRow| n.alive(now);
    let offers: Vec<NodeOffer> = nodes
        .iter()
        .map(|n| NodeOffer::new(&n.name, n.tags.as_deref(), alive(n) && !n.drain))
        .collect();
    let jobs: Vec<JobStatus> = rows
        .iter()
        .map(|r| job_status(r, config, now, &offers))
        .collect();
    let running_on = |node: &str| {
        jobs.iter()
            .filter(|j| j.running_on.as_deref() == Some(node))
            .count()
    };
    let drift = drift(&nodes, now);
    let status = Status {
        now: daemon::fmt_ms(now),
        nodes: nodes
            .iter()
            .map(|n| NodeStatus {
                name: n.name.clone(),
                host: n.host.clone(),
                pid: n.pid,
                version: n.version.clone(),
                alive: alive(n),
                last_seen: n.last_seen.map(daemon::fmt_ms),
                tags: NodeOffer::new(&n.name, n.tags.as_deref(), true).tags,
                drained: n.drain,
                running: running_on(&n.name),
            })
            .collect(),
        jobs,
        drift,
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&status).map_err(Failure::runtime)?
        );
        return Ok(0);
    }
    let mut out = String::new();
    // Like `systemctl list-timers`: when next and in how long, when last and how long ago.
    out.push_str(&format!(
        "{:<24} {:<24} {:<10} {:<24} {:<10} {:<14} {:<28} {}\n",
        "JOB", "NEXT", "LEFT", "LAST", "PASSED", "RESULT", "STATE", "SCHEDULE"
    ));
    for j in &status.jobs {
        let state = if let Some(e) = &j.error {
            format!("error: {e}")
        } else if let Some(node) = &j.running_on {
            format!(
                "running on {node} since {}",
                j.running_since.clone().unwrap_or_default()
            )
        } else if j.every_node {
            format!("on every node: {}@NODE", j.name)
        } else if j.done {
            "done".into()
        } else if !j.enabled {
            "paused".into()
        } else if let Some(why) = &j.unplaceable {
            why.clone()
        } else {
            "idle".into()
        };
        let result = match (&j.last_status, j.last_exit) {
            (Some(s), Some(code)) if code != 0 => format!("{s} (exit {code})"),
            (Some(s), _) => s.clone(),
            _ => "-".into(),
        };
        let left = match j.next_in_ms {
            Some(ms) if ms <= 0 && j.running_on.is_none() => "due".to_string(),
            Some(ms) if ms > 0 => span(ms),
            _ => "-".to_string(),
        };
        let passed = j
            .last_end_ago_ms
            .map_or_else(|| "-".to_string(), |ms| format!("{} ago", span(ms)));
        out.push_str(&format!(
            "{:<24} {:<24} {:<10} {:<24} {:<10} {:<14} {:<28} {} ({})\n",
            j.name,
            j.next_run.clone().unwrap_or_else(|| "-".into()),
            left,
            j.last_end.clone().unwrap_or_else(|| "-".into()),
            passed,
            result,
            state,
            j.schedule,
            j.timezone
        ));
    }
    out.push_str(&format!(
        "\n{:<24} {:<24} {:<8} {:<6} {:<24} {:<22} {}\n",
        "NODE", "HOST", "PID", "ALIVE", "TAGS", "STATE", "LAST SEEN"
    ));
    for n in &status.nodes {
        let state = match (n.drained, n.running) {
            (true, 0) => "drained".to_string(),
            (true, r) => format!("draining ({r} running)"),
            (false, r) => format!("{r} running"),
        };
        out.push_str(&format!(
            "{:<24} {:<24} {:<8} {:<6} {:<24} {:<22} {}\n",
            n.name,
            n.host.clone().unwrap_or_default(),
            n.pid.map(|p| p.to_string()).unwrap_or_default(),
            if n.alive { "yes" } else { "no" },
            if n.tags.is_empty() {
                "-".to_string()
            } else {
                n.tags.join(",")
            },
            state,
            n.last_seen.clone().unwrap_or_default()
        ));
    }
    if !status.drift.is_empty() {
        out.push_str("\nCONFIGURATION DRIFT (alive nodes whose TOML files disagree)\n");
        for d in &status.drift {
            let parts: Vec<String> = d.nodes.iter().map(|(n, h)| format!("{n}={h}")).collect();
            out.push_str(&format!("{:<24} {}\n", d.job, parts.join(" ")));
        }
    }
    print!("{out}");
    Ok(0)
}

/// Alive nodes whose TOML files disagree: per job, each node's fingerprint of it.
pub(super) fn drift(nodes: &[crate::store::NodeRow], now: i64) -> Vec<Drift> {
    let mut per_node = std::collections::BTreeMap::new();
    for n in nodes.iter().filter(|n| n.alive(now)) {
        let map: std::collections::BTreeMap<String, String> = n
            .toml_jobs
            .as_deref()
            .and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or_default();
        per_node.insert(n.name.clone(), map);
    }
    let mut all_jobs = std::collections::BTreeSet::new();
    for m in per_node.values() {
        all_jobs.extend(m.keys().cloned());
    }
    let mut drift = vec![];
    for job in all_jobs {
        let versions: std::collections::BTreeMap<String, String> = per_node
            .iter()
            .map(|(node, m)| {
                (
                    node.clone(),
                    m.get(&job).cloned().unwrap_or_else(|| "absent".into()),
                )
            })
            .collect();
        let distinct: std::collections::BTreeSet<_> = versions.values().collect();
        if distinct.len() > 1 {
            drift.push(Drift {
                job,
                nodes: versions,
            });
        }
    }
    drift
}

/// A span of time as `systemctl list-timers` shows it: `45s`, `12min 3s`, `4h 2min`, `3 days`.
fn span(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}min {}s", s / 60, s % 60),
        3600..172_800 => format!("{}h {}min", s / 3600, s % 3600 / 60),
        _ => format!("{} days", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn spans_read_like_list_timers() {
        assert_eq!(super::span(45_400), "45s");
        assert_eq!(super::span(723_000), "12min 3s");
        assert_eq!(super::span(14_520_000), "4h 2min");
        assert_eq!(super::span(3 * 86_400_000 + 5), "3 days");
        assert_eq!(super::span(-5), "0s");
    }
}
