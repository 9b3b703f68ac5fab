//! Group commit (architecture.md §1.6): concurrent writes from every stream and HTTP request are
//! merged into one engine statement per flush.
//!
//! One [`Coalescer`] per kind of write. A caller validates its own batch (so a bad job fails
//! only its own request), hands it to the coalescer and awaits a oneshot. A collector task
//! gathers callers until `max_rows` rows are waiting or `max_wait` has passed since the first
//! one, then runs the flush (at most `max_inflight` flushes at once, so the next batch
//! accumulates while one is in the database) and answers every caller after the statement
//! committed. A caller's batch is never split across flushes: each request stays
//! all-or-nothing. With adaptive group commit, a caller that finds its lane idle runs its
//! flush itself, skipping the collector's hand-offs ([`CoalesceConfig::caller_flush`]).
//!
//! A *partitioned* writer (completions) has `lanes` collectors instead, each running one
//! flush at a time, and every item goes to the lane of its key (a completion's receipt).
//! `pgferry.complete()` holds an advisory lock per receipt until COMMIT, so two concurrent
//! flushes naming one receipt run one after the other anyway — each holding a pooled
//! connection while it waits. With lanes, the outcomes of one receipt (a dispatcher's claim,
//! handed out over many streams and reported in many requests) always meet in the same lane:
//! concurrent flushes never share a receipt, and what piles up behind a running flush joins
//! the lane's next one. A request naming receipts of several lanes is split by lane and
//! answered when every part committed; if a part fails the request fails, though other
//! parts may have been recorded (an outcome is recorded once: a re-report answers stale).
//!
//! If a merged statement fails because of its input (something only the database could
//! check), the flush is re-run caller by caller so that only the offending request fails.
//! Infrastructure errors (connection lost) go to every caller of the flush.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

mod receipts;
mod writers;

pub use receipts::ReceiptBook;

pub use writers::{Coalescers, CompleteWriter, EnqueueWriter};

/// Limits of one coalescer.
#[derive(Debug, Clone)]
pub struct CoalesceConfig {
    /// Rows per flush (a single caller's batch larger than this is flushed alone).
    pub max_rows: usize,
    /// How long the first waiting caller waits for company while another flush of the
    /// same collector is in the database (with `adaptive`), or always (without).
    pub max_wait: Duration,
    /// Adaptive group commit (issue 21): when nothing is waiting and no other flush of this
    /// collector is running, flush at once instead of waiting `max_wait` for company — a
    /// lone caller's acknowledgement then costs about one commit. Under load nothing
    /// changes: callers that arrive while a flush runs join the next one (the way
    /// Postgres's own WAL flush groups commits).
    pub adaptive: bool,
    /// With `adaptive`, a caller that finds its lane idle (nothing queued, no flush of the
    /// lane running) runs its flush itself instead of handing it to the collector task and
    /// waiting for the flush task it would spawn: two task wake-ups fewer per
    /// acknowledgement, which is most of a lone producer's latency on a busy machine
    /// (docs/performance.md, "Caller-run flushes"). Only the caller's own items are in such
    /// a flush, so a caller whose future is dropped (a client gone) drops only its own,
    /// unacknowledged write.
    pub caller_flush: bool,
    /// Flushes running at once (a writer that is not partitioned).
    pub max_inflight: usize,
    /// Flush lanes of a partitioned writer (completions, by receipt), each running one flush
    /// at a time: at most this many of its statements at once.
    pub lanes: usize,
    /// How long a lane holding part of one receipt waits for each further part of it,
    /// past `max_wait` (see [`Writer::missing`]; at most five times this in all); zero:
    /// never.
    pub gather_wait: Duration,
    /// Callers waiting to be collected before submitters feel backpressure.
    pub queue_depth: usize,
}

impl Default for CoalesceConfig {
    fn default() -> Self {
        CoalesceConfig {
            max_rows: 1000,
            max_wait: Duration::from_millis(1),
            adaptive: true,
            caller_flush: true,
            max_inflight: 4,
            lanes: 4,
            gather_wait: Duration::from_millis(10),
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
    /// Requests whose items went to more than one lane (each part is a caller of its lane's
    /// flush; `callers` counts the request once).
    pub split: AtomicU64,
    /// Flush lanes (1 unless the writer is partitioned).
    pub lanes: AtomicU64,
    /// Flushes run by their caller on an idle lane (see [`CoalesceConfig::caller_flush`]).
    pub caller_run: AtomicU64,
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
    pub split: u64,
    /// Flush lanes (1 unless the writer is partitioned).
    pub lanes: u64,
    /// Flushes run by their caller on an idle lane.
    pub caller_run: u64,
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
            split: load(&self.split),
            lanes: load(&self.lanes),
            caller_run: load(&self.caller_run),
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

    /// Whether items go to flush lanes by [`Writer::lane_key`] (see the module docs).
    const PARTITIONED: bool = false;

    /// Checks one caller's batch before it is merged with others.
    fn validate(&self, items: &[Self::Item]) -> pgferry_core::Result<()>;

    /// Writes a merged batch in one statement; outputs in input order, one per item.
    fn write(
        &self,
        items: &[Self::Item],
    ) -> impl Future<Output = pgferry_core::Result<Vec<Self::Output>>> + Send;

    /// How many rows an item stands for (`max_rows` counts rows): 1, unless an item is a
    /// whole request (enqueue).
    fn weight(&self, _item: &Self::Item) -> usize {
        1
    }

    /// A partitioned writer's key of an item: items with equal keys share a lane.
    fn lane_key(&self, _item: &Self::Item) -> u64 {
        0
    }

    /// A partitioned writer whose statement is cheapest for a whole group of items (a
    /// receipt): for a batch that is part of one such group, how many of the group's items
    /// are not in it yet (`Some(0)`: whole). `None`: not part of a single group. The lane
    /// waits up to `gather_wait` for the rest and keeps other groups for its next flush.
    fn missing(&self, _items: &[&Self::Item]) -> Option<usize> {
        None
    }
}

type Reply<O> = oneshot::Sender<Result<Vec<O>, SubmitError>>;

struct Pending<I, O> {
    items: Vec<I>,
    reply: Reply<O>,
}

/// One flush lane: its collector's queue and its flush slots.
struct Lane<I, O> {
    tx: mpsc::Sender<Pending<I, O>>,
    /// Flush slots: the collector takes one per flush it starts (after it has a first
    /// request), a caller running its own flush takes one too.
    slots: Arc<Semaphore>,
    size: usize,
}

/// Merges concurrent requests of one [`Writer`] into one statement per flush.
pub struct Coalescer<W: Writer> {
    writer: Arc<W>,
    /// One collector per lane.
    lanes: Vec<Lane<W::Item, W::Output>>,
    stats: Arc<BatchStats>,
    /// Callers may run their own flush on an idle lane (adaptive, with `caller_flush`).
    adaptive: bool,
    /// Partial receipts wait for their other parts (never flushed by their caller).
    gathering: bool,
}

impl<W: Writer> Coalescer<W> {
    /// Starts the collector tasks (on the current Tokio runtime). They end when the
    /// coalescer is dropped, after flushing what they hold.
    pub fn new(writer: W, config: CoalesceConfig) -> Coalescer<W> {
        let writer = Arc::new(writer);
        let stats = Arc::new(BatchStats::default());
        let (lanes, inflight) = if W::PARTITIONED {
            (config.lanes.max(1), 1)
        } else {
            (1, config.max_inflight.max(1))
        };
        stats.lanes.store(lanes as u64, Ordering::Relaxed);
        let lanes = (0..lanes)
            .map(|_| {
                let (tx, rx) = mpsc::channel(config.queue_depth.max(1));
                let slots = Arc::new(Semaphore::new(inflight));
                let (writer, stats) = (writer.clone(), stats.clone());
                tokio::spawn(collect(
                    writer,
                    stats,
                    config.clone(),
                    (slots.clone(), inflight),
                    rx,
                ));
                Lane {
                    tx,
                    slots,
                    size: inflight,
                }
            })
            .collect();
        Coalescer {
            writer,
            lanes,
            stats,
            adaptive: config.adaptive && config.caller_flush,
            gathering: W::PARTITIONED && !config.gather_wait.is_zero(),
        }
    }

    pub fn stats(&self) -> &Arc<BatchStats> {
        &self.stats
    }

    /// Writes `items` (all or nothing, unless split over lanes: see the module docs)
    /// together with whatever other callers submit meanwhile; answers after COMMIT with one
    /// output per item, in order.
    pub async fn submit(&self, items: Vec<W::Item>) -> Result<Vec<W::Output>, SubmitError> {
        self.stats.callers.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.writer.validate(&items) {
            self.stats.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(e.into());
        }
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.lanes.len();
        let lane_of = |item: &W::Item| (self.writer.lane_key(item) % k as u64) as usize;
        let first = lane_of(&items[0]);
        if k == 1 || items.iter().all(|i| lane_of(i) == first) {
            if let Some(slot) = self.idle_slot(first, &items) {
                return self.run_own_flush(slot, items).await;
            }
            return self.send(first, items).await?.await;
        }
        self.stats.split.fetch_add(1, Ordering::Relaxed);
        let n = items.len();
        let mut parts: Vec<(Vec<usize>, Vec<W::Item>)> =
            (0..k).map(|_| (Vec::new(), Vec::new())).collect();
        for (i, item) in items.into_iter().enumerate() {
            let part = &mut parts[lane_of(&item)];
            part.0.push(i);
            part.1.push(item);
        }
        // Every part is queued before any is awaited: the lanes flush them concurrently.
        let mut answers = Vec::new();
        for (lane, (at, items)) in parts.into_iter().enumerate() {
            if !items.is_empty() {
                answers.push((at, self.send(lane, items).await?));
            }
        }
        let mut out: Vec<Option<W::Output>> = (0..n).map(|_| None).collect();
        let mut failed = None;
        for (at, answer) in answers {
            match answer.await {
                Ok(outputs) => {
                    for (i, o) in at.into_iter().zip(outputs) {
                        out[i] = Some(o);
                    }
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let out: Vec<W::Output> = out.into_iter().flatten().collect();
        if out.len() != n {
            return Err(wrong_count());
        }
        Ok(out)
    }

    /// A flush slot of `lane` for a caller to run its own flush, if the lane is idle: nothing
    /// queued for its collector, none of its flushes running (so there is no company to
    /// wait for), and not a partial receipt (which waits for its other parts).
    fn idle_slot(&self, lane: usize, items: &[W::Item]) -> Option<OwnedSemaphorePermit> {
        let lane = &self.lanes[lane];
        if !self.adaptive
            || lane.tx.capacity() != lane.tx.max_capacity()
            || lane.slots.available_permits() != lane.size
        {
            return None;
        }
        if self.gathering {
            let refs: Vec<&W::Item> = items.iter().collect();
            if self.writer.missing(&refs).is_some_and(|n| n > 0) {
                return None;
            }
        }
        lane.slots.clone().try_acquire_owned().ok()
    }

    /// Runs a flush of the caller's own items, holding `slot` until it ends: callers that
    /// arrive meanwhile go to the collector and gather for the lane's next flush.
    async fn run_own_flush(
        &self,
        slot: OwnedSemaphorePermit,
        items: Vec<W::Item>,
    ) -> Result<Vec<W::Output>, SubmitError> {
        self.stats.caller_run.fetch_add(1, Ordering::Relaxed);
        let (reply, rx) = oneshot::channel();
        flush(&*self.writer, &self.stats, vec![Pending { items, reply }]).await;
        drop(slot);
        rx.await.unwrap_or(Err(SubmitError::ShuttingDown))
    }

    /// Queues one lane's part; the returned future is its answer.
    async fn send(
        &self,
        lane: usize,
        items: Vec<W::Item>,
    ) -> Result<impl Future<Output = Result<Vec<W::Output>, SubmitError>>, SubmitError> {
        let (reply, rx) = oneshot::channel();
        self.lanes[lane]
            .tx
            .send(Pending { items, reply })
            .await
            .map_err(|_| SubmitError::ShuttingDown)?;
        Ok(async move { rx.await.unwrap_or(Err(SubmitError::ShuttingDown)) })
    }
}

pub(crate) fn wrong_count() -> SubmitError {
    SubmitError::from(pgferry_core::Error::InvalidArgument {
        field: "batch",
        reason: "internal: write returned the wrong number of rows".into(),
    })
}

/// The collector: gathers callers into flushes and starts each flush.
async fn collect<W: Writer>(
    writer: Arc<W>,
    stats: Arc<BatchStats>,
    config: CoalesceConfig,
    (inflight, slots): (Arc<Semaphore>, usize),
    mut rx: mpsc::Receiver<Pending<W::Item, W::Output>>,
) {
    // Requests taken from the channel but left for a later flush, oldest first.
    let mut carry: VecDeque<Pending<W::Item, W::Output>> = VecDeque::new();
    let gathering = W::PARTITIONED && !config.gather_wait.is_zero();
    loop {
        // The first request, then a flush slot: while every slot is busy, callers pile up
        // in the channel and the next flush is larger. (The slot is not held while the lane
        // is idle, so that a caller may take it to run its own flush.)
        let first = match carry.pop_front() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let Ok(permit) = inflight.clone().acquire_owned().await else {
            return;
        };
        let deadline = Instant::now() + config.max_wait;
        let weight = |p: &Pending<W::Item, W::Output>| -> usize {
            p.items.iter().map(|i| writer.weight(i)).sum()
        };
        let mut rows = weight(&first);
        let mut batch = vec![first];
        // Taken now but left for a later flush (after the older carry: they came later).
        let mut aside = Vec::new();
        let mut missing = if gathering {
            missing_of(&*writer, &batch, None)
        } else {
            None
        };
        let mut from_carry = carry.len();
        let mut gather_until = deadline + config.gather_wait;
        let gather_cap = deadline + config.gather_wait * GATHER_ROUNDS;
        // A whole receipt goes at once.
        while rows < config.max_rows && missing != Some(0) {
            let next = if from_carry > 0 {
                from_carry -= 1;
                carry.pop_front()
            } else {
                match rx.try_recv() {
                    Ok(p) => Some(p),
                    Err(mpsc::error::TryRecvError::Empty) => {
                        // Past `max_wait`, a receipt not yet whole waits for its other
                        // outcomes while they keep coming (at most `gather_wait` apart,
                        // and not past `GATHER_ROUNDS` times that in all).
                        let until = match missing {
                            Some(n) if n > 0 => gather_until.min(gather_cap),
                            // Adaptive: the only flush slot in use is ours, so nobody is
                            // in the database to wait behind; waiting buys no company.
                            _ if config.adaptive && inflight.available_permits() + 1 == slots => {
                                break;
                            }
                            _ => deadline,
                        };
                        tokio::time::timeout_at(until, rx.recv())
                            .await
                            .ok()
                            .flatten()
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => None,
                }
            };
            let Some(p) = next else { break };
            let w = weight(&p);
            if rows + w > config.max_rows {
                // Starts the next flush instead: a request is never split.
                aside.push(p);
                break;
            }
            if let Some(n) = missing {
                // A single receipt so far: keep it single; other receipts wait for the
                // next flush. (The engine's complete_whole() would take several whole
                // receipts in one statement; gathering several per flush is not done yet.)
                match missing_of(&*writer, &batch, Some(&p)) {
                    Some(m) if m < n => {
                        missing = Some(m);
                        gather_until = Instant::now() + config.gather_wait;
                    }
                    _ => {
                        aside.push(p);
                        continue;
                    }
                }
            }
            rows += w;
            batch.push(p);
        }
        carry.extend(aside);
        let (writer, stats) = (writer.clone(), stats.clone());
        tokio::spawn(async move {
            flush(&*writer, &stats, batch).await;
            drop(permit);
        });
    }
}

/// Longest a lane gathers one receipt, in `gather_wait`s.
const GATHER_ROUNDS: u32 = 5;

/// [`Writer::missing`] of a batch, plus one more request.
fn missing_of<W: Writer>(
    writer: &W,
    batch: &[Pending<W::Item, W::Output>],
    more: Option<&Pending<W::Item, W::Output>>,
) -> Option<usize> {
    let items: Vec<&W::Item> = batch
        .iter()
        .chain(more)
        .flat_map(|p| p.items.iter())
        .collect();
    writer.missing(&items)
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
    stats.record_flush(items.iter().map(|i| writer.weight(i)).sum());
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
            let e = wrong_count();
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
