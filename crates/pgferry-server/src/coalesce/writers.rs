//! The server's writers (enqueue, completion) and the pair of coalescers built on them.

use std::future::Future;
use std::sync::Arc;

use pgferry_core::{Acked, Completed, Engine, EnqueueRequest, NewJob, Outcome};

use super::{wrong_count, CoalesceConfig, Coalescer, ReceiptBook, SubmitError, Writer};

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

/// Enqueue through [`Engine::enqueue_requests`]: an item is one producer's request (all
/// or nothing, with its idempotency key), so each caller gets its own answer, a replay or a
/// refused key included, while the others of the flush are written.
pub struct EnqueueWriter {
    pub engine: Arc<Engine>,
}

/// Checks one request's jobs before they are merged with others.
fn validate_jobs(engine: &Engine, jobs: &[NewJob]) -> pgferry_core::Result<()> {
    let limit = engine.config().max_batch;
    if jobs.len() > limit {
        return Err(pgferry_core::Error::BatchTooLarge {
            size: jobs.len(),
            limit,
        });
    }
    let max_payload = engine.config().max_payload_bytes;
    for (i, job) in jobs.iter().enumerate() {
        job.validate(i, max_payload)?;
        check_no_nul(&job.args, i, "args")?;
        if let Some(meta) = &job.meta {
            check_no_nul(meta, i, "meta")?;
        }
    }
    Ok(())
}

impl Writer for EnqueueWriter {
    type Item = EnqueueRequest;
    type Output = Result<Acked, SubmitError>;

    fn validate(&self, requests: &[EnqueueRequest]) -> pgferry_core::Result<()> {
        requests
            .iter()
            .try_for_each(|r| validate_jobs(&self.engine, &r.jobs))
    }

    fn weight(&self, request: &EnqueueRequest) -> usize {
        request.jobs.len().max(1)
    }

    async fn write(&self, requests: &[EnqueueRequest]) -> pgferry_core::Result<Vec<Self::Output>> {
        let answers = self.engine.enqueue_requests(requests).await?;
        Ok(answers
            .into_iter()
            .map(|a| a.map_err(SubmitError::from))
            .collect())
    }
}

/// Completion through [`Engine::complete`].
pub struct CompleteWriter {
    pub engine: Arc<Engine>,
    /// Receipts handed out by this server: a flush that is exactly one of them is sent in
    /// its claim order (the engine's whole-receipt fast path).
    pub receipts: Arc<ReceiptBook>,
}

impl Writer for CompleteWriter {
    type Item = Outcome;
    type Output = Completed;

    // pgferry.complete() locks each receipt it names until COMMIT: one receipt, one lane.
    const PARTITIONED: bool = true;

    fn lane_key(&self, outcome: &Outcome) -> u64 {
        outcome.receipt_id as u64
    }

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

    fn missing(&self, outcomes: &[&Outcome]) -> Option<usize> {
        self.receipts.missing(outcomes)
    }

    fn write(
        &self,
        outcomes: &[Outcome],
    ) -> impl Future<Output = pgferry_core::Result<Vec<Completed>>> + Send {
        let whole = self.receipts.claim_order(outcomes);
        async move {
            let Some((receipt, order)) = whole else {
                return self.engine.complete(outcomes).await;
            };
            let sorted: Vec<Outcome> = order.iter().map(|&i| outcomes[i].clone()).collect();
            let done = self.engine.complete(&sorted).await?;
            self.receipts.written_whole(receipt);
            // Back to the callers' order: `done[k]` answers `outcomes[order[k]]`.
            let mut out: Vec<Option<Completed>> = vec![None; outcomes.len()];
            for (k, d) in done.into_iter().enumerate() {
                if let Some(&i) = order.get(k) {
                    out[i] = Some(d);
                }
            }
            Ok(out.into_iter().flatten().collect())
        }
    }
}

/// The server's coalescers, shared by gRPC streams and HTTP handlers: enqueue and
/// completion, each twice. Requests whose queues all chose async durability (architecture.md §1.7)
/// go to the `_async` pair, so that their flushes commit asynchronously; merged with a
/// synchronous queue's writes, they would commit synchronously (the engine never weakens a
/// batch). A request mixing both goes to the synchronous pair.
pub struct Coalescers {
    engine: Arc<Engine>,
    pub enqueue: Coalescer<EnqueueWriter>,
    pub enqueue_async: Coalescer<EnqueueWriter>,
    pub complete: Coalescer<CompleteWriter>,
    pub complete_async: Coalescer<CompleteWriter>,
}

impl Coalescers {
    /// `receipts`: the claim order of the receipts this server hands out (its dispatchers
    /// and the HTTP claim register them), which the completion writers use as a hint.
    pub fn new(
        engine: Arc<Engine>,
        config: CoalesceConfig,
        receipts: Arc<ReceiptBook>,
    ) -> Arc<Coalescers> {
        let enqueue = || {
            let writer = EnqueueWriter {
                engine: engine.clone(),
            };
            Coalescer::new(writer, config.clone())
        };
        let complete = || {
            let writer = CompleteWriter {
                engine: engine.clone(),
                receipts: receipts.clone(),
            };
            Coalescer::new(writer, config.clone())
        };
        Arc::new(Coalescers {
            enqueue: enqueue(),
            enqueue_async: enqueue(),
            complete: complete(),
            complete_async: complete(),
            engine: engine.clone(),
        })
    }

    /// Enqueues one request's jobs (all or nothing); ids in order, after COMMIT.
    pub async fn enqueue(&self, jobs: Vec<NewJob>) -> Result<Vec<i64>, SubmitError> {
        Ok(self.enqueue_request(EnqueueRequest::new(jobs)).await?.ids)
    }

    /// The enqueue use case of every transport (HTTP, gRPC): one request, all or nothing,
    /// answered after COMMIT. Requests with unique keys go to the engine directly (their
    /// key takeover takes several statements, which a merged flush cannot hold); the rest
    /// through group commit, async-durability queues through their own coalescer.
    pub async fn enqueue_request(&self, request: EnqueueRequest) -> Result<Acked, SubmitError> {
        if request.jobs.iter().any(|j| j.unique_key.is_some()) {
            validate_jobs(&self.engine, &request.jobs)?;
            let mut answers = self
                .engine
                .enqueue_requests(std::slice::from_ref(&request))
                .await?;
            return Ok(answers.pop().expect("one answer per request")?);
        }
        let mut queues = request.jobs.iter().map(|j| j.queue.as_str());
        // Jobs of one request usually share a queue: one cache probe per change of queue.
        let mut last = None;
        let all_async = !request.jobs.is_empty()
            && queues.all(|q| {
                let same = last == Some(q);
                last = Some(q);
                same || self.engine.commits_async(q)
            });
        let coalescer = if all_async {
            &self.enqueue_async
        } else {
            &self.enqueue
        };
        let mut answers = coalescer.submit(vec![request]).await?;
        answers.pop().ok_or_else(wrong_count)?
    }

    /// Records one request's outcomes; answers in order, after COMMIT.
    pub async fn complete(&self, outcomes: Vec<Outcome>) -> Result<Vec<Completed>, SubmitError> {
        let coalescer = if self
            .engine
            .lanes_commit_async(outcomes.iter().map(|o| o.lane))
        {
            &self.complete_async
        } else {
            &self.complete
        };
        let done = coalescer.submit(outcomes).await?;
        // Result long-polls (GET /v1/jobs/{id}/result) waiting on these jobs re-read them.
        crate::http::results::wake(done.iter().map(|c| c.job_id));
        Ok(done)
    }
}
