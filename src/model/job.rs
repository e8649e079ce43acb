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
    /// Stopped because its next slot came (`overlap = "replace"`).
    Replaced,
    /// Stopped on request (`sqlcron stop`, the dashboard); not retried.
    Stopped,
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
            "replaced" => Outcome::Replaced,
            "stopped" => Outcome::Stopped,
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
            Outcome::Replaced => "replaced",
            Outcome::Stopped => "stopped",
        }
    }

    /// The run ended on its node and its end was recorded (whatever the exit).
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            Outcome::Ok | Outcome::Failed | Outcome::Timeout | Outcome::Replaced | Outcome::Stopped
        )
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

/// What the next slot does when it comes while the previous run still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    /// The next slot waits for the run, then follows `misfire` (the default).
    Forbid,
    /// The next slot stops the run (SIGTERM, `kill_grace`, SIGKILL), records it `replaced`
    /// and starts.
    Replace,
}

impl Overlap {
    pub fn parse(s: &str) -> Result<Overlap, String> {
        match s {
            "forbid" => Ok(Overlap::Forbid),
            "replace" => Ok(Overlap::Replace),
            "allow" => Err(
                "\"allow\" is not offered: one job runs once at a time (see docs/daemon.md); use forbid or replace"
                    .into(),
            ),
            other => Err(format!("\"{other}\" must be forbid or replace")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Forbid => "forbid",
            Overlap::Replace => "replace",
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
    pub overlap: Overlap,
    /// `skip_on`, `only_in` and `defer`.
    pub calendars: crate::model::calendars::CalendarRule,
    /// Upstreams that must have succeeded before a slot runs (`requires`).
    pub requires: Vec<crate::model::requires::Requirement>,
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
            overlap: Overlap::Forbid,
            calendars: Default::default(),
            requires: vec![],
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
    pub overlap: Option<Overlap>,
    pub calendars: crate::model::calendars::CalendarOverrides,
    pub requires: Option<Vec<crate::model::requires::Requirement>>,
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
            overlap: self.overlap.unwrap_or(base.overlap),
            calendars: self.calendars.apply_to(&base.calendars),
            requires: self.requires.clone().unwrap_or(base.requires.clone()),
        }
    }
}

/// A job as defined in TOML (`[[job]]`), validated.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobSpec {
    pub name: String,
    pub schedule: String,
    /// `None`: the `[defaults]` zone.
    pub timezone: Option<String>,
    /// Run with `/bin/sh -c`.
    pub command: Option<String>,
    /// Run without a shell; exclusive with `command`.
    pub argv: Option<Vec<String>>,
    /// Send an HTTP request instead of running a process; exclusive with both.
    pub http: Option<crate::model::http_target::HttpTarget>,
    pub env: BTreeMap<String, String>,
    pub workdir: Option<String>,
    pub enabled: bool,
    pub pool: Option<String>,
    pub overrides: PolicyOverrides,
    /// The account the job runs as (`None`: `[daemon] default_user`, else the daemon's own).
    pub user: Option<String>,
    /// Its primary group (`None`: the user's).
    pub group: Option<String>,
    /// A file of `KEY=VALUE` lines the daemon reads at each run: the job's own secrets.
    pub env_file: Option<String>,
    /// Variables of the daemon's environment the job also gets.
    pub inherit_env: Vec<String>,
    /// Resource limits of each run.
    pub limits: Limits,
    /// Hooks, the dead-man's switch and pings (`None`s inherit `[defaults]`).
    pub alerts: crate::model::hooks::AlertSettings,
    /// Which nodes may run it (`None`: any).
    pub placement: Option<crate::model::placement::Placement>,
    /// `run_on = "every_node"`: every matching node runs each slot (its own copy `job@node`).
    pub every_node: bool,
    /// Upstreams whose finished runs each run this job once (`after`).
    pub after: Vec<crate::model::chains::After>,
}

/// Resource limits of one run: `setrlimit` values (any system) and control-group values (under
/// systemd with cgroup v2 and `Delegate=yes`). Stored as a JSON object in `cron_table.limits`;
/// sizes are bytes and times seconds once parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Limits {
    /// RLIMIT_NOFILE: open files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nofile: Option<u64>,
    /// RLIMIT_AS: address space, bytes (allocations beyond it fail).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// RLIMIT_CPU: CPU seconds; the process gets SIGXCPU, then SIGKILL 5 s later.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_time: Option<u64>,
    /// RLIMIT_NPROC: processes of the job's user (counted per user by the kernel).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
    /// cgroup `memory.max`, bytes: the kernel's OOM killer ends the run beyond it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_max: Option<u64>,
    /// cgroup `cpu.weight`, 1-10000 (100 is the default share).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_weight: Option<u64>,
    /// cgroup `cpu.max` as a percentage of one CPU (200: two CPUs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_quota: Option<u64>,
    /// cgroup `pids.max`: processes and threads of the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks_max: Option<u64>,
}

/// Keys of a `limits` table, in documentation order.
pub const LIMIT_KEYS: [&str; 8] = [
    "nofile",
    "memory",
    "cpu_time",
    "processes",
    "memory_max",
    "cpu_weight",
    "cpu_quota",
    "tasks_max",
];

impl Limits {
    /// Parses a `limits` table (TOML, or the JSON of `cron_table.limits`). Sizes are bytes or
    /// strings with a binary suffix (`"512M"`, `"2G"`), `cpu_time` a number of seconds or a
    /// duration (`"10m"`), `cpu_quota` a number or `"50%"`.
    pub fn from_json(value: &serde_json::Value) -> Result<Limits, String> {
        let map = value
            .as_object()
            .ok_or_else(|| format!("{value} is not a table of limits"))?;
        let mut l = Limits::default();
        for (key, v) in map {
            let number = |max: u64| -> Result<u64, String> {
                match v.as_u64() {
                    Some(n) if (1..=max).contains(&n) => Ok(n),
                    _ => Err(format!("{key}: {v} must be a whole number 1-{max}")),
                }
            };
            match key.as_str() {
                "nofile" => l.nofile = Some(number(1 << 30)?),
                "processes" => l.processes = Some(number(1 << 22)?),
                "tasks_max" => l.tasks_max = Some(number(1 << 22)?),
                "cpu_weight" => l.cpu_weight = Some(number(10_000)?),
                "memory" => l.memory = Some(size(key, v)?),
                "memory_max" => l.memory_max = Some(size(key, v)?),
                "cpu_time" => {
                    l.cpu_time = Some(match v {
                        serde_json::Value::String(s) => humantime::parse_duration(s.trim())
                            .ok()
                            .map(|d| d.as_secs())
                            .filter(|s| *s > 0)
                            .ok_or_else(|| {
                                format!("{key}: \"{s}\" is not a duration of 1s or more")
                            })?,
                        _ => number(u64::MAX)?,
                    })
                }
                "cpu_quota" => {
                    l.cpu_quota = Some(match v {
                        serde_json::Value::String(s) => s
                            .trim()
                            .strip_suffix('%')
                            .and_then(|n| n.trim().parse::<u64>().ok())
                            .filter(|n| (1..=100_000).contains(n))
                            .ok_or_else(|| {
                                format!("{key}: \"{s}\" must be a percentage such as \"50%\"")
                            })?,
                        _ => number(100_000)?,
                    })
                }
                other => {
                    return Err(format!(
                        "unknown limit \"{other}\" (known: {})",
                        LIMIT_KEYS.join(", ")
                    ));
                }
            }
        }
        Ok(l)
    }

    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }

    /// The limits that need a control group.
    pub fn needs_cgroup(&self) -> bool {
        self.memory_max.is_some()
            || self.cpu_weight.is_some()
            || self.cpu_quota.is_some()
            || self.tasks_max.is_some()
    }
}

/// A size in bytes: a number, or a string with an optional binary suffix (K, M, G, T; `KiB`,
/// `MB` and friends read the same).
fn size(key: &str, v: &serde_json::Value) -> Result<u64, String> {
    let bad = || format!("{key}: {v} is not a size such as 1048576, \"512M\" or \"2G\"");
    match v {
        serde_json::Value::Number(n) => n.as_u64().filter(|n| *n > 0).ok_or_else(bad),
        serde_json::Value::String(s) => {
            let s = s.trim();
            let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
            let (num, unit) = s.split_at(digits);
            let n: u64 = num.parse().map_err(|_| bad())?;
            let shift = match unit.trim().to_ascii_uppercase().as_str() {
                "" | "B" => 0,
                "K" | "KB" | "KIB" => 10,
                "M" | "MB" | "MIB" => 20,
                "G" | "GB" | "GIB" => 30,
                "T" | "TB" | "TIB" => 40,
                _ => return Err(bad()),
            };
            n.checked_mul(1 << shift).filter(|b| *b > 0).ok_or_else(bad)
        }
        _ => Err(bad()),
    }
}

/// Variables of the daemon's own environment no command ever inherits: the database URL (it may
/// hold the password) and systemd's notification, socket and credential handles.
pub const SECRET_VARS: [&str; 7] = [
    "SQLCRON_DATABASE_URL",
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "CREDENTIALS_DIRECTORY",
    "LISTEN_FDS",
    "LISTEN_PID",
];

/// Whether a variable of the daemon's environment is never passed to a job, even when
/// `inherit_env` names it: [`SECRET_VARS`], sqlcron's own `SQLCRON_*` settings, and the database
/// drivers' variables (libpq's `PG*` such as `PGPASSWORD`, `MYSQL_PWD` and the other `MYSQL_*`
/// and `MARIADB_*`, `DATABASE_URL`), which may carry the daemon's database credentials.
pub fn never_inherited(name: &str) -> bool {
    SECRET_VARS.contains(&name)
        || name.starts_with("SQLCRON_")
        || name.starts_with("MYSQL_")
        || name.starts_with("MARIADB_")
        || name == "DATABASE_URL"
        || name
            .strip_prefix("PG")
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_uppercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_driver_variables_are_never_inherited() {
        for name in [
            "PGPASSWORD",
            "PGPASSFILE",
            "PGSSLKEY",
            "MYSQL_PWD",
            "MARIADB_PASSWORD",
            "DATABASE_URL",
            "SQLCRON_DATABASE_URL",
            "SQLCRON_CONFIG",
            "CREDENTIALS_DIRECTORY",
        ] {
            assert!(never_inherited(name), "{name}");
        }
        for name in ["PATH", "TZ", "PAGER", "MY_TOKEN", "HTTP_PROXY"] {
            assert!(!never_inherited(name), "{name}");
        }
    }

    #[test]
    fn overlap_is_forbid_or_replace_and_allow_is_explained() {
        assert_eq!(Overlap::parse("replace"), Ok(Overlap::Replace));
        assert_eq!(Policy::default().overlap, Overlap::Forbid);
        assert!(Overlap::parse("allow").unwrap_err().contains("not offered"));
        assert!(
            Overlap::parse("often")
                .unwrap_err()
                .contains("forbid or replace")
        );
        assert!(Outcome::Replaced.is_finished());
        assert_eq!(Outcome::parse("replaced"), Ok(Outcome::Replaced));
        assert!(Outcome::Stopped.is_finished());
        assert_eq!(Outcome::parse("stopped"), Ok(Outcome::Stopped));
    }

    #[test]
    fn limits_parse_sizes_durations_and_percentages() {
        let v = serde_json::json!({"nofile": 1024, "memory": "512M", "cpu_time": "10m",
            "processes": 64, "memory_max": 1073741824u64, "cpu_quota": "50%", "tasks_max": 32,
            "cpu_weight": 200});
        let l = Limits::from_json(&v).unwrap();
        assert_eq!(l.nofile, Some(1024));
        assert_eq!(l.memory, Some(512 << 20));
        assert_eq!(l.cpu_time, Some(600));
        assert_eq!(l.memory_max, Some(1 << 30));
        assert_eq!(l.cpu_quota, Some(50));
        assert!(l.needs_cgroup());
        // What is stored reads back the same.
        let stored = serde_json::to_value(&l).unwrap();
        assert_eq!(Limits::from_json(&stored).unwrap(), l);
        assert_eq!(
            Limits::from_json(&serde_json::json!({"memory": "2GiB"}))
                .unwrap()
                .memory,
            Some(2 << 30)
        );
    }

    #[test]
    fn bad_limits_name_the_key() {
        for (v, want) in [
            (serde_json::json!({"nofile": 0}), "nofile: 0 must be"),
            (
                serde_json::json!({"memory": "lots"}),
                "memory: \"lots\" is not a size",
            ),
            (
                serde_json::json!({"cpu_time": "soon"}),
                "cpu_time: \"soon\" is not a duration",
            ),
            (
                serde_json::json!({"cpu_quota": "half"}),
                "cpu_quota: \"half\" must be a percentage",
            ),
            (serde_json::json!({"stack": 1}), "unknown limit \"stack\""),
            (serde_json::json!([1]), "is not a table"),
        ] {
            let e = Limits::from_json(&v).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }
}
