//! Dispatchers: one per queue per server, shared by every worker stream subscribed to it.
//!
//! A dispatcher claims in batches ahead of demand (the credits of its streams plus
//! `prefetch`), keeps what it claimed in a buffer, and hands jobs out round-robin, taking
//! one credit per job — a stream never receives more jobs than it granted credits. When
//! nothing is claimable it sleeps on the engine's tick watch, so a job enqueued anywhere
//! reaches an idle worker within a tick (milliseconds), however long the worker was idle.
//!
//! Jobs claimed but not delivered are never left to rot: buffered jobs whose lease runs
//! low are heartbeated, and when the last stream leaves (or the server stops) the buffer is
//! handed back at once — completed as a zero-delay snooze, which puts the job straight back
//! into the log without using up an attempt. (A process killed outright loses the buffer
//! only until the rescuer retries it after its lease.)

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures_util::future::OptionFuture;
use pgferry_core::{AttemptRef, Backoff, ClaimedJob, Engine, Outcome};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;
use tonic::Status;

use super::convert::job_message;
use super::GrpcConfig;
use crate::auth::token::{Attempt, TokenKey};
use crate::coalesce::Coalescers;
use crate::metrics::{JobCounter, Latency};
use crate::proto::v1 as pb;

const QUEUE_LEASE: &str = include_str!("sql/queue_lease.sql");
/// A dispatcher without streams lingers this long (a reconnecting worker finds it warm).
const IDLE_EXIT: Duration = Duration::from_secs(30);
/// How often a dispatcher re-reads its queue's lease.
const LEASE_REFRESH: Duration = Duration::from_secs(10);

pub(crate) type Tx = mpsc::UnboundedSender<Result<pb::WorkerResponse, Status>>;

/// An attempt handed to a stream and not yet finished there.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub attempt: Attempt,
    pub backoff: Backoff,
    pub lease: Duration,
    pub token: String,
}

/// What dispatchers and the stream's own task share about one worker stream.
pub(crate) struct StreamShared {
    pub tenant_id: i64,
    /// The tenant's name (metrics labels).
    pub tenant: String,
    pub credits: AtomicU64,
    pub draining: AtomicBool,
    /// Most jobs per JobBatch; 0: the worker did not ask for batches (one Job each).
    pub batch: usize,
    /// Empty: every kind.
    pub kinds: HashSet<String>,
    pub tx: Tx,
    /// By job id.
    pub held: Mutex<HashMap<i64, Held>>,
}

impl StreamShared {
    /// Takes one credit, unless the stream is draining or has none.
    fn take_credit(&self) -> bool {
        if self.draining.load(Ordering::Acquire) {
            return false;
        }
        self.credits
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| c.checked_sub(1))
            .is_ok()
    }

    fn demand(&self) -> u64 {
        if self.draining.load(Ordering::Acquire) {
            0
        } else {
            self.credits.load(Ordering::Acquire)
        }
    }

    fn accepts(&self, kind: &str) -> bool {
        self.kinds.is_empty() || self.kinds.contains(kind)
    }
}

/// A claimed job waiting in a dispatcher's buffer.
struct Buffered {
    job: ClaimedJob,
    lease_until: SystemTime,
}

struct Dispatcher {
    /// The engine's (tenant-namespaced) name.
    queue: String,
    /// The name the tenant knows.
    user_queue: String,
    tenant_id: i64,
    tenant: String,
    subs: Mutex<Vec<Arc<StreamShared>>>,
    wake: Notify,
}

/// Keeps a stream subscribed to one dispatcher; dropping it unsubscribes.
pub(crate) struct Subscription {
    dispatcher: Arc<Dispatcher>,
    stream: Arc<StreamShared>,
}

impl Subscription {
    /// Tells the dispatcher that demand changed (credits granted, drain).
    pub fn wake(&self) {
        self.dispatcher.wake.notify_one();
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.dispatcher
            .subs
            .lock()
            .expect("subscribers")
            .retain(|s| !Arc::ptr_eq(s, &self.stream));
        self.dispatcher.wake.notify_one();
    }
}

struct Inner {
    engine: Arc<Engine>,
    coalescers: Arc<Coalescers>,
    tokens: Arc<TokenKey>,
    config: GrpcConfig,
    stopping: watch::Receiver<bool>,
    worker: String,
    map: Mutex<HashMap<String, Arc<Dispatcher>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// The dispatchers of this server, by engine queue name.
pub struct Registry {
    inner: Arc<Inner>,
}

impl Registry {
    pub(crate) fn new(
        engine: Arc<Engine>,
        coalescers: Arc<Coalescers>,
        tokens: Arc<TokenKey>,
        config: GrpcConfig,
        stopping: watch::Receiver<bool>,
    ) -> Registry {
        Registry {
            inner: Arc::new(Inner {
                engine,
                coalescers,
                tokens,
                config,
                stopping,
                worker: format!("grpc-{}", std::process::id()),
                map: Mutex::new(HashMap::new()),
                tasks: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Subscribes a stream to a queue, starting the queue's dispatcher if needed.
    pub(crate) fn subscribe(
        &self,
        engine_queue: &str,
        user_queue: &str,
        stream: Arc<StreamShared>,
    ) -> Subscription {
        let mut map = self.inner.map.lock().expect("dispatchers");
        let d = map
            .entry(engine_queue.to_string())
            .or_insert_with(|| {
                let d = Arc::new(Dispatcher {
                    queue: engine_queue.to_string(),
                    user_queue: user_queue.to_string(),
                    tenant_id: stream.tenant_id,
                    tenant: stream.tenant.clone(),
                    subs: Mutex::new(Vec::new()),
                    wake: Notify::new(),
                });
                let task = tokio::spawn(run(d.clone(), self.inner.clone()));
                let mut tasks = self.inner.tasks.lock().expect("dispatcher tasks");
                tasks.retain(|t| !t.is_finished());
                tasks.push(task);
                d
            })
            .clone();
        d.subs.lock().expect("subscribers").push(stream.clone());
        d.wake.notify_one();
        Subscription {
            dispatcher: d,
            stream,
        }
    }

    /// The lease of a queue (the engine's default when it does not exist yet).
    pub(crate) async fn lease_of(&self, engine_queue: &str) -> Duration {
        lease_of(&self.inner, engine_queue).await
    }

    /// Waits (bounded) for every dispatcher to hand back its buffer after `stopping`.
    pub(crate) async fn close_all(&self) {
        let tasks: Vec<_> = self
            .inner
            .tasks
            .lock()
            .expect("dispatcher tasks")
            .drain(..)
            .collect();
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
    }

    /// Jobs currently buffered (claimed, not yet delivered) across dispatchers is not
    /// tracked here; the number of live dispatchers is, for tests and metrics.
    pub fn dispatchers(&self) -> usize {
        self.inner.map.lock().expect("dispatchers").len()
    }
}

async fn lease_of(inner: &Inner, queue: &str) -> Duration {
    let read = async {
        let client = inner.engine.pool().get().await.ok()?;
        let row = client.query_opt(QUEUE_LEASE, &[&queue]).await.ok()??;
        let ms: i32 = row.get(0);
        Some(Duration::from_millis(u64::try_from(ms).ok()?))
    };
    read.await.unwrap_or(inner.config.default_lease)
}

/// A claim running in the background: when it started, and what it got.
type Claim =
    Pin<Box<dyn Future<Output = (SystemTime, pgferry_core::Result<Vec<ClaimedJob>>)> + Send>>;

fn start_claim(inner: &Inner, d: &Dispatcher, want: usize) -> Claim {
    let (engine, metrics) = (inner.engine.clone(), inner.coalescers.metrics.clone());
    let receipts = inner.coalescers.receipts.clone();
    let (queue, worker) = (d.queue.clone(), inner.worker.clone());
    let (tenant, user_queue) = (d.tenant.clone(), d.user_queue.clone());
    Box::pin(async move {
        let at = SystemTime::now();
        let started = Instant::now();
        let claimed = engine.claim(&queue, want, &worker).await;
        metrics.observe(Latency::Claim, started.elapsed());
        if let Ok(jobs) = &claimed {
            metrics.add(JobCounter::Claimed, &tenant, &user_queue, jobs.len() as u64);
            receipts.register(jobs);
        }
        (at, claimed)
    })
}

fn buffered(
    jobs: Vec<ClaimedJob>,
    at: SystemTime,
    lease: Duration,
) -> impl Iterator<Item = Buffered> {
    jobs.into_iter().map(move |job| Buffered {
        job,
        lease_until: at + lease,
    })
}

/// Waits for a claim still running and buffers what it got (to be delivered or handed
/// back: claimed jobs are never dropped on the floor).
async fn settle(claiming: &mut Option<Claim>, buffer: &mut VecDeque<Buffered>, lease: Duration) {
    if let Some(claim) = claiming.take() {
        if let (at, Ok(jobs)) = claim.await {
            buffer.extend(buffered(jobs, at, lease));
        }
    }
}

/// The dispatcher's loop: deliver, claim when demand exceeds the buffer, sleep on ticks.
/// A claim runs alongside delivery: credits that come back while a claim is in the
/// database are served from the buffer at once, not after the claim's round trip.
async fn run(d: Arc<Dispatcher>, inner: Arc<Inner>) {
    let mut ticks = inner.engine.subscribe_ticks();
    let mut stopping = inner.stopping.clone();
    let mut buffer: VecDeque<Buffered> = VecDeque::new();
    let mut lease = lease_of(&inner, &d.queue).await;
    let mut lease_read = Instant::now();
    let mut rr = 0usize;
    let mut empty_since: Option<Instant> = None;
    let mut claiming: Option<Claim> = None;
    // The last claim came back empty: claim again only after something happened (a tick,
    // more credit, the idle poll), never in a loop.
    let mut dry = false;
    loop {
        if *stopping.borrow() {
            settle(&mut claiming, &mut buffer, lease).await;
            hand_back(&inner, &d, buffer.drain(..).collect()).await;
            return;
        }
        if lease_read.elapsed() > LEASE_REFRESH {
            lease = lease_of(&inner, &d.queue).await;
            lease_read = Instant::now();
        }
        let subs = d.subs.lock().expect("subscribers").clone();
        if subs.is_empty() {
            settle(&mut claiming, &mut buffer, lease).await;
            if !buffer.is_empty() {
                hand_back(&inner, &d, buffer.drain(..).collect()).await;
            }
            let since = *empty_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= IDLE_EXIT {
                let mut map = inner.map.lock().expect("dispatchers");
                if d.subs.lock().expect("subscribers").is_empty() {
                    if map.get(&d.queue).is_some_and(|x| Arc::ptr_eq(x, &d)) {
                        map.remove(&d.queue);
                    }
                    return;
                }
                continue;
            }
            tokio::select! {
                _ = d.wake.notified() => {}
                _ = tokio::time::sleep(IDLE_EXIT.saturating_sub(since.elapsed())) => {}
                _ = stopping.changed() => {}
            }
            continue;
        }
        empty_since = None;
        deliver(&inner, &d, &mut buffer, &subs, &mut rr, lease);
        refresh_leases(&inner, &d, &mut buffer, lease).await;
        let demand: u64 = subs.iter().map(|s| s.demand()).sum();
        let demand = usize::try_from(demand).unwrap_or(usize::MAX);
        let target = if demand > 0 {
            demand.saturating_add(inner.config.prefetch)
        } else {
            0
        };
        if claiming.is_none() && !dry && buffer.len() < target {
            let want = (target - buffer.len()).min(inner.config.max_claim);
            // Marks the current tick seen: an empty claim then sleeps until a newer one.
            ticks.borrow_and_update();
            claiming = Some(start_claim(&inner, &d, want));
        }
        dry = false;
        tokio::select! {
            Some((at, res)) = OptionFuture::from(claiming.as_mut()) => {
                claiming = None;
                match res {
                    Ok(jobs) if !jobs.is_empty() => buffer.extend(buffered(jobs, at, lease)),
                    Ok(_) => dry = true,
                    Err(e) => {
                        tracing::warn!(queue = %d.queue, error = %e, "claim failed; retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
            _ = ticks.changed() => {}
            _ = d.wake.notified() => {}
            _ = tokio::time::sleep(inner.config.idle_poll) => {}
            _ = stopping.changed() => {}
        }
    }
}

/// Hands buffered jobs to streams with credit, round-robin, in claim order. Each stream gets
/// what this pass picked for it in as few messages as its batching allows: whatever is
/// ready now, never held back to fill a batch.
fn deliver(
    inner: &Inner,
    d: &Dispatcher,
    buffer: &mut VecDeque<Buffered>,
    subs: &[Arc<StreamShared>],
    rr: &mut usize,
    lease: Duration,
) {
    let mut picked: Vec<Vec<Buffered>> = subs.iter().map(|_| Vec::new()).collect();
    let mut kept = VecDeque::new();
    while let Some(b) = buffer.pop_front() {
        if !subs.iter().any(|s| s.demand() > 0) {
            kept.push_back(b);
            break;
        }
        let target = (0..subs.len())
            .map(|k| (*rr + k) % subs.len())
            .find(|&i| subs[i].accepts(&b.job.kind) && subs[i].take_credit());
        match target {
            Some(i) => {
                *rr = (i + 1) % subs.len();
                picked[i].push(b);
            }
            None => kept.push_back(b),
        }
    }
    kept.extend(buffer.drain(..));
    *buffer = kept;
    for (s, jobs) in subs.iter().zip(picked) {
        if jobs.is_empty() {
            continue;
        }
        // A stream that went away meanwhile: its jobs go back to the front, in order.
        for b in send_jobs(inner, d, s, jobs, lease).into_iter().rev() {
            buffer.push_front(b);
        }
    }
}

/// Largest JobBatch in encoded bytes (a single bigger job still goes, alone): far below
/// the 4 MiB default receive limit of gRPC clients.
const JOB_BATCH_BYTES: usize = 1 << 20;

/// Sends jobs on a stream (one message each, or JobBatch messages when the stream
/// negotiated batches); returns those that could not be sent because the stream is gone.
fn send_jobs(
    inner: &Inner,
    d: &Dispatcher,
    s: &StreamShared,
    jobs: Vec<Buffered>,
    lease: Duration,
) -> Vec<Buffered> {
    use pb::worker_response::Msg;
    let mut msgs = Vec::with_capacity(jobs.len());
    {
        let mut held = s.held.lock().expect("held");
        for b in &jobs {
            let attempt = Attempt::from_claimed(d.tenant_id, &d.user_queue, &b.job);
            let token = inner.tokens.sign(&attempt);
            msgs.push(job_message(
                &b.job,
                &d.user_queue,
                token.clone(),
                b.lease_until,
            ));
            held.insert(
                b.job.job_id,
                Held {
                    attempt,
                    backoff: b.job.backoff,
                    lease,
                    token,
                },
            );
        }
    }
    let send = |msg: Msg| s.tx.send(Ok(pb::WorkerResponse { msg: Some(msg) })).is_ok();
    // Jobs [0, sent) are on their way; the rest go back to the buffer.
    let mut sent = 0;
    if s.batch == 0 {
        for m in msgs {
            if !send(Msg::Job(m)) {
                break;
            }
            sent += 1;
        }
    } else {
        let mut chunk: Vec<pb::Job> = Vec::new();
        let mut bytes = 0;
        let mut msgs = msgs.into_iter().peekable();
        while let Some(m) = msgs.next() {
            bytes += prost::Message::encoded_len(&m);
            chunk.push(m);
            let full = chunk.len() >= s.batch
                || msgs
                    .peek()
                    .is_some_and(|n| bytes + prost::Message::encoded_len(n) > JOB_BATCH_BYTES);
            if full || msgs.peek().is_none() {
                let n = chunk.len();
                if !send(Msg::Jobs(pb::JobBatch {
                    jobs: std::mem::take(&mut chunk),
                })) {
                    break;
                }
                sent += n;
                bytes = 0;
            }
        }
    }
    if sent == jobs.len() {
        return Vec::new();
    }
    let failed: Vec<Buffered> = jobs.into_iter().skip(sent).collect();
    let mut held = s.held.lock().expect("held");
    for b in &failed {
        held.remove(&b.job.job_id);
    }
    failed
}

/// Extends the lease of buffered jobs past half their lease (a slow consumer is holding the
/// dispatcher's prefetch); drops those the engine says are no longer ours.
async fn refresh_leases(
    inner: &Inner,
    d: &Dispatcher,
    buffer: &mut VecDeque<Buffered>,
    lease: Duration,
) {
    let soon = SystemTime::now() + lease / 2;
    if !buffer.iter().any(|b| b.lease_until < soon) {
        return;
    }
    let refs: Vec<AttemptRef> = buffer.iter().map(|b| AttemptRef::from(&b.job)).collect();
    match inner.engine.heartbeat(&refs, lease, &inner.worker).await {
        Ok(beats) => {
            let mut cancelled = Vec::new();
            let mut kept = VecDeque::with_capacity(buffer.len());
            for (b, beat) in buffer.drain(..).zip(beats) {
                if !beat.held {
                    continue;
                }
                if beat.cancelled {
                    cancelled.push(b.job.cancelled("cancelled before delivery"));
                    continue;
                }
                kept.push_back(Buffered {
                    lease_until: beat.lease_until,
                    ..b
                });
            }
            *buffer = kept;
            if !cancelled.is_empty() {
                if let Err(e) = inner.coalescers.complete(cancelled).await {
                    tracing::warn!(queue = %d.queue, error = %e, "closing cancelled jobs failed");
                }
            }
        }
        Err(e) => tracing::warn!(queue = %d.queue, error = %e, "heartbeat of buffered jobs failed"),
    }
}

/// Puts claimed-but-undelivered jobs back into the log now (zero-delay snooze: the attempt
/// is not used up). If that fails they come back when the rescuer sees their lease lapse.
async fn hand_back(inner: &Inner, d: &Dispatcher, jobs: Vec<Buffered>) {
    if jobs.is_empty() {
        return;
    }
    let outcomes: Vec<Outcome> = jobs.iter().map(|b| b.job.release()).collect();
    let n = outcomes.len();
    match inner.coalescers.complete(outcomes).await {
        Ok(_) => tracing::debug!(queue = %d.queue, jobs = n, "handed back undelivered jobs"),
        Err(e) => tracing::warn!(
            queue = %d.queue, jobs = n, error = %e,
            "hand-back failed; the jobs return when their lease lapses"
        ),
    }
}
