//! A claimed row, decoded into what it means: its schedule and policy (or why it cannot run),
//! and the command line, environment and limits of a run. Pure: no database, no process.

use std::collections::{BTreeMap, HashMap};

use crate::config::Config;
use crate::exec::account::Account;
use crate::exec::runner::{Program, RunSpec};
use crate::model::hooks::AlertSettings;
use crate::model::job::{Limits, Policy, PolicyOverrides};
use crate::schedule::{Schedule, parse_zone};
use crate::store::JobRow;

/// The schedule and the policy of a row, or why it cannot run.
pub fn resolve(row: &JobRow, defaults: &Policy) -> Result<(Schedule, Policy), String> {
    if let Some(e) = &row.decode_error {
        return Err(e.clone());
    }
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
        crate::model::placement::Placement::from_json(p)?;
    }
    if let Some(r) = row
        .run_on
        .as_deref()
        .filter(|r| *r != "any" && *r != "every_node")
    {
        return Err(format!("run_on: \"{r}\" must be any or every_node"));
    }
    inherit_list(row)?;
    row_limits(row)?;
    row_alerts(row)?;
    Ok((schedule, policy))
}

/// [`resolve`], and whether this node lets the row run as the account it names
/// ([`account_allowed`]): what the claim path and the preparation of new rows check before a row
/// may be scheduled or run. An `Err` parks the row with the reason.
pub fn resolve_here(
    row: &JobRow,
    config: &Config,
    daemon: &Account,
) -> Result<(Schedule, Policy), String> {
    let resolved = resolve(row, &config.defaults)?;
    account_allowed(row, config, daemon)?;
    Ok(resolved)
}

/// The `http` column: an HTTP job's request, or `None` for a process.
fn row_http(row: &JobRow) -> Result<Option<crate::model::http_target::HttpTarget>, String> {
    row.http
        .as_deref()
        .map(|t| {
            let v: serde_json::Value =
                serde_json::from_str(t).map_err(|e| format!("http: not a JSON object ({e})"))?;
            crate::model::http_target::HttpTarget::from_json(&v).map_err(|m| format!("http: {m}"))
        })
        .transpose()
}

/// The `inherit_env` column: a JSON array of variable names.
fn inherit_list(row: &JobRow) -> Result<Vec<String>, String> {
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
fn row_limits(row: &JobRow) -> Result<Limits, String> {
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

/// What a run's process is made of besides its row: the daemon's own account and environment,
/// read once at start.
#[derive(Debug, Clone)]
pub struct Host {
    pub account: Account,
    pub env: BTreeMap<String, String>,
}

impl Host {
    pub fn from_process() -> Host {
        // SAFETY: geteuid and getegid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Host {
            account: crate::exec::account::current().unwrap_or_else(|_| Account {
                name: uid.to_string(),
                uid,
                gid,
                groups: vec![gid],
                home: "/".into(),
                shell: "/bin/sh".into(),
            }),
            env: std::env::vars().collect(),
        }
    }
}

/// `PATH` of a job unless its `env` or `inherit_env` says otherwise.
pub const JOB_PATH_DEFAULT: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Which account a row's run switches to (see [`crate::model::run_as::run_as`]).
pub fn run_as(
    row: &JobRow,
    config: &Config,
    daemon: &Account,
) -> Result<Option<(String, Option<String>)>, String> {
    crate::model::run_as::run_as(
        row.run_user.as_deref(),
        row.run_group.as_deref(),
        config.daemon.default_user.as_deref(),
        &daemon.as_daemon(),
    )
}

/// Whether this node lets the row run as the account it names: a row refused here is parked
/// with the reason. Judged by the names as written, and for a row naming a group by the
/// accounts looked up (is it one of the user's groups); the look-up and every check come again
/// before each run, where an account missing on this node fails the run instead.
pub fn account_allowed(row: &JobRow, config: &Config, daemon: &Account) -> Result<(), String> {
    if row.http.is_some() {
        return Ok(());
    }
    let allowed = &config.daemon.allowed;
    // A row that names no account under a root daemon fails each run with the reason, as
    // before; only the allow-list parks.
    let Ok(who) = run_as(row, config, daemon) else {
        return Ok(());
    };
    match who {
        Some((user, None)) => allowed.check_names(&user, None),
        Some((user, Some(group))) => {
            match crate::exec::account::checked(&user, Some(&group), allowed) {
                Err(crate::exec::account::Refused::NotAllowed(m)) => Err(m),
                Ok(_) | Err(crate::exec::account::Refused::Lookup(_)) => Ok(()),
            }
        }
        None => Ok(()),
    }
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
        overlap: get("overlap"),
        ..Default::default()
    };
    PolicyOverrides::from_raw(&raw).map_err(|(k, m)| format!("{k}: {m}"))
}

/// Everything a run needs that the daemon looked up outside this module: the account the run
/// switches to (`None`: the daemon's own) and the variables of its `env_file`.
pub struct Resolved<'a> {
    pub host: &'a Host,
    pub account: Option<Account>,
    pub file_env: Vec<(String, String)>,
    /// An HTTP job's `Idempotency-Key` attempt (see `http_target::RunIdentity`).
    pub key_attempt: u32,
}

/// The process of one run. Its environment is built like cron's: `PATH`, `HOME`, `SHELL`,
/// `LOGNAME` and `USER` of the account it runs as, `LANG` if the daemon has one; then the
/// variables named in `inherit_env` (the daemon's and the job's lists); then the `env_file`;
/// then the job's `env`; then the `SQLCRON_*` variables, which nothing overrides. Nothing else
/// of the daemon's environment: never the database URL, never systemd's handles.
pub(super) fn run_spec(
    row: &JobRow,
    slot: i64,
    attempt: u32,
    node: &str,
    policy: &Policy,
    config: &Config,
    resolved: Resolved<'_>,
) -> Result<RunSpec, String> {
    if let Some(target) = row_http(row)? {
        let call = crate::model::http_target::HttpCall {
            target,
            id: crate::model::http_target::RunIdentity {
                job: row.name.clone(),
                slot: crate::model::http_target::slot_text(slot),
                attempt,
                key_attempt: resolved.key_attempt,
                node: node.to_string(),
                token: row.token,
            },
        };
        return Ok(RunSpec {
            job: row.name.clone(),
            program: Program::Http(Box::new(call)),
            env: Vec::new(),
            workdir: None,
            timeout: policy.timeout,
            kill_grace: policy.kill_grace,
            output_tail: config.daemon.output_tail,
            log_lines: config.daemon.output_log_lines,
            log_bytes: config.daemon.output_log_bytes,
            reaper_deadline: None,
            pgid: Default::default(),
            inherit_io: false,
            clear_env: true,
            account: None,
            limits: Limits::default(),
        });
    }
    let program = match (&row.argv, &row.command) {
        (Some(argv), _) => {
            Program::Argv(serde_json::from_str(argv).map_err(|e| format!("argv: {e}"))?)
        }
        (None, Some(c)) => Program::Shell(c.clone()),
        (None, None) => return Err("command: is empty".into()),
    };
    let host = resolved.host;
    let who = resolved.account.as_ref().unwrap_or(&host.account);
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    env.insert("PATH".into(), JOB_PATH_DEFAULT.into());
    env.insert("HOME".into(), who.home.clone());
    env.insert("SHELL".into(), who.shell.clone());
    env.insert("LOGNAME".into(), who.name.clone());
    env.insert("USER".into(), who.name.clone());
    if let Some(lang) = host.env.get("LANG") {
        env.insert("LANG".into(), lang.clone());
    }
    for name in config.daemon.inherit_env.iter().chain(&inherit_list(row)?) {
        if crate::model::job::never_inherited(name) {
            continue;
        }
        if let Some(v) = host.env.get(name) {
            env.insert(name.clone(), v.clone());
        }
    }
    env.extend(resolved.file_env);
    if let Some(e) = &row.env {
        env.extend(
            serde_json::from_str::<BTreeMap<String, String>>(e).map_err(|e| format!("env: {e}"))?,
        );
    }
    let mut env: Vec<(String, String)> = env.into_iter().collect();
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
        clear_env: true,
        account: resolved.account,
        limits: row_limits(row)?,
    })
}
impl super::Shared {
    /// The account a run switches to and its `env_file`, looked up now (users and files change
    /// between runs).
    pub(super) fn resolve_process<'a>(
        &'a self,
        row: &JobRow,
        config: &Config,
    ) -> Result<Resolved<'a>, String> {
        if row.http.is_some() {
            // No process: no account to switch to, no environment.
            return Ok(Resolved {
                host: &self.host,
                account: None,
                file_env: vec![],
                key_attempt: 1,
            });
        }
        let account = match run_as(row, config, &self.host.account)? {
            Some((user, group)) => Some(
                crate::exec::account::checked(&user, group.as_deref(), &config.daemon.allowed)
                    .map_err(crate::exec::account::Refused::message)?,
            ),
            None => None,
        }
        // A job running as the daemon's own identity (root's jobs under a root daemon) switches
        // nothing: no `pre_exec` hook, so it is started with posix_spawn, not a fork.
        .filter(|a| !a.same_identity(&self.host.account));
        let file_env = match &row.env_file {
            Some(path) => crate::exec::envfile::read(std::path::Path::new(path))?,
            None => vec![],
        };
        Ok(Resolved {
            host: &self.host,
            account,
            file_env,
            key_attempt: 1,
        })
    }
}
