//! The in-process worker loop: claim a batch of due steps (one statement), run their
//! handlers concurrently outside any transaction, record the batch's outcomes (one
//! statement). A plain `next` costs nothing more: no inbox or children reads, no extra
//! round trip. Its outcome's statement also claims the instance's next step for this
//! worker (continued steps, ADR 0016 addendum), which runs at once: a 3-step instance is
//! one claim and three outcome statements.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::client::{Finished, StepRef, Workflows};
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
    /// How many times in a row a claimed instance's plain `next` continues on this worker:
    /// its next step is claimed by the outcome's own statement and run at once, without
    /// going back through the picker (ADR 0016, addendum "Continued steps"). 0: every
    /// step goes through the picker.
    pub continue_steps: u32,
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
            continue_steps: 8,
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

/// What one claim did, for the worker's pacing.
#[derive(Default)]
struct Ran {
    steps: usize,
    /// The claim got as many steps as it asked for: more may be due.
    full: bool,
    /// Its outcomes may have made steps of the queue runnable.
    again: bool,
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
    ///
    /// After a claim that ran steps the worker claims again at once when there may be more:
    /// the claim was full, or its outcomes made steps runnable (a `next`, a retry, a
    /// consumed signal, children, a child's end that may resume its parent). Otherwise it
    /// pauses; the pause starts at 1 ms after a full claim and doubles up to `idle_poll`
    /// while claims find nothing. An announcement of the queue (a delivered signal) ends
    /// the pause of one idle worker (wake.rs), which claims at once (ADR 0018).
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) -> Result<()> {
        self.register().await?;
        let first = Duration::from_millis(1).min(self.config.idle_poll);
        let mut idle = first;
        // Taken before the first claim: an announcement made while a claim runs is kept
        // as a permit and ends the pause after it.
        let waker = self.wf.waker(&self.config.queue);
        while !*shutdown.borrow() {
            let pause = match self.run_once_inner().await {
                Ok(Ran { steps: 0, .. }) => {
                    let p = idle;
                    idle = (idle * 2).min(self.config.idle_poll);
                    p
                }
                Ok(Ran { full, again, .. }) => {
                    if full {
                        idle = first;
                    }
                    if full || again {
                        continue;
                    }
                    idle
                }
                Err(e) => {
                    tracing::warn!(queue = %self.config.queue, error = %e, "workflow worker");
                    Duration::from_millis(200)
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = waker.notified() => {
                    self.stats.woken.fetch_add(1, Ordering::Relaxed);
                }
                _ = shutdown.changed() => {}
            }
        }
        Ok(())
    }

    /// One claim, its handlers and one finish; returns how many steps ran.
    pub async fn run_once(&self) -> Result<usize> {
        Ok(self.run_once_inner().await?.steps)
    }

    async fn run_once_inner(&self) -> Result<Ran> {
        let c = &self.config;
        let mut steps = self.wf.claim(&c.queue, c.batch, &c.name, c.lease).await?;
        let claimed = steps.len();
        let mut ran = Ran {
            steps: 0,
            full: claimed >= c.batch,
            again: false,
        };
        let mut round = 0;
        while !steps.is_empty() {
            let outcomes = self.run_steps(steps).await;
            ran.steps += outcomes.len();
            let lease = (round < c.continue_steps).then_some(c.lease);
            round += 1;
            let finished = match lease {
                Some(lease) => self.wf.finish_continuing(&outcomes, lease).await?,
                None => {
                    let applied = self.wf.finish(&outcomes).await?;
                    applied
                        .into_iter()
                        .map(|applied| Finished {
                            applied,
                            continued: None,
                        })
                        .collect()
                }
            };
            let won = finished.iter().filter(|f| f.applied).count() as u64;
            self.stats.steps.fetch_add(won, Ordering::Relaxed);
            self.stats
                .stale
                .fetch_add(finished.len() as u64 - won, Ordering::Relaxed);
            // Only a top-level instance's end, a failure, a sleep, or a step continued
            // here make nothing runnable in the picker now.
            steps = Vec::new();
            for ((r, o), f) in outcomes.iter().zip(finished) {
                match f.continued {
                    Some(next) => steps.push(next),
                    None => {
                        ran.again |= match o {
                            Outcome::Done { .. } | Outcome::Fail { .. } => r.parent_id.is_some(),
                            Outcome::Sleep { .. } => false,
                            _ => true,
                        }
                    }
                }
            }
        }
        Ok(ran)
    }

    /// Runs a batch of claimed steps' handlers concurrently; their outcomes in order.
    async fn run_steps(&self, steps: Vec<ClaimedStep>) -> Vec<(StepRef, Outcome)> {
        let c = &self.config;
        let tasks: Vec<_> = steps
            .into_iter()
            .map(|s| {
                let r = s.reference();
                let attempt = s.attempt;
                let run = self.prepare(s);
                (r, attempt, tokio::spawn(run))
            })
            .collect();
        let mut outcomes = Vec::with_capacity(tasks.len());
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
        outcomes
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
