//! What the host sees of a node: systemd's notifications ([`systemd`], implementing the daemon's
//! `ServiceManager`), the `/metrics` and `/healthz` listener ([`metrics`]), and the web dashboard
//! with its API ([`web`]). On top of the daemon: it serves what the daemon exposes and never
//! reaches into its run path; the listeners run on threads of their own ([`runtime`]).

pub mod metrics;
pub mod peers;
pub mod runtime;
pub mod systemd;
pub mod web;
