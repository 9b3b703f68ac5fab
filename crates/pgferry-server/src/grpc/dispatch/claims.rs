//! A dispatcher's claims: several at once, each in the background.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime};

use futures_util::stream::{FuturesUnordered, StreamExt};
use pgferry_core::ClaimedJob;

use super::{Buffered, Dispatcher, Inner};
use crate::metrics::{JobCounter, Latency};

/// A claim running in the background: how many it asked for, when it started, and what it
/// got.
type Claim = Pin<
    Box<dyn Future<Output = (usize, SystemTime, pgferry_core::Result<Vec<ClaimedJob>>)> + Send>,
>;

fn start_claim(inner: &Inner, d: &Dispatcher, want: usize) -> Claim {
    let (engine, metrics) = (inner.engine.clone(), inner.metrics.clone());
    let receipts = inner.receipts.clone();
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
        (want, at, claimed)
    })
}

/// The claims of one dispatcher running at once. Several at a time: one claim's round trip
/// (milliseconds under load) feeding every stream bounds delivery, and the engine runs
/// concurrent claims of one process on different lanes of the queue.
#[derive(Default)]
pub(super) struct Claims {
    running: FuturesUnordered<Claim>,
    /// Jobs the running claims asked for in all (counted as on their way).
    pub wanted: usize,
}

impl Claims {
    pub fn len(&self) -> usize {
        self.running.len()
    }

    pub fn start(&mut self, inner: &Inner, d: &Dispatcher, want: usize) {
        self.wanted += want;
        self.running.push(start_claim(inner, d, want));
    }

    /// The next claim to finish (pending forever while none runs).
    pub async fn next(&mut self) -> (SystemTime, pgferry_core::Result<Vec<ClaimedJob>>) {
        match self.running.next().await {
            Some((want, at, res)) => {
                self.wanted -= want;
                (at, res)
            }
            None => std::future::pending().await,
        }
    }

    /// Waits for every running claim and buffers what they got (to be delivered or handed
    /// back: claimed jobs are never dropped on the floor).
    pub async fn settle(&mut self, d: &Dispatcher, lease: Duration) {
        while let Some((want, at, res)) = self.running.next().await {
            self.wanted -= want;
            if let Ok(jobs) = res {
                d.buffer_lock().extend(buffered(jobs, at, lease));
            }
        }
    }
}

/// How many claims to run side by side, from what recent claims found. A second claim pays
/// only while more is visible than one claim takes at a time: each claim statement costs
/// Postgres about 0.3 ms even when it finds nothing, and at light load (a job or so per
/// tick) the second of two claims started on a tick came back empty every time, doubling
/// the claims per job (docs/performance.md, "Claims side by side only while claims find
/// more than a job"). A running average of what claims that found something found: an
/// empty claim says nothing about the next tick's jobs, and at saturation the claims that
/// follow a drained batch come back empty several times between two batches (most without
/// a statement: their lanes are known dry), which must not serialise the next batch's
/// claims.
pub(super) struct Yields {
    /// Jobs per non-empty claim, recent claims weighted most; None before the first (side
    /// by side from the start, as a backlog at startup wants).
    average: Option<f64>,
}

impl Yields {
    /// At this average or more, claims run side by side.
    const SIDE_BY_SIDE_FROM: f64 = 2.0;

    pub fn new() -> Yields {
        Yields { average: None }
    }

    /// A claim came back with `jobs` (none: ignored).
    pub fn record(&mut self, jobs: usize) {
        if jobs == 0 {
            return;
        }
        let jobs = jobs as f64;
        self.average = Some(self.average.map_or(jobs, |a| (a + jobs) / 2.0));
    }

    /// Claims to run at once, at most `max`.
    pub fn parallel(&self, max: usize) -> usize {
        match self.average {
            Some(a) if a < Self::SIDE_BY_SIDE_FROM => 1,
            _ => max,
        }
    }
}

pub(super) fn buffered(
    jobs: Vec<ClaimedJob>,
    at: SystemTime,
    lease: Duration,
) -> impl Iterator<Item = Buffered> {
    jobs.into_iter().map(move |job| Buffered {
        job,
        lease_until: at + lease,
    })
}

/// Jobs of `buffer` taken in order while `take` says yes; `take` is asked once per job and
/// stops the scan when it returns `None` (no more room). Jobs it refuses stay, in order.
pub(super) fn take_from(
    buffer: &mut VecDeque<Buffered>,
    mut take: impl FnMut(&Buffered) -> Option<bool>,
) -> Vec<Buffered> {
    let mut taken = Vec::new();
    let mut i = 0;
    while i < buffer.len() {
        match take(&buffer[i]) {
            None => break,
            Some(true) => taken.extend(buffer.remove(i)),
            Some(false) => i += 1,
        }
    }
    taken
}

#[cfg(test)]
mod tests {
    use super::Yields;

    #[test]
    fn claims_run_side_by_side_until_claims_find_a_job_or_less() {
        let mut y = Yields::new();
        assert_eq!(y.parallel(2), 2, "side by side before any claim");
        // Light load: one job per tick, the second claim dry.
        for jobs in [1, 0, 1, 0] {
            y.record(jobs);
        }
        assert_eq!(y.parallel(2), 1);
        // Dry claims alone change nothing.
        for _ in 0..10 {
            y.record(0);
        }
        assert_eq!(y.parallel(2), 1);
        // One claim at a time, a job each: stays one.
        for _ in 0..10 {
            y.record(1);
        }
        assert_eq!(y.parallel(2), 1);
        // A burst: the next round is side by side again.
        y.record(64);
        assert_eq!(y.parallel(2), 2);
        // Saturation: dry claims between batches keep the next batch's claims side by side.
        for jobs in [50, 0, 0, 0, 0, 0, 0, 0, 48, 0, 0, 0, 52] {
            y.record(jobs);
            assert_eq!(y.parallel(2), 2, "after a claim of {jobs}");
        }
    }
}
