//! Dispatchers: one per queue per server, shared by every worker stream subscribed to it.
//!
//! A dispatcher claims in batches ahead of demand (the credits of its streams plus
//! `prefetch`), up to `claim_concurrency` claims at once, and keeps what it claimed in a
//! buffer. Jobs leave the buffer one credit each — a stream never receives more jobs than
//! it granted credits: round-robin by the dispatcher task when a claim lands, and by a
//! stream's own task when it grants credits (so a returning credit is served without a
//! hop through the dispatcher task, and signing tokens and building messages is spread over
//! the stream tasks). When nothing is claimable it sleeps on the engine's tick watch, so a
//! job enqueued anywhere reaches an idle worker within a tick (milliseconds), however long
//! the worker was idle.
//!
//! Jobs claimed but not delivered are never left to rot: buffered jobs whose lease runs
//! low are heartbeated, and when the last stream leaves (or the server stops) the buffer is
//! handed back at once — completed as a zero-delay snooze, which puts the job straight back
//! into the log without using up an attempt. (A process killed outright loses the buffer
//! only until the rescuer retries it after its lease.)

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use pgferry_core::{Backoff, ClaimedJob, Engine};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;
use tonic::Status;

use super::GrpcConfig;
use crate::auth::token::{Attempt, TokenKey};
use crate::coalesce::{Coalescers, ReceiptBook};
use crate::metrics::Metrics;
use crate::proto::v1 as pb;

mod claims;
mod deliver;
mod leases;

use claims::{buffered, Claims, Yields};

const QUEUE_LEASE: &str = include_str!("../sql/queue_lease.sql");
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
    /// Claimed, not yet delivered, in claim order. Taken by the dispatcher task and by
    /// stream tasks; every job in it is this dispatcher's to deliver or hand back.
    buffer: Mutex<VecDeque<Buffered>>,
    /// The queue's lease as last read (milliseconds).
    lease_ms: AtomicU64,
    tokens: Arc<TokenKey>,
}

impl Dispatcher {
    fn buffer_lock(&self) -> MutexGuard<'_, VecDeque<Buffered>> {
        self.buffer.lock().expect("dispatch buffer")
    }

    fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms.load(Ordering::Relaxed))
    }
}

/// Keeps a stream subscribed to one dispatcher; dropping it unsubscribes.
pub(crate) struct Subscription {
    dispatcher: Arc<Dispatcher>,
    stream: Arc<StreamShared>,
}

impl Subscription {
    /// Tells the dispatcher that demand changed (drain).
    pub fn wake(&self) {
        self.dispatcher.wake.notify_one();
    }

    /// After credits were granted: takes what the buffer holds for this stream now, and
    /// wakes the dispatcher to claim for the rest (and to refill the buffer).
    pub fn serve(&self) {
        deliver::serve(&self.dispatcher, &self.stream);
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
    /// Claim latencies and counts.
    metrics: Arc<Metrics>,
    /// Where each claim's receipt is registered (the completion writers' claim-order hint).
    receipts: Arc<ReceiptBook>,
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
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        engine: Arc<Engine>,
        coalescers: Arc<Coalescers>,
        metrics: Arc<Metrics>,
        receipts: Arc<ReceiptBook>,
        tokens: Arc<TokenKey>,
        config: GrpcConfig,
        stopping: watch::Receiver<bool>,
    ) -> Registry {
        Registry {
            inner: Arc::new(Inner {
                engine,
                coalescers,
                metrics,
                receipts,
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
                    buffer: Mutex::new(VecDeque::new()),
                    lease_ms: AtomicU64::new(deliver::lease_ms(self.inner.config.default_lease)),
                    tokens: self.inner.tokens.clone(),
                });
                // Every line the dispatcher logs names its role, tenant and queue (issue 27).
                let span = tracing::info_span!(
                    "claimer",
                    role = "claimer",
                    tenant = %d.tenant,
                    queue = %d.user_queue
                );
                let task = tokio::spawn(tracing::Instrument::instrument(
                    run(d.clone(), self.inner.clone()),
                    span,
                ));
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

    /// The lease of a queue (the engine's default when it does not exist yet); an error
    /// when the database could not say.
    pub(crate) async fn lease_of(&self, engine_queue: &str) -> pgferry_core::Result<Duration> {
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

/// The queue's lease, or the default for a queue that does not exist yet. A database error
/// is an error, never the default: a dispatcher that took the default (60 s) for a queue of
/// 3 s heartbeated its buffered jobs 60 s ahead, and a result refused in a fault then left
/// its job running for a minute instead of three seconds (the chaos suite's terminate-2).
async fn lease_of(inner: &Inner, queue: &str) -> pgferry_core::Result<Duration> {
    let client = inner.engine.pool().get().await?;
    let row = client.query_opt(QUEUE_LEASE, &[&queue]).await?;
    Ok(row
        .and_then(|r| u64::try_from(r.get::<_, i32>("lease_ms")).ok())
        .map_or(inner.config.default_lease, Duration::from_millis))
}

/// The dispatcher's first read of its queue's lease, retried until it answers (nothing is
/// claimed before: every lease the dispatcher reports or extends is this one). `None`
/// when the server stops meanwhile.
async fn first_lease(inner: &Inner, d: &Dispatcher) -> Option<Duration> {
    let mut stopping = inner.stopping.clone();
    loop {
        match lease_of(inner, &d.queue).await {
            Ok(lease) => return Some(lease),
            Err(e) => {
                tracing::warn!(queue = %d.queue, error = %e, "reading the queue's lease failed; retrying")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = stopping.wait_for(|s| *s) => return None,
        }
    }
}

/// The dispatcher's loop: deliver, claim when demand exceeds the buffer, sleep on ticks.
/// Claims run alongside delivery (up to `claim_concurrency` at once): credits that come
/// back while a claim is in the database are served from the buffer at once, not after the
/// claim's round trip.
async fn run(d: Arc<Dispatcher>, inner: Arc<Inner>) {
    tracing::debug!("dispatcher started");
    let mut ticks = inner.engine.signals().subscribe_ticks();
    let mut stopping = inner.stopping.clone();
    let Some(mut lease) = first_lease(&inner, &d).await else {
        return;
    };
    d.lease_ms
        .store(deliver::lease_ms(lease), Ordering::Relaxed);
    let mut lease_read = Instant::now();
    let mut rr = 0usize;
    let mut empty_since: Option<Instant> = None;
    let mut claims = Claims::default();
    let max_parallel = inner.config.claim_concurrency.max(1);
    let mut yields = Yields::new();
    // A claim came back empty: claim again only after something happened (a tick, more
    // credit, the idle poll, another claim's answer), never in a loop.
    let mut dry = false;
    loop {
        if *stopping.borrow() {
            claims.settle(&d, lease).await;
            leases::hand_back(&inner, &d).await;
            return;
        }
        if lease_read.elapsed() > LEASE_REFRESH {
            // A failed read keeps the lease as last read (tried again next refresh).
            match lease_of(&inner, &d.queue).await {
                Ok(l) => {
                    lease = l;
                    d.lease_ms.store(deliver::lease_ms(l), Ordering::Relaxed);
                }
                Err(e) => {
                    tracing::warn!(queue = %d.queue, error = %e, "re-reading the queue's lease failed")
                }
            }
            lease_read = Instant::now();
        }
        let subs = d.subs.lock().expect("subscribers").clone();
        if subs.is_empty() {
            claims.settle(&d, lease).await;
            leases::hand_back(&inner, &d).await;
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
        deliver::deliver(&d, &subs, &mut rr);
        leases::refresh_leases(&inner, &d, lease).await;
        let demand: u64 = subs.iter().map(|s| s.demand()).sum();
        let demand = usize::try_from(demand).unwrap_or(usize::MAX);
        let target = if demand > 0 {
            demand.saturating_add(inner.config.prefetch)
        } else {
            0
        };
        // What is missing is split over the free claim slots, so that claims run side by
        // side instead of one big one after another.
        let buffered_now = d.buffer_lock().len();
        let mut missing = target.saturating_sub(buffered_now + claims.wanted);
        // One claim while claims find a job or less each (claims.rs, `Yields`).
        let parallel = yields.parallel(max_parallel);
        let free = parallel.saturating_sub(claims.len());
        if !dry && missing > 0 && free > 0 {
            // Marks the current tick seen: an empty claim then sleeps until a newer one.
            ticks.borrow_and_update();
            let each = missing.div_ceil(free).min(inner.config.max_claim);
            while missing > 0 && claims.len() < parallel {
                let want = each.min(missing);
                missing -= want;
                claims.start(&inner, &d, want);
            }
        }
        // After an empty claim this dispatcher waits for a tick: the ticker ticks on demand
        // while it does (signals.rs).
        let _waiting = dry.then(|| inner.engine.signals().waiting_for_tick());
        dry = false;
        tokio::select! {
            (at, res) = claims.next() => {
                if let Ok(jobs) = &res {
                    yields.record(jobs.len());
                }
                match res {
                    Ok(jobs) if !jobs.is_empty() => {
                        d.buffer_lock().extend(buffered(jobs, at, lease));
                    }
                    // (Another claim still running may hold the lanes this one found busy:
                    // its answer brings the next try.)
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
