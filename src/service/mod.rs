//! What the host sees.
pub mod metrics;
pub mod systemd;
