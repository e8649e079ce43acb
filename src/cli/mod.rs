//! Subcommands. Each returns an exit code or a [`Failure`] carrying its message and code.

mod at;
mod backfill;
mod drain;
mod events;
mod explain;
mod import;
mod status;

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use clap::{Parser, Subcommand};
use tokio::sync::mpsc;

use crate::config::{self, Config, Environment};
use crate::daemon::{self, Control, Daemon};
use crate::model::job::Outcome;
use crate::schedule::Schedule;
use crate::store::{PARKED, Store};

#[derive(Debug, Parser)]
#[command(
    name = "sqlcron",
    version,
    about = "Cluster-safe cron with its state in SQL"
)]
pub struct Cli {
    /// Configuration file (default: $SQLCRON_CONFIG, else /etc/sqlcron/sqlcron.toml).
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon (the long-running service).
    Daemon,
    /// Create or upgrade the database schema.
    Migrate,
    /// Validate the configuration and every job in it.
    Check,
    /// Write the TOML's jobs to the database (create, update, remove TOML jobs).
    Apply {
        /// Only show what would change.
        #[arg(long)]
        dry_run: bool,
    },
    /// Show jobs, running claims, nodes and configuration drift.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Show the run history, newest first.
    History {
        /// Only this job.
        job: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// Say what happened to every slot of a job in a range, and when it runs next.
    Explain {
        job: String,
        /// Start of the range: RFC 3339, or a date or date and time in the job's zone
        /// (default: 24 hours ago).
        #[arg(long)]
        from: Option<String>,
        /// End of the range (default: now).
        #[arg(long)]
        to: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show the audit trail, newest first: operator actions and definition changes made with SQL.
    Audit {
        /// Only this job.
        job: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// Show alert events (hooks, the dead-man's switch) and their delivery, newest first.
    Events {
        /// Only this job.
        job: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// Create a one-off job: run CMD once at TIME (`now`, `+10m`, RFC 3339, or a local
    /// `2026-12-24T18:00` in the default zone), with the usual claim, lease, retries and history.
    At {
        time: String,
        /// The job's name (default: `at-<time>-<random>`).
        #[arg(long)]
        name: Option<String>,
        /// The account it runs as (a root daemon needs one, as for any job).
        #[arg(long)]
        user: Option<String>,
        /// One argument: a shell command line; several: a program and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Run every slot of a job in a range that has no successful run yet, oldest first, each
    /// once (as one-off rows JOB#backfill-SLOT, one at a time unless the job has a pool).
    Backfill {
        job: String,
        /// Start of the range: RFC 3339, or a date or date and time in the job's zone.
        #[arg(long)]
        from: String,
        /// End of the range (at most now).
        #[arg(long)]
        to: String,
        /// Queue at most this many slots (the oldest).
        #[arg(long)]
        max: Option<usize>,
        /// Only list the slots that would run.
        #[arg(long)]
        dry_run: bool,
    },
    /// Run a job once more as soon as possible; its schedule is unchanged.
    Run { job: String },
    /// Stop a node claiming (default: this configuration's node); its runs finish. For rolling
    /// upgrades. Lasts until `undrain`, across restarts. SIGUSR2 to the daemon does the same.
    Drain {
        node: Option<String>,
        /// Wait until the node holds no run any more.
        #[arg(long)]
        wait: bool,
    },
    /// Let a drained node claim again. SIGUSR1 to the daemon does the same.
    Undrain { node: Option<String> },
    /// Stop scheduling a job until `resume`.
    Pause { job: String },
    /// Schedule a paused job again (missed slots follow its misfire policy).
    Resume { job: String },
    /// Run a command while holding a cluster-wide lock (like flock(1) across hosts).
    Lock {
        name: String,
        /// Lease of the hold, extended while the command runs.
        #[arg(long, default_value = "10s")]
        lease: String,
        /// How long to wait for the lock (default: as long as it takes; 0: try once). When it
        /// runs out, exit 75 without running the command.
        #[arg(long)]
        wait: Option<String>,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Run a command while holding one of N places of a cluster-wide semaphore.
    Sem {
        name: String,
        /// Holders allowed at once.
        #[arg(long)]
        size: u32,
        #[arg(long, default_value = "10s")]
        lease: String,
        #[arg(long)]
        wait: Option<String>,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Break a lock or semaphore: its holders stop their commands at their next extension and
    /// the place is free when the lease ends. Recorded in the audit trail.
    Unlock {
        name: String,
        /// Only the hold with this fencing token (see `sqlcron locks`).
        #[arg(long)]
        token: Option<i64>,
    },
    /// List lock and semaphore holders and waiters, and each lock's last release.
    Locks {
        #[arg(long)]
        json: bool,
    },
    /// Print shell completions (bash, zsh, fish, elvish, powershell) to stdout.
    #[command(hide = true)]
    Completions { shell: clap_complete::Shell },
    /// Print the man page (roff) to stdout.
    #[command(hide = true)]
    Man,
    /// The daemon's job reaper (started by `sqlcron daemon` outside systemd).
    #[command(name = crate::exec::reaper::SUBCOMMAND, hide = true)]
    Reaper,
    /// Turn crontab files into [[job]] TOML on stdout (notes on stderr).
    #[command(subcommand)]
    Import(ImportFrom),
    /// Print the next fire times of a cron expression.
    Next {
        /// A 5-field (minute hour day-of-month month day-of-week) or 6-field (second first)
        /// expression, or a macro such as @daily.
        expr: String,
        /// IANA time zone the fields are read in.
        #[arg(long, default_value = "UTC")]
        tz: String,
        /// List fire times strictly after this RFC 3339 instant (default: now).
        #[arg(long)]
        after: Option<String>,
        /// How many fire times to print.
        #[arg(long, default_value_t = 5)]
        count: usize,
        /// The job whose name `H` fields hash (required when the expression uses `H`).
        #[arg(long)]
        job: Option<String>,
    },
}

/// What `sqlcron import` reads.
#[derive(Debug, Subcommand)]
pub enum ImportFrom {
    /// A user crontab (`crontab -l`), `/etc/crontab` or `/etc/cron.d/*` files (these two have a
    /// user column, recognised by their path or with --system).
    Crontab {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The account of a user crontab's jobs (`user = ...`).
        #[arg(long)]
        user: Option<String>,
        /// The files have a user column before the command.
        #[arg(long)]
        system: bool,
    },
}

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
}

/// The command line without its hidden subcommands: clap_complete offers every subcommand,
/// hidden or not, and `__reaper` or `man` have no place in an operator's tab completion.
fn visible_command() -> clap::Command {
    use clap::CommandFactory;
    let full = Cli::command();
    let root = clap::Command::new("sqlcron")
        .version(env!("CARGO_PKG_VERSION"))
        .args(full.get_arguments().filter(|a| !a.is_hide_set()).cloned());
    full.get_subcommands()
        .filter(|s| !s.is_hide_set())
        .fold(root, |cmd, sub| cmd.subcommand(sub.clone()))
}

pub fn run(cli: Cli) -> Result<u8, Failure> {
    match &cli.command {
        Command::Reaper => return Ok(crate::exec::reaper::serve()),
        Command::Completions { shell } => {
            let mut cmd = visible_command();
            clap_complete::generate(*shell, &mut cmd, "sqlcron", &mut std::io::stdout());
            return Ok(0);
        }
        Command::Man => {
            use clap::CommandFactory;
            clap_mangen::Man::new(Cli::command())
                .render(&mut std::io::stdout())
                .map_err(Failure::runtime)?;
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
    if let Command::Next {
        expr,
        tz,
        after,
        count,
        job,
    } = &cli.command
    {
        return next(expr, tz, after.as_deref(), *count, job.as_deref()).map(|()| 0);
    }
    let explicit = cli.config.is_some() || std::env::var_os("SQLCRON_CONFIG").is_some();
    let path = config::config_path(cli.config.as_deref());
    let env = Environment::from_process();
    let config = config::load(&path, explicit, &env).map_err(|e| Failure::usage(e.to_string()))?;
    if let Command::Check = cli.command {
        check_accounts(&config)?;
        if let Some(warning) = config::readable_secret_warning(&config) {
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(Failure::runtime)?;
    runtime.block_on(async move {
        match cli.command {
            Command::Daemon => run_daemon(config, path, explicit, env).await,
            Command::Migrate => {
                let store = connect(&config).await?;
                store.migrate().await.map_err(Failure::runtime)?;
                println!("schema up to date ({})", store.dialect().name());
                Ok(0)
            }
            Command::Apply { dry_run } => {
                let store = connect(&config).await?;
                store.migrate().await.map_err(Failure::runtime)?;
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
                for n in &report.removed {
                    println!("{verb}remove {n}");
                }
                for n in &report.conflicts {
                    println!("skip {n}: a job of that name was created with SQL");
                }
                if report.created.is_empty()
                    && report.updated.is_empty()
                    && report.removed.is_empty()
                {
                    println!("nothing to change");
                }
                Ok(0)
            }
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
            Command::Locks { json } => locks(&connect(&config).await?, json).await,
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
                audit(&connect(&config).await?, job.as_deref(), limit, json).await
            }
            Command::Events { job, limit, json } => {
                events::run(&connect(&config).await?, job.as_deref(), limit, json).await
            }
            Command::At {
                time,
                name,
                user,
                command,
            } => {
                let store = connect(&config).await?;
                at::run(
                    &store,
                    at::Request {
                        time: &time,
                        name: name.as_deref(),
                        user: user.as_deref(),
                        command: &command,
                        zone: &config.defaults.timezone,
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
            Command::Run { job } => {
                let store = connect(&config).await?;
                if store
                    .job(&job)
                    .await
                    .map_err(Failure::runtime)?
                    .is_some_and(|r| r.run_on.as_deref() == Some("every_node"))
                {
                    return Err(Failure::usage(format!(
                        "{job} runs on every node: run one node's copy, sqlcron run {job}@NODE"
                    )));
                }
                found(
                    &job,
                    store
                        .request_run(&job, &crate::exec::account::this_process(None))
                        .await
                        .map_err(Failure::runtime)?,
                )?;
                println!("{job}: will run as soon as a node is free");
                Ok(0)
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
            Command::Pause { job } => set_enabled(&config, &job, false).await,
            Command::Resume { job } => set_enabled(&config, &job, true).await,
            Command::Check
            | Command::Next { .. }
            | Command::Import(_)
            | Command::Completions { .. }
            | Command::Man
            | Command::Reaper => {
                unreachable!("handled above")
            }
        }
    })
}

async fn guarded(
    config: &Config,
    name: String,
    size: u32,
    lease: &str,
    wait: Option<&str>,
    command: &[String],
) -> Result<u8, Failure> {
    let lease = crate::model::duration::parse_duration(lease)
        .map_err(|m| Failure::usage(format!("--lease: {m}")))?;
    if lease < Duration::from_secs(1) {
        return Err(Failure::usage("--lease: must be at least 1s"));
    }
    let wait = wait
        .map(crate::model::duration::parse_duration)
        .transpose()
        .map_err(|m| Failure::usage(format!("--wait: {m}")))?;
    if size == 0 {
        return Err(Failure::usage("--size: must be at least 1"));
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let store = connect(config).await?;
    store.migrate().await.map_err(Failure::runtime)?;
    // The command runs in its own process group under the reaper, as a job does: a SIGKILL or a
    // freeze of this holder must not leave its pipeline running once the lock could pass on.
    if let Err(e) = crate::exec::reaper::start() {
        tracing::warn!(error = %e, "could not start the reaper: the command will not be stopped if this process is killed");
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let params = crate::daemon::guard::GuardParams {
        name,
        size,
        lease,
        wait,
        owner: config.node_name.clone(),
        host,
        pid: std::process::id(),
    };
    let code = crate::daemon::guard::run_guarded(&store, &params, command)
        .await
        .map_err(Failure::runtime)?;
    store.close().await;
    Ok(code.clamp(0, 255) as u8)
}

async fn locks(store: &Store, json: bool) -> Result<u8, Failure> {
    let rows = store.locks().await.map_err(Failure::runtime)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(Failure::runtime)?
        );
        return Ok(0);
    }
    println!(
        "{:<20} {:<28} {:<16} {:<16} {:>8} {:<21} UNTIL",
        "LOCK", "STATE", "NODE", "HOST", "PID", "SINCE"
    );
    for r in rows {
        println!(
            "{:<20} {:<28} {:<16} {:<16} {:>8} {:<21} {}",
            r.name,
            r.state,
            r.owner.unwrap_or_default(),
            r.host.unwrap_or_default(),
            r.pid.map(|p| p.to_string()).unwrap_or_default(),
            fmt_ms(r.since),
            fmt_ms(r.until)
        );
    }
    Ok(0)
}

async fn unlock(store: &Store, name: &str, token: Option<i64>) -> Result<u8, Failure> {
    let broken = store
        .lock_break(name, token, &crate::exec::account::this_process(None))
        .await
        .map_err(Failure::runtime)?;
    if broken.is_empty() {
        let which = token
            .map(|t| format!(" with token {t}"))
            .unwrap_or_default();
        return Err(Failure::runtime(format!(
            "lock \"{name}\" has no live hold{which}"
        )));
    }
    for b in broken {
        println!(
            "{name}: broke token {} held by {} on {} (pid {}); its holder stops its command at its next extension, and the place is free by {}",
            b.token.unwrap_or_default(),
            b.owner.unwrap_or_default(),
            b.host.unwrap_or_default(),
            b.pid.map(|p| p.to_string()).unwrap_or_default(),
            fmt_ms(b.until)
        );
    }
    Ok(0)
}

/// `pause` and `resume`.
async fn set_enabled(config: &Config, job: &str, enabled: bool) -> Result<u8, Failure> {
    let store = connect(config).await?;
    let changed = store
        .set_enabled(job, enabled, &crate::exec::account::this_process(None))
        .await
        .map_err(Failure::runtime)?;
    found(job, changed)?;
    println!("{job}: {}", if enabled { "resumed" } else { "paused" });
    Ok(0)
}

fn found(job: &str, ok: bool) -> Result<(), Failure> {
    if ok {
        Ok(())
    } else {
        Err(Failure::usage(format!("no job named \"{job}\"")))
    }
}

/// `check` on this host: every job's account exists and this daemon may switch to it.
fn check_accounts(config: &Config) -> Result<(), Failure> {
    let me = crate::exec::account::current().map_err(Failure::runtime)?;
    let mut problems = Vec::new();
    for job in &config.jobs {
        let account = crate::model::job::run_as(
            job.user.as_deref(),
            job.group.as_deref(),
            config.daemon.default_user.as_deref(),
            &me.as_daemon(),
        )
        .and_then(|who| match who {
            Some((user, group)) => crate::exec::account::lookup(&user, group.as_deref())
                .map(|_| ())
                .map_err(|e| format!("user: {e}")),
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

async fn connect(config: &Config) -> Result<Store, Failure> {
    connect_with(config, 4, None).map_err(|e| Failure::usage(e.to_string()))
}

/// The store for `[database] url`: through a transaction-mode pooler when `direct_url` is set.
fn connect_with(
    config: &Config,
    pool_size: u32,
    statement_timeout: Option<Duration>,
) -> Result<Store, crate::store::StoreError> {
    match &config.database_direct_url {
        Some(direct) => {
            Store::connect_pooled(&config.database_url, direct, pool_size, statement_timeout)
        }
        None => Store::connect_with(&config.database_url, pool_size, statement_timeout),
    }
}

/// The store the reading commands (`status`, `history`, `explain`) use: `[database] read_url`
/// when set (a replica: any server that answers, a standby too), else the database itself.
async fn connect_read(config: &Config) -> Result<Store, Failure> {
    match &config.database_read_url {
        Some(url) => Store::connect_reader(url, 4).map_err(|e| Failure::usage(e.to_string())),
        None => connect(config).await,
    }
}

/// Logs natively to journald under systemd (`$JOURNAL_STREAM`) or with `[log] target =
/// "journald"`, with fields `SQLCRON_JOB=`, `SQLCRON_SLOT=`, `SQLCRON_NODE=`, `SQLCRON_OUTCOME=`
/// and the priority mapped from the level; otherwise human-readable lines on stderr.
fn init_logging(config: &Config) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&config.log.level));
    let journald = match config.log.target.as_str() {
        "journald" => true,
        "stderr" => false,
        _ => std::env::var_os("JOURNAL_STREAM").is_some(),
    };
    if journald {
        match tracing_journald::layer() {
            Ok(layer) => {
                let layer = layer
                    .with_field_prefix(Some("SQLCRON".into()))
                    .with_syslog_identifier("sqlcron".into())
                    .with_custom_fields([("SQLCRON_NODE", config.node_name.as_bytes())]);
                let _ = tracing_subscriber::registry()
                    .with(filter)
                    .with(layer)
                    .try_init();
                return;
            }
            Err(e) => eprintln!("sqlcron: journald is not reachable ({e}); logging to stderr"),
        }
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

async fn run_daemon(
    config: Config,
    path: PathBuf,
    explicit: bool,
    env: Environment,
) -> Result<u8, Failure> {
    init_logging(&config);
    // Under systemd too: the unit's control group ends a dead daemon's jobs, but only the reaper
    // ends those of a daemon that is stopped (SIGSTOP, a stalled thread) once their lease
    // could have passed to another node.
    match crate::exec::reaper::start() {
        Ok(pid) => tracing::debug!(pid, "job reaper started"),
        Err(e) => {
            tracing::warn!(error = %e, "could not start the job reaper: jobs will not be stopped if this daemon is killed or frozen")
        }
    }
    let store = connect_with(
        &config,
        config.database_pool_size,
        Some(crate::model::lease::statement_timeout(config.daemon.lease)),
    )
    .map_err(|e| Failure::usage(e.to_string()))?;
    tracing::info!(node = %config.node_name, database = %config.database_url, jobs = config.jobs.len(), "starting");
    let (tx, mut rx) = mpsc::unbounded_channel();
    spawn_signal_thread(tx.clone(), path, explicit, env).map_err(Failure::runtime)?;

    // Migrate and apply, retrying while the database is unreachable: a node must be able to start
    // before its database does.
    let mut delay = Duration::from_millis(500);
    let daemon = Daemon::new(store.clone(), config);
    loop {
        let attempt = async {
            store.migrate().await?;
            daemon.apply_config().await
        };
        // A stop signal ends the wait: a node that never got its database still obeys SIGTERM.
        let outcome = tokio::select! {
            r = attempt => Some(r),
            msg = rx.recv() => match msg {
                Some(Control::Stop | Control::StopNow) | None => None,
                Some(Control::Reload(_)) => {
                    tracing::warn!("reload ignored: the database is not ready yet");
                    continue;
                }
                Some(Control::Drain(_)) => {
                    tracing::warn!("drain signal ignored: the database is not ready yet; use sqlcron drain");
                    continue;
                }
            },
        };
        match outcome {
            Some(Ok(())) => break,
            Some(Err(e)) => {
                tracing::error!(error = %e, kind = e.kind(), "database not ready; retrying");
                let stop = tokio::select! {
                    _ = tokio::time::sleep(delay) => false,
                    msg = rx.recv() => matches!(msg, Some(Control::Stop | Control::StopNow) | None),
                };
                if stop {
                    tracing::info!("stopped before the database was ready");
                    return Ok(0);
                }
                delay = (delay * 2).min(Duration::from_secs(10));
            }
            None => {
                tracing::info!("stopped before the database was ready");
                return Ok(0);
            }
        }
    }
    crate::service::systemd::ready();
    tracing::info!("ready");
    daemon.run(rx).await;
    store.close().await;
    Ok(0)
}

/// signal-hook delivers signals on a plain thread; they become [`Control`] messages.
fn spawn_signal_thread(
    tx: mpsc::UnboundedSender<Control>,
    path: PathBuf,
    explicit: bool,
    env: Environment,
) -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut stops = 0;
            for signal in signals.forever() {
                match signal {
                    SIGHUP => match config::load(&path, explicit, &env) {
                        Ok(config) => {
                            tracing::info!(path = %path.display(), "SIGHUP: reloading configuration");
                            let _ = tx.send(Control::Reload(Box::new(config)));
                        }
                        Err(e) => {
                            tracing::error!("SIGHUP: configuration not reloaded, keeping the running one: {e}");
                        }
                    },
                    SIGUSR2 | SIGUSR1 => {
                        if tx.send(Control::Drain(signal == SIGUSR2)).is_err() {
                            break;
                        }
                    }
                    _ => {
                        stops += 1;
                        crate::service::systemd::stopping();
                        let msg = if stops == 1 { Control::Stop } else { Control::StopNow };
                        if tx.send(msg).is_err() {
                            break;
                        }
                    }
                }
            }
        })?;
    Ok(())
}

fn fmt_ms(ms: Option<i64>) -> String {
    match ms {
        None => "-".into(),
        Some(PARKED) => "never".into(),
        Some(ms) => daemon::fmt_ms(ms),
    }
}

async fn history(store: &Store, job: Option<&str>, limit: i64, json: bool) -> Result<u8, Failure> {
    let rows = store
        .history(job, limit.clamp(1, 100_000))
        .await
        .map_err(Failure::runtime)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(Failure::runtime)?
        );
        return Ok(0);
    }
    println!(
        "{:<24} {:<21} {:>3} {:<10} {:<16} {:<21} DETAIL",
        "JOB", "SLOT", "TRY", "OUTCOME", "NODE", "ENDED"
    );
    for r in rows {
        let detail = match Outcome::parse(&r.outcome) {
            Ok(Outcome::Skipped) => format!(
                "{} slot(s) up to {}",
                r.skipped_count.unwrap_or(0),
                fmt_ms(r.skipped_last)
            ),
            _ => match (r.exit_code, r.signal) {
                (Some(c), _) => format!("exit {c}"),
                (None, Some(s)) => match &r.message {
                    Some(m) => format!("signal {s}: {m}"),
                    None => format!("signal {s}"),
                },
                _ => r.message.clone().unwrap_or_default(),
            },
        };
        println!(
            "{:<24} {:<21} {:>3} {:<10} {:<16} {:<21} {}",
            r.job,
            daemon::fmt_ms(r.slot),
            r.attempt,
            r.outcome,
            r.node.unwrap_or_default(),
            fmt_ms(r.ended),
            detail
        );
    }
    Ok(0)
}

async fn audit(store: &Store, job: Option<&str>, limit: i64, json: bool) -> Result<u8, Failure> {
    let rows = store
        .audit_log(job, limit.clamp(1, 100_000))
        .await
        .map_err(Failure::runtime)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).map_err(Failure::runtime)?
        );
        return Ok(0);
    }
    println!(
        "{:<21} {:<13} {:<24} {:<32} DETAIL",
        "WHEN", "ACTION", "JOB", "WHO"
    );
    for r in rows {
        let who = match (&r.host, r.pid) {
            (Some(h), Some(p)) => format!("{} @{h} pid {p}", r.who),
            (Some(h), None) => format!("{} @{h}", r.who),
            _ => r.who.clone(),
        };
        println!(
            "{:<21} {:<13} {:<24} {:<32} {}",
            daemon::fmt_ms(r.at),
            r.action,
            r.job.unwrap_or_default(),
            who,
            r.detail.unwrap_or_default()
        );
    }
    Ok(0)
}

fn next(
    expr: &str,
    tz: &str,
    after: Option<&str>,
    count: usize,
    job: Option<&str>,
) -> Result<(), Failure> {
    let schedule = Schedule::parse_for(expr, tz, job).map_err(|e| Failure::usage(e.to_string()))?;
    if let Some(resolved) = schedule.expr().and_then(|e| e.resolved()) {
        eprintln!("{expr} is {resolved} for {}", job.unwrap_or_default());
    }
    let after = match after {
        Some(text) => DateTime::parse_from_rfc3339(text)
            .map_err(|e| {
                Failure::usage(format!(
                    "--after: \"{text}\" is not an RFC 3339 timestamp ({e}), e.g. 2026-03-29T01:00:00+01:00"
                ))
            })?
            .with_timezone(&Utc),
        None => Utc::now(),
    };
    let mut out = String::new();
    for t in schedule.iter_after(after).take(count) {
        out.push_str(
            &t.with_timezone(&schedule.tz())
                .to_rfc3339_opts(SecondsFormat::Secs, false),
        );
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}
