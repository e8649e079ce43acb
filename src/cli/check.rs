//! `sqlcron check`, on this host: every job's account exists and this daemon may switch to it.

use super::*;

/// `check` on this host: every job's account exists and this daemon may switch to it.
pub(super) fn check_accounts(config: &Config) -> Result<(), Failure> {
    let me = crate::exec::account::current().map_err(Failure::runtime)?;
    let mut problems = Vec::new();
    for job in &config.jobs {
        let account = crate::model::run_as::run_as(
            job.user.as_deref(),
            job.group.as_deref(),
            config.daemon.default_user.as_deref(),
            &me.as_daemon(),
        )
        .and_then(|who| match who {
            Some((user, group)) => {
                crate::exec::account::checked(&user, group.as_deref(), &config.daemon.allowed)
                    .map(|_| ())
                    .map_err(crate::exec::account::Refused::message)
            }
            None => Ok(()),
        });
        if let Err(e) = account {
            let (key, message) = e.split_once(": ").unwrap_or(("user", &e));
            problems.push(config::Problem {
                location: format!("job \"{}\" {key}", job.name),
                message: message.to_string(),
            });
        }
    }
    refused(config, problems)
}

/// How far ahead `check` looks for a slot a job's calendars let run.
const CALENDAR_HORIZON_DAYS: i64 = 3653;

/// The TOML's calendars, parsed (they were validated when the file was read).
pub(super) fn toml_calendars(config: &Config) -> crate::model::calendars::Calendars {
    config
        .calendars
        .iter()
        .filter_map(|d| d.parse().ok().map(|c| (d.name.clone(), c)))
        .collect()
}

/// `check`: a job whose calendars exclude every slot of the next ten years is refused.
pub(super) fn check_calendars(config: &Config, now: i64) -> Result<(), Failure> {
    let calendars = toml_calendars(config);
    let mut problems = Vec::new();
    for job in &config.jobs {
        let policy = job.overrides.apply_to(&config.defaults);
        if policy.calendars.is_empty() {
            continue;
        }
        let Ok(schedule) = Schedule::parse_for(&job.schedule, &policy.timezone, Some(&job.name))
        else {
            continue;
        };
        let until = now.saturating_add(CALENDAR_HORIZON_DAYS * 86_400_000);
        let allowed = crate::model::calendars::first_allowed(
            now,
            until,
            &policy.calendars,
            &calendars,
            &schedule,
            1_000_000,
        );
        if allowed.is_none() {
            let c = &policy.calendars;
            problems.push(config::Problem {
                location: format!("job \"{}\" skip_on/only_in", job.name),
                message: format!(
                    "its calendars (skip_on = {:?}, only_in = {:?}) leave no slot of its schedule \
                     \"{}\" to run in the next 10 years",
                    c.skip_on, c.only_in, job.schedule
                ),
            });
        }
    }
    refused(config, problems)
}

/// The problems found, as `check` reports them (exit 2), or nothing.
fn refused(config: &Config, problems: Vec<config::Problem>) -> Result<(), Failure> {
    if problems.is_empty() {
        return Ok(());
    }
    Err(Failure::usage(
        config::ConfigError {
            path: config.path.clone(),
            problems,
        }
        .to_string(),
    ))
}
