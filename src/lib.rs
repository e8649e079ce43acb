//! sqlcron: cron for a cluster, with its state in the SQL database you already run.
//!
//! Every host runs the same daemon. Each daemon polls `cron_table` for rows whose `next_exec` has
//! come, claims them with its name and a short lease, runs the command and, on release, computes
//! the next `next_exec` here in Rust from the slot it served.
//!
//! # Layout
//! - [`schedule`]: pure cron maths. A cron expression in an IANA zone, and the next fire instant
//!   after a given instant, with the DST rules spelled out in its module documentation. No clock
//!   reads, no I/O.
//!
//! Reading order for a newcomer: this file, then `schedule`.

pub mod schedule;
