//! The Worker stream: hello, credits, jobs, results (acked after COMMIT, coalesced across
//! streams), heartbeats, server-pushed cancels, drain.

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{FutureExt, Stream};
use pgferry_core::{AttemptRef, Backoff, Outcome, OutcomeKind, Report};
use tokio::sync::{mpsc, Semaphore};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::convert::{parse_json, unix_ms};
use super::dispatch::{Held, StreamShared, Subscription, Tx};
use super::{engine_error, pb_error, GrpcState};
use crate::auth::token::Attempt;
use crate::auth::{Principal, Scope};
use crate::proto::v1 as pb;
use pb::worker_request::Msg;
use pb::worker_response::Msg as Out;

pub(crate) struct WorkerService {
    pub state: Arc<GrpcState>,
}

#[tonic::async_trait]
impl pb::worker_server::Worker for WorkerService {
    type StreamStream = Pin<Box<dyn Stream<Item = Result<pb::WorkerResponse, Status>> + Send>>;

    async fn stream(
        &self,
        request: Request<Streaming<pb::WorkerRequest>>,
    ) -> Result<Response<Self::StreamStream>, Status> {
        let inbound = request.into_inner();
        let (tx, rx) = mpsc::unbounded_channel();
        super::spawn_stream(run(self.state.clone(), inbound, tx.clone()), tx);
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }
}

// The stream's item type is fixed by tonic: Result<_, Status>.
#[allow(clippy::result_large_err)]
fn out(msg: Out) -> Result<pb::WorkerResponse, Status> {
    Ok(pb::WorkerResponse { msg: Some(msg) })
}

/// One open worker stream.
struct Session {
    state: Arc<GrpcState>,
    principal: Principal,
    worker_id: String,
    shared: Arc<StreamShared>,
    default_lease: Duration,
}

async fn run(state: Arc<GrpcState>, mut inbound: Streaming<pb::WorkerRequest>, tx: Tx) {
    let hello = match inbound.next().await {
        Some(Ok(pb::WorkerRequest {
            msg: Some(Msg::Hello(h)),
        })) => h,
        Some(Ok(_)) => {
            let _ = tx.send(Err(Status::unauthenticated(
                "the first message of a stream must be hello",
            )));
            return;
        }
        Some(Err(s)) => {
            // A hello that does not decode is answered (INVALID_ARGUMENT).
            let _ = tx.send(Err(s));
            return;
        }
        None => return,
    };
    let principal = match state.hello(&hello.api_key, Scope::Consume).await {
        Ok(p) => p,
        Err(s) => {
            let _ = tx.send(Err(s));
            return;
        }
    };
    if hello.queues.is_empty() {
        let _ = tx.send(Err(Status::invalid_argument(
            "queues: name at least one queue",
        )));
        return;
    }
    let mut queues = Vec::new();
    for (i, q) in hello.queues.iter().enumerate() {
        match principal.queue(q) {
            Ok(engine_q) => queues.push((engine_q, q.clone())),
            Err(e) => {
                let _ = tx.send(Err(Status::invalid_argument(format!("queues[{i}]: {e}"))));
                return;
            }
        }
    }
    queues.sort();
    queues.dedup();
    let mut default_lease = state.config.default_lease;
    for (engine_q, _) in &queues {
        match state.dispatchers.lease_of(engine_q).await {
            Ok(lease) => default_lease = default_lease.min(lease),
            // The worker paces its heartbeats by this lease: a guess could be 20× too long.
            // It reconnects after UNAVAILABLE.
            Err(e) => {
                let _ = tx.send(Err(super::admin_pb::status(&e, "")));
                return;
            }
        }
    }
    // Batches only when the worker asked: older workers know nothing of them.
    let batch = if hello.max_batch > 0 {
        hello.max_batch.min(state.config.max_worker_batch)
    } else {
        0
    };
    let shared = Arc::new(StreamShared {
        tenant_id: principal.tenant_id,
        tenant: principal.tenant.clone(),
        credits: AtomicU64::new(0),
        draining: AtomicBool::new(false),
        batch: batch as usize,
        kinds: hello.kinds.iter().cloned().collect::<HashSet<_>>(),
        tx: tx.clone(),
        held: Mutex::new(HashMap::new()),
    });
    let ack = pb::WorkerHelloAck {
        tenant: principal.tenant.clone(),
        server_version: env!("CARGO_PKG_VERSION").to_string(),
        default_lease_ms: default_lease.as_millis() as u64,
        max_batch: batch,
    };
    if tx.send(out(Out::HelloAck(ack))).is_err() {
        return;
    }
    let worker_id = if hello.worker_id.is_empty() {
        "grpc-worker".to_string()
    } else {
        hello.worker_id.chars().take(200).collect()
    };
    let session = Arc::new(Session {
        state: state.clone(),
        principal,
        worker_id,
        shared: shared.clone(),
        default_lease,
    });
    let subs: Vec<Subscription> = queues
        .iter()
        .map(|(engine_q, user_q)| {
            state
                .dispatchers
                .subscribe(engine_q, user_q, shared.clone())
        })
        .collect();
    let mut cancels = state.engine.signals().subscribe_cancels();
    let mut stopping = state.stopping();
    let inflight = Arc::new(Semaphore::new(state.config.max_inflight_per_stream.max(1)));
    let mut drained = false;
    // Messages read ahead while gathering a batch of results, handled next.
    let mut stash: VecDeque<Msg> = VecDeque::new();
    let mut ended = false;
    loop {
        let msg = if let Some(m) = stash.pop_front() {
            Some(Ok(pb::WorkerRequest { msg: Some(m) }))
        } else if ended {
            break;
        } else {
            tokio::select! {
            m = inbound.next() => m,
            c = cancels.recv() => {
                if let Ok(job_id) = c {
                    session.push_cancel(job_id);
                }
                continue;
            }
            _ = stopping.wait_for(|s| *s) => {
                let _ = tx.send(Err(Status::unavailable("server is shutting down")));
                break;
            }
            }
        };
        let m = match msg {
            Some(Ok(pb::WorkerRequest { msg: Some(m) })) => m,
            Some(Ok(pb::WorkerRequest { msg: None })) => {
                let _ = tx.send(Err(Status::invalid_argument("empty request")));
                break;
            }
            Some(Err(s)) => {
                // A message that does not decode (grpc::codec) ends the stream with its
                // status; results in flight may be resent (answered stale if recorded).
                if s.code() == tonic::Code::InvalidArgument {
                    let _ = tx.send(Err(s));
                }
                break;
            }
            None => break,
        };
        match m {
            Msg::Hello(_) => {
                let _ = tx.send(Err(Status::failed_precondition("hello sent twice")));
                break;
            }
            Msg::Credit(c) => grant(&shared, &subs, c.n, state.config.max_credits),
            Msg::Drain(d) => {
                if !drained {
                    drained = true;
                    shared.draining.store(true, Ordering::Release);
                    subs.iter().for_each(Subscription::wake);
                }
                let session = session.clone();
                let Ok(permit) = inflight.clone().acquire_owned().await else {
                    break;
                };
                tokio::spawn(async move {
                    session.release(d.release).await;
                    let _ = session.shared.tx.send(out(Out::Drained(pb::Drained {})));
                    drop(permit);
                });
            }
            Msg::Result(_) | Msg::Results(_) => {
                // Take every result already received as one request to the coalescer:
                // under load a stream carries many, and one submission per result would
                // cost a task and a oneshot each. Credits in between are granted inline.
                let mut batch = Vec::new();
                let mut next = Some(m);
                while let Some(m) = next.take() {
                    match m {
                        Msg::Result(r) => batch.push(r),
                        Msg::Results(rb) => match check_results(shared.batch, &rb) {
                            Ok(()) => {
                                if rb.credit > 0 {
                                    grant(&shared, &subs, rb.credit, state.config.max_credits);
                                }
                                batch.extend(rb.results);
                            }
                            Err(st) => {
                                let _ = tx.send(Err(st));
                                ended = true;
                                stash.clear();
                                batch.clear();
                                break;
                            }
                        },
                        Msg::Credit(c) => grant(&shared, &subs, c.n, state.config.max_credits),
                        other => {
                            stash.push_back(other);
                            break;
                        }
                    }
                    if batch.len() >= RESULT_BATCH {
                        break;
                    }
                    match inbound.next().now_or_never() {
                        Some(Some(Ok(pb::WorkerRequest { msg: Some(m) }))) => next = Some(m),
                        Some(_) => ended = true,
                        None => {}
                    }
                }
                if batch.is_empty() {
                    continue;
                }
                let Ok(permit) = inflight.clone().acquire_owned().await else {
                    break;
                };
                let session = session.clone();
                tokio::spawn(async move {
                    let acks = session.results(batch).await;
                    session.send_acks(acks);
                    drop(permit);
                });
            }
            Msg::Heartbeat(h) => {
                let Ok(permit) = inflight.clone().acquire_owned().await else {
                    break;
                };
                let session = session.clone();
                tokio::spawn(async move {
                    let ack = session.heartbeat(h.refs).await;
                    let _ = session.shared.tx.send(out(Out::HeartbeatAck(ack)));
                    drop(permit);
                });
            }
        }
    }
    // Unsubscribe: dispatchers stop sending here. Jobs this worker held stay leased to it:
    // it may still finish them and report on a new stream (tokens are not tied to a
    // stream); if it does not, the rescuer retries them when their lease lapses.
    drop(subs);
}

impl Session {
    /// The attempt a client's ref names, if it is a genuine token of this tenant.
    fn verify(&self, r: &pb::AttemptRef) -> Option<Attempt> {
        let a = self.state.tokens.verify(&r.token)?;
        (a.tenant_id == self.principal.tenant_id && a.job_id == r.id && a.attempt == r.attempt)
            .then_some(a)
    }

    /// The attempt a result names and the queue's backoff for it. A job this stream holds
    /// under the very token the client sent back needs no HMAC: that token came from here.
    /// Anything else (a result after a reconnect, a forged token) is checked in full.
    fn attempt_of(&self, r: &pb::AttemptRef) -> Option<(Attempt, Backoff)> {
        let backoff = {
            let held = self.shared.held.lock().expect("held");
            match held.get(&r.id).filter(|h| h.attempt.attempt == r.attempt) {
                Some(h) if h.token == r.token => return Some((h.attempt.clone(), h.backoff)),
                Some(h) => h.backoff,
                None => Backoff::default(),
            }
        };
        Some((self.verify(r)?, backoff))
    }

    fn held(&self, job_id: i64) -> Option<Held> {
        self.shared.held.lock().expect("held").get(&job_id).cloned()
    }

    fn push_cancel(&self, job_id: i64) {
        if let Some(h) = self.held(job_id) {
            let r = pb::AttemptRef {
                id: job_id,
                attempt: h.attempt.attempt,
                token: h.token,
            };
            let _ = self
                .shared
                .tx
                .send(out(Out::Cancel(pb::Cancel { r#ref: Some(r) })));
        }
    }

    /// The outcome a result asks for, or the error to ack it with.
    /// Also the attempt's user queue (metrics).
    fn prepare(
        &self,
        mut r: pb::JobResult,
    ) -> Result<(pb::AttemptRef, Outcome, String), pb::ResultAck> {
        let Some(aref) = r.r#ref.take() else {
            return Err(result_error(
                None,
                pb_error("invalid_argument", "result without ref", "ref"),
            ));
        };
        let Some((attempt, backoff)) = self.attempt_of(&aref) else {
            let e = pb_error(
                "not_found",
                "unknown attempt (bad or foreign token)",
                "ref.token",
            );
            return Err(result_error(Some(aref), e));
        };
        match outcome_of(&attempt, backoff, r) {
            Ok(o) => Ok((aref, o, attempt.queue)),
            Err(e) => Err(result_error(Some(aref), e)),
        }
    }

    /// Records a batch of results in one coalesced request; one ack per result, in order.
    async fn results(&self, rs: Vec<pb::JobResult>) -> Vec<pb::ResultAck> {
        let mut acks: Vec<Option<pb::ResultAck>> = Vec::with_capacity(rs.len());
        let mut refs = Vec::new();
        let mut outcomes = Vec::new();
        for r in rs {
            match self.prepare(r) {
                Ok((aref, o, queue)) => {
                    acks.push(None);
                    refs.push((acks.len() - 1, aref, queue));
                    outcomes.push(o);
                }
                Err(ack) => acks.push(Some(ack)),
            }
        }
        if !outcomes.is_empty() {
            let kinds: Vec<OutcomeKind> = outcomes.iter().map(|o| o.kind).collect();
            let recorded =
                crate::service::record(&self.state.coalescers, &self.state.metrics, outcomes).await;
            match recorded {
                Ok(done) => {
                    self.state.metrics.count_outcomes(
                        &self.principal.tenant,
                        refs.iter()
                            .zip(&kinds)
                            .zip(&done)
                            .filter(|(_, d)| !d.stale)
                            .map(|(((_, _, q), k), _)| (q.as_str(), k)),
                    );
                    let mut held = self.shared.held.lock().expect("held");
                    for ((i, aref, _), d) in refs.into_iter().zip(done) {
                        forget(&mut held, aref.id, aref.attempt);
                        acks[i] = Some(pb::ResultAck {
                            r#ref: Some(aref),
                            stale: d.stale,
                            error: None,
                        });
                    }
                }
                Err(e) => {
                    let err = match e.engine() {
                        Some(ee) => engine_error(ee, ""),
                        None => pb_error(e.code(), e.to_string(), ""),
                    };
                    for (i, aref, _) in refs {
                        acks[i] = Some(result_error(Some(aref), err.clone()));
                    }
                }
            }
        }
        acks.into_iter().flatten().collect()
    }

    /// Acks one by one, or in ResultAckBatch messages on a batching stream.
    fn send_acks(&self, acks: Vec<pb::ResultAck>) {
        let tx = &self.shared.tx;
        if self.shared.batch == 0 {
            for ack in acks {
                let _ = tx.send(out(Out::ResultAck(ack)));
            }
            return;
        }
        let mut acks = acks.into_iter().peekable();
        while acks.peek().is_some() {
            let chunk: Vec<_> = acks.by_ref().take(self.shared.batch).collect();
            let _ = tx.send(out(Out::ResultAcks(pb::ResultAckBatch { acks: chunk })));
        }
    }

    fn forget(&self, job_id: i64, attempt: i32) {
        forget(&mut self.shared.held.lock().expect("held"), job_id, attempt);
    }

    async fn heartbeat(&self, refs: Vec<pb::AttemptRef>) -> pb::HeartbeatAck {
        let mut lost = Vec::new();
        let mut by_lease: HashMap<Duration, Vec<(pb::AttemptRef, AttemptRef)>> = HashMap::new();
        for r in refs {
            match self.verify(&r) {
                Some(a) => {
                    let lease = self.held(r.id).map_or(self.default_lease, |h| h.lease);
                    by_lease.entry(lease).or_default().push((r, engine_ref(&a)));
                }
                None => lost.push(r),
            }
        }
        let mut until: Option<i64> = None;
        for (lease, group) in by_lease {
            let engine_refs: Vec<AttemptRef> = group.iter().map(|(_, a)| *a).collect();
            match self
                .state
                .engine
                .heartbeat(&engine_refs, lease, &self.worker_id)
                .await
            {
                Ok(beats) => {
                    for ((r, _), beat) in group.into_iter().zip(beats) {
                        if !beat.held {
                            self.forget(r.id, r.attempt);
                            lost.push(r);
                            continue;
                        }
                        if beat.cancelled {
                            let _ = self.shared.tx.send(out(Out::Cancel(pb::Cancel {
                                r#ref: Some(r.clone()),
                            })));
                        }
                        let ms = unix_ms(beat.lease_until);
                        until = Some(until.map_or(ms, |u| u.min(ms)));
                    }
                }
                Err(e) => {
                    // Not extended: report nothing as lost (the worker keeps going and
                    // retries its heartbeat); the lease it has is unchanged.
                    tracing::warn!(error = %e, "heartbeat failed");
                }
            }
        }
        pb::HeartbeatAck {
            lease_until_unix_ms: until.unwrap_or(0),
            lost,
        }
    }

    /// Hands back jobs the worker received but did not start: back into the log at once as
    /// the same attempt (`OutcomeKind::Released`).
    async fn release(&self, refs: Vec<pb::AttemptRef>) {
        let mut outcomes = Vec::new();
        for r in refs {
            if let Some(a) = self.verify(&r) {
                self.forget(r.id, r.attempt);
                outcomes.push(a.outcome(OutcomeKind::Released, None, None));
            }
        }
        if outcomes.is_empty() {
            return;
        }
        if let Err(e) = self.state.coalescers.complete(outcomes).await {
            tracing::warn!(error = %e, "drain release failed; jobs return when their lease lapses");
        }
    }
}

/// Most results taken from a stream into one coalesced request.
const RESULT_BATCH: usize = 512;

/// A ResultBatch is for streams that negotiated batches, and no bigger than agreed.
#[allow(clippy::result_large_err)]
fn check_results(batch: usize, rb: &pb::ResultBatch) -> Result<(), Status> {
    if batch == 0 {
        return Err(Status::invalid_argument(
            "results: ResultBatch needs batching, negotiated with hello.max_batch",
        ));
    }
    if rb.results.len() > batch {
        return Err(Status::invalid_argument(format!(
            "results: {} results in one batch, at most {batch} (hello_ack.max_batch)",
            rb.results.len()
        )));
    }
    Ok(())
}

fn grant(shared: &StreamShared, subs: &[Subscription], n: u32, max: u64) {
    let _ = shared
        .credits
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
            Some(cur.saturating_add(u64::from(n)).min(max))
        });
    // Served from the buffers right here (no hop through the dispatcher tasks).
    subs.iter().for_each(Subscription::serve);
}

/// Drops a held attempt once its outcome is recorded (a newer attempt of the job stays).
fn forget(held: &mut HashMap<i64, Held>, job_id: i64, attempt: i32) {
    if held
        .get(&job_id)
        .is_some_and(|h| h.attempt.attempt == attempt)
    {
        held.remove(&job_id);
    }
}

fn engine_ref(a: &Attempt) -> AttemptRef {
    AttemptRef {
        job_id: a.job_id,
        attempt: a.attempt,
        segment: a.segment,
        receipt_id: a.receipt_id,
        lane: a.lane,
        receipt_segment: a.receipt_segment,
    }
}

fn result_error(r: Option<pb::AttemptRef>, e: pb::Error) -> pb::ResultAck {
    pb::ResultAck {
        r#ref: r,
        stale: false,
        error: Some(e),
    }
}

/// The engine outcome of a worker's result.
fn outcome_of(a: &Attempt, backoff: Backoff, r: pb::JobResult) -> Result<Outcome, pb::Error> {
    use pb::job_result::Outcome as O;
    let report = match r.outcome {
        Some(O::Ok(ok)) => {
            let result = if ok.result.trim().is_empty() {
                None
            } else {
                Some(parse_json(&ok.result).map_err(|e| {
                    pb_error(
                        "invalid_argument",
                        format!("result is not JSON: {e}"),
                        "ok.result",
                    )
                })?)
            };
            Report::Completed { result }
        }
        Some(O::Error(f)) => {
            // The engine keeps one error text per attempt; the class goes in front of it.
            let text = if f.kind.is_empty() {
                f.message
            } else {
                format!("{}: {}", f.kind, f.message)
            };
            Report::Failed {
                error: clean(text),
                retryable: f.retryable,
                retry_delay: f.retry_delay_ms.map(Duration::from_millis),
            }
        }
        Some(O::Snooze(s)) => Report::Snoozed {
            delay: Duration::from_millis(s.delay_ms),
        },
        Some(O::Cancelled(c)) => Report::Cancelled {
            reason: Some(clean(c.message)),
        },
        None => {
            return Err(pb_error(
                "invalid_argument",
                "result needs one of ok, error, snooze, cancelled",
                "outcome",
            ))
        }
    };
    // Retry or dead letter: decided as every transport decides it (crate::service).
    let (kind, error, result) = report.decide(a.attempt, a.max_attempts, backoff);
    let mut o = a.outcome(kind, error, result);
    o.duration_ms = Some(i32::try_from(r.duration_ms).unwrap_or(i32::MAX));
    Ok(o)
}

/// Error texts as Postgres can store them: no NUL, bounded length.
fn clean(mut s: String) -> String {
    if s.contains('\0') {
        s = s.replace('\0', "\u{FFFD}");
    }
    if s.len() > 8192 {
        let mut end = 8192;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}
