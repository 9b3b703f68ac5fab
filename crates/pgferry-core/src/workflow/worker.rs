//! The in-process worker loop: claim a batch of due steps (one statement), run their
//! handlers concurrently outside any transaction, record the batch's outcomes (one
//! statement). A plain `next` costs nothing more: no inbox or children reads, no extra
//! round trip.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::client::Workflows;
use super::machine::{ClaimedStep, Machine, Outcome};
use super::validate;
use crate::error::Result;
use crate::job::Backoff;

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub queue: String,
    /// Shown in the step history and `get`.
    pub name: String,
    /// Steps claimed per statement.
    pub batch: usize,
    /// How long a claimed step may run before it is claimed again.
    pub lease: Duration,
    /// Longest pause after claims found nothing: the pause starts at 1 ms and doubles up
    /// to this while the queue stays empty. A signal delivered to an instance of the queue
    /// ends the pause at once (wake.rs), so this bounds how late a step that came due by
    /// time (a sleep, a deadline, a start from another process) is seen by an idle worker.
    pub idle_poll: Duration,
    /// Delay before running a step again after its handler panicked.
    pub panic_backoff: Backoff,
}

impl WorkerConfig {
    pub fn new(queue: impl Into<String>) -> WorkerConfig {
        WorkerConfig {
            queue: queue.into(),
            name: format!("worker-{}", std::process::id()),
            batch: 64,
            lease: Duration::from_secs(60),
            idle_poll: Duration::from_millis(20),
            panic_backoff: Backoff::default(),
        }
    }
}

/// What a worker did (read while it runs).
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Outcomes applied.
    pub steps: AtomicU64,
    /// Outcomes refused as stale (cancelled meanwhile, or claimed again after the lease).
    pub stale: AtomicU64,
    /// Idle pauses ended early by an announcement that a step of the queue became
    /// runnable (a delivered signal, wake.rs).
    pub woken: AtomicU64,
}

pub struct Worker {
    wf: Workflows,
    machines: HashMap<String, Machine>,
    config: WorkerConfig,
    stats: Arc<WorkerStats>,
}

impl Worker {
    pub fn new(wf: Workflows, config: WorkerConfig) -> Worker {
        Worker {
            wf,
            machines: HashMap::new(),
            config,
            stats: Arc::default(),
        }
    }

    /// Adds a machine this worker runs.
    pub fn machine(mut self, m: Machine) -> Worker {
        self.machines.insert(m.kind.clone(), m);
        self
    }

    pub fn stats(&self) -> Arc<WorkerStats> {
        self.stats.clone()
    }

    /// Records the machines' capability flags; [`Worker::run`] does this first.
    pub async fn register(&self) -> Result<()> {
        let machines: Vec<&Machine> = self.machines.values().collect();
        self.wf.register(&machines).await
    }

    /// Claims and runs steps until `shutdown` turns true. Database errors are logged and
    /// retried after a pause.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) -> Result<()> {
        self.register().await?;
        let first = Duration::from_millis(1).min(self.config.idle_poll);
        let mut idle = first;
        // Subscribed before the first claim: an announcement made while a claim runs wakes
        // the pause after it.
        let mut ready = self.wf.subscribe_ready();
        while !*shutdown.borrow() {
            let pause = match self.run_once().await {
                Ok(0) => {
                    let p = idle;
                    idle = (idle * 2).min(self.config.idle_poll);
                    p
                }
                Ok(_) => {
                    idle = first;
                    continue;
                }
                Err(e) => {
                    tracing::warn!(queue = %self.config.queue, error = %e, "workflow worker");
                    Duration::from_millis(200)
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = super::wake::woken(&mut ready, &self.config.queue) => {
                    idle = first;
                    self.stats.woken.fetch_add(1, Ordering::Relaxed);
                }
                _ = shutdown.changed() => {}
            }
        }
        Ok(())
    }

    /// One claim, its handlers and one finish; returns how many steps ran.
    pub async fn run_once(&self) -> Result<usize> {
        let c = &self.config;
        let steps = self.wf.claim(&c.queue, c.batch, &c.name, c.lease).await?;
        if steps.is_empty() {
            return Ok(0);
        }
        let n = steps.len();
        let tasks: Vec<_> = steps
            .into_iter()
            .map(|s| {
                let r = s.reference();
                let attempt = s.attempt;
                let run = self.prepare(s);
                (r, attempt, tokio::spawn(run))
            })
            .collect();
        let mut outcomes = Vec::with_capacity(n);
        for (r, attempt, task) in tasks {
            let outcome = match task.await {
                Ok(o) => match validate::outcome(&o) {
                    Ok(()) => o,
                    Err(e) => Outcome::fail(format!("invalid outcome: {e}")),
                },
                Err(e) => Outcome::retry(
                    c.panic_backoff.delay(attempt),
                    format!("step handler panicked: {e}"),
                ),
            };
            outcomes.push((r, outcome));
        }
        let applied = self.wf.finish(&outcomes).await?;
        let won = applied.iter().filter(|a| **a).count() as u64;
        self.stats.steps.fetch_add(won, Ordering::Relaxed);
        self.stats
            .stale
            .fetch_add(applied.len() as u64 - won, Ordering::Relaxed);
        Ok(n)
    }

    /// The future that runs one step's handler (or the outcome that replaces it).
    fn prepare(&self, s: ClaimedStep) -> futures_util::future::BoxFuture<'static, Outcome> {
        if s.attempt > s.max_attempts {
            // Only expired leases get here (a retry past max_attempts already failed).
            let reason = format!(
                "step {} was not finished within its lease {} times",
                s.step, s.max_attempts
            );
            return Box::pin(async move { Outcome::fail(reason) });
        }
        let Some(machine) = self.machines.get(&s.kind) else {
            let reason = format!("no machine for kind {:?} on this worker", s.kind);
            return Box::pin(async move { Outcome::fail(reason) });
        };
        match machine.handler(&s.step) {
            Some(h) => h(s),
            None => {
                let reason = format!("machine {:?} has no step {:?}", s.kind, s.step);
                Box::pin(async move { Outcome::fail(reason) })
            }
        }
    }
}
