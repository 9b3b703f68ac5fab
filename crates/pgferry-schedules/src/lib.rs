//! pgferry-schedules: cron and interval schedules for any job kind or workflow
//! (docs/schedules.md, ADR 0015).
//!
//! A schedule's timing ([`timing`]) is a cron expression read in an IANA time zone or a
//! fixed interval. The server's leader fires due schedules ([`firer`]): each fire is a row
//! unique per (schedule, fire time) inserted in the same transaction as the job it enqueues,
//! so a fire happens exactly once across leader failover and restarts.

pub mod ahead;
pub mod cron;
pub mod error;
pub mod firer;
pub mod metrics;
pub mod migrate;
pub mod schedule;
pub mod store;
pub mod timing;

pub use error::{Result, ScheduleError};
pub use firer::{fire_due, leader_duty, FireReport, FirerConfig};
pub use schedule::{Missed, NewSchedule, Overlap, Schedule, Target};
pub use store::{Fire, Schedules};
