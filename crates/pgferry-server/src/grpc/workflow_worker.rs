//! The WorkflowWorker stream (proto/pgferry/v1/workflow.proto): hello, credits, batches of
//! claimed steps, outcomes (acked after COMMIT), heartbeats, server-pushed cancels, drain.
//!
//! One claim task per stream claims steps while the worker has credits (one statement per
//! claim; an idle stream polls with a backoff of 1 to 20 ms, as steps become due by time
//! and by other instances' outcomes, which have no notification). The checks and engine
//! calls are those of the HTTP workers ([`crate::wfsteps`]).

// tonic's stream items are `Result<_, Status>` by value.
#![allow(clippy::result_large_err)]

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::Stream;
use pgferry_core::workflow::{Caps, Workflows};
use tokio::sync::{mpsc, watch, Notify, Semaphore};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::convert::unix_ms;
use super::workflow_pb::{outcome_body, refused, result_pb};
use super::{pb_error, GrpcState};
use crate::auth::{Principal, Scope};
use crate::proto::v1 as pb;
use crate::wfsteps::{self, StepToken};
use pb::workflow_worker_request::Msg;
use pb::workflow_worker_response::Msg as Out;

type Tx = mpsc::UnboundedSender<Result<pb::WorkflowWorkerResponse, Status>>;

/// Steps per StepBatch when the hello names no max_batch.
const DEFAULT_BATCH: u32 = 64;
/// Longest pause of an idle stream's claim task between claims.
const MAX_IDLE_POLL: Duration = crate::wfsteps::MAX_IDLE_POLL;

pub(crate) struct WorkflowWorkerService {
    pub state: Arc<GrpcState>,
}

#[tonic::async_trait]
impl pb::workflow_worker_server::WorkflowWorker for WorkflowWorkerService {
    type StreamStream =
        Pin<Box<dyn Stream<Item = Result<pb::WorkflowWorkerResponse, Status>> + Send>>;

    async fn stream(
        &self,
        request: Request<Streaming<pb::WorkflowWorkerRequest>>,
    ) -> Result<Response<Self::StreamStream>, Status> {
        let inbound = request.into_inner();
        let (tx, rx) = mpsc::unbounded_channel();
        super::spawn_stream(run(self.state.clone(), inbound, tx.clone()), tx);
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }
}

fn out(msg: Out) -> Result<pb::WorkflowWorkerResponse, Status> {
    Ok(pb::WorkflowWorkerResponse { msg: Some(msg) })
}

/// One open stream.
struct Session {
    state: Arc<GrpcState>,
    wf: Workflows,
    principal: Principal,
    worker_id: String,
    /// (engine queue, user queue)
    queues: Vec<(String, String)>,
    lease: Duration,
    batch: usize,
    credits: AtomicU64,
    draining: AtomicBool,
    /// Wakes the claim task (credits granted, drain, end).
    wake: Notify,
    /// Held while a claim and its delivery run, so a drain answers only after it.
    claiming: tokio::sync::Mutex<()>,
    /// Steps handed out and not answered: instance id → (seq, token).
    held: Mutex<HashMap<i64, (i32, String)>>,
    tx: Tx,
}

async fn run(state: Arc<GrpcState>, mut inbound: Streaming<pb::WorkflowWorkerRequest>, tx: Tx) {
    let hello = match inbound.next().await {
        Some(Ok(pb::WorkflowWorkerRequest {
            msg: Some(Msg::Hello(h)),
        })) => h,
        Some(Ok(_)) => {
            let _ = tx.send(Err(Status::unauthenticated(
                "the first message of a stream must be hello",
            )));
            return;
        }
        Some(Err(s)) => {
            let _ = tx.send(Err(s));
            return;
        }
        None => return,
    };
    let session = match open(&state, hello, tx.clone()).await {
        Ok(s) => Arc::new(s),
        Err(s) => {
            let _ = tx.send(Err(s));
            return;
        }
    };
    let ack = pb::WorkflowHelloAck {
        tenant: session.principal.tenant.clone(),
        server_version: env!("CARGO_PKG_VERSION").to_string(),
        lease_ms: session.lease.as_millis() as u64,
        max_batch: session.batch as u32,
    };
    if tx.send(out(Out::HelloAck(ack))).is_err() {
        return;
    }
    let (closed_tx, closed) = watch::channel(false);
    let claimer = tokio::spawn(claim_loop(session.clone(), closed));
    let mut cancels = state.engine.signals().subscribe_wf_cancels();
    let mut stopping = state.stopping();
    let inflight = Arc::new(Semaphore::new(state.config.max_inflight_per_stream.max(1)));
    loop {
        let msg = tokio::select! {
            m = inbound.next() => m,
            c = cancels.recv() => {
                if let Ok(id) = c {
                    session.push_cancel(id);
                }
                continue;
            }
            _ = stopping.wait_for(|s| *s) => {
                let _ = tx.send(Err(Status::unavailable("server is shutting down")));
                break;
            }
        };
        let m = match msg {
            Some(Ok(pb::WorkflowWorkerRequest { msg: Some(m) })) => m,
            Some(Ok(pb::WorkflowWorkerRequest { msg: None })) => {
                let _ = tx.send(Err(Status::invalid_argument("empty request")));
                break;
            }
            Some(Err(s)) => {
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
            Msg::Credit(c) => session.grant(c.n),
            Msg::Outcomes(b) => {
                if b.outcomes.len() > session.batch {
                    let _ = tx.send(Err(Status::invalid_argument(format!(
                        "outcomes: {} outcomes in one batch, at most {} (hello_ack.max_batch)",
                        b.outcomes.len(),
                        session.batch
                    ))));
                    break;
                }
                if b.credit > 0 {
                    session.grant(b.credit);
                }
                if b.outcomes.is_empty() {
                    continue;
                }
                let Ok(permit) = inflight.clone().acquire_owned().await else {
                    break;
                };
                let session = session.clone();
                tokio::spawn(async move {
                    let acks = session.outcomes(b.outcomes).await;
                    let _ = session.tx.send(out(Out::Acks(pb::StepAckBatch { acks })));
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
                    let _ = session.tx.send(out(Out::HeartbeatAck(ack)));
                    drop(permit);
                });
            }
            Msg::Drain(_) => {
                session.draining.store(true, Ordering::Release);
                session.wake.notify_one();
                let session = session.clone();
                tokio::spawn(async move {
                    // A claim under way delivers first; none starts after this.
                    drop(session.claiming.lock().await);
                    let _ = session.tx.send(out(Out::Drained(pb::StepDrained {})));
                });
            }
        }
    }
    // Steps still held stay leased to this worker: it may answer them on a new stream
    // (tokens are not tied to a stream); otherwise they are claimed again after the lease.
    let _ = closed_tx.send(true);
    session.wake.notify_one();
    let _ = claimer.await;
}

/// Checks a hello and opens the session.
async fn open(state: &Arc<GrpcState>, hello: pb::WorkflowHello, tx: Tx) -> Result<Session, Status> {
    let principal = state.hello(&hello.api_key, Scope::Consume).await?;
    if hello.queues.is_empty() {
        return Err(Status::invalid_argument("queues: name at least one queue"));
    }
    let mut queues = Vec::new();
    for (i, q) in hello.queues.iter().enumerate() {
        match principal.queue(q) {
            Ok(engine_q) => queues.push((engine_q, q.clone())),
            Err(e) => return Err(Status::invalid_argument(format!("queues[{i}]: {e}"))),
        }
    }
    queues.sort();
    queues.dedup();
    let lease_ms = if hello.lease_ms == 0 {
        wfsteps::DEFAULT_LEASE_MS
    } else {
        hello.lease_ms
    };
    if !(wfsteps::MIN_LEASE_MS..=wfsteps::MAX_LEASE_MS).contains(&lease_ms) {
        return Err(Status::invalid_argument(format!(
            "lease_ms: must be {} to {}",
            wfsteps::MIN_LEASE_MS,
            wfsteps::MAX_LEASE_MS
        )));
    }
    let batch = match hello.max_batch {
        0 => DEFAULT_BATCH,
        n => n.min(wfsteps::MAX_STEPS as u32),
    };
    let wf = Workflows::of(&state.engine);
    let mut caps = Vec::new();
    for (i, k) in hello.kinds.iter().enumerate() {
        pgferry_core::job::validate_kind(&k.kind)
            .map_err(|e| Status::invalid_argument(format!("kinds[{i}].kind: {e}")))?;
        let c = Caps {
            inbox: k.inbox,
            children: k.children,
        };
        caps.push((k.kind.as_str(), c));
    }
    wf.add_caps(&caps)
        .await
        .map_err(|e| super::admin_pb::status(&e, "kinds"))?;
    let worker_id = if hello.worker_id.is_empty() {
        "grpc-workflow-worker".to_string()
    } else {
        hello.worker_id.chars().take(128).collect()
    };
    Ok(Session {
        state: state.clone(),
        wf,
        principal,
        worker_id,
        queues,
        lease: Duration::from_millis(lease_ms),
        batch: batch as usize,
        credits: AtomicU64::new(0),
        draining: AtomicBool::new(false),
        wake: Notify::new(),
        claiming: tokio::sync::Mutex::new(()),
        held: Mutex::new(HashMap::new()),
        tx,
    })
}

/// Claims while the worker has credits, round robin over its queues.
async fn claim_loop(s: Arc<Session>, mut closed: watch::Receiver<bool>) {
    let mut next_queue = 0;
    let mut idle = Duration::from_millis(1);
    while !*closed.borrow() {
        let credits = s.credits.load(Ordering::Acquire);
        if credits == 0 || s.draining.load(Ordering::Acquire) {
            tokio::select! {
                _ = s.wake.notified() => {}
                _ = closed.changed() => {}
            }
            continue;
        }
        let want = (credits as usize).min(s.batch);
        let guard = s.claiming.lock().await;
        if s.draining.load(Ordering::Acquire) {
            continue;
        }
        let mut got = 0;
        let mut failed = false;
        for k in 0..s.queues.len() {
            let (engine_q, user_q) = &s.queues[(next_queue + k) % s.queues.len()];
            match s.claim(engine_q, user_q, want).await {
                Ok(0) => {}
                Ok(n) => {
                    got = n;
                    next_queue = (next_queue + k + 1) % s.queues.len();
                    break;
                }
                Err(e) => {
                    tracing::warn!(queue = %user_q, error = %e, "workflow step claim failed");
                    failed = true;
                    break;
                }
            }
        }
        drop(guard);
        let pause = if failed {
            Duration::from_millis(200)
        } else if got > 0 {
            idle = Duration::from_millis(1);
            continue;
        } else {
            let p = idle;
            idle = (idle * 2).min(MAX_IDLE_POLL);
            p
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = s.wake.notified() => {}
            _ = closed.changed() => {}
        }
    }
}

impl Session {
    fn grant(&self, n: u32) {
        let max = self.state.config.max_credits;
        let _ = self
            .credits
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                Some(cur.saturating_add(u64::from(n)).min(max))
            });
        self.wake.notify_one();
    }

    /// One claim of up to `want` steps of a queue, delivered as one StepBatch.
    async fn claim(
        &self,
        engine_q: &str,
        user_q: &str,
        want: usize,
    ) -> pgferry_core::Result<usize> {
        let steps = wfsteps::claim(
            &self.wf,
            &self.state.tokens,
            &self.principal,
            engine_q,
            want,
            &self.worker_id,
            self.lease,
        )
        .await?;
        let n = steps.len();
        if n == 0 {
            return Ok(0);
        }
        self.credits.fetch_sub(n as u64, Ordering::AcqRel);
        let mut msgs = Vec::with_capacity(n);
        {
            let mut held = self.held.lock().expect("held");
            for d in steps {
                let s = d.step;
                held.insert(s.id, (s.seq, d.token.clone()));
                let json = |v: &serde_json::Value| v.to_string();
                msgs.push(pb::ClaimedStep {
                    r#ref: Some(pb::StepRef {
                        id: s.id,
                        seq: s.seq,
                        token: d.token,
                    }),
                    queue: user_q.to_string(),
                    kind: s.kind.clone(),
                    step: s.step.clone(),
                    state: json(&s.state),
                    input: json(&s.input),
                    attempt: s.attempt,
                    max_attempts: s.max_attempts,
                    wake: wfsteps::wake_str(&s).unwrap_or("").to_string(),
                    parent_id: s.parent_id,
                    inbox: s.inbox.as_ref().map_or(String::new(), |sigs| {
                        serde_json::Value::Array(
                            sigs.iter()
                                .map(|g| {
                                    serde_json::json!({"signal_id": g.signal_id,
                                        "name": g.name, "payload": g.payload})
                                })
                                .collect(),
                        )
                        .to_string()
                    }),
                    children: s.children.as_ref().map_or(String::new(), |cs| {
                        serde_json::Value::Array(
                            cs.iter()
                                .map(|c| {
                                    serde_json::json!({"id": c.id, "kind": c.kind,
                                        "status": c.status, "result": c.result,
                                        "error": c.error})
                                })
                                .collect(),
                        )
                        .to_string()
                    }),
                    lease_until_unix_ms: unix_ms(d.lease_until),
                });
            }
        }
        let _ = self.tx.send(out(Out::Steps(pb::StepBatch { steps: msgs })));
        Ok(n)
    }

    fn push_cancel(&self, id: i64) {
        let held = self.held.lock().expect("held").get(&id).cloned();
        if let Some((seq, token)) = held {
            let _ = self.tx.send(out(Out::Cancel(pb::StepCancel {
                r#ref: Some(pb::StepRef { id, seq, token }),
            })));
        }
    }

    /// The step a ref names, if its token is genuine and this tenant's.
    fn verify(&self, r: &pb::StepRef) -> Option<StepToken> {
        let t = StepToken::verify(&self.state.tokens, self.principal.tenant_id, &r.token)?;
        (t.id == r.id && t.seq == r.seq).then_some(t)
    }

    /// Records a batch of outcomes in one statement; one ack per outcome, in order.
    async fn outcomes(&self, items: Vec<pb::StepOutcome>) -> Vec<pb::StepAck> {
        let mut acks: Vec<Option<pb::StepAck>> = Vec::with_capacity(items.len());
        let mut todo = Vec::new();
        let mut refs = Vec::new();
        for (i, mut o) in items.into_iter().enumerate() {
            let Some(r) = o.r#ref.take() else {
                acks.push(Some(refused(
                    None,
                    pb_error(
                        "invalid_argument",
                        "outcome without ref",
                        format!("outcomes[{i}].ref"),
                    ),
                )));
                continue;
            };
            let Some(t) = self.verify(&r) else {
                let e = pb_error(
                    "not_found",
                    "unknown step (bad or foreign token)",
                    format!("outcomes[{i}].ref.token"),
                );
                acks.push(Some(refused(Some(r), e)));
                continue;
            };
            let body = match outcome_body(o, r.token.clone()) {
                Ok(b) => b,
                Err(bf) => {
                    let e = pb_error(
                        "invalid_argument",
                        bf.message,
                        format!("outcomes[{i}].{}", bf.field),
                    );
                    acks.push(Some(refused(Some(r), e)));
                    continue;
                }
            };
            match wfsteps::parse(&self.principal, body) {
                Ok((_, outcome)) => {
                    acks.push(None);
                    refs.push((acks.len() - 1, r));
                    todo.push((t.step_ref(), outcome));
                }
                Err(bf) => {
                    let e = pb_error(
                        "invalid_argument",
                        bf.message,
                        format!("outcomes[{i}].{}", bf.field),
                    );
                    acks.push(Some(refused(Some(r), e)));
                }
            }
        }
        if !todo.is_empty() {
            match wfsteps::finish(&self.wf, &todo).await {
                Ok(answers) => {
                    let mut held = self.held.lock().expect("held");
                    for ((i, r), a) in refs.into_iter().zip(answers) {
                        if held.get(&r.id).is_some_and(|(seq, _)| *seq == r.seq) {
                            held.remove(&r.id);
                        }
                        acks[i] = Some(pb::StepAck {
                            r#ref: Some(r),
                            result: result_pb(a) as i32,
                            error: None,
                        });
                    }
                }
                Err(e) => {
                    let err = super::engine_error(&e, "");
                    for (i, r) in refs {
                        acks[i] = Some(refused(Some(r), err.clone()));
                    }
                }
            }
        }
        acks.into_iter().flatten().collect()
    }

    async fn heartbeat(&self, refs: Vec<pb::StepRef>) -> pb::StepHeartbeatAck {
        let mut beats = Vec::with_capacity(refs.len());
        let mut known = Vec::new();
        for r in refs {
            match self.verify(&r) {
                Some(t) => known.push((r, t.step_ref())),
                None => beats.push(pb::StepBeat {
                    r#ref: Some(r),
                    held: false,
                    cancelled: false,
                    lease_until_unix_ms: 0,
                }),
            }
        }
        let step_refs: Vec<_> = known.iter().map(|(_, s)| *s).collect();
        match wfsteps::heartbeat(&self.wf, &step_refs, self.lease).await {
            Ok(answers) => {
                for ((r, _), b) in known.into_iter().zip(answers) {
                    beats.push(pb::StepBeat {
                        r#ref: Some(r),
                        held: b.held(),
                        cancelled: b.cancelled(),
                        lease_until_unix_ms: b.lease_until.map_or(0, unix_ms),
                    });
                }
            }
            Err(e) => {
                // Not extended: report the steps as held (the worker keeps going and
                // heartbeats again); their leases are unchanged.
                tracing::warn!(error = %e, "workflow step heartbeat failed");
                for (r, _) in known {
                    beats.push(pb::StepBeat {
                        r#ref: Some(r),
                        held: true,
                        cancelled: false,
                        lease_until_unix_ms: 0,
                    });
                }
            }
        }
        pb::StepHeartbeatAck { beats }
    }
}
