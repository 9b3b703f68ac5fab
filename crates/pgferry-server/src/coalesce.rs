//! Group commit (DESIGN §1.6): concurrent writes from every stream and HTTP request are
//! merged into one engine statement per flush.
//!
//! One [`Coalescer`] per kind of write. A caller validates its own batch (so a bad job fails
//! only its own request), hands it to the coalescer and awaits a oneshot. A single
//! collector task gathers callers until `max_rows` rows are waiting or `max_wait` has passed
//! since the first one, then runs the flush (at most `max_inflight` flushes at once, so the
//! next batch accumulates while one is in the database) and answers every caller after the
//! statement committed. A caller's batch is never split across flushes: each request stays
//! all-or-nothing.
//!
//! If a merged statement fails because of its input (something only the database could
//! check), the flush is re-run caller by caller so that only the offending request fails.
//! Infrastructure errors (connection lost) go to every caller of the flush.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pgferry_core::{Completed, Engine, NewJob, Outcome};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;

use crate::metrics::{Latency, Metrics};

/// Limits of one coalescer.
#[derive(Debug, Clone)]
pub struct CoalesceConfig {
    /// Rows per flush (a single caller's batch larger than this is flushed alone).
    pub max_rows: usize,
    /// How long the first waiting caller waits for company.
    pub max_wait: Duration,
    /// Flushes running at once.
    pub max_inflight: usize,
    /// Callers waiting to be collected before submitters feel backpressure.
    pub queue_depth: usize,
}

impl Default for CoalesceConfig {
    fn default() -> Self {
        CoalesceConfig {
            max_rows: 1000,
            max_wait: Duration::from_millis(1),
            max_inflight: 4,
            queue_depth: 4096,
        }
    }
}

/// Upper bounds of the rows-per-flush histogram (a final +Inf bucket is implied).
pub const BATCH_BUCKETS: [u64; 11] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000];

/// Counters of one coalescer, readable at any time (for `/metrics`).
#[derive(Debug, Default)]
pub struct BatchStats {
    /// Engine statements run (merged flushes plus per-caller re-runs).
    pub statements: AtomicU64,
    /// Flushes (merged batches).
    pub flushes: AtomicU64,
    /// Requests submitted.
    pub callers: AtomicU64,
    /// Rows flushed.
    pub rows: AtomicU64,
    /// Flushes whose merged statement failed.
    pub failed_flushes: AtomicU64,
    /// Requests refused before merging (their own input was invalid).
    pub rejected: AtomicU64,
    /// Flushes by rows, non-cumulative: `buckets[i]` counts flushes with
    /// `BATCH_BUCKETS[i-1] < rows <= BATCH_BUCKETS[i]`; the last entry is +Inf.
    pub buckets: [AtomicU64; BATCH_BUCKETS.len() + 1],
}

/// A point-in-time copy of [`BatchStats`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSnapshot {
    pub statements: u64,
    pub flushes: u64,
    pub callers: u64,
    pub rows: u64,
    pub failed_flushes: u64,
    pub rejected: u64,
    /// Cumulative counts per `BATCH_BUCKETS` bound, then +Inf (Prometheus `le` buckets).
    pub cumulative: Vec<u64>,
}

impl BatchStats {
    fn record_flush(&self, rows: usize) {
        let rows = rows as u64;
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.rows.fetch_add(rows, Ordering::Relaxed);
        let i = BATCH_BUCKETS
            .iter()
            .position(|b| rows <= *b)
            .unwrap_or(BATCH_BUCKETS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> BatchSnapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut acc = 0;
        let cumulative = self
            .buckets
            .iter()
            .map(|b| {
                acc += load(b);
                acc
            })
            .collect();
        BatchSnapshot {
            statements: load(&self.statements),
            flushes: load(&self.flushes),
            callers: load(&self.callers),
            rows: load(&self.rows),
            failed_flushes: load(&self.failed_flushes),
            rejected: load(&self.rejected),
            cumulative,
        }
    }
}

/// Why a submitted request was not written.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SubmitError {
    /// The engine refused this request or the flush it was part of. Shared: every caller of
    /// a failed flush holds the same error.
    #[error("{0}")]
    Engine(Arc<pgferry_core::Error>),
    /// The server is shutting down; nothing was written.
    #[error("server is shutting down")]
    ShuttingDown,
}

impl SubmitError {
    /// A stable code (the engine's codes, plus `unavailable`).
    pub fn code(&self) -> &'static str {
        match self {
            SubmitError::Engine(e) => e.code(),
            SubmitError::ShuttingDown => "unavailable",
        }
    }

    /// The engine error, when there is one.
    pub fn engine(&self) -> Option<&pgferry_core::Error> {
        match self {
            SubmitError::Engine(e) => Some(e),
            SubmitError::ShuttingDown => None,
        }
    }
}

impl From<pgferry_core::Error> for SubmitError {
    fn from(e: pgferry_core::Error) -> Self {
        SubmitError::Engine(Arc::new(e))
    }
}

/// One kind of write: how a request is checked and how a merged batch is written.
pub trait Writer: Send + Sync + 'static {
    type Item: Send + Sync + 'static;
    type Output: Send + 'static;

    /// Checks one caller's batch before it is merged with others.
    fn validate(&self, items: &[Self::Item]) -> pgferry_core::Result<()>;

    /// Writes a merged batch in one statement; outputs in input order, one per item.
    fn write(
        &self,
        items: &[Self::Item],
    ) -> impl Future<Output = pgferry_core::Result<Vec<Self::Output>>> + Send;
}

type Reply<O> = oneshot::Sender<Result<Vec<O>, SubmitError>>;

struct Pending<I, O> {
    items: Vec<I>,
    reply: Reply<O>,
}

/// Merges concurrent requests of one [`Writer`] into one statement per flush.
pub struct Coalescer<W: Writer> {
    writer: Arc<W>,
    tx: mpsc::Sender<Pending<W::Item, W::Output>>,
    stats: Arc<BatchStats>,
}

impl<W: Writer> Coalescer<W> {
    /// Starts the collector task (on the current Tokio runtime). It ends when the
    /// coalescer is dropped, after flushing what it holds.
    pub fn new(writer: W, config: CoalesceConfig) -> Coalescer<W> {
        let writer = Arc::new(writer);
        let stats = Arc::new(BatchStats::default());
        let (tx, rx) = mpsc::channel(config.queue_depth.max(1));
        tokio::spawn(collect(writer.clone(), stats.clone(), config, rx));
        Coalescer { writer, tx, stats }
    }

    pub fn stats(&self) -> &Arc<BatchStats> {
        &self.stats
    }

    /// Writes `items` (all or nothing) together with whatever other callers submit
    /// meanwhile; answers after COMMIT with one output per item, in order.
    pub async fn submit(&self, items: Vec<W::Item>) -> Result<Vec<W::Output>, SubmitError> {
        self.stats.callers.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.writer.validate(&items) {
            self.stats.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(e.into());
        }
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Pending { items, reply })
            .await
            .map_err(|_| SubmitError::ShuttingDown)?;
        rx.await.unwrap_or(Err(SubmitError::ShuttingDown))
    }
}

/// The collector: gathers callers into flushes and starts each flush.
async fn collect<W: Writer>(
    writer: Arc<W>,
    stats: Arc<BatchStats>,
    config: CoalesceConfig,
    mut rx: mpsc::Receiver<Pending<W::Item, W::Output>>,
) {
    let inflight = Arc::new(Semaphore::new(config.max_inflight.max(1)));
    let mut carry: Option<Pending<W::Item, W::Output>> = None;
    loop {
        // Take the permit first: while every flush slot is busy, callers pile up in the
        // channel and the next flush is larger.
        let Ok(permit) = inflight.clone().acquire_owned().await else {
            return;
        };
        let first = match carry.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let deadline = Instant::now() + config.max_wait;
        let mut rows = first.items.len();
        let mut batch = vec![first];
        while rows < config.max_rows {
            let next = match rx.try_recv() {
                Ok(p) => Some(p),
                Err(mpsc::error::TryRecvError::Empty) => {
                    tokio::time::timeout_at(deadline, rx.recv())
                        .await
                        .ok()
                        .flatten()
                }
                Err(mpsc::error::TryRecvError::Disconnected) => None,
            };
            let Some(p) = next else { break };
            if rows + p.items.len() > config.max_rows {
                // Starts the next flush instead: a request is never split.
                carry = Some(p);
                break;
            }
            rows += p.items.len();
            batch.push(p);
        }
        let (writer, stats) = (writer.clone(), stats.clone());
        tokio::spawn(async move {
            flush(&*writer, &stats, batch).await;
            drop(permit);
        });
    }
}

/// Runs one merged statement and answers its callers.
async fn flush<W: Writer>(writer: &W, stats: &BatchStats, batch: Vec<Pending<W::Item, W::Output>>) {
    let mut counts = Vec::with_capacity(batch.len());
    let mut replies = Vec::with_capacity(batch.len());
    let mut items = Vec::with_capacity(batch.iter().map(|p| p.items.len()).sum());
    for p in batch {
        counts.push(p.items.len());
        replies.push(p.reply);
        items.extend(p.items);
    }
    stats.record_flush(items.len());
    stats.statements.fetch_add(1, Ordering::Relaxed);
    match writer.write(&items).await {
        Ok(outputs) if outputs.len() == items.len() => {
            let mut outputs = outputs.into_iter();
            for (n, reply) in counts.into_iter().zip(replies) {
                let _ = reply.send(Ok(outputs.by_ref().take(n).collect()));
            }
        }
        Ok(outputs) => {
            // A writer bug; never hand anyone someone else's ids.
            stats.failed_flushes.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                rows = items.len(),
                outputs = outputs.len(),
                "coalesced write returned the wrong number of rows"
            );
            let e = SubmitError::from(pgferry_core::Error::InvalidArgument {
                field: "batch",
                reason: "internal: write returned the wrong number of rows".into(),
            });
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
        Err(e) if caller_attributable(&e) && replies.len() > 1 => {
            // Someone's input was refused by the database: find whose by writing each
            // request alone. Rare (validate catches what can be checked up front).
            stats.failed_flushes.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(error = %e, callers = replies.len(), "merged write refused; retrying per caller");
            let mut start = 0;
            for (n, reply) in counts.into_iter().zip(replies) {
                let own = &items[start..start + n];
                start += n;
                stats.statements.fetch_add(1, Ordering::Relaxed);
                let _ = reply.send(writer.write(own).await.map_err(SubmitError::from));
            }
        }
        Err(e) => {
            stats.failed_flushes.fetch_add(1, Ordering::Relaxed);
            let e = SubmitError::from(e);
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

/// Whether a failed merged write may be one caller's fault: the engine refused an input, or
/// Postgres raised a data exception (class 22, e.g. a NUL byte in text) or an integrity
/// violation (class 23). Anything else (connection, pool, server) is everyone's problem.
fn caller_attributable(e: &pgferry_core::Error) -> bool {
    match e {
        pgferry_core::Error::Db(db) => db
            .code()
            .is_some_and(|c| c.code().starts_with("22") || c.code().starts_with("23")),
        other => other.is_invalid_input(),
    }
}

/// Postgres cannot store U+0000 in jsonb or text: refuse it with a precise error up front
/// rather than failing the statement (and, merged, every other caller's request with it).
fn check_no_nul(
    v: &serde_json::Value,
    index: usize,
    field: &'static str,
) -> pgferry_core::Result<()> {
    use serde_json::Value;
    let bad = match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(a) => return a.iter().try_for_each(|x| check_no_nul(x, index, field)),
        Value::Object(m) => {
            for (k, x) in m {
                if k.contains('\0') {
                    return Err(nul_error(index, field));
                }
                check_no_nul(x, index, field)?;
            }
            false
        }
        _ => false,
    };
    if bad {
        return Err(nul_error(index, field));
    }
    Ok(())
}

fn nul_error(index: usize, field: &'static str) -> pgferry_core::Error {
    pgferry_core::Error::InvalidArgument {
        field,
        reason: format!("job {index}: strings may not contain U+0000 (Postgres cannot store it)"),
    }
}

/// Enqueue through [`Engine::enqueue`].
pub struct EnqueueWriter {
    pub engine: Arc<Engine>,
}

impl Writer for EnqueueWriter {
    type Item = NewJob;
    type Output = i64;

    fn validate(&self, jobs: &[NewJob]) -> pgferry_core::Result<()> {
        let limit = self.engine.config().max_batch;
        if jobs.len() > limit {
            return Err(pgferry_core::Error::BatchTooLarge {
                size: jobs.len(),
                limit,
            });
        }
        let max_payload = self.engine.config().max_payload_bytes;
        for (i, job) in jobs.iter().enumerate() {
            job.validate(i, max_payload)?;
            check_no_nul(&job.args, i, "args")?;
            if let Some(meta) = &job.meta {
                check_no_nul(meta, i, "meta")?;
            }
        }
        Ok(())
    }

    fn write(
        &self,
        jobs: &[NewJob],
    ) -> impl Future<Output = pgferry_core::Result<Vec<i64>>> + Send {
        self.engine.enqueue(jobs)
    }
}

/// Completion through [`Engine::complete`].
pub struct CompleteWriter {
    pub engine: Arc<Engine>,
}

impl Writer for CompleteWriter {
    type Item = Outcome;
    type Output = Completed;

    fn validate(&self, outcomes: &[Outcome]) -> pgferry_core::Result<()> {
        let limit = self.engine.config().max_batch;
        if outcomes.len() > limit {
            return Err(pgferry_core::Error::BatchTooLarge {
                size: outcomes.len(),
                limit,
            });
        }
        Ok(())
    }

    fn write(
        &self,
        outcomes: &[Outcome],
    ) -> impl Future<Output = pgferry_core::Result<Vec<Completed>>> + Send {
        self.engine.complete(outcomes)
    }
}

/// The server's two coalescers, shared by gRPC streams and HTTP handlers.
pub struct Coalescers {
    pub enqueue: Coalescer<EnqueueWriter>,
    pub complete: Coalescer<CompleteWriter>,
    /// Commit latencies per request (what a caller waits, group-commit wait included).
    pub metrics: Arc<Metrics>,
}

impl Coalescers {
    pub fn new(
        engine: Arc<Engine>,
        config: CoalesceConfig,
        metrics: Arc<Metrics>,
    ) -> Arc<Coalescers> {
        Arc::new(Coalescers {
            enqueue: Coalescer::new(
                EnqueueWriter {
                    engine: engine.clone(),
                },
                config.clone(),
            ),
            complete: Coalescer::new(CompleteWriter { engine }, config),
            metrics,
        })
    }

    /// Enqueues one request's jobs (all or nothing); ids in order, after COMMIT.
    pub async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<i64>, SubmitError> {
        let started = Instant::now();
        let ids = self.enqueue.submit(jobs).await?;
        self.metrics
            .observe(Latency::EnqueueCommit, started.elapsed());
        Ok(ids)
    }

    /// Records one request's outcomes; answers in order, after COMMIT.
    pub async fn complete(&self, outcomes: Vec<Outcome>) -> Result<Vec<Completed>, SubmitError> {
        let started = Instant::now();
        let done = self.complete.submit(outcomes).await?;
        self.metrics
            .observe(Latency::CompleteCommit, started.elapsed());
        Ok(done)
    }
}
