//! The nouns and the pure decisions. What a job is ([`job`]), how a run ended ([`job::Outcome`]),
//! what a node does with a claimed row ([`policy`]), where a job may run ([`placement`]), which
//! events a run raises ([`alerts`], with their settings in [`hooks`]), what pruning removes
//! ([`retention`]), what happened to each slot ([`explain`]), which slots a job's calendars let run
//! ([`calendars`]) whether its upstreams let a slot run ([`requires`]), which upstream runs trigger it
//! ([`chains`]), crontab files as jobs
//! ([`crontab`]), durations, an HTTP target as a definition, the lease's timing rules
//! ([`lease`]), a run as the history holds it, who acted, and the database URL parsed once
//! ([`database_url`]), what a job's signature covers ([`signing`]), and how JSON spells an
//! instant ([`json_time`]).
//!
//! No I/O: no database, no process, no clock (time comes in as a parameter). Imports only
//! `schedule`.

/// This build's version as nodes record it and `sqlcron --version` prints it: the package
/// version and the git commit it was built from (`unknown` outside git). Two builds of one
/// package version from different commits are told apart in `cron_nodes` (a rolling upgrade).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SQLCRON_GIT_COMMIT"),
    ")"
);

pub mod access;
pub mod actor;
pub mod alerts;
pub mod calendars;
pub mod chains;
pub mod crontab;
pub mod database_url;
pub mod duration;
pub mod explain;
pub mod history;
pub mod hooks;
pub mod http_target;
pub mod job;
pub mod job_edit;
pub mod job_row;
pub mod json_time;
pub mod lease;
pub mod names;
pub mod placement;
pub mod policy;
pub mod policy_keys;
pub mod repeated_warnings;
pub mod requires;
pub mod resume;
pub mod retention;
pub mod row_decode;
pub mod run_as;
pub mod signal;
pub mod signing;
pub mod start_rate;
