//! The command line: every subcommand and its flags (clap). Parsing only; `mod.rs` dispatches.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// The version `sqlcron --version` prints ([`crate::model::VERSION`]).
pub const LONG_VERSION: &str = crate::model::VERSION;

#[derive(Debug, Parser)]
#[command(
    name = "sqlcron",
    version = LONG_VERSION,
    about = "Cluster-safe cron with its state in SQL"
)]
pub struct Cli {
    /// Configuration file (default: $SQLCRON_CONFIG, else /etc/sqlcron/sqlcron.toml).
    #[arg(long, global = true, value_name = "PATH")]
    pub(super) config: Option<PathBuf>,
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Debug, Subcommand)]
pub(super) enum Command {
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
    /// Check this node and its cluster, one line per check, each problem with its fix (exit 0:
    /// all well, 1: a warning, 2: an error).
    Doctor {
        #[arg(long)]
        json: bool,
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
        /// Deliver the failed event with this id again (its tries start afresh).
        #[arg(long, value_name = "ID")]
        retry: Option<i64>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// Print a `[web] users_file` line for a dashboard user: reads the password from the first
    /// line of standard input and prints `NAME:ROLE:<Argon2id hash>`.
    WebUser {
        /// The user name (letters, digits and . _ @ -).
        name: String,
        /// viewer (reads), operator (runs, pauses, drains) or admin.
        #[arg(long, default_value = "viewer")]
        role: String,
    },
    /// Make an API token for the web dashboard's `/api/v1` (`Authorization: Bearer TOKEN`),
    /// stored hashed in the database and valid on every node; prints the token once. With
    /// `--revoke`, delete the token of that name.
    WebToken {
        /// The token's name (letters, digits and . _ @ -), shown as `token:NAME` in the audit.
        name: String,
        /// viewer (reads), operator (runs, pauses, drains) or admin.
        #[arg(long, default_value = "viewer")]
        role: String,
        /// How long it is valid (e.g. 90d; default: until revoked).
        #[arg(long)]
        expires: Option<String>,
        /// Delete the token instead.
        #[arg(long)]
        revoke: bool,
    },
    /// Make a key that signs jobs: writes it to FILE (mode 0600) and prints its public key for
    /// the nodes' `[security] trusted_keys`.
    Keygen {
        /// Where the signing key is written (a new file).
        #[arg(long)]
        out: std::path::PathBuf,
    },
    /// Sign jobs as they are stored now: a node with `[security] sql_jobs = "signed"` runs a
    /// job written with SQL only with a valid signature. Prints what was signed.
    Sign {
        /// The signing key file (`sqlcron keygen`).
        #[arg(long, required_unless_present = "dry_run")]
        key: Option<std::path::PathBuf>,
        /// Sign nothing: print each job's definition and its digest, to review before signing
        /// with `--expect`.
        #[arg(long, conflicts_with = "expect")]
        dry_run: bool,
        /// Sign only if the job's definition is still the one reviewed: its digest as
        /// `--dry-run` printed it (once per job, in the order of the jobs).
        #[arg(long)]
        expect: Vec<String>,
        #[arg(required = true)]
        jobs: Vec<String>,
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
        /// Sign the job with this key file (nodes with `[security] sql_jobs = "signed"`).
        #[arg(long)]
        key: Option<std::path::PathBuf>,
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
    Run {
        job: String,
        /// Ask for the run even when nothing will run it now (the job is paused, or no node
        /// is up): it runs once the job is resumed and a node claims it.
        #[arg(long)]
        queue: bool,
        /// Wait for the run to end, print its output and exit with its exit code (a signal N
        /// as 128+N, a timeout as 124). The output is printed when the run ends.
        #[arg(long)]
        wait: bool,
    },
    /// Print a run's stored output: the job's newest run that has ended, or run RUN (the RUN
    /// column of `history`). A line about the run goes to standard error.
    Logs {
        job: String,
        /// A run's id, from `history`.
        run: Option<i64>,
    },
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
    Pause {
        job: String,
        /// Why: kept in the audit trail and shown on the job's dashboard page while it stays
        /// paused.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Stop the job's run in progress, wherever it runs: its node stops it at its next lease
    /// extension (within a third of the lease) and records it `stopped`, not retried.
    Stop { job: String },
    /// Schedule a paused job again: prints what its misfire policy will do with the slots that
    /// passed while it was paused, then resumes it.
    Resume {
        job: String,
        /// Skip every slot that passed while it was paused (one `skipped` line in its history)
        /// instead of following the misfire policy; the job continues at its next slot.
        #[arg(long)]
        skip_missed: bool,
    },
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
    /// Print sqlcron(8) (roff) to stdout, or with --out write every page into DIR:
    /// sqlcron(8), sqlcron-COMMAND(1) for each command and sqlcron.toml(5).
    #[command(hide = true)]
    Man {
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
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
        /// Skip the fire times inside this calendar (a [[calendar]] of the configuration file;
        /// repeatable). Skipped times are told on stderr.
        #[arg(long = "skip-on", value_name = "CALENDAR")]
        skip_on: Vec<String>,
        /// Keep to the times inside this calendar (repeatable).
        #[arg(long = "only-in", value_name = "CALENDAR")]
        only_in: Vec<String>,
        /// With --only-in: a fire time outside runs once at the window's next opening.
        #[arg(long, requires = "only_in")]
        defer: bool,
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

/// The command line without its hidden subcommands: clap_complete offers every subcommand,
/// hidden or not, and `__reaper` or `man` have no place in an operator's tab completion.
pub(super) fn visible_command() -> clap::Command {
    use clap::CommandFactory;
    let full = Cli::command();
    let root = clap::Command::new("sqlcron")
        .version(LONG_VERSION)
        .args(full.get_arguments().filter(|a| !a.is_hide_set()).cloned());
    full.get_subcommands()
        .filter(|s| !s.is_hide_set())
        .fold(root, |cmd, sub| cmd.subcommand(sub.clone()))
}
