//! Buffered jobs' leases: heartbeated while they wait, handed back when nobody takes them.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use pgferry_core::{AttemptRef, Outcome};

use super::{Dispatcher, Inner};

/// Extends the lease of buffered jobs past half their lease (a slow consumer is holding the
/// dispatcher's prefetch); drops those the engine says are no longer ours. Streams keep
/// taking jobs from the buffer meanwhile: what they took was heartbeated too (harmless),
/// and only jobs still buffered afterwards are updated or dropped.
pub(super) async fn refresh_leases(inner: &Inner, d: &Dispatcher, lease: Duration) {
    let soon = SystemTime::now() + lease / 2;
    let refs: Vec<AttemptRef> = {
        let buffer = d.buffer_lock();
        if !buffer.iter().any(|b| b.lease_until < soon) {
            return;
        }
        buffer.iter().map(|b| AttemptRef::from(&b.job)).collect()
    };
    match inner.engine.heartbeat(&refs, lease, &inner.worker).await {
        Ok(beats) => {
            let beats: HashMap<(i64, i32), _> = refs
                .iter()
                .zip(beats)
                .map(|(r, beat)| ((r.job_id, r.attempt), beat))
                .collect();
            let mut cancelled = Vec::new();
            d.buffer_lock().retain_mut(|b| {
                let Some(beat) = beats.get(&(b.job.job_id, b.job.attempt)) else {
                    // Came back to the buffer after the snapshot: its lease is as it was.
                    return true;
                };
                if !beat.held {
                    return false;
                }
                if beat.cancelled {
                    cancelled.push(b.job.cancelled("cancelled before delivery"));
                    return false;
                }
                b.lease_until = beat.lease_until;
                true
            });
            if !cancelled.is_empty() {
                if let Err(e) = inner.coalescers.complete(cancelled).await {
                    tracing::warn!(queue = %d.queue, error = %e, "closing cancelled jobs failed");
                }
            }
        }
        Err(e) => tracing::warn!(queue = %d.queue, error = %e, "heartbeat of buffered jobs failed"),
    }
}

/// Puts every buffered job back into the log now (zero-delay snooze: the attempt is not
/// used up). If that fails they come back when the rescuer sees their lease lapse.
pub(super) async fn hand_back(inner: &Inner, d: &Dispatcher) {
    let outcomes: Vec<Outcome> = d.buffer_lock().drain(..).map(|b| b.job.release()).collect();
    if outcomes.is_empty() {
        return;
    }
    let n = outcomes.len();
    match inner.coalescers.complete(outcomes).await {
        Ok(_) => tracing::debug!(queue = %d.queue, jobs = n, "handed back undelivered jobs"),
        Err(e) => tracing::warn!(
            queue = %d.queue, jobs = n, error = %e,
            "hand-back failed; the jobs return when their lease lapses"
        ),
    }
}
