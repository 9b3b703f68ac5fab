//! The Producer stream: hello, then Enqueue/EnqueueBatch requests acknowledged after COMMIT
//! (group commit across every client). Each request is all or nothing; acks may overtake
//! each other and carry the request's `seq`.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use pgferry_core::{EnqueueRequest, IdempotencyKey};
use tokio::sync::{mpsc, Semaphore};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use super::convert::new_job;
use super::{engine_error, pb_error, GrpcState};
use crate::auth::namespace::tenant_scope;
use crate::auth::{Principal, Scope};
use crate::coalesce::SubmitError;
use crate::proto::v1 as pb;
use pb::producer_request::Msg;
use pb::producer_response::Msg as Out;

pub(crate) struct ProducerService {
    pub state: Arc<GrpcState>,
}

type Tx = mpsc::UnboundedSender<Result<pb::ProducerResponse, Status>>;

#[tonic::async_trait]
impl pb::producer_server::Producer for ProducerService {
    type StreamStream = Pin<Box<dyn Stream<Item = Result<pb::ProducerResponse, Status>> + Send>>;

    async fn stream(
        &self,
        request: Request<Streaming<pb::ProducerRequest>>,
    ) -> Result<Response<Self::StreamStream>, Status> {
        // A trace context sent when the stream opens applies to every job of the stream
        // that does not carry its own in `meta`.
        let traceparent = super::traceparent(request.metadata());
        let inbound = request.into_inner();
        let (tx, rx) = mpsc::unbounded_channel();
        let task = run(self.state.clone(), inbound, tx.clone(), traceparent);
        super::spawn_stream(task, tx);
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }
}

async fn run(
    state: Arc<GrpcState>,
    mut inbound: Streaming<pb::ProducerRequest>,
    tx: Tx,
    traceparent: Option<String>,
) {
    let mut stopping = state.stopping();
    let principal = match inbound.next().await {
        Some(Ok(pb::ProducerRequest {
            msg: Some(Msg::Hello(h)),
        })) => match state.hello(&h.api_key, Scope::Produce).await {
            Ok(p) => p,
            Err(s) => {
                let _ = tx.send(Err(s));
                return;
            }
        },
        Some(Ok(_)) => {
            let _ = tx.send(Err(Status::unauthenticated(
                "the first message of a stream must be hello",
            )));
            return;
        }
        Some(Err(s)) => {
            // A hello that does not decode is answered (INVALID_ARGUMENT); a broken
            // connection has no one to answer.
            let _ = tx.send(Err(s));
            return;
        }
        None => return,
    };
    let ack = pb::HelloAck {
        tenant: principal.tenant.clone(),
        server_version: env!("CARGO_PKG_VERSION").to_string(),
        max_batch: state.config.max_batch as u32,
        max_payload_bytes: state.engine.config().max_payload_bytes as u32,
    };
    if tx.send(Ok(out(Out::HelloAck(ack)))).is_err() {
        return;
    }
    let principal = Arc::new(principal);
    let inflight = Arc::new(Semaphore::new(state.config.max_inflight_per_stream.max(1)));
    loop {
        let msg = tokio::select! {
            m = inbound.next() => m,
            _ = stopping.wait_for(|s| *s) => {
                let _ = tx.send(Err(Status::unavailable("server is shutting down")));
                return;
            }
        };
        let (seq, mut specs, single, key) = match msg {
            Some(Ok(pb::ProducerRequest { msg: Some(m) })) => match m {
                Msg::Enqueue(e) => match e.job {
                    Some(job) => (e.seq, vec![job], true, e.idempotency_key),
                    None => {
                        let err = pb_error("invalid_argument", "enqueue without a job", "job");
                        let _ = tx.send(Ok(out(Out::Ack(nack(e.seq, err)))));
                        continue;
                    }
                },
                Msg::Batch(b) => (b.seq, b.jobs, false, b.idempotency_key),
                Msg::Hello(_) => {
                    let _ = tx.send(Err(Status::failed_precondition("hello sent twice")));
                    return;
                }
            },
            Some(Ok(pb::ProducerRequest { msg: None })) => {
                let _ = tx.send(Err(Status::invalid_argument("empty request")));
                return;
            }
            // The client closed its side or the connection broke: acks still in flight are
            // sent by their tasks as long as the receiver lives.
            Some(Err(s)) if s.code() == tonic::Code::InvalidArgument => {
                // A message that does not decode (grpc::codec) ends the stream with its
                // status, after the acks of everything read before it went out.
                let max = state.config.max_inflight_per_stream.max(1) as u32;
                let _ = inflight.acquire_many(max).await;
                let _ = tx.send(Err(s));
                return;
            }
            Some(Err(_)) | None => return,
        };
        if let Some(tp) = &traceparent {
            specs
                .iter_mut()
                .for_each(|s| super::inherit_traceparent(s, tp));
        }
        let Ok(permit) = inflight.clone().acquire_owned().await else {
            return;
        };
        let (state, tx, principal) = (state.clone(), tx.clone(), principal.clone());
        tokio::spawn(async move {
            let ack = enqueue(&state, &principal, seq, specs, single, key).await;
            let _ = tx.send(Ok(out(Out::Ack(ack))));
            drop(permit);
        });
    }
}

/// Validates every job (naming the first bad field), then commits them all in one go
/// (the server's one enqueue use case, [`crate::coalesce::Coalescers::enqueue_request`]).
async fn enqueue(
    state: &GrpcState,
    p: &Principal,
    seq: u64,
    specs: Vec<pb::JobSpec>,
    single: bool,
    key: String,
) -> pb::EnqueueAck {
    if specs.len() > state.config.max_batch {
        let msg = format!(
            "batch of {} jobs is over the limit of {}",
            specs.len(),
            state.config.max_batch
        );
        return nack(seq, pb_error("batch_too_large", msg, "jobs"));
    }
    let max_payload = state.engine.config().max_payload_bytes;
    let queues: Vec<String> = specs.iter().map(|s| s.queue.clone()).collect();
    let mut jobs = Vec::with_capacity(specs.len());
    for (i, spec) in specs.into_iter().enumerate() {
        let prefix = if single {
            "job".to_string()
        } else {
            format!("jobs[{i}]")
        };
        match new_job(p, spec, &prefix, i, max_payload) {
            Ok(j) => jobs.push(j),
            Err(e) => return nack(seq, e),
        }
    }
    let mut request = EnqueueRequest::new(jobs);
    if !key.is_empty() {
        match IdempotencyKey::new(key) {
            Ok(k) => request = request.idempotency_key(k.scoped(&tenant_scope(p.tenant_id))),
            Err(e) => return nack(seq, engine_error(&e, "")),
        }
    }
    let metrics = &state.metrics;
    match crate::service::enqueue(&state.coalescers, metrics, &p.tenant, request, &queues).await {
        Ok(done) => pb::EnqueueAck {
            seq,
            job_ids: done.ids,
            duplicates: done.duplicates,
            error: None,
            replayed: done.replayed,
        },
        Err(SubmitError::Engine(e)) => nack(seq, engine_error(&e, "")),
        Err(e @ SubmitError::ShuttingDown) => nack(seq, pb_error(e.code(), e.to_string(), "")),
    }
}

fn nack(seq: u64, error: pb::Error) -> pb::EnqueueAck {
    pb::EnqueueAck {
        seq,
        job_ids: Vec::new(),
        duplicates: Vec::new(),
        error: Some(error),
        replayed: false,
    }
}

fn out(msg: Out) -> pb::ProducerResponse {
    pb::ProducerResponse { msg: Some(msg) }
}
