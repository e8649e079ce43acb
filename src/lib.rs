//! sqlcron: cron for a cluster, with its state in the SQL database you already run.
//!
//! Every host runs the same daemon. Each daemon polls `cron_table` for rows whose `next_exec` has
//! come, claims them with its name and a short lease, runs the command and, on release, computes
//! the next `next_exec` here in Rust from the slot it served.
//!
//! # Layout
//! - [`schedule`]: pure cron maths. A cron expression in an IANA zone, and the next fire instant
//!   after a given instant, with the DST rules in its module documentation. No clock, no I/O.
//! - [`config`]: TOML text → raw settings → validated [`config::Config`]; pure but for `load`.
//! - [`job`]: the nouns — a job's definition and its policy.
//! - [`policy`]: pure decisions on claim and release (misfire, retries, lost runs, jitter).
//! - [`store`]: every SQL statement, for SQLite, PostgreSQL and MySQL/MariaDB, behind one type:
//!   `rows` (what is read and written), `claim` (the claim path: claim, start, extend, release,
//!   takeover), `admin` (status, history, pause, run), `apply` (TOML → rows), `audit` (the
//!   audit trail), `locks` (locks, semaphores, pools), `retention` (duties and pruning), `events` (alert events and the dead-man's
//!   switch), `migrate`, and
//!   `dialect` (every difference between the three databases).
//! - [`runner`]: running one command (process group, output tail and bounded log, timeout); no
//!   database. [`http_target`]: an HTTP job's request (idempotency key, fencing token header,
//!   status range, TLS roots), run through the same entry point.
//! - [`account`]: Unix accounts jobs run as (user, group, supplementary groups, home, shell).
//! - [`envfile`]: `KEY=VALUE` files a job's secrets live in.
//! - [`limits`]: a run's resource limits (`setrlimit`, and a control group where delegated).
//! - [`secrets`]: the database URL and password from files or systemd credentials; redaction.
//! - [`reaper`]: the helper process that ends a dead or frozen daemon's jobs.
//! - [`alerts`]: which events a history record raises (hooks), what they say, the dead-man's
//!   switch; pure.
//! - [`crontab`]: crontab files as `[[job]]` TOML (`sqlcron import crontab`); pure.
//! - [`explain`]: what happened to each slot of a job (`sqlcron explain`); pure.
//! - [`retention`]: `[history]` limits and the pure decisions of a pruning round.
//! - [`metrics`]: Prometheus metrics and `/healthz`, served on `[metrics] listen`.
//! - [`daemon`]: the poll loop (`tick`), what a claimed row becomes (`claimed`: decide, write,
//!   act), the lease loop and trust window (`lease`), row decoding (`decode`), history pruning
//!   (`housekeeping`), event scan and hook delivery (`alerting`, `delivery`) and the shutdown
//!   sequence.
//! - [`guard`]: `sqlcron lock` / `sqlcron sem`: a command run under a cluster-wide lease.
//! - [`systemd`]: sd_notify (READY, STATUS, WATCHDOG, RELOADING, STOPPING); no-ops elsewhere.
//!
//! Dependency rule: `schedule`, `config`, `job` and `policy` import nothing from `store`,
//! `runner` or `daemon`; `store` and `runner` never import each other; only `daemon` knows both.
//!
//! Reading order for a newcomer: this file, `job`, `schedule`, `policy`, `store`, `runner`,
//! `daemon`.

pub mod cli;
pub mod config;
pub mod daemon;
pub mod exec;
pub mod model;
pub mod schedule;
pub mod service;
pub mod store;
