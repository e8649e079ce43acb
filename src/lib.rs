//! sqlcron: cron for a cluster, with its state in the SQL database you already run.
//!
//! Every host runs the same daemon. Each daemon polls `cron_table` for rows whose `next_exec` has
//! come, claims them with its name and a short lease, runs the command and, on release, computes
//! the next `next_exec` here in Rust from the slot it served.
//!
//! # Layout
//! The folders are layers; each imports only the layers below it (docs/architecture.md, kept by
//! `tests/it/architecture.rs`):
//! - [`schedule`]: pure cron maths. A cron expression in an IANA zone, and the next fire instant
//!   after a given instant, with the DST rules in its module documentation. Imports nothing.
//! - [`model`]: the nouns and the pure decisions: job definitions and policy, outcomes, what to
//!   do with a claimed row (`policy`), placement, alert rules and settings, retention, `explain`,
//!   crontab translation, durations, the lease's timing rules, the database URL parsed once.
//! - [`config`]: TOML text → raw settings → validated [`config::Config`]; secrets from files and
//!   systemd credentials. Imports `model` and `schedule`.
//! - [`store`]: every SQL statement, for SQLite, PostgreSQL and MySQL/MariaDB, behind one type;
//!   `dialect` holds every difference between the three. Imports `model` and `schedule`.
//! - [`exec`]: running one thing on this host, no database: the process runner, HTTP jobs'
//!   client, limits, accounts, env files, the job reaper. Imports `model`.
//! - [`daemon`]: the one place where store, exec and decisions meet: the poll loop (`tick`),
//!   what a claimed row becomes (`claimed`, `release`), the lease and trust window (`lease`),
//!   alert events and delivery, pruning, the stop sequence, `sqlcron lock`/`sem` (`guard`).
//! - [`service`]: what the host sees: sd_notify and the `/metrics` and `/healthz` listener.
//! - [`cli`]: the commands, one file per command or group; `main.rs` only calls [`cli::run`].
//!
//! Reading order for a newcomer: this file, `model` (`job`, `policy`), `schedule`, `store`,
//! `exec`, `daemon`, then `service` and `cli`.

pub mod cli;
pub mod config;
pub mod daemon;
pub mod exec;
pub mod model;
pub mod schedule;
pub mod service;
pub mod store;
