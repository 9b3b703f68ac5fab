//! Lease extension for the jobs a queue's pipeline holds: from its claim until its outcome
//! is written, an HTTP job may wait for its destination's turn (parallelism, rate), wait for
//! a slow answer, or wait for the outcome writer — longer than the queue's lease. Without
//! an extension the leader's rescuer would take the job back while it is still in flight
//! and another claim would send it again. The keeper heartbeats every held attempt at a
//! third of its lease (ADR 0020's pipeline; docs/http-jobs.md#leases).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use pgferry_core::{AttemptRef, ClaimedJob, Engine};
use tokio::sync::{watch, Notify};

/// Shortest and longest pause between two heartbeats of a queue's held jobs.
const MIN_BEAT: Duration = Duration::from_millis(50);
const MAX_BEAT: Duration = Duration::from_secs(10);
/// The engine refuses leases outside this range (milliseconds).
const LEASE_MS: std::ops::RangeInclusive<u128> = 100..=86_400_000;
/// Attempts heartbeated by one statement at most.
const BEAT_ROWS: usize = 256;

/// One held attempt: its reference and the queue's lease when it was claimed.
#[derive(Clone, Copy)]
struct Hold {
    attempt: AttemptRef,
    lease: Duration,
}

/// The attempts a queue's pipeline holds, by (job id, attempt).
#[derive(Default)]
pub(crate) struct Held {
    jobs: Mutex<HashMap<(i64, i32), Hold>>,
    /// Wakes an idle keeper when jobs are held again.
    arrived: Notify,
}

impl Held {
    /// Holds `jobs` from their claim: the lease is what remained of it at the claim (a
    /// lower bound of the queue's lease, which the heartbeats then renew).
    pub(crate) fn hold(&self, jobs: &[ClaimedJob]) {
        let now = SystemTime::now();
        let mut held = self.lock();
        for j in jobs {
            let lease = j.lease_until.duration_since(now).unwrap_or_default().clamp(
                Duration::from_millis(100),
                Duration::from_millis(86_400_000),
            );
            held.insert(
                (j.job_id, j.attempt),
                Hold {
                    attempt: AttemptRef::from(j),
                    lease,
                },
            );
        }
        drop(held);
        self.arrived.notify_one();
    }

    /// The attempts' outcomes are written (or given up on): no more heartbeats.
    pub(crate) fn release(&self, done: impl IntoIterator<Item = (i64, i32)>) {
        let mut held = self.lock();
        for k in done {
            held.remove(&k);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(i64, i32), Hold>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The held attempts grouped by lease, and the pause until the next round (a third
    /// of the shortest lease; None when nothing is held).
    fn round(&self) -> (Vec<(Duration, Vec<AttemptRef>)>, Option<Duration>) {
        let held = self.lock();
        let mut by_lease: HashMap<Duration, Vec<AttemptRef>> = HashMap::new();
        for h in held.values() {
            by_lease.entry(h.lease).or_default().push(h.attempt);
        }
        let pause = by_lease
            .keys()
            .min()
            .map(|shortest| (*shortest / 3).clamp(MIN_BEAT, MAX_BEAT));
        (by_lease.into_iter().collect(), pause)
    }
}

/// Heartbeats `held` until `stop` turns true. An attempt the engine says is no longer held
/// (rescued already, or finished) is dropped: its outcome will be refused as stale.
pub(crate) async fn keep(
    engine: Arc<Engine>,
    held: Arc<Held>,
    worker: &'static str,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let Some(pause) = held.round().1 else {
            // Nothing held: wait for a claim (a held job's first beat is a third of its
            // lease after this wake-up at the latest).
            tokio::select! {
                _ = held.arrived.notified() => continue,
                _ = stop.wait_for(|s| *s) => return,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let (groups, _) = held.round();
        for (lease, refs) in groups {
            if !LEASE_MS.contains(&lease.as_millis()) {
                continue;
            }
            for chunk in refs.chunks(BEAT_ROWS) {
                match engine.heartbeat(chunk, lease, worker).await {
                    Ok(beats) => held.release(
                        beats
                            .iter()
                            .filter(|b| !b.held)
                            .map(|b| (b.job_id, b.attempt)),
                    ),
                    // The next round tries again; a lease that lapses meanwhile is rescued
                    // as it would have been without the keeper.
                    Err(e) => tracing::warn!(error = %e, "HTTP job leases not extended"),
                }
            }
        }
    }
}
