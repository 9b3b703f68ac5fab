//! Runs HTTP jobs from queues: claims, executes each attempt on the pooled [`Executor`],
//! and records the outcome through the engine.
//!
//! - success: completed, the response (status, headers, bounded body) kept as the result;
//! - failure: retried with the queue's backoff, or after `Retry-After` when the destination
//!   sent one on 429/503 (whichever is later); the response goes with the error;
//! - a `Retry-After` pauses the whole destination (host:port): its other jobs are snoozed
//!   until then without being sent;
//! - refused by the SSRF guard or malformed: dead at once (retrying cannot help);
//! - at most `per_destination` requests to one destination at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use pgferry_core::{ClaimedJob, Engine, Outcome};
use serde_json::json;
use tokio::sync::Semaphore;

use crate::executor::{Attempt, Executor, HttpRequest};

/// The kind of job this worker runs.
pub const KIND: &str = "http";

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub batch: usize,
    pub per_destination: usize,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            batch: 100,
            per_destination: 16,
        }
    }
}

pub struct HttpWorker {
    engine: Arc<Engine>,
    executor: Arc<Executor>,
    config: WorkerConfig,
    paused: Mutex<HashMap<String, Instant>>,
    slots: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl HttpWorker {
    pub fn new(engine: Arc<Engine>, executor: Arc<Executor>, config: WorkerConfig) -> HttpWorker {
        HttpWorker {
            engine,
            executor,
            config,
            paused: Mutex::new(HashMap::new()),
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// Claims up to a batch from `queue`, runs it, records the outcomes; returns how many.
    pub async fn run_once(&self, queue: &str) -> pgferry_core::Result<usize> {
        let jobs = self
            .engine
            .claim(queue, self.config.batch, "pgferry-http")
            .await?;
        let n = jobs.len();
        if n > 0 {
            let outcomes = join_all(jobs.iter().map(|j| self.run_job(j))).await;
            self.engine.complete(&outcomes).await?;
        }
        Ok(n)
    }

    async fn run_job(&self, job: &ClaimedJob) -> Outcome {
        let req: HttpRequest = match serde_json::from_value(job.args.clone()) {
            Ok(r) => r,
            Err(e) => return job.discarded(format!("not an HTTP job's args: {e}")),
        };
        let dest = destination(&req.url);
        if let Some(wait) = self.paused_for(&dest) {
            return job.snooze(wait);
        }
        let slot = self.slot(&dest);
        let _permit = slot.acquire().await;
        match self.executor.run(&req).await {
            Attempt::Succeeded(resp) => job.completed(Some(json!(resp))),
            Attempt::Failed {
                refused: true,
                error,
                ..
            } => job.discarded(error),
            Attempt::Failed {
                response,
                error,
                retry_after,
                ..
            } => {
                let backoff = job.backoff.delay(job.attempt);
                let delay = match retry_after {
                    Some(ra) => {
                        self.pause(&dest, ra);
                        ra.max(backoff)
                    }
                    None => backoff,
                };
                let detail = json!({"error": error, "response": response});
                job.failed(detail.to_string(), delay)
            }
        }
    }

    fn paused_for(&self, dest: &str) -> Option<Duration> {
        let paused = self.paused.lock().expect("not poisoned");
        let until = *paused.get(dest)?;
        until.checked_duration_since(Instant::now())
    }

    fn pause(&self, dest: &str, for_: Duration) {
        let until = Instant::now() + for_;
        let mut paused = self.paused.lock().expect("not poisoned");
        let e = paused.entry(dest.to_string()).or_insert(until);
        *e = (*e).max(until);
    }

    fn slot(&self, dest: &str) -> Arc<Semaphore> {
        let mut slots = self.slots.lock().expect("not poisoned");
        slots
            .entry(dest.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.config.per_destination)))
            .clone()
    }
}

/// The flow-control key of a URL: host and port.
pub fn destination(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => format!(
            "{}:{}",
            u.host_str().unwrap_or(""),
            u.port_or_known_default().unwrap_or(0)
        ),
        Err(_) => String::new(),
    }
}
