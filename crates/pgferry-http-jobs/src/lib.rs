//! pgferry-http-jobs: HTTP jobs (issue 22, ADR 0015): the SSRF guard ([`ssrf`]), request
//! signing ([`sign`]), the pooled executor of one attempt ([`executor`]), the worker that
//! runs `http` queues ([`worker`], [`pipeline`], [`service`]), per-tenant settings ([`settings`]: signing
//! secrets, allow lists, rates; schema in [`migrate`]), per-destination rates ([`rate`])
//! and destination failure/recovery transitions ([`transitions`]).

pub mod ca_bundle;
pub mod executor;
mod lease;
pub mod migrate;
pub mod pipeline;
pub mod rate;
pub mod rescued;
pub mod service;
pub mod settings;
pub mod sign;
pub mod ssrf;
pub mod transitions;
pub mod worker;

pub use executor::{Attempt, Executor, ExecutorConfig, HttpRequest, Response};
pub use settings::{Rate, Settings, TenantSettings};
pub use ssrf::{Allow, Cidr, Range, Refused};
pub use transitions::{NoSink, Transition, TransitionSink};
