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
