//! pgferry-core: the engine of pgferry — schema and migrations, the append-only ready log
//! with tick visibility batches, receipts as cursors, batched completions, and the leader's
//! duties (ticker, promoter, rescuer, rotator). See docs/architecture.md §2–§3.

mod bound_params;
pub mod cancelling;
mod completion;
pub mod control;
pub mod counters;
pub mod db;
pub mod dlq;
pub mod engine;
mod enqueue;
pub mod error;
pub mod growth;
pub mod idempotency;
mod ids;
pub mod job;
pub mod json_text;
pub mod lanes;
pub mod leader;
pub mod listen;
pub mod listing;
mod listing_first_runs;
mod listing_scheduled_lanes;
pub mod lookup;
pub mod migrate;
pub mod queues;
pub mod runtime;
pub mod serving;
pub mod signals;
pub mod unique;
pub mod workflow;

pub use cancelling::{CancelFilter, CancelMatched};
pub use control::{AttemptRef, Beat};
pub use counters::{QueueCounts, Recount};
pub use dlq::{DeadFilter, DeadJob, DeadPage};
pub use engine::{Engine, EngineConfig, QueueOptions};
pub use error::{Error, Result};
pub use idempotency::{Acked, EnqueueRequest, IdempotencyKey};
pub use job::{Backoff, ClaimedJob, Completed, NewJob, Outcome, OutcomeKind, Report};
pub use json_text::JsonText;
pub use leader::{Leader, LeaderConfig};
pub use listing::{JobFilter, JobPage, TextFilter};
pub use lookup::{AttemptInfo, CancelResult, JobInfo, JobState};
pub use queues::{Durability, QueueInfo, QueueSettings};
pub use unique::Enqueued;
