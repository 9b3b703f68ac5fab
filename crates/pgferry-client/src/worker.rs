//! The worker: slots granted as credits, a handler per job, results, heartbeats, cancels,
//! drain, and reconnection.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, watch, Notify};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

use crate::proto::v1 as pb;
use crate::{channel, Error, Result};
use pb::worker_request::Msg;
use pb::worker_response::Msg as In;

/// How a handler finished.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Success, optionally with a JSON result to keep.
    Ok(Option<String>),
    /// Failure: retried (after `retry_delay`, or the queue's backoff) while attempts remain
    /// and `retryable`, else dead-lettered.
    Fail {
        message: String,
        retryable: bool,
        retry_delay: Option<Duration>,
    },
    /// Run again after the delay without using up an attempt.
    Snooze(Duration),
    /// Stopped because the job was cancelled.
    Cancelled(String),
}

/// One job handed to the handler.
#[derive(Debug, Clone)]
pub struct JobCtx {
    pub id: i64,
    pub attempt: i32,
    pub queue: String,
    pub kind: String,
    /// JSON text.
    pub args: String,
    pub meta: HashMap<String, String>,
    pub max_attempts: i32,
    pub enqueued_at: SystemTime,
    cancel: watch::Receiver<bool>,
}

impl JobCtx {
    /// Resolves when the server asks to stop this job (cancelled, or its lease was lost).
    pub async fn cancelled(&self) {
        let mut rx = self.cancel.clone();
        let _ = rx.wait_for(|c| *c).await;
    }

    pub fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    pub fn args_json(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::from_str(&self.args)
    }
}

/// A job handler. Any `Fn(JobCtx) -> impl Future<Output = Outcome>` is one.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, job: JobCtx) -> Pin<Box<dyn Future<Output = Outcome> + Send>>;
}

impl<F, Fut> Handler for F
where
    F: Fn(JobCtx) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    fn handle(&self, job: JobCtx) -> Pin<Box<dyn Future<Output = Outcome> + Send>> {
        Box::pin(self(job))
    }
}

/// A server's answer to one result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub id: i64,
    pub attempt: i32,
    /// Another outcome of this attempt was recorded first (lease expiry, cancel).
    pub stale: bool,
    /// When the job was enqueued (for latency measurements).
    pub enqueued_at: SystemTime,
}

#[derive(Clone)]
pub struct WorkerOptions {
    pub url: String,
    pub api_key: String,
    pub worker_id: String,
    pub queues: Vec<String>,
    /// Empty: every kind.
    pub kinds: Vec<String>,
    /// Jobs run at once (credits granted).
    pub slots: usize,
    /// Reconnect backoff: first and longest pause.
    pub reconnect_min: Duration,
    pub reconnect_max: Duration,
    /// Every acked result is also sent here (tests, benchmarks).
    pub acks: Option<mpsc::UnboundedSender<Ack>>,
    /// Ask the server for batches (JobBatch, ResultBatch, ResultAckBatch) of up to this
    /// many items; 0 keeps one message per job, result and ack (what older servers get
    /// anyway).
    pub max_batch: u32,
    /// Open this worker's streams on a shared connection instead of one of its own (many
    /// workers of few slots in one process).
    pub connection: Option<crate::Connection>,
}

impl WorkerOptions {
    pub fn new(url: &str, api_key: &str, queues: &[&str], slots: usize) -> WorkerOptions {
        WorkerOptions {
            url: url.to_string(),
            api_key: api_key.to_string(),
            worker_id: format!("rust-worker@{}", std::process::id()),
            queues: queues.iter().map(|q| q.to_string()).collect(),
            kinds: Vec::new(),
            slots: slots.max(1),
            reconnect_min: Duration::from_millis(50),
            reconnect_max: Duration::from_secs(2),
            acks: None,
            max_batch: 256,
            connection: None,
        }
    }
}

/// Counters of a worker.
#[derive(Debug, Default)]
pub struct WorkerStats {
    pub received: AtomicU64,
    /// Results acknowledged as recorded.
    pub acked: AtomicU64,
    pub stale: AtomicU64,
    pub result_errors: AtomicU64,
    /// Results the server could not record for now (its database was unavailable), sent
    /// again after a pause: counted per refusal.
    pub results_resent: AtomicU64,
    pub connects: AtomicU64,
}

/// Slots and the connection results go to, under one lock so credits stay exact across
/// reconnects: a new connection is granted exactly the slots free at that moment.
struct Slots {
    running: usize,
    /// Slots freed but not yet granted (credits go out in bunches: fewer messages).
    owed: u32,
    tx: Option<mpsc::UnboundedSender<pb::WorkerRequest>>,
    /// Items per batch granted on this connection; 0: single messages.
    batch: usize,
    /// Results for the next ResultBatch (batching connections only).
    pending: Vec<pb::JobResult>,
}

impl Slots {
    /// Sends the pending results with every owed credit, in as few ResultBatch messages
    /// as the batch size allows.
    fn flush_results(&mut self) {
        let Some(tx) = &self.tx else { return };
        let mut results = std::mem::take(&mut self.pending).into_iter().peekable();
        while results.peek().is_some() {
            let chunk: Vec<_> = results.by_ref().take(self.batch.max(1)).collect();
            let credit = std::mem::take(&mut self.owed);
            let _ = tx.send(req(Msg::Results(pb::ResultBatch {
                results: chunk,
                credit,
            })));
        }
    }

    fn flush_credits(&mut self) {
        if self.owed > 0 {
            if let Some(tx) = &self.tx {
                let _ = tx.send(req(Msg::Credit(pb::Credit { n: self.owed })));
            }
            self.owed = 0;
        }
    }
}

struct Running {
    ctx_cancel: watch::Sender<bool>,
    aref: pb::AttemptRef,
    enqueued_at: SystemTime,
}

struct Shared {
    opts: WorkerOptions,
    handler: Arc<dyn Handler>,
    stats: Arc<WorkerStats>,
    slots: Mutex<Slots>,
    running: Mutex<HashMap<i64, Running>>,
    /// Results sent and not yet acked, by (id, attempt): resent on a new connection.
    unacked: Mutex<HashMap<(i64, i32), (pb::JobResult, SystemTime)>>,
    /// Wakes the connection to send pending results (batching connections).
    results_ready: Notify,
    /// Results refused as unavailable, to send again.
    refused: Mutex<Refused>,
}

/// First and longest pause before results refused as unavailable are sent again: the
/// server's database lost a connection (a blip) or is down (then the pause grows).
const RESEND_MIN: Duration = Duration::from_millis(100);
const RESEND_MAX: Duration = Duration::from_secs(5);

/// Results the server refused with a retryable code. They stay in `unacked` (a new
/// connection resends them anyway) and go out again at `at`. Without this a result lost to
/// a database blip left its job running until the lease ran out, then ran it again.
struct Refused {
    keys: Vec<(i64, i32)>,
    at: Option<Instant>,
    pause: Duration,
}

/// A worker; [`Worker::run`] runs it until a shutdown signal, then drains.
pub struct Worker {
    shared: Arc<Shared>,
}

fn req(msg: Msg) -> pb::WorkerRequest {
    pb::WorkerRequest { msg: Some(msg) }
}

impl Worker {
    pub fn new(opts: WorkerOptions, handler: impl Handler) -> Worker {
        Worker {
            shared: Arc::new(Shared {
                opts,
                handler: Arc::new(handler),
                stats: Arc::default(),
                slots: Mutex::new(Slots {
                    running: 0,
                    owed: 0,
                    tx: None,
                    batch: 0,
                    pending: Vec::new(),
                }),
                running: Mutex::new(HashMap::new()),
                unacked: Mutex::new(HashMap::new()),
                results_ready: Notify::new(),
                refused: Mutex::new(Refused {
                    keys: Vec::new(),
                    at: None,
                    pause: RESEND_MIN,
                }),
            }),
        }
    }

    pub fn stats(&self) -> Arc<WorkerStats> {
        self.shared.stats.clone()
    }

    /// Works until `shutdown` resolves, reconnecting whenever the stream breaks. On
    /// shutdown: Drain, wait (up to `grace`) for running handlers and their acks, return.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send,
        grace: Duration,
    ) -> Result<Arc<WorkerStats>> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let shared = self.shared.clone();
        let work = tokio::spawn(connect_loop(shared.clone(), stop_rx));
        shutdown.await;
        let _ = stop_tx.send(true);
        let res = tokio::time::timeout(grace, work).await;
        if res.is_err() {
            tracing::warn!("worker did not drain within its grace period");
        }
        Ok(shared.stats.clone())
    }
}

async fn connect_loop(s: Arc<Shared>, mut stop: watch::Receiver<bool>) -> Result<()> {
    let mut pause = s.opts.reconnect_min;
    loop {
        match session(&s, &mut stop).await {
            Ok(()) => return Ok(()),
            Err(e @ Error::Refused(_)) if s.stats.connects.load(Ordering::Relaxed) == 0 => {
                // A bad key or queue on the very first connect: nothing to retry.
                if let Error::Refused(st) = &e {
                    if matches!(
                        st.code(),
                        tonic::Code::Unauthenticated
                            | tonic::Code::PermissionDenied
                            | tonic::Code::InvalidArgument
                    ) {
                        return Err(e);
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "worker stream ended; reconnecting"),
        }
        s.slots.lock().expect("slots").tx = None;
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.wait_for(|v| *v) => {
                return Ok(());
            }
        }
        pause = (pause * 2).min(s.opts.reconnect_max);
    }
}

/// One connection: Ok(()) after a clean drain, Err when the stream broke.
async fn session(s: &Arc<Shared>, stop: &mut watch::Receiver<bool>) -> Result<()> {
    let channel = match &s.opts.connection {
        Some(c) => c.channel.clone(),
        None => channel(&s.opts.url).await?,
    };
    let mut client =
        pb::worker_client::WorkerClient::new(channel).max_decoding_message_size(64 << 20);
    let (tx, rx) = mpsc::unbounded_channel();
    let hello = pb::WorkerHello {
        api_key: s.opts.api_key.clone(),
        worker_id: s.opts.worker_id.clone(),
        queues: s.opts.queues.clone(),
        kinds: s.opts.kinds.clone(),
        max_batch: s.opts.max_batch,
    };
    tx.send(req(Msg::Hello(hello)))
        .map_err(|_| Error::Disconnected)?;
    let mut inbound = client
        .stream(UnboundedReceiverStream::new(rx))
        .await
        .map_err(Error::Refused)?
        .into_inner();
    let (lease, batch) = match inbound.next().await {
        Some(Ok(pb::WorkerResponse {
            msg: Some(In::HelloAck(a)),
        })) => (
            Duration::from_millis(a.default_lease_ms.max(300)),
            // Never more than asked for, whatever the server says.
            a.max_batch.min(s.opts.max_batch) as usize,
        ),
        Some(Err(st)) => return Err(Error::Refused(st)),
        _ => return Err(Error::Disconnected),
    };
    s.stats.connects.fetch_add(1, Ordering::Relaxed);
    {
        // Under the slots lock (which `finish` holds while recording a result), so every
        // result is sent exactly once per connection.
        let mut slots = s.slots.lock().expect("slots");
        slots.tx = Some(tx.clone());
        slots.batch = batch;
        // The grant below covers every free slot.
        slots.owed = 0;
        // Results finished while disconnected (or unacked on the old stream) go first;
        // pending and refused ones are among them.
        slots.pending.clear();
        {
            let mut refused = s.refused.lock().expect("refused");
            refused.keys.clear();
            refused.at = None;
        }
        let resend: Vec<pb::JobResult> = s
            .unacked
            .lock()
            .expect("unacked")
            .values()
            .map(|(r, _)| r.clone())
            .collect();
        if batch > 0 {
            slots.pending = resend;
            slots.flush_results();
        } else {
            for r in resend {
                let _ = tx.send(req(Msg::Result(r)));
            }
        }
        let free = s.opts.slots.saturating_sub(slots.running);
        if free > 0 {
            let _ = tx.send(req(Msg::Credit(pb::Credit { n: free as u32 })));
        }
    }
    let mut beat = tokio::time::interval(lease / 3);
    beat.tick().await;
    // Credits owed below the bunch size go out at least this often.
    let mut credit_flush = tokio::time::interval(Duration::from_millis(2));
    credit_flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut draining = false;
    let mut drained = false;
    loop {
        let resend_at = s.refused.lock().expect("refused").at;
        tokio::select! {
            m = inbound.next() => match m {
                Some(Ok(pb::WorkerResponse { msg: Some(msg) })) => {
                    drained |= matches!(msg, In::Drained(_));
                    handle(s, msg);
                    // Done once drained, nothing runs and every result is acked.
                    if drained
                        && s.slots.lock().expect("slots").running == 0
                        && s.unacked.lock().expect("unacked").is_empty()
                    {
                        return Ok(());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(st)) => return Err(Error::Refused(st)),
                None => return Err(Error::Disconnected),
            },
            // (Batching connections return credits with their results.)
            _ = credit_flush.tick(), if batch == 0 => {
                s.slots.lock().expect("slots").flush_credits();
            }
            // Every result finished since the last flush, in one message: under load many
            // handlers finish between two polls of this task.
            _ = s.results_ready.notified() => s.slots.lock().expect("slots").flush_results(),
            _ = beat.tick() => {
                let refs: Vec<pb::AttemptRef> = s
                    .running
                    .lock()
                    .expect("running")
                    .values()
                    .map(|r| r.aref.clone())
                    .collect();
                if !refs.is_empty() {
                    let _ = tx.send(req(Msg::Heartbeat(pb::Heartbeat { refs })));
                }
            }
            _ = tokio::time::sleep_until(resend_at.unwrap_or_else(Instant::now).into()),
                if resend_at.is_some() => resend_refused(s),
            _ = stop.wait_for(|v| *v), if !draining => {
                draining = true;
                let _ = tx.send(req(Msg::Drain(pb::Drain { release: Vec::new() })));
            }
        }
    }
}

/// Handles one server message.
fn handle(s: &Arc<Shared>, msg: In) {
    match msg {
        In::Job(job) => start(s, job),
        In::Jobs(b) => b.jobs.into_iter().for_each(|job| start(s, job)),
        In::ResultAck(a) => on_ack(s, a),
        In::ResultAcks(b) => b.acks.into_iter().for_each(|a| on_ack(s, a)),
        In::Cancel(c) => {
            if let Some(r) = c.r#ref {
                if let Some(run) = s.running.lock().expect("running").get(&r.id) {
                    let _ = run.ctx_cancel.send(true);
                }
            }
        }
        In::HeartbeatAck(h) => {
            let running = s.running.lock().expect("running");
            for r in h.lost {
                if let Some(run) = running.get(&r.id) {
                    let _ = run.ctx_cancel.send(true);
                }
            }
        }
        In::Drained(_) | In::HelloAck(_) => {}
    }
}

fn on_ack(s: &Shared, a: pb::ResultAck) {
    let Some(r) = a.r#ref else { return };
    let key = (r.id, r.attempt);
    if let Some(e) = &a.error {
        if e.code == "unavailable" {
            // Not recorded, and nothing else recorded either: send it again shortly.
            if s.unacked.lock().expect("unacked").contains_key(&key) {
                s.stats.results_resent.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(id = r.id, message = %e.message, "result not recorded yet; resending");
                let mut refused = s.refused.lock().expect("refused");
                if !refused.keys.contains(&key) {
                    refused.keys.push(key);
                }
                if refused.at.is_none() {
                    refused.at = Some(Instant::now() + refused.pause);
                    refused.pause = (refused.pause * 2).min(RESEND_MAX);
                }
            }
            return;
        }
    }
    let sent = s.unacked.lock().expect("unacked").remove(&key);
    if let Some(e) = a.error {
        s.stats.result_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(id = r.id, code = %e.code, message = %e.message, "result refused");
        return;
    }
    s.refused.lock().expect("refused").pause = RESEND_MIN;
    if a.stale {
        s.stats.stale.fetch_add(1, Ordering::Relaxed);
    } else {
        s.stats.acked.fetch_add(1, Ordering::Relaxed);
    }
    if let (Some(acks), Some((_, enqueued_at))) = (&s.opts.acks, sent) {
        let _ = acks.send(Ack {
            id: r.id,
            attempt: r.attempt,
            stale: a.stale,
            enqueued_at,
        });
    }
}

/// Sends the refused results again (those still unacked), on the current connection.
fn resend_refused(s: &Shared) {
    let keys = {
        let mut refused = s.refused.lock().expect("refused");
        refused.at = None;
        std::mem::take(&mut refused.keys)
    };
    let results: Vec<pb::JobResult> = {
        let unacked = s.unacked.lock().expect("unacked");
        keys.iter()
            .filter_map(|k| unacked.get(k).map(|(r, _)| r.clone()))
            .collect()
    };
    let mut slots = s.slots.lock().expect("slots");
    if slots.batch > 0 {
        slots.pending.extend(results);
        slots.flush_results();
    } else if let Some(tx) = &slots.tx {
        for r in results {
            let _ = tx.send(req(Msg::Result(r)));
        }
    }
}

fn start(s: &Arc<Shared>, job: pb::Job) {
    let Some(aref) = job.r#ref.clone() else {
        return;
    };
    s.stats.received.fetch_add(1, Ordering::Relaxed);
    s.slots.lock().expect("slots").running += 1;
    let (cancel_tx, cancel_rx) = watch::channel(false);
    // Microseconds where the server sends them (the milliseconds drop the fraction).
    let enqueued_at = match job.enqueued_at_unix_us {
        us if us > 0 => UNIX_EPOCH + Duration::from_micros(us as u64),
        _ => UNIX_EPOCH + Duration::from_millis(job.enqueued_at_unix_ms.max(0) as u64),
    };
    s.running.lock().expect("running").insert(
        aref.id,
        Running {
            ctx_cancel: cancel_tx,
            aref: aref.clone(),
            enqueued_at,
        },
    );
    let ctx = JobCtx {
        id: aref.id,
        attempt: aref.attempt,
        queue: job.queue,
        kind: job.kind,
        args: job.args,
        meta: job.meta,
        max_attempts: job.max_attempts,
        enqueued_at,
        cancel: cancel_rx,
    };
    let s = s.clone();
    tokio::spawn(async move {
        let started = std::time::Instant::now();
        let outcome = s.handler.handle(ctx).await;
        finish(&s, aref, outcome, started.elapsed());
    });
}

/// Sends the result (now, or on the next connection) and frees the slot: one credit back.
fn finish(s: &Shared, aref: pb::AttemptRef, outcome: Outcome, took: Duration) {
    use pb::job_result::Outcome as O;
    let outcome = match outcome {
        Outcome::Ok(result) => O::Ok(pb::Success {
            result: result.unwrap_or_default(),
        }),
        Outcome::Fail {
            message,
            retryable,
            retry_delay,
        } => O::Error(pb::Failure {
            message,
            kind: String::new(),
            retryable,
            retry_delay_ms: retry_delay.map(|d| d.as_millis() as u64),
        }),
        Outcome::Snooze(d) => O::Snooze(pb::Snooze {
            delay_ms: d.as_millis() as u64,
        }),
        Outcome::Cancelled(message) => O::Cancelled(pb::Cancelled { message }),
    };
    let key = (aref.id, aref.attempt);
    let enqueued_at = s
        .running
        .lock()
        .expect("running")
        .remove(&aref.id)
        .map_or(UNIX_EPOCH, |r| r.enqueued_at);
    let result = pb::JobResult {
        r#ref: Some(aref),
        outcome: Some(outcome),
        duration_ms: took.as_millis().min(u128::from(u32::MAX)) as u32,
    };
    let mut slots = s.slots.lock().expect("slots");
    s.unacked
        .lock()
        .expect("unacked")
        .insert(key, (result.clone(), enqueued_at));
    slots.running -= 1;
    slots.owed += 1;
    let Some(tx) = &slots.tx else { return };
    if slots.batch > 0 {
        // The connection sends it with the freed slot's credit (ResultBatch).
        slots.pending.push(result);
        if slots.pending.len() == 1 {
            s.results_ready.notify_one();
        }
        return;
    }
    let _ = tx.send(req(Msg::Result(result)));
    if slots.owed as usize >= (s.opts.slots / 8).max(1) {
        slots.flush_credits();
    }
}
