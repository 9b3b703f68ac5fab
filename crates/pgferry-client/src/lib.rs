//! Rust client of a pgferry server over its gRPC streams (docs/protocol.md).
//!
//! - [`Producer`]: one long-lived Producer stream; [`Producer::enqueue`] and
//!   [`Producer::enqueue_batch`] return job ids once the server has committed them. Many
//!   calls may be in flight at once on one stream (matched by `seq`).
//! - [`Worker`]: one Worker stream with a fixed number of execution slots, granted to the
//!   server as credits; runs a handler per job, reports results, heartbeats long jobs,
//!   observes cancellation, and reconnects with backoff when the server goes away (results
//!   finished meanwhile are sent on the next connection).

mod producer;
mod worker;

pub use producer::{EnqueueAck, Producer, RetryPolicy};
pub use worker::{Ack, Handler, JobCtx, Outcome, Worker, WorkerOptions, WorkerStats};

/// Generated protocol types.
pub mod proto {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    pub mod v1 {
        tonic::include_proto!("pgferry.v1");
    }
}

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What went wrong.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("connecting to {url}: {message}")]
    Connect { url: String, message: String },
    /// The server refused the stream (bad key, missing scope, shutting down).
    #[error("server refused the stream: {0}")]
    Refused(tonic::Status),
    /// The server answered with a typed error; nothing of the request was written.
    #[error("{code}: {message}{}", if field.is_empty() { String::new() } else { format!(" (field {field})") })]
    Api {
        code: String,
        message: String,
        field: String,
    },
    /// The stream broke before the answer arrived: the request may or may not have been
    /// committed.
    #[error("stream closed before the server answered")]
    Disconnected,
}

impl From<proto::v1::Error> for Error {
    fn from(e: proto::v1::Error) -> Self {
        Error::Api {
            code: e.code,
            message: e.message,
            field: e.field,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A job to enqueue.
#[derive(Debug, Clone, Default)]
pub struct JobSpec {
    pub queue: String,
    pub kind: String,
    /// JSON text.
    pub args: String,
    pub meta: HashMap<String, String>,
    pub priority: u32,
    pub max_attempts: Option<i32>,
    pub run_at: Option<SystemTime>,
    pub delay: Option<Duration>,
}

impl JobSpec {
    pub fn new(
        queue: impl Into<String>,
        kind: impl Into<String>,
        args: &serde_json::Value,
    ) -> Self {
        JobSpec {
            queue: queue.into(),
            kind: kind.into(),
            args: args.to_string(),
            ..JobSpec::default()
        }
    }

    pub fn priority(mut self, p: u32) -> Self {
        self.priority = p;
        self
    }

    pub fn max_attempts(mut self, n: i32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = Some(d);
        self
    }

    pub fn meta(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        self.meta.insert(k.into(), v.into());
        self
    }

    fn into_proto(self) -> proto::v1::JobSpec {
        proto::v1::JobSpec {
            queue: self.queue,
            kind: self.kind,
            args: self.args,
            meta: self.meta,
            priority: self.priority,
            max_attempts: self.max_attempts,
            run_at_unix_ms: self
                .run_at
                .map(|t| t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as i64),
            delay_ms: self.delay.map(|d| d.as_millis() as u64),
            unique_key: None,
        }
    }
}

/// One HTTP/2 connection to a server, shared by the workers given it
/// ([`WorkerOptions::connection`]): their streams are multiplexed on it, so the frames of
/// many streams go out in one write, where a connection per worker costs a system call per
/// job and result on each side. Clones share the connection; it reconnects by itself, and a
/// worker whose stream broke opens its next one on it.
#[derive(Clone)]
pub struct Connection {
    channel: tonic::transport::Channel,
}

impl Connection {
    /// Connects to `url` (`http://host:port`).
    pub async fn open(url: &str) -> Result<Connection> {
        Ok(Connection {
            channel: channel(url).await?,
        })
    }
}

/// Opens a channel to `url` (`http://host:port`).
async fn channel(url: &str) -> Result<tonic::transport::Channel> {
    let err = |e: &dyn std::fmt::Display| Error::Connect {
        url: url.to_string(),
        message: e.to_string(),
    };
    tonic::transport::Endpoint::from_shared(url.to_string())
        .map_err(|e| err(&e))?
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(20))
        .keep_alive_while_idle(true)
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| err(&e))
}
