//! Handing buffered jobs to streams: by the dispatcher when a claim lands (round-robin over
//! its streams), and by a stream's own task when it grants credits (from the buffer,
//! without waiting for the dispatcher task). Either way a job is taken from the buffer
//! together with one credit of the stream it goes to.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use super::claims::take_from;
use super::{Buffered, Dispatcher, StreamShared};
use crate::auth::token::Attempt;
use crate::grpc::convert::job_message;
use crate::grpc::dispatch::Held;
use crate::proto::v1 as pb;

/// Hands buffered jobs to streams with credit, round-robin, in claim order. Each stream gets
/// what this pass picked for it in as few messages as its batching allows: whatever is
/// ready now, never held back to fill a batch.
pub(super) fn deliver(d: &Dispatcher, subs: &[Arc<StreamShared>], rr: &mut usize) {
    let mut picked: Vec<Vec<Buffered>> = subs.iter().map(|_| Vec::new()).collect();
    {
        let mut buffer = d.buffer_lock();
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
    }
    for (s, jobs) in subs.iter().zip(picked) {
        send(d, s, jobs);
    }
}

/// Hands one stream as many buffered jobs as it has credits for (those of its kinds, in
/// claim order). Called by the stream's task right after it granted credits.
pub(super) fn serve(d: &Dispatcher, s: &StreamShared) {
    if s.demand() == 0 {
        return;
    }
    let jobs = take_from(&mut d.buffer_lock(), |b| {
        if !s.accepts(&b.job.kind) {
            Some(false)
        } else {
            s.take_credit().then_some(true)
        }
    });
    send(d, s, jobs);
}

/// Sends jobs taken for a stream; those it could not take (the stream went away meanwhile)
/// go back to the front of the buffer, in order.
fn send(d: &Dispatcher, s: &StreamShared, jobs: Vec<Buffered>) {
    if jobs.is_empty() {
        return;
    }
    let failed = send_jobs(d, s, jobs);
    if !failed.is_empty() {
        let mut buffer = d.buffer_lock();
        for b in failed.into_iter().rev() {
            buffer.push_front(b);
        }
    }
}

/// Largest JobBatch in encoded bytes (a single bigger job still goes, alone): far below
/// the 4 MiB default receive limit of gRPC clients.
const JOB_BATCH_BYTES: usize = 1 << 20;

/// Sends jobs on a stream (one message each, or JobBatch messages when the stream
/// negotiated batches); returns those that could not be sent because the stream is gone.
fn send_jobs(d: &Dispatcher, s: &StreamShared, jobs: Vec<Buffered>) -> Vec<Buffered> {
    use pb::worker_response::Msg;
    let lease = d.lease();
    let mut msgs = Vec::with_capacity(jobs.len());
    {
        let mut held = s.held.lock().expect("held");
        for b in &jobs {
            let attempt = Attempt::from_claimed(d.tenant_id, &d.user_queue, &b.job);
            let token = d.tokens.sign(&attempt);
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

/// The lease a dispatcher last read for its queue, as kept in an atomic.
pub(super) fn lease_ms(lease: Duration) -> u64 {
    u64::try_from(lease.as_millis()).unwrap_or(u64::MAX)
}
