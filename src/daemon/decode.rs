//! A claimed row, decoded into what it means: its schedule and policy (or why it cannot run),
//! and the command line, environment and limits of a run. Pure: no database, no process.

use std::collections::HashMap;

use crate::config::Config;
use crate::job::{Policy, PolicyOverrides};
use crate::runner::{Program, RunSpec};
use crate::schedule::{Schedule, parse_zone};
use crate::store::JobRow;

/// The schedule and the policy of a row, or why it cannot run.
pub fn resolve(row: &JobRow, defaults: &Policy) -> Result<(Schedule, Policy), String> {
    if let Some(e) = &row.decode_error {
        return Err(e.clone());
    }
    let overrides = row_overrides(row)?;
    let policy = overrides.apply_to(defaults);
    let tz = parse_zone(&policy.timezone).map_err(|e| format!("timezone: {e}"))?;
    let expr =
        crate::schedule::CronExpr::parse(&row.schedule).map_err(|e| format!("schedule: {e}"))?;
    match (&row.command, &row.argv) {
        (_, Some(argv)) => {
            let v: Vec<String> = serde_json::from_str(argv)
                .map_err(|e| format!("argv: not a JSON array of strings ({e})"))?;
            if v.first().is_none_or(|p| p.is_empty()) {
                return Err("argv: must name a program first".into());
            }
        }
        (Some(c), None) if !c.trim().is_empty() => {}
        _ => return Err("command: is empty".into()),
    }
    if let Some(env) = &row.env {
        serde_json::from_str::<HashMap<String, String>>(env)
            .map_err(|e| format!("env: not a JSON object of strings ({e})"))?;
    }
    Ok((Schedule::new(expr, tz), policy))
}

fn row_overrides(row: &JobRow) -> Result<PolicyOverrides, String> {
    let get = |k: &str| row.policy.get(k).cloned().flatten();
    let int = |k: &str| -> Result<Option<i64>, String> {
        get(k)
            .map(|v| {
                v.trim()
                    .parse::<i64>()
                    .map_err(|_| format!("{k}: \"{v}\" is not a whole number"))
            })
            .transpose()
    };
    let raw = crate::config::RawPolicy {
        timezone: row.timezone.clone(),
        misfire: get("misfire"),
        starting_deadline: get("starting_deadline"),
        max_catch_up: int("max_catch_up")?,
        retries: int("retries")?,
        retry_backoff: get("retry_backoff"),
        retry_backoff_max: get("retry_backoff_max"),
        timeout: get("timeout"),
        kill_grace: get("kill_grace"),
        jitter: get("jitter"),
        on_lease_lost: get("on_lease_lost"),
        rerun_lost: int("rerun_lost")?.map(|n| n != 0),
    };
    PolicyOverrides::from_raw(&raw).map_err(|(k, m)| format!("{k}: {m}"))
}

pub(super) fn run_spec(
    row: &JobRow,
    slot: i64,
    attempt: u32,
    node: &str,
    policy: &Policy,
    config: &Config,
) -> Result<RunSpec, String> {
    let program = match (&row.argv, &row.command) {
        (Some(argv), _) => {
            Program::Argv(serde_json::from_str(argv).map_err(|e| format!("argv: {e}"))?)
        }
        (None, Some(c)) => Program::Shell(c.clone()),
        (None, None) => return Err("command: is empty".into()),
    };
    let mut env: Vec<(String, String)> = match &row.env {
        Some(e) => serde_json::from_str::<std::collections::BTreeMap<String, String>>(e)
            .map_err(|e| format!("env: {e}"))?
            .into_iter()
            .collect(),
        None => vec![],
    };
    env.push(("SQLCRON_JOB".into(), row.name.clone()));
    env.push(("SQLCRON_SLOT".into(), super::fmt_ms(slot)));
    env.push(("SQLCRON_ATTEMPT".into(), attempt.to_string()));
    env.push(("SQLCRON_NODE".into(), node.to_string()));
    env.push(("SQLCRON_FENCING_TOKEN".into(), row.token.to_string()));
    Ok(RunSpec {
        job: row.name.clone(),
        program,
        env,
        workdir: row.workdir.clone().map(Into::into),
        timeout: policy.timeout,
        kill_grace: policy.kill_grace,
        output_tail: config.daemon.output_tail,
        log_lines: config.daemon.output_log_lines,
        log_bytes: config.daemon.output_log_bytes,
        reaper_deadline: None,
        pgid: Default::default(),
        inherit_io: false,
    })
}
