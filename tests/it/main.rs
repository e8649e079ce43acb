//! The single integration-test binary: every file below is a module, sharing `util`.

/// Generates one test per database for each listed `async fn(Dialect)` of the calling module.
macro_rules! for_each_dialect {
    ($($case:ident),* $(,)?) => {
        mod sqlite { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $case() { super::$case(sqlcron::store::Dialect::Sqlite).await } )* }
        mod postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $case() { super::$case(sqlcron::store::Dialect::Postgres).await } )* }
        mod mysql { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $case() { super::$case(sqlcron::store::Dialect::Mysql).await } )* }
    };
}

/// The cases on PostgreSQL and MySQL/MariaDB only: races and locks of concurrent sessions that
/// SQLite, one writer at a time, rules out.
macro_rules! for_each_server {
    ($($case:ident),* $(,)?) => {
        mod postgres { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $case() { super::$case(sqlcron::store::Dialect::Postgres).await } )* }
        mod mysql { $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $case() { super::$case(sqlcron::store::Dialect::Mysql).await } )* }
    };
}

mod alerts;
mod architecture;
mod audit_writer;
mod behaviour;
mod browser;
mod calendars;
mod chains;
mod cli_import;
mod cli_next;
mod cluster;
mod command_reference;
mod config_errors;
mod doctor;
mod environment_faults;
mod explain;
mod failover;
mod faults;
mod galera;
mod http_jobs;
mod http_server;
mod job_search;
mod journal_fields;
mod live_output;
mod locks;
mod long_soak;
mod manual;
mod manual_examples;
mod mariadb_outage;
mod metrics;
mod node_name;
mod outage;
mod patroni;
mod peek;
mod placement;
mod placement_claim_race;
mod placement_tidy;
mod pool_connections;
mod pooler;
mod proxied;
mod proxy;
mod quickstart;
mod read_commands;
mod replica;
mod retention;
mod roles;
mod rolling_upgrade;
mod run_record;
mod run_search;
mod run_wait;
mod schedules;
mod security;
mod service;
mod signals;
mod signed;
mod soak;
mod sqlite_cli;
mod start_rate;
mod stop;
mod store;
mod tick;
mod tls;
mod upgrades;
mod util;
mod wakeups;
mod web;
mod web_actions;
mod web_editor;
mod web_flood;
mod web_guarded;
