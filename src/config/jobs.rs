//! `[[job]]` tables and the policy keys (`[defaults]`, a job, a row) to validated job
//! definitions and policy overrides.

use std::collections::BTreeMap;
use std::path::Path;

use super::raw::RawJob;
use crate::model::hooks::AlertSettings;
use crate::model::job::{JobSpec, PolicyOverrides};
use crate::schedule::Schedule;

/// Validates one `[[job]]` table; errors are (key, message) pairs.
pub(super) fn job_spec(
    job: &RawJob,
    pools: &BTreeMap<String, u32>,
) -> Result<JobSpec, Vec<(String, String)>> {
    let mut problems = Vec::new();
    let name = match &job.name {
        Some(n) if !n.trim().is_empty() && n.chars().count() <= 200 => n.clone(),
        Some(n) => {
            problems.push(("name".into(), format!("\"{n}\" must be 1-200 characters")));
            String::new()
        }
        None => {
            problems.push(("name".into(), "is missing".into()));
            String::new()
        }
    };
    let after = match job.after.as_ref().map(crate::model::chains::from_json) {
        None => vec![],
        Some(Ok(list)) => list,
        Some(Err(e)) => {
            problems.push(("after".into(), e));
            vec![]
        }
    };
    let schedule = match &job.schedule {
        // A job with only `after` runs when its upstreams finish.
        None if !after.is_empty() => crate::schedule::AFTER_ONLY.to_string(),
        Some(s) => {
            // The zone does not change whether a schedule parses; it is checked on its own.
            if let Err(e) = Schedule::parse_for(s, "UTC", Some(&name)) {
                problems.push(("schedule".into(), e.to_string()));
            }
            s.clone()
        }
        None => {
            problems.push(("schedule".into(), "is missing".into()));
            String::new()
        }
    };
    let http = match &job.http {
        None => None,
        Some(v) => match crate::model::http_target::HttpTarget::from_json(v) {
            Ok(t) => Some(t),
            Err(m) => {
                problems.push(("http".into(), m));
                None
            }
        },
    };
    match (&job.command, &job.argv) {
        (None, None) if job.http.is_some() => {}
        _ if job.http.is_some() => {
            problems.push(("http".into(), "give one of command, argv or http".into()))
        }
        (None, None) => {
            problems.push(("command".into(), "is missing (or give argv or http)".into()))
        }
        (Some(_), Some(_)) => problems.push((
            "command".into(),
            "give either command or argv, not both".into(),
        )),
        (Some(cmd), None) if cmd.trim().is_empty() => {
            problems.push(("command".into(), "is empty".into()))
        }
        (None, Some(argv)) if argv.is_empty() || argv[0].is_empty() => {
            problems.push(("argv".into(), "must name a program first".into()))
        }
        _ => {}
    }
    if let Some(pool) = &job.pool
        && !pools.contains_key(pool)
    {
        problems.push((
            "pool".into(),
            format!("\"{pool}\" is not defined under [pools]"),
        ));
    }
    let overrides = match PolicyOverrides::from_raw(&job.policy) {
        Ok(o) => o,
        Err((key, message)) => {
            problems.push((key, message));
            PolicyOverrides::default()
        }
    };
    let alerts = job
        .policy
        .alert_settings()
        .unwrap_or_else(|(key, message)| {
            problems.push((key, message));
            AlertSettings::default()
        });
    let limits = match &job.limits {
        None => crate::model::job::Limits::default(),
        Some(v) => crate::model::job::Limits::from_json(v).unwrap_or_else(|m| {
            problems.push(("limits".into(), m));
            crate::model::job::Limits::default()
        }),
    };
    for name in &job.inherit_env {
        if let Err(m) = check_inherit_name(name) {
            problems.push(("inherit_env".into(), m));
        }
    }
    for (key, value) in [("user", &job.user), ("group", &job.group)] {
        if value.as_ref().is_some_and(|v| v.trim().is_empty()) {
            problems.push((key.into(), "is empty".into()));
        }
    }
    if job.group.is_some() && job.user.is_none() {
        problems.push(("group".into(), "needs user".into()));
    }
    if let Some(f) = &job.env_file
        && !Path::new(f).is_absolute()
    {
        problems.push((
            "env_file".into(),
            format!("\"{f}\" must be an absolute path"),
        ));
    }
    if let Some(Err(m)) = job
        .on
        .as_ref()
        .map(crate::model::placement::Placement::validate)
    {
        problems.push(("on".into(), m));
    }
    let every_node = match job.run_on.as_deref() {
        None | Some("any") => false,
        Some("every_node") => true,
        Some(other) => {
            problems.push((
                "run_on".into(),
                format!("\"{other}\" must be any or every_node"),
            ));
            false
        }
    };
    if every_node && name.contains('@') {
        problems.push((
            "name".into(),
            "a job with run_on = \"every_node\" may not contain @ (its copies are named job@node)"
                .into(),
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(JobSpec {
        name,
        schedule,
        timezone: job.policy.timezone.clone(),
        command: job.command.clone(),
        argv: job.argv.clone(),
        http,
        env: job.env.clone(),
        workdir: job.workdir.clone(),
        enabled: job.enabled.unwrap_or(true),
        pool: job.pool.clone(),
        overrides,
        user: job.user.clone(),
        group: job.group.clone(),
        env_file: job.env_file.clone(),
        inherit_env: job.inherit_env.clone(),
        limits,
        alerts,
        placement: job.on.clone(),
        every_node,
        after,
    })
}

/// A name in `inherit_env`: never one of the variables a job must not see.
pub(super) fn check_inherit_name(name: &str) -> Result<(), String> {
    if crate::model::job::never_inherited(name) {
        Err(format!("\"{name}\" is never passed to jobs"))
    } else if name.is_empty() || name.contains('=') {
        Err(format!("\"{name}\" is not a variable name"))
    } else {
        Ok(())
    }
}
