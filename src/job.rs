//! The nouns: a job's definition ([`JobSpec`]), its policy ([`Policy`]) and the per-key
//! overrides a job or a row may carry ([`PolicyOverrides`]). No I/O.

use std::collections::BTreeMap;
use std::time::Duration;

/// What to do with slots that passed while no node could run them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misfire {
    /// Drop missed slots; continue at the next future one.
    Skip,
    /// One run for any number of missed slots (serving the latest one).
    RunOnce,
    /// Every missed slot, oldest first, at most `max_catch_up` of them.
    RunAll,
}

impl Misfire {
    pub fn parse(s: &str) -> Result<Misfire, String> {
        match s {
            "skip" => Ok(Misfire::Skip),
            "run_once" => Ok(Misfire::RunOnce),
            "run_all" => Ok(Misfire::RunAll),
            other => Err(format!("\"{other}\" must be skip, run_once or run_all")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Misfire::Skip => "skip",
            Misfire::RunOnce => "run_once",
            Misfire::RunAll => "run_all",
        }
    }
}

/// How a run, or a history line that stands for slots not run, ended. Stored as text in
/// `cron_runs.outcome` and `cron_table.last_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Started and not ended yet (or its node died: a taker records it `Lost`).
    Running,
    Ok,
    /// A non-zero exit, a signal, or a command that could not be started.
    Failed,
    Timeout,
    /// Its node stopped renewing the lease while it ran (died, stalled, shut down).
    Lost,
    /// A summary of missed slots not run (misfire policy).
    Skipped,
    /// Retries given up because the next regular slot came.
    Abandoned,
}

impl Outcome {
    pub fn parse(s: &str) -> Result<Outcome, String> {
        Ok(match s {
            "running" => Outcome::Running,
            "ok" => Outcome::Ok,
            "failed" => Outcome::Failed,
            "timeout" => Outcome::Timeout,
            "lost" => Outcome::Lost,
            "skipped" => Outcome::Skipped,
            "abandoned" => Outcome::Abandoned,
            other => return Err(format!("\"{other}\" is not a run outcome")),
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Running => "running",
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Timeout => "timeout",
            Outcome::Lost => "lost",
            Outcome::Skipped => "skipped",
            Outcome::Abandoned => "abandoned",
        }
    }

    /// The run ended on its node and its end was recorded (whatever the exit).
    pub fn is_finished(self) -> bool {
        matches!(self, Outcome::Ok | Outcome::Failed | Outcome::Timeout)
    }
}

/// The newest run record of a job under an older claim token: what a node taking over an
/// unreleased claim accounts for (see `policy::account_previous`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviousRun {
    pub slot: i64,
    pub attempt: u32,
    /// `Err` holds an outcome text this version does not know.
    pub outcome: Result<Outcome, String>,
    /// The claim token that wrote it.
    pub token: i64,
}

/// What a node does with a running job whose lease it lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLeaseLost {
    /// Stop the job's process group (the default: another node may already run the slot).
    Kill,
    /// Let it finish, but write nothing about it.
    Ignore,
}

impl OnLeaseLost {
    pub fn parse(s: &str) -> Result<OnLeaseLost, String> {
        match s {
            "kill" => Ok(OnLeaseLost::Kill),
            "ignore" => Ok(OnLeaseLost::Ignore),
            other => Err(format!("\"{other}\" must be kill or ignore")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OnLeaseLost::Kill => "kill",
            OnLeaseLost::Ignore => "ignore",
        }
    }
}

/// The complete policy of one job, after defaults and overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// IANA zone the schedule's fields are read in.
    pub timezone: String,
    pub misfire: Misfire,
    /// A slot started later than this after its time is missed, not run. `None`: no deadline.
    pub starting_deadline: Option<Duration>,
    /// With `run_all`, the most missed slots replayed after an outage.
    pub max_catch_up: u32,
    /// Extra attempts after a failed exit, a timeout or a lost lease.
    pub retries: u32,
    /// Delay before the first retry; doubles for each further attempt.
    pub retry_backoff: Duration,
    /// Cap of the doubling backoff.
    pub retry_backoff_max: Duration,
    /// A run longer than this is stopped (SIGTERM to its process group, then SIGKILL).
    pub timeout: Duration,
    /// Time between SIGTERM and SIGKILL when stopping a job.
    pub kill_grace: Duration,
    /// Random delay bound, fixed per slot, to spread jobs due at the same second.
    pub jitter: Duration,
    pub on_lease_lost: OnLeaseLost,
    /// After a node died mid-run: run the slot again (at-least-once) or record it lost and move on
    /// (at-most-once).
    pub rerun_lost: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            timezone: "UTC".into(),
            misfire: Misfire::RunOnce,
            starting_deadline: None,
            max_catch_up: 10,
            retries: 0,
            retry_backoff: Duration::from_secs(10),
            retry_backoff_max: Duration::from_secs(3600),
            timeout: Duration::from_secs(3600),
            kill_grace: Duration::from_secs(10),
            jitter: Duration::ZERO,
            on_lease_lost: OnLeaseLost::Kill,
            rerun_lost: true,
        }
    }
}

/// Policy keys a `[[job]]` table or a `cron_table` row may set; `None` means "inherit".
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyOverrides {
    pub timezone: Option<String>,
    pub misfire: Option<Misfire>,
    pub starting_deadline: Option<Duration>,
    pub max_catch_up: Option<u32>,
    pub retries: Option<u32>,
    pub retry_backoff: Option<Duration>,
    pub retry_backoff_max: Option<Duration>,
    pub timeout: Option<Duration>,
    pub kill_grace: Option<Duration>,
    pub jitter: Option<Duration>,
    pub on_lease_lost: Option<OnLeaseLost>,
    pub rerun_lost: Option<bool>,
}

impl PolicyOverrides {
    /// The policy that results from laying these overrides over `base`.
    pub fn apply_to(&self, base: &Policy) -> Policy {
        Policy {
            timezone: self.timezone.clone().unwrap_or(base.timezone.clone()),
            misfire: self.misfire.unwrap_or(base.misfire),
            starting_deadline: self.starting_deadline.or(base.starting_deadline),
            max_catch_up: self.max_catch_up.unwrap_or(base.max_catch_up),
            retries: self.retries.unwrap_or(base.retries),
            retry_backoff: self.retry_backoff.unwrap_or(base.retry_backoff),
            retry_backoff_max: self.retry_backoff_max.unwrap_or(base.retry_backoff_max),
            timeout: self.timeout.unwrap_or(base.timeout),
            kill_grace: self.kill_grace.unwrap_or(base.kill_grace),
            jitter: self.jitter.unwrap_or(base.jitter),
            on_lease_lost: self.on_lease_lost.unwrap_or(base.on_lease_lost),
            rerun_lost: self.rerun_lost.unwrap_or(base.rerun_lost),
        }
    }
}

/// A job as defined in TOML (`[[job]]`), validated.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    pub name: String,
    pub schedule: String,
    /// `None`: the `[defaults]` zone.
    pub timezone: Option<String>,
    /// Run with `/bin/sh -c`.
    pub command: Option<String>,
    /// Run without a shell; exclusive with `command`.
    pub argv: Option<Vec<String>>,
    pub env: BTreeMap<String, String>,
    pub workdir: Option<String>,
    pub enabled: bool,
    pub pool: Option<String>,
    pub overrides: PolicyOverrides,
}

/// Formats a duration the way the configuration accepts it back (`"1h 30m"`).
pub fn format_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}
