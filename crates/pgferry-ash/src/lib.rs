//! pgferry-ash: active session history of the database pgferry serves (DESIGN §3.8,
//! docs/ash.md).
//!
//! A [`Sampler`] reads `pg_stat_activity` once per tick and writes one compact row per
//! sample into a ring of three partitions rotated by TRUNCATE, with 1-minute and 1-hour
//! rollups; the readers ([`read`]) answer "what was the database doing" in average active
//! sessions, from the raw ring for the edges of a window and from the rollups for its
//! whole minutes and hours. The server's leader runs the sampler (see ADR 0012).

pub mod bench;
pub mod config;
pub mod cron;
mod dict;
pub mod encode;
pub mod error;
pub mod migrate;
pub mod publish;
pub mod read;
pub mod sampler;
pub mod seed;

pub use config::SamplerConfig;
pub use error::{AshError, Result};
pub use read::{Dimension, Window};
pub use sampler::{SampleReport, Sampler};
