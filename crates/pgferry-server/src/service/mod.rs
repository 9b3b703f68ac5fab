//! The use cases both transports call (issue 18; docs/architecture.md §4). An HTTP handler
//! or a gRPC stream checks scopes, validates and translates its wire form, then calls one
//! of these; what is decided here (which write path a request takes, retry or dead letter,
//! what counts in the metrics) is decided once for both.
//!
//! - [`enqueue`]: a producer's request → group commit (or the engine directly for unique
//!   keys) → counted as enqueued once committed, duplicates excluded.
//! - [`outcome`]: a worker's report about an attempt → the engine's outcome
//!   ([`pgferry_core::Report::decide`]); counted once the outcome is recorded.
//! - [`admin`]: a caller's jobs, dead letters and queues — tenant checks, filter
//!   validation and the audit record.

pub mod admin;
pub mod enqueue;
pub mod outcome;
pub mod transport;

pub use enqueue::enqueue;
pub use outcome::{count_recorded, outcome, record};
