//! What a `cron_table` row means: its schedule and policy (or why it cannot run), and its
//! JSON columns decoded. Pure: what the daemon checks before it schedules a row, and what the
//! CLI and the dashboard read to explain one, without the run loop.

use std::collections::HashMap;

use super::hooks::AlertSettings;
use super::job::{Limits, Policy, PolicyOverrides};
use super::job_row::JobRow;
use crate::schedule::{Schedule, parse_zone};

/// The schedule and the policy of a row, or why it cannot run.
pub fn resolve(row: &JobRow, defaults: &Policy) -> Result<(Schedule, Policy), String> {
    if let Some(e) = &row.decode_error {
        return Err(e.clone());
    }
    super::names::check_name(&row.name, 200).map_err(|m| format!("name: {m}"))?;
    let overrides = row_overrides(row)?;
    let policy = overrides.apply_to(defaults);
    parse_zone(&policy.timezone).map_err(|e| format!("timezone: {e}"))?;
    let schedule = Schedule::parse_for(&row.schedule, &policy.timezone, Some(&row.name))
        .map_err(|e| format!("schedule: {e}"))?;
    match (&row.command, &row.argv) {
        _ if row.http.is_some() => {
            if row.command.is_some() || row.argv.is_some() {
                return Err("http: give one of command, argv or http".into());
            }
            row_http(row)?;
        }
        // Both: what runs (argv) would not be what a reader of the command sees.
        (Some(c), Some(_)) if !c.trim().is_empty() => {
            return Err("argv: give one of command, argv or http, not both".into());
        }
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
    if let Some(p) = &row.placement {
        super::placement::Placement::from_json(p)?;
    }
    if let Some(r) = row
        .run_on
        .as_deref()
        .filter(|r| *r != "any" && *r != "every_node")
    {
        return Err(format!("run_on: \"{r}\" must be any or every_node"));
    }
    if let Some(text) = &row.after {
        if row.name.chars().count() > super::chains::MAX_CHAINED_NAME {
            return Err(format!(
                "name: a job with after_jobs has at most {} characters (its chained rows add \
                 #after-<run id>)",
                super::chains::MAX_CHAINED_NAME
            ));
        }
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("after_jobs: not JSON ({e})"))?;
        super::chains::from_json(&v).map_err(|m| format!("after_jobs: {m}"))?;
    }
    inherit_list(row)?;
    row_limits(row)?;
    row_alerts(row)?;
    Ok((schedule, policy))
}

/// The `http` column: an HTTP job's request, or `None` for a process.
pub fn row_http(row: &JobRow) -> Result<Option<super::http_target::HttpTarget>, String> {
    row.http
        .as_deref()
        .map(|t| {
            let v: serde_json::Value =
                serde_json::from_str(t).map_err(|e| format!("http: not a JSON object ({e})"))?;
            super::http_target::HttpTarget::from_json(&v).map_err(|m| format!("http: {m}"))
        })
        .transpose()
}

/// The `inherit_env` column: a JSON array of variable names.
pub fn inherit_list(row: &JobRow) -> Result<Vec<String>, String> {
    row.inherit_env
        .as_deref()
        .map(|t| {
            serde_json::from_str::<Vec<String>>(t)
                .map_err(|e| format!("inherit_env: not a JSON array of strings ({e})"))
        })
        .transpose()
        .map(Option::unwrap_or_default)
}

/// The `limits` column: a JSON object (see [`Limits::from_json`]).
pub fn row_limits(row: &JobRow) -> Result<Limits, String> {
    match &row.limits {
        None => Ok(Limits::default()),
        Some(t) => {
            let v: serde_json::Value =
                serde_json::from_str(t).map_err(|e| format!("limits: not JSON ({e})"))?;
            Limits::from_json(&v).map_err(|e| format!("limits: {e}"))
        }
    }
}

/// The `alerts` column: a JSON object of hooks, `alert_after` and `ping_url`.
pub fn row_alerts(row: &JobRow) -> Result<AlertSettings, String> {
    match &row.alerts {
        None => Ok(AlertSettings::default()),
        Some(t) => {
            let v: serde_json::Value =
                serde_json::from_str(t).map_err(|e| format!("alerts: not JSON ({e})"))?;
            AlertSettings::from_json(&v).map_err(|e| format!("alerts: {e}"))
        }
    }
}

/// The policy columns as overrides of the defaults.
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
    let raw = super::policy_keys::RawPolicy {
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
        overlap: get("overlap"),
        ..Default::default()
    };
    let mut overrides = PolicyOverrides::from_raw(&raw).map_err(|(k, m)| format!("{k}: {m}"))?;
    if let Some(text) = get("requires") {
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("requires: not JSON ({e})"))?;
        overrides.requires =
            Some(super::requires::from_json(&v).map_err(|m| format!("requires: {m}"))?);
    }
    if let Some(text) = get("calendars") {
        overrides.calendars = super::calendars::CalendarOverrides::from_json(&text)
            .map_err(|m| format!("calendars: {m}"))?;
    }
    Ok(overrides)
}
