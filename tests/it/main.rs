//! The single integration-test binary: every file below is a module, sharing `util`.

mod behaviour;
mod cli_next;
mod cluster;
mod locks;
mod outage;
mod service;
mod signals;
mod store;
mod util;
