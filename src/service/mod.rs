//! What the host sees of a node: systemd's notifications ([`systemd`], implementing the daemon's
//! `ServiceManager`) and the `/metrics` and `/healthz` listener ([`metrics`]). The web dashboard
//! will live here. On top of the daemon: it serves what the daemon exposes and never reaches
//! into its run path.

pub mod metrics;
pub mod systemd;
