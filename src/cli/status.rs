//! `sqlcron status`: jobs (where they may run, whether a live node can, the calendars they keep
//! to), nodes (tags, drained, runs in progress), calendars (what each covers next),
//! configuration drift.

use serde::Serialize;

use crate::config::Config;
use crate::daemon;
use crate::model::job::Outcome;
use crate::model::placement::{NodeOffer, Placement, unplaceable};
use crate::store::{JobRow, Store};

use super::terminal::shown;
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
    /// The calendars it keeps to: "skip_on holidays-de; only_in window (deferred)".
    calendars: Option<String>,
}

/// One link of a chain: `job` follows `upstream`.
#[derive(Serialize)]
struct ChainLink {
    upstream: String,
    job: String,
    /// "after, on success", "requires within 6h".
    how: String,
}

#[derive(Serialize)]
struct CalendarStatus {
    name: String,
    entries: usize,
    /// Written from a TOML file's `[[calendar]]` (else made with SQL).
    from_toml: bool,
    /// What it covers next, from now (UTC): "2026-12-25 1. Weihnachtstag".
    next: Option<String>,
    /// Why it cannot be read (the jobs that name it are parked).
    error: Option<String>,
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
struct Status {
    now: String,
    /// Set when no node is up and undrained: nothing runs, whatever the jobs' NEXT says.
    warning: Option<&'static str>,
    jobs: Vec<JobStatus>,
    nodes: Vec<NodeStatus>,
    calendars: Vec<CalendarStatus>,
    chains: Vec<ChainLink>,
    drift: Vec<crate::store::Drift>,
}

/// The links of every chain, from the rows' `requires` and `after`.
fn chain_links(edges: Vec<(String, Option<String>, Option<String>)>) -> Vec<ChainLink> {
    let json = |t: Option<String>| -> Option<serde_json::Value> {
        t.and_then(|t| serde_json::from_str(&t).ok())
    };
    let mut links = vec![];
    for (job, requires, after) in edges {
        let after = json(after)
            .and_then(|v| crate::model::chains::from_json(&v).ok())
            .unwrap_or_default();
        for a in after {
            links.push(ChainLink {
                upstream: a.job,
                job: job.clone(),
                how: format!("after, on {}", a.on.as_str()),
            });
        }
        let requires = json(requires)
            .and_then(|v| crate::model::requires::from_json(&v).ok())
            .unwrap_or_default();
        for r in requires {
            let within = crate::model::duration::format_duration(r.within);
            links.push(ChainLink {
                upstream: r.job,
                job: job.clone(),
                how: format!("requires within {within}"),
            });
        }
    }
    links
}

/// The chains as trees, from the jobs that follow nothing: one line per link, indented.
fn chain_tree(links: &[ChainLink]) -> String {
    fn branch(links: &[ChainLink], at: &str, depth: usize, out: &mut String) {
        if depth > 20 {
            return;
        }
        for l in links.iter().filter(|l| l.upstream == at) {
            out.push_str(&format!(
                "{}└─ {} ({})\n",
                "   ".repeat(depth),
                shown(&l.job),
                shown(&l.how)
            ));
            branch(links, &l.job, depth + 1, out);
        }
    }
    let mut roots: Vec<&str> = links
        .iter()
        .map(|l| l.upstream.as_str())
        .filter(|u| !links.iter().any(|l| l.job == *u))
        .collect();
    roots.sort();
    roots.dedup();
    let mut out = String::new();
    for root in roots {
        out.push_str(&format!("{}\n", shown(root)));
        branch(links, root, 0, &mut out);
    }
    out
}

/// The calendars a row keeps to, for people; `None`: none.
fn calendars_of(row: &JobRow, config: &Config) -> Option<String> {
    let own = row
        .policy
        .get("calendars")
        .cloned()
        .flatten()
        .and_then(|t| crate::model::calendars::CalendarOverrides::from_json(&t).ok())
        .unwrap_or_default();
    own.apply_to(&config.defaults.calendars).describe()
}

fn calendar_status(row: &crate::store::calendars::CalendarRow, now: i64) -> CalendarStatus {
    let parsed = crate::schedule::calendar::Calendar::parse(&row.name, &row.entries);
    let next = parsed.as_ref().ok().and_then(|c| {
        let local = crate::model::calendars::local_time(now, chrono_tz::UTC);
        let at = c.next_covered(local, chrono::Duration::days(400))?;
        let label = c.covering(at).map(|e| e.label.clone()).unwrap_or_default();
        Some(
            format!("{} {label}", at.format("%Y-%m-%d %H:%M"))
                .trim()
                .to_string(),
        )
    });
    CalendarStatus {
        name: row.name.clone(),
        entries: parsed.as_ref().map_or(0, |c| c.entries.len()),
        from_toml: row.from_toml,
        next,
        error: parsed.err(),
    }
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
            && row.schedule != crate::schedule::AFTER_ONLY
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
        calendars: calendars_of(row, config),
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
    let drift = crate::store::drift(&nodes, now);
    let calendars = store.calendars().await.map_err(Failure::runtime)?;
    let chains = chain_links(store.upstream_edges().await.map_err(Failure::runtime)?);
    let status = Status {
        now: daemon::fmt_ms(now),
        warning: super::explain::nothing_runs(nodes.iter().any(alive), &offers),
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
        calendars: calendars.iter().map(|c| calendar_status(c, now)).collect(),
        chains,
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
    if let Some(w) = status.warning {
        out.push_str(&format!("WARNING: {w}\n\n"));
    }
    // Like `systemctl list-timers`: when next and in how long, when last and how long ago;
    // each column as wide as its widest value.
    let mut jobs = Vec::with_capacity(status.jobs.len());
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
        } else if j.schedule == crate::schedule::AFTER_ONLY {
            "when its upstreams finish".into()
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
        let calendars = j
            .calendars
            .as_ref()
            .map_or_else(String::new, |c| format!(", {c}"));
        jobs.push(vec![
            j.name.clone(),
            j.next_run.clone().unwrap_or_else(|| "-".into()),
            left,
            j.last_end.clone().unwrap_or_else(|| "-".into()),
            passed,
            result,
            state,
            format!("{} ({}){calendars}", j.schedule, j.timezone),
        ]);
    }
    out.push_str(&super::terminal::table(
        &[
            "JOB", "NEXT", "LEFT", "LAST", "PASSED", "RESULT", "STATE", "SCHEDULE",
        ],
        &jobs,
    ));
    let mut nodes = Vec::with_capacity(status.nodes.len());
    for n in &status.nodes {
        let state = match (n.drained, n.running) {
            (true, 0) => "drained".to_string(),
            (true, r) => format!("draining ({r} running)"),
            (false, r) => format!("{r} running"),
        };
        nodes.push(vec![
            n.name.clone(),
            n.host.clone().unwrap_or_default(),
            n.pid.map(|p| p.to_string()).unwrap_or_default(),
            if n.alive { "yes" } else { "no" }.to_string(),
            if n.tags.is_empty() {
                "-".to_string()
            } else {
                n.tags.join(",")
            },
            state,
            n.last_seen.clone().unwrap_or_default(),
        ]);
    }
    out.push('\n');
    out.push_str(&super::terminal::table(
        &["NODE", "HOST", "PID", "ALIVE", "TAGS", "STATE", "LAST SEEN"],
        &nodes,
    ));
    if !status.calendars.is_empty() {
        out.push_str(&format!(
            "\n{:<24} {:<8} {:<6} {}\n",
            "CALENDAR", "ENTRIES", "FROM", "NEXT (UTC)"
        ));
        for c in &status.calendars {
            let next = match (&c.error, &c.next) {
                (Some(e), _) => format!("error: {e}"),
                (None, Some(n)) => n.clone(),
                (None, None) => "-".into(),
            };
            let from = if c.from_toml { "toml" } else { "sql" };
            out.push_str(&format!(
                "{:<24} {:<8} {:<6} {}\n",
                shown(&c.name),
                c.entries,
                from,
                shown(&next)
            ));
        }
    }
    if !status.chains.is_empty() {
        out.push_str("\nCHAINS (each job under the job it follows)\n");
        out.push_str(&chain_tree(&status.chains));
    }
    if !status.drift.is_empty() {
        out.push_str("\nCONFIGURATION DRIFT (alive nodes whose TOML files disagree)\n");
        for d in &status.drift {
            let parts: Vec<String> = d
                .nodes
                .iter()
                .map(|(n, h)| format!("{}={}", shown(n), shown(h)))
                .collect();
            out.push_str(&format!("{:<24} {}\n", shown(&d.job), parts.join(" ")));
        }
    }
    // And whatever else came from a row, the lines aside.
    print!("{}", super::terminal::shown_lines(&out));
    Ok(0)
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
