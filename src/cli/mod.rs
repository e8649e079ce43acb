//! Subcommands. Each returns an exit code or a [`Failure`] carrying its message and code.

mod args;
mod at;
mod backfill;
mod check;
mod connect;
mod dashboard_access;
mod database_file;
mod doctor;
mod doctor_certificate;
mod doctor_node;
mod drain;
mod events;
mod explain;
mod history;
mod import;
mod lock;
pub mod man_pages;
mod next;
mod pausing;
mod run_daemon;
mod run_now;
mod signing;
mod status;
mod terminal;
mod upgrade_window;

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use tokio::sync::mpsc;

pub use args::{Cli, ImportFrom};
use args::{Command, visible_command};
use check::check_accounts;
use connect::{connect, connect_existing, connect_read, connect_with};
use dashboard_access::{web_token, web_user};
use history::{audit, history};
use lock::{guarded, locks, unlock};
use next::next;
use run_daemon::run_daemon;

use crate::config::{self, Config, Environment};
use crate::daemon::{self, Control, Daemon};
use crate::model::job::Outcome;
use crate::schedule::Schedule;
use crate::store::{PARKED, Store};

/// An error the binary reports: its message and the exit code it maps to.
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: 2,
            message: message.into(),
        }
    }

    fn runtime(message: impl std::fmt::Display) -> Failure {
        Failure {
            code: 1,
            message: message.to_string(),
        }
    }

    /// A migration that failed: exit status [`SCHEMA_TOO_NEW`] when only a newer sqlcron can use
    /// the schema, 1 otherwise.
    fn migration(e: crate::store::StoreError) -> Failure {
        Failure {
            code: if matches!(e, crate::store::StoreError::SchemaTooNew { .. }) {
                SCHEMA_TOO_NEW
            } else {
                1
            },
            message: e.to_string(),
        }
    }
}

/// Exit status of a command (the daemon, `migrate`, `apply`) refused because the database's
/// schema needs a newer sqlcron (docs/upgrades.md). The unit does not restart on it.
pub const SCHEMA_TOO_NEW: u8 = 3;

/// A failure's message as the terminal shows it: it may quote a row's text (a schedule that
/// does not parse), whose control characters are escaped, lines and tabs aside.
pub fn printable(message: &str) -> String {
    terminal::shown_lines(message)
}

pub fn run(cli: Cli) -> Result<u8, Failure> {
    // A command whose output goes to a pipe that closes (`sqlcron history | head`) ends quietly,
    // as Unix tools do, instead of failing on the write. The long-running ones keep ignoring
    // SIGPIPE: a daemon whose log reader went away must go on running jobs.
    if !matches!(
        cli.command,
        Command::Daemon | Command::Reaper | Command::Lock { .. } | Command::Sem { .. }
    ) {
        // SAFETY: setting a signal's disposition to the default has no preconditions.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    match &cli.command {
        Command::Reaper => return Ok(crate::exec::reaper::serve()),
        Command::Completions { shell } => {
            let mut cmd = visible_command();
            clap_complete::generate(*shell, &mut cmd, "sqlcron", &mut std::io::stdout());
            return Ok(0);
        }
        Command::Keygen { out } => return signing::keygen(out),
        Command::WebUser { name, role } => return web_user(name, role),
        Command::Man { out } => {
            match out {
                Some(dir) => {
                    man_pages::write_all(dir).map_err(Failure::runtime)?;
                }
                None => {
                    use std::io::Write;
                    let page = man_pages::main_page().map_err(Failure::runtime)?;
                    std::io::stdout()
                        .write_all(&page)
                        .map_err(Failure::runtime)?;
                }
            }
            return Ok(0);
        }
        _ => {}
    }
    if let Command::Import(ImportFrom::Crontab {
        files,
        user,
        system,
    }) = &cli.command
    {
        return import::crontab(files, user.as_deref(), *system);
    }
    let explicit = cli.config.is_some() || std::env::var_os("SQLCRON_CONFIG").is_some();
    let path = config::config_path(cli.config.as_deref());
    let env = Environment::from_process();
    if let Command::Next {
        expr,
        tz,
        after,
        count,
        job,
        skip_on,
        only_in,
        defer,
    } = &cli.command
    {
        let rule = crate::model::calendars::CalendarRule {
            skip_on: skip_on.clone(),
            only_in: only_in.clone(),
            defer: *defer,
        };
        // The configuration file is read only for the calendars named.
        let calendars = if rule.is_empty() {
            Default::default()
        } else {
            let config =
                config::load(&path, explicit, &env).map_err(|e| Failure::usage(e.to_string()))?;
            let calendars = check::toml_calendars(&config);
            if let Some(m) = rule.missing(&calendars) {
                return Err(Failure::usage(format!(
                    "{m}; {} defines none of that name",
                    path.display()
                )));
            }
            calendars
        };
        let when = next::When {
            after: after.as_deref(),
            count: *count,
            job: job.as_deref(),
        };
        return next(expr, tz, &when, &rule, &calendars).map(|()| 0);
    }
    let config = config::load(&path, explicit, &env).map_err(|e| match unreadable(&path) {
        Some(hint) => Failure::usage(format!("{e}; {hint}")),
        None => Failure::usage(e.to_string()),
    })?;
    if let Command::Check = cli.command {
        check_accounts(&config)?;
        check::check_calendars(&config, Utc::now().timestamp_millis())?;
        if let Some(warning) = config::readable_secret_warning(&config) {
            eprintln!("warning: {warning}");
        }
        if let Some(warning) = config::open_metrics_warning(&config) {
            eprintln!("warning: {warning}");
        }
        if let Some(warning) = config::long_lease_warning(&config) {
            eprintln!("warning: {warning}");
        }
        println!(
            "{}: ok ({} job(s), database {})",
            path.display(),
            config.jobs.len(),
            config.database_url
        );
        return Ok(0);
    }
    if let Command::Daemon = cli.command {
        run_daemon::harden_process();
    }
    // The daemon runs its tasks on one thread, and its lease extension on a thread of its own
    // (`daemon/lease_thread.rs`): in a burst, one thread running every run's task wakes fewer
    // threads per run than a pool of workers would.
    let runtime = if let Command::Daemon = cli.command {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    }
    .enable_all()
    .build()
    .map_err(Failure::runtime)?;
    runtime.block_on(async move {
        match cli.command {
            Command::Daemon => run_daemon(config, path, explicit, env).await,
            Command::Migrate => {
                let store = connect(&config).await?;
                let before = store.migrations_applied().await;
                store.migrate().await.map_err(Failure::migration)?;
                let after = store.migrations_applied().await;
                if let Ok((Some(applied), knows)) = store.schema_version().await
                    && applied > knows
                {
                    println!(
                        "schema newer than this sqlcron ({}, migration {applied}; this one knows up to {knows}): used as it is, its newer migrations only add; upgrade this node",
                        store.dialect().name()
                    );
                    return Ok(0);
                }
                match after - before {
                    0 => println!(
                        "schema up to date ({}, {after} migrations)",
                        store.dialect().name()
                    ),
                    n => println!(
                        "applied {n} migration{} ({}, {after} in all)",
                        if n == 1 { "" } else { "s" },
                        store.dialect().name()
                    ),
                }
                Ok(0)
            }
            Command::Apply { dry_run } => {
                let store = connect(&config).await?;
                store.migrate().await.map_err(Failure::migration)?;
                if !dry_run {
                    let calendars: Vec<(String, String)> = config
                        .calendars
                        .iter()
                        .map(|c| (c.name.clone(), c.entries.clone()))
                        .collect();
                    let written = store
                        .apply_calendars(&calendars, &crate::exec::account::this_process(None))
                        .await
                        .map_err(Failure::runtime)?;
                    for n in &written.written {
                        println!("write calendar {n}");
                    }
                    for n in &written.removed {
                        println!("remove calendar {n}");
                    }
                }
                let report = store
                    .apply_toml(
                        &config.jobs,
                        dry_run,
                        &crate::exec::account::this_process(None),
                    )
                    .await
                    .map_err(Failure::runtime)?;
                let verb = if dry_run { "would " } else { "" };
                for n in &report.created {
                    println!("{verb}create {n}");
                }
                for n in &report.updated {
                    println!("{verb}update {n}");
                }
                for (n, columns) in &report.restored {
                    println!("{verb}restore {n} (changed outside the file: {columns})");
                }
                for n in &report.removed {
                    println!("{verb}remove {n}");
                }
                for n in &report.conflicts {
                    println!("skip {n}: a job of that name was created with SQL");
                }
                for (n, twin) in &report.twins {
                    println!(
                        "skip {n}: the database takes it for the name of {twin} (MySQL and MariaDB compare names without case)"
                    );
                }
                if report.created.is_empty()
                    && report.updated.is_empty()
                    && report.restored.is_empty()
                    && report.removed.is_empty()
                {
                    println!("nothing to change");
                }
                Ok(0)
            }
            Command::Doctor { json } => doctor::run(&config, json).await,
            Command::Status { json } => {
                status::run(&connect_read(&config).await?, &config, json).await
            }
            Command::Lock {
                name,
                lease,
                wait,
                command,
            } => guarded(&config, name, 1, &lease, wait.as_deref(), &command).await,
            Command::Sem {
                name,
                size,
                lease,
                wait,
                command,
            } => guarded(&config, name, size, &lease, wait.as_deref(), &command).await,
            Command::Locks { json } => locks(&connect_existing(&config).await?, json).await,
            Command::Unlock { name, token } => unlock(&connect(&config).await?, &name, token).await,
            Command::History { job, limit, json } => {
                history(&connect_read(&config).await?, job.as_deref(), limit, json).await
            }
            Command::Explain {
                job,
                from,
                to,
                json,
            } => {
                let store = connect_read(&config).await?;
                explain::run(&store, &config, &job, from.as_deref(), to.as_deref(), json).await
            }
            Command::Audit { job, limit, json } => {
                audit(
                    &connect_existing(&config).await?,
                    job.as_deref(),
                    limit,
                    json,
                )
                .await
            }
            Command::Events {
                retry: Some(id), ..
            } => {
                let store = connect(&config).await?;
                let actor = crate::exec::account::this_process(None);
                if store
                    .event_retry(id, &actor)
                    .await
                    .map_err(Failure::runtime)?
                {
                    println!("event {id}: pending again");
                    Ok(0)
                } else {
                    Err(Failure::usage(format!("no failed event {id}")))
                }
            }
            Command::Events {
                job, limit, json, ..
            } => {
                events::run(
                    &connect_existing(&config).await?,
                    job.as_deref(),
                    limit,
                    json,
                )
                .await
            }
            Command::Sign {
                key,
                dry_run,
                expect,
                jobs,
            } => {
                let store = connect(&config).await?;
                match key.filter(|_| !dry_run) {
                    None => signing::review(&store, &jobs).await,
                    Some(key) => signing::sign(&store, &key, &jobs, &expect).await,
                }
            }
            Command::At {
                time,
                name,
                user,
                key,
                command,
            } => {
                let key = key.as_deref().map(signing::read_key).transpose()?;
                let store = connect(&config).await?;
                at::run(
                    &store,
                    at::Request {
                        time: &time,
                        name: name.as_deref(),
                        user: user.as_deref(),
                        command: &command,
                        zone: &config.defaults.timezone,
                        allowed: &config.daemon.allowed,
                        key: key.as_ref(),
                    },
                )
                .await
            }
            Command::Backfill {
                job,
                from,
                to,
                max,
                dry_run,
            } => {
                let store = connect(&config).await?;
                backfill::run(
                    &store,
                    &config,
                    backfill::Request {
                        job: &job,
                        from: &from,
                        to: &to,
                        max,
                        dry_run,
                    },
                )
                .await
            }
            Command::Run { job, queue, wait } => run_now::run_now(&config, &job, queue, wait).await,
            Command::Logs { job, run } => {
                run_now::logs(&connect_read(&config).await?, &job, run).await
            }
            Command::Drain { node, wait } => {
                let store = connect(&config).await?;
                let node = node.unwrap_or_else(|| config.node_name.clone());
                drain::drain(&store, &node, wait).await
            }
            Command::Undrain { node } => {
                let store = connect(&config).await?;
                let node = node.unwrap_or_else(|| config.node_name.clone());
                drain::undrain(&store, &node).await
            }
            Command::Pause { job, reason } => {
                pausing::pause(&config, &job, reason.as_deref()).await
            }
            Command::Stop { job } => pausing::stop(&config, &job).await,
            Command::WebToken {
                name,
                role,
                expires,
                revoke,
            } => web_token(&config, &name, &role, expires.as_deref(), revoke).await,
            Command::Resume { job, skip_missed } => {
                let store = connect(&config).await?;
                pausing::resume(
                    &store,
                    &job,
                    skip_missed,
                    &config.defaults,
                    &config.node_name,
                )
                .await
            }
            Command::Check
            | Command::Next { .. }
            | Command::Import(_)
            | Command::Completions { .. }
            | Command::Man { .. }
            | Command::Keygen { .. }
            | Command::WebUser { .. }
            | Command::Reaper => {
                unreachable!("handled above")
            }
        }
    })
}

/// Why this process cannot read the configuration file at `path`, and what an operator does
/// about it (the packaged file is root:sqlcron 0640: its group reads it); `None` when it can.
fn unreadable(path: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    if std::fs::File::open(path).is_ok() {
        return None;
    }
    let meta = std::fs::metadata(path).ok()?;
    let me = crate::exec::account::current().map_or_else(|e| e, |a| a.name);
    let owner = crate::exec::account::name_of(meta.uid());
    let group = crate::exec::account::group_name_of(meta.gid());
    // Joining the file's group helps only where the group may read it, and never root's.
    let join = if meta.mode() & 0o040 != 0 && meta.gid() != 0 {
        format!(
            "an operator in group {group} reads it (`sudo adduser {me} {group}`, then log in again), or "
        )
    } else {
        String::new()
    };
    Some(format!(
        "{} is {owner}:{group} mode {:04o} and this command runs as {me}: {join}run the command \
         with sudo, or give it a configuration of its own (`--config FILE`, or SQLCRON_CONFIG) \
         that names the database, for example with a reader's credentials (docs/roles/)",
        path.display(),
        meta.mode() & 0o7777
    ))
}

/// "no job named JOB", as every command says it (exit 2), with the closest name when one is
/// near: a typo is told apart from a job without runs.
pub(super) async fn no_such_job(store: &Store, job: &str) -> Failure {
    let names: Vec<String> = store
        .jobs()
        .await
        .map(|rows| rows.into_iter().map(|r| r.name).collect())
        .unwrap_or_default();
    match closest(job, names.iter().map(String::as_str)) {
        Some(near) => Failure::usage(format!("no job named \"{job}\" (did you mean \"{near}\"?)")),
        None => Failure::usage(format!("no job named \"{job}\"")),
    }
}

/// The name nearest `asked` by edit distance, when within a third of its length (at least 2).
fn closest<'a>(asked: &str, names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (asked.chars().count() / 3).max(2);
    names
        .map(|n| (strsim::levenshtein(asked, n), n))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, n)| (*d, *n))
        .map(|(_, n)| n)
}

/// A database time (ms) for tables: RFC 3339 in UTC, or `-`.
fn fmt_ms(ms: Option<i64>) -> String {
    match ms {
        None => "-".into(),
        Some(PARKED) => "never".into(),
        Some(ms) => daemon::fmt_ms(ms),
    }
}
