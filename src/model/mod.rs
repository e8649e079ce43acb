//! The nouns and the pure decisions.
pub mod actor;
pub mod alerts;
pub mod crontab;
pub mod database_url;
pub mod duration;
pub mod explain;
pub mod history;
pub mod hooks;
pub mod http_target;
pub mod job;
pub mod lease;
pub mod placement;
pub mod policy;
pub mod retention;
