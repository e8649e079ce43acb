//! The single integration-test binary: every file below is a module, sharing `util`.

mod cli_next;
mod cluster;
mod store;
mod util;
