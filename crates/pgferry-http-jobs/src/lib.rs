//! pgferry-http-jobs: the parts of HTTP jobs (issue 22, ADR 0015) that do not need the
//! queue: the SSRF guard ([`ssrf`]), request signing ([`sign`]) and the pooled executor of
//! one attempt ([`executor`]). The worker that runs `http` jobs from queues is not built
//! yet (docs/http-jobs.md).

pub mod executor;
pub mod service;
pub mod sign;
pub mod ssrf;
pub mod worker;

pub use executor::{Attempt, Executor, ExecutorConfig, HttpRequest, Response};
pub use ssrf::{Allow, Range, Refused};
