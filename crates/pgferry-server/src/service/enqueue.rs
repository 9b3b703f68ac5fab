//! The enqueue use case.

use std::time::Instant;

use pgferry_core::{Acked, EnqueueRequest};

use crate::coalesce::{Coalescers, SubmitError};
use crate::metrics::{JobCounter, Latency, Metrics};

/// Enqueues one producer request (its jobs already validated and namespaced; `queues` are
/// their user-facing queue names, in order) and counts the jobs it wrote. Acknowledged only
/// after COMMIT (ADR 0014): the answer comes back from the writer that committed it.
/// Unique-key jobs go to the engine directly, the rest through group commit; that choice is
/// [`Coalescers::enqueue_request`]'s, and nobody else's. Its commit latency (what the
/// producer waits, group-commit wait included) is observed here.
pub async fn enqueue(
    coalescers: &Coalescers,
    metrics: &Metrics,
    tenant: &str,
    request: EnqueueRequest,
    queues: &[String],
) -> Result<Acked, SubmitError> {
    let started = Instant::now();
    let done = coalescers.enqueue_request(request).await?;
    metrics.observe(Latency::EnqueueCommit, started.elapsed());
    metrics.add_each(
        JobCounter::Enqueued,
        tenant,
        queues
            .iter()
            .zip(&done.duplicates)
            .filter(|(_, duplicate)| !**duplicate)
            .map(|(q, _)| q.as_str()),
    );
    Ok(done)
}
