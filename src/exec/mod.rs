//! Running one thing on this host.
pub mod account;
pub mod envfile;
pub mod http;
pub mod limits;
pub mod outcome;
pub mod reaper;
pub mod runner;
