//! pgferry-monitors: the alerting half of issue 22 (docs/monitors.md).
//!
//! - [`targets`]: a tenant's notification targets, and [`notify`], which turns an event into
//!   one HTTP job per matching target on the tenant's `http` queue, inside the caller's
//!   transaction (the state change and its notifications commit together).
//! - [`monitors`]: heartbeat monitors (dead-man switches) and their pings.
//! - [`duty`]: the leader duty that finds late monitors and watches schedules' fires.
//! - [`webhooks`]: inbound webhook endpoints, their stored events and replay.
//! - [`http_transitions`]: HTTP-job destinations failing and recovering, as notifications.

pub mod alerts;
pub mod duty;
pub mod error;
pub mod http_transitions;
pub mod metrics;
pub mod migrate;
pub mod monitors;
mod realert;
pub mod schedule_watch;
pub mod signature;
pub mod targets;
pub mod webhooks;

pub use alerts::{Alert, Event};
pub use duty::{leader_duty, run_once, DutyConfig, DutyReport};
pub use error::{MonitorError, Result};
pub use monitors::{Monitor, Monitors, NewMonitor, PingKind};
pub use targets::{notify, NewTarget, Target, Targets};
pub use webhooks::{Endpoint, InboundEvent, NewEndpoint, OldAddress, Received, Rotated, Webhooks};

/// The engine name of a tenant's `http` queue, whose jobs the server's HTTP worker runs.
/// Mirrors `pgferry_server::auth::namespace::engine_queue(tenant, "http")` (ADR 0003): this
/// crate sits below the server and cannot call it; a server test checks they agree.
pub fn http_queue(tenant_id: i64) -> String {
    format!("t{tenant_id}.http")
}
