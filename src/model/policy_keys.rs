//! The policy keys as written, in `[defaults]`, a `[[job]]` table or a row's policy columns
//! (text), and their parsing into [`PolicyOverrides`]: one reading for the TOML file and for a
//! row written with SQL.

use std::time::Duration;

use serde::Deserialize;

use super::duration::parse_duration;
use super::job::{Misfire, OnLeaseLost, Overlap, PolicyOverrides};
use crate::schedule::parse_zone;

/// Policy keys, shared by `[defaults]` and `[[job]]`.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RawPolicy {
    pub timezone: Option<String>,
    pub misfire: Option<String>,
    pub starting_deadline: Option<String>,
    pub max_catch_up: Option<i64>,
    pub retries: Option<i64>,
    pub retry_backoff: Option<String>,
    pub retry_backoff_max: Option<String>,
    pub timeout: Option<String>,
    pub kill_grace: Option<String>,
    pub jitter: Option<String>,
    pub on_lease_lost: Option<String>,
    pub rerun_lost: Option<bool>,
    pub overlap: Option<String>,
    /// Calendars whose times the job's slots skip (`[[calendar]]` names).
    pub skip_on: Option<Vec<String>>,
    /// Calendars outside whose times the job's slots are skipped (or deferred).
    pub only_in: Option<Vec<String>>,
    /// A slot outside `only_in` runs once at the next opening instead of being skipped.
    pub defer: Option<bool>,
    /// Upstreams that must have succeeded before a slot runs: `{ job = "extract", within =
    /// "6h" }` or a list of them.
    pub requires: Option<serde_json::Value>,
    /// Alert keys (see `model/hooks.rs`): a hook is a command, a table with `command` or `url`, or
    /// `false`.
    pub on_failure: Option<serde_json::Value>,
    pub on_success: Option<serde_json::Value>,
    pub on_missed: Option<serde_json::Value>,
    pub on_recovery: Option<serde_json::Value>,
    pub alert_after: Option<String>,
    pub ping_url: Option<String>,
}

impl PolicyOverrides {
    /// Parses the policy keys of `[defaults]` or a `[[job]]`; the first bad key is reported.
    pub fn from_raw(raw: &RawPolicy) -> Result<PolicyOverrides, (String, String)> {
        let dur = |key: &str, v: &Option<String>| -> Result<Option<Duration>, (String, String)> {
            v.as_ref()
                .map(|t| parse_duration(t).map_err(|m| (key.to_string(), m)))
                .transpose()
        };
        let count =
            |key: &str, v: Option<i64>, max: i64| -> Result<Option<u32>, (String, String)> {
                match v {
                    None => Ok(None),
                    Some(n) if (0..=max).contains(&n) => Ok(Some(n as u32)),
                    Some(n) => Err((key.to_string(), format!("{n} must be 0-{max}"))),
                }
            };
        if let Some(zone) = &raw.timezone {
            parse_zone(zone).map_err(|e| ("timezone".to_string(), e.to_string()))?;
        }
        Ok(PolicyOverrides {
            timezone: raw.timezone.clone(),
            misfire: raw
                .misfire
                .as_deref()
                .map(|m| Misfire::parse(m).map_err(|e| ("misfire".to_string(), e)))
                .transpose()?,
            starting_deadline: dur("starting_deadline", &raw.starting_deadline)?,
            max_catch_up: count("max_catch_up", raw.max_catch_up, 100_000)?,
            retries: count("retries", raw.retries, 1000)?,
            retry_backoff: dur("retry_backoff", &raw.retry_backoff)?,
            retry_backoff_max: dur("retry_backoff_max", &raw.retry_backoff_max)?,
            timeout: dur("timeout", &raw.timeout)?,
            kill_grace: dur("kill_grace", &raw.kill_grace)?,
            jitter: dur("jitter", &raw.jitter)?,
            on_lease_lost: raw
                .on_lease_lost
                .as_deref()
                .map(|m| OnLeaseLost::parse(m).map_err(|e| ("on_lease_lost".to_string(), e)))
                .transpose()?,
            rerun_lost: raw.rerun_lost,
            overlap: raw
                .overlap
                .as_deref()
                .map(|m| Overlap::parse(m).map_err(|e| ("overlap".to_string(), e)))
                .transpose()?,
            calendars: calendar_keys(raw)?,
            requires: raw
                .requires
                .as_ref()
                .map(|v| crate::model::requires::from_json(v).map_err(|e| ("requires".into(), e)))
                .transpose()?,
        })
    }
}

/// `skip_on`, `only_in` and `defer`, each name checked.
fn calendar_keys(
    raw: &RawPolicy,
) -> Result<crate::model::calendars::CalendarOverrides, (String, String)> {
    let named = raw.skip_on.iter().chain(&raw.only_in).flatten().count();
    let most = crate::model::calendars::MAX_CALENDARS_PER_JOB;
    if named > most {
        return Err((
            "skip_on/only_in".into(),
            format!("name {named} calendars, more than {most}"),
        ));
    }
    for (key, names) in [("skip_on", &raw.skip_on), ("only_in", &raw.only_in)] {
        for name in names.iter().flatten() {
            crate::model::names::check_name(name, 200).map_err(|m| (key.to_string(), m))?;
        }
    }
    Ok(crate::model::calendars::CalendarOverrides {
        skip_on: raw.skip_on.clone(),
        only_in: raw.only_in.clone(),
        defer: raw.defer,
    })
}
