//! One queue's loop: claim up to the free slots, run each job in its own task, batch the
//! outcomes, heartbeat what runs long, pass cancellations on, drain on shutdown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, watch, Notify, Semaphore};
use tokio::task::JoinSet;

use super::handler::{Handler, HandlerError, JobContext};
use super::{RuntimeConfig, Stats};
use crate::control::AttemptRef;
use crate::engine::Engine;
use crate::job::{ClaimedJob, Outcome, OutcomeKind};

/// A running attempt: what a heartbeat needs, and how to tell its handler to stop.
struct Running {
    /// The claimed job (args dropped): its outcome is written from it at shutdown.
    job: ClaimedJob,
    lease: Duration,
    lease_until: SystemTime,
    stop: watch::Sender<bool>,
}

type RunningSet = Arc<Mutex<HashMap<i64, Running>>>;

pub(super) struct QueueLoop {
    pub engine: Arc<Engine>,
    pub queue: String,
    pub concurrency: usize,
    pub handlers: Arc<HashMap<String, Arc<dyn Handler>>>,
    pub config: RuntimeConfig,
    /// `Some(grace)` once the runtime is shutting down.
    pub stop: watch::Receiver<Option<Duration>>,
}

impl QueueLoop {
    pub async fn run(mut self) -> Stats {
        let slots = Arc::new(Semaphore::new(self.concurrency));
        let freed = Arc::new(Notify::new());
        let running: RunningSet = Arc::default();
        let (out_tx, out_rx) = mpsc::unbounded_channel::<Outcome>();
        let completer = tokio::spawn(complete_loop(
            self.engine.clone(),
            out_rx,
            self.config.flush_rows,
            self.config.flush_wait,
        ));
        let beats = tokio::spawn(heartbeat_loop(
            self.engine.clone(),
            running.clone(),
            self.config.worker.clone(),
        ));
        let cancels = tokio::spawn(cancel_loop(self.engine.clone(), running.clone()));
        let mut jobs: JoinSet<()> = JoinSet::new();
        let mut ticks = self.engine.signals().subscribe_ticks();
        let mut backoff = Duration::from_millis(50);
        let grace = loop {
            if let Some(grace) = *self.stop.borrow() {
                break grace;
            }
            while jobs.try_join_next().is_some() {}
            let free = slots.available_permits();
            if free == 0 {
                tokio::select! {
                    _ = freed.notified() => {}
                    _ = self.stop.changed() => {}
                }
                continue;
            }
            ticks.borrow_and_update();
            let claimed = match self
                .engine
                .claim(&self.queue, free, &self.config.worker)
                .await
            {
                Ok(c) => {
                    backoff = Duration::from_millis(50);
                    c
                }
                Err(e) => {
                    tracing::warn!(queue = %self.queue, error = %e, "claim failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = self.stop.changed() => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            };
            if claimed.is_empty() {
                // An empty claim: nothing visible yet. The next tick (or the idle poll, for a
                // process whose listener is not connected yet) may bring more. Waiting, it
                // asks the ticker to tick as soon as the log grows (signals.rs).
                let _waiting = self.engine.signals().waiting_for_tick();
                tokio::select! {
                    _ = ticks.changed() => {}
                    _ = tokio::time::sleep(self.config.idle_poll) => {}
                    _ = self.stop.changed() => {}
                }
                continue;
            }
            for job in claimed {
                let permit = slots
                    .clone()
                    .try_acquire_owned()
                    .expect("claims never exceed the free slots");
                let (stop_tx, stop_rx) = watch::channel(false);
                let lease = job
                    .lease_until
                    .duration_since(SystemTime::now())
                    .unwrap_or(Duration::from_secs(1));
                running.lock().expect("running").insert(
                    job.job_id,
                    Running {
                        job: ClaimedJob {
                            args: serde_json::Value::Null,
                            ..job.clone()
                        },
                        lease: lease.max(Duration::from_secs(1)),
                        lease_until: job.lease_until,
                        stop: stop_tx,
                    },
                );
                let handler = self.handlers.get(&job.kind).cloned();
                let (out, running, freed) = (out_tx.clone(), running.clone(), freed.clone());
                let queue = self.queue.clone();
                jobs.spawn(async move {
                    let outcome = run_one(handler, job, queue, stop_rx).await;
                    running.lock().expect("running").remove(&outcome.job_id);
                    let _ = out.send(outcome);
                    drop(permit);
                    freed.notify_one();
                });
            }
        };
        // Shutdown: no more claims. Running jobs get `grace`, then are told to stop and
        // reported for another run.
        let drained =
            tokio::time::timeout(grace, async { while jobs.join_next().await.is_some() {} })
                .await
                .is_ok();
        let mut abandoned = 0;
        if !drained {
            let left: Vec<Running> = running
                .lock()
                .expect("running")
                .drain()
                .map(|(_, r)| r)
                .collect();
            jobs.abort_all();
            for r in left {
                let _ = r.stop.send(true);
                abandoned += 1;
                let _ = out_tx.send(r.job.failed(
                    "the worker shut down before the job finished",
                    Duration::ZERO,
                ));
            }
        }
        beats.abort();
        cancels.abort();
        drop(out_tx);
        let mut stats = completer.await.unwrap_or_default();
        // Counted as retried (or dead) by the completer already; reported apart.
        stats.abandoned = abandoned;
        stats
    }
}

/// Runs one job's handler and turns its answer into the outcome to record.
async fn run_one(
    handler: Option<Arc<dyn Handler>>,
    job: ClaimedJob,
    queue: String,
    stop: watch::Receiver<bool>,
) -> Outcome {
    let Some(handler) = handler else {
        return job.discarded(format!(
            "no handler for kind {:?} in this runtime",
            job.kind
        ));
    };
    let ctx = JobContext {
        job_id: job.job_id,
        queue,
        kind: job.kind.clone(),
        attempt: job.attempt,
        max_attempts: job.max_attempts,
        meta: job.meta.clone(),
        enqueued_at: job.enqueued_at,
        stop,
    };
    let fut = handler.call(ctx, job.args.clone());
    // A panicking handler is a failed attempt, not a dead runtime.
    match tokio::spawn(fut).await {
        Ok(Ok(result)) => job.completed(result),
        Ok(Err(HandlerError::Retry { message, delay })) => match delay {
            Some(d) => job.failed(message, d),
            None => job.fail(message),
        },
        Ok(Err(HandlerError::Discard { message })) => job.discarded(message),
        Ok(Err(HandlerError::Snooze { delay })) => job.snooze(delay),
        Ok(Err(HandlerError::Cancel { reason })) => job.cancelled(reason),
        Err(e) => job.fail(format!("handler panicked: {e}")),
    }
}

/// Writes outcomes in batches: `rows` at most, flushed `wait` after the first arrived.
async fn complete_loop(
    engine: Arc<Engine>,
    mut rx: mpsc::UnboundedReceiver<Outcome>,
    rows: usize,
    wait: Duration,
) -> Stats {
    let mut stats = Stats::default();
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + wait;
        while batch.len() < rows {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(o)) => batch.push(o),
                _ => break,
            }
        }
        let mut backoff = Duration::from_millis(50);
        loop {
            match engine.complete(&batch).await {
                Ok(_) => break,
                Err(e) if e.is_invalid_input() => {
                    tracing::error!(error = %e, "outcomes refused; their jobs run again after their leases");
                    break;
                }
                Err(e) => {
                    // The attempts stay leased: writing the same outcomes again is safe (the
                    // first outcome of an attempt wins).
                    tracing::warn!(error = %e, "writing outcomes failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
        for o in &batch {
            match o.kind {
                OutcomeKind::Completed => stats.completed += 1,
                OutcomeKind::Retry { .. } => stats.retried += 1,
                OutcomeKind::Dead => stats.dead += 1,
                OutcomeKind::Snooze { .. } => stats.snoozed += 1,
                OutcomeKind::Released => stats.released += 1,
                OutcomeKind::Cancelled => stats.cancelled += 1,
            }
        }
    }
    stats
}

/// Every second: extends the lease of attempts past half of it, in one statement; stops
/// handlers whose attempt is no longer theirs or was cancelled.
async fn heartbeat_loop(engine: Arc<Engine>, running: RunningSet, worker: String) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        every.tick().await;
        let now = SystemTime::now();
        let due: Vec<(AttemptRef, Duration)> = running
            .lock()
            .expect("running")
            .values()
            .filter(|r| r.lease_until.duration_since(now).unwrap_or_default() < r.lease / 2)
            .map(|r| (AttemptRef::from(&r.job), r.lease))
            .collect();
        // One statement per lease length (a queue has one).
        let mut by_lease: HashMap<Duration, Vec<AttemptRef>> = HashMap::new();
        for (a, l) in due {
            by_lease.entry(l).or_default().push(a);
        }
        for (lease, refs) in by_lease {
            let lease = lease.max(Duration::from_millis(100));
            match engine.heartbeat(&refs, lease, &worker).await {
                Ok(beats) => {
                    let mut set = running.lock().expect("running");
                    for b in beats {
                        if let Some(r) = set.get_mut(&b.job_id) {
                            r.lease_until = b.lease_until;
                            if !b.held || b.cancelled {
                                let _ = r.stop.send(true);
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
            }
        }
    }
}

/// Tells a running job's handler of its cancellation as soon as this process hears of it.
async fn cancel_loop(engine: Arc<Engine>, running: RunningSet) {
    let mut rx = engine.signals().subscribe_cancels();
    loop {
        match rx.recv().await {
            Ok(job_id) => {
                if let Some(r) = running.lock().expect("running").get(&job_id) {
                    let _ = r.stop.send(true);
                }
            }
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(_) => return,
        }
    }
}
