//! Durable workflows: explicit state machines whose instances live in Postgres
//! (DESIGN §3.5, docs/workflows.md, docs/adr/0013-workflow-instances.md).
//!
//! A [`Machine`] has a kind and a handler per step; each handler returns one [`Outcome`].
//! [`Workflows`] starts, signals, cancels, retries and inspects instances; a [`Worker`]
//! claims batches of due steps (one statement), runs their handlers outside any transaction
//! and records the batch's outcomes (one statement).

mod client;
pub mod code;
mod inspect;
mod lease;
mod machine;
mod outcome_arrays;
pub mod retention;
mod start_many;
pub mod sweeper;
mod validate;
mod wake;
mod worker;

pub use client::{
    ConcurrencyStrategy, Finished, SignalSent, Start, Started, StepRef, Target, Workflows,
    MAX_PAYLOAD_BYTES,
};
pub use inspect::{
    InstanceFilter, InstanceInfo, InstancePage, InstanceSummary, StepRecord, STATUSES,
};
pub use lease::StepBeat;
pub use machine::{
    Caps, Child, ChildFailure, ChildResult, ClaimedStep, Handler, Join, Machine, Outcome, Signal,
    Wake,
};
pub use start_many::MAX_START_BATCH;
pub use validate::MAX_PRIORITY;
pub use worker::{Worker, WorkerConfig, WorkerStats};
