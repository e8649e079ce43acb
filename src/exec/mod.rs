//! Running one thing on this host: a process ([`runner`]; one set up before `exec` starts
//! without a `fork`, [`clone_spawn`]) or an HTTP request ([`http`]), as a
//! Unix account ([`account`]), with its env file ([`envfile`]), header file ([`headers_file`])
//! and resource limits ([`limits`]), ended by the job reaper if the daemon dies ([`reaper`]),
//! with what it leaves behind ([`orphans`]). How a run ended is [`outcome`]; a shell command
//! that needs no shell is started directly ([`plain_command`]).
//!
//! No database and no claims: the daemon decides what to run and records what happened.
//! Imports only `model`.

pub mod account;
pub mod child_setup;
pub mod clone_spawn;
pub mod envfile;
pub mod headers_file;
pub mod http;
pub mod limits;
pub mod orphans;
pub mod outcome;
pub mod output_tail;
pub mod plain_command;
pub mod reaper;
pub mod run_process;
pub mod runner;
pub mod spawn_watch;
