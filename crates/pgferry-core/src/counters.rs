//! Per-queue counts for dashboards, from counters instead of table scans (ADR 0006).
//!
//! Every engine process adds up, per lane, what its committed statements did (enqueued,
//! claimed, finished, …) in memory and flushes the deltas once per interval in one
//! statement into `lane_counters`. Nothing is counted inside enqueue, claim or complete: a
//! counter row updated per batch would serialize every writer of a lane on one row
//! (architecture.md §1.2). The cold paths that move jobs in their own statement (promotion, DLQ retry
//! and purge) count in that statement.
//!
//! Counters drift where a delta is lost or wrong: a process that dies loses its unflushed
//! deltas (at most one interval); `enqueue_tx` counts when its statement returns, so a
//! rolled-back transaction leaves pending jobs counted that do not exist; a cancel racing a
//! claim may count a job cancelled that still runs; the rescuer does not count yet. The
//! recount repairs drift: it reads a lane's true sizes (bounded by what is live, see
//! counters_truth.sql) and stores them unless a write reached the lane's counters in the
//! meantime; the leader recounts lanes in turn, an operator may recount a queue.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use deadpool_postgres::Pool;
use tokio_postgres::GenericClient;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::job::{validate_queue_name, Outcome, OutcomeKind};

const FLUSH: &str = include_str!("sql/counters_flush.sql");
const QUEUES: &str = include_str!("sql/counters_queues.sql");
const TRUTH: &str = include_str!("sql/counters_truth.sql");
const SET: &str = include_str!("sql/counters_set.sql");
const COUNTED: &str = "SELECT version, pending, running, scheduled, dead \
    FROM pgferry.lane_counters WHERE lane = $1";
const QUEUE_LANES: &str = "SELECT l.lane FROM pgferry.lanes l \
    JOIN pgferry.queues q ON q.queue_id = l.queue_id WHERE q.name = $1 ORDER BY l.lane";

/// Changes to one lane's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Delta {
    pub pending: i64,
    pub running: i64,
    pub scheduled: i64,
    pub dead: i64,
    pub enqueued: i64,
    pub completed: i64,
    pub failed: i64,
    pub cancelled: i64,
}

impl Delta {
    fn add(&mut self, o: &Delta) {
        self.pending += o.pending;
        self.running += o.running;
        self.scheduled += o.scheduled;
        self.dead += o.dead;
        self.enqueued += o.enqueued;
        self.completed += o.completed;
        self.failed += o.failed;
        self.cancelled += o.cancelled;
    }
}

/// A queue's counts. `pending`, `running`, `scheduled` and `dead` are current sizes (never
/// below zero, even while a counter drifts); the others are totals since the queue existed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    pub pending: i64,
    pub running: i64,
    pub scheduled: i64,
    /// Jobs in the dead-letter queue.
    pub dead: i64,
    /// Jobs enqueued (retries not included).
    pub enqueued: i64,
    pub completed: i64,
    /// Failed attempts (retried or dead-lettered, expired leases included).
    pub failed: i64,
    pub cancelled: i64,
    /// When a recount last repaired one of the queue's lanes.
    pub recounted_at: Option<SystemTime>,
}

/// What a recount did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recount {
    pub lanes: usize,
    /// Lanes whose counters were replaced by their true sizes.
    pub stored: usize,
    /// Of those, lanes whose counters had drifted.
    pub repaired: usize,
    /// Lanes left alone because a write reached them meanwhile (not forced).
    pub busy: usize,
}

/// The in-memory deltas of one process and the task that flushes them.
pub(crate) struct Counters {
    inner: Arc<Inner>,
}

struct Inner {
    deltas: Mutex<HashMap<i32, Delta>>,
    pool: Pool,
    interval: Duration,
    started: AtomicBool,
    /// One flush at a time, so that a flush returns only once every delta taken before it
    /// is written (a caller reading counts after `flush_counters` sees its own work).
    flushing: tokio::sync::Mutex<()>,
}

impl Counters {
    pub fn new(pool: Pool, interval: Duration) -> Counters {
        Counters {
            inner: Arc::new(Inner {
                deltas: Mutex::new(HashMap::new()),
                pool,
                interval,
                started: AtomicBool::new(false),
                flushing: tokio::sync::Mutex::new(()),
            }),
        }
    }

    pub fn interval(&self) -> Duration {
        self.inner.interval
    }

    /// Adds to a lane's deltas.
    pub fn add(&self, lane: i32, d: Delta) {
        self.add_all([(lane, d)]);
    }

    /// Jobs of an enqueue statement: `(lane, run_at)` each.
    pub fn enqueued<'a>(&self, jobs: impl Iterator<Item = (&'a i32, &'a Option<SystemTime>)>) {
        let now = SystemTime::now();
        let mut per: HashMap<i32, Delta> = HashMap::new();
        for (lane, run_at) in jobs {
            let d = per.entry(*lane).or_default();
            d.enqueued += 1;
            if run_at.is_some_and(|t| t > now) {
                d.scheduled += 1;
            } else {
                d.pending += 1;
            }
        }
        self.add_all(per);
    }

    /// Jobs handed out by a claim, per lane.
    pub fn claimed(&self, per_lane: &HashMap<i32, usize>) {
        self.add_all(per_lane.iter().map(|(&lane, &n)| {
            let n = n as i64;
            (
                lane,
                Delta {
                    pending: -n,
                    running: n,
                    ..Delta::default()
                },
            )
        }));
    }

    /// Outcomes that won (were recorded).
    pub fn finished<'a>(&self, won: impl Iterator<Item = &'a Outcome>) {
        let mut per: HashMap<i32, Delta> = HashMap::new();
        for o in won {
            let d = per.entry(o.lane).or_default();
            d.running -= 1;
            // As complete.sql decides: a delay under a millisecond re-enqueues at once.
            let later = |delay: &Duration| delay.as_millis() > 0;
            match &o.kind {
                OutcomeKind::Completed => d.completed += 1,
                OutcomeKind::Retry { delay } => {
                    d.failed += 1;
                    if later(delay) {
                        d.scheduled += 1;
                    } else {
                        d.pending += 1;
                    }
                }
                OutcomeKind::Snooze { delay } => {
                    if later(delay) {
                        d.scheduled += 1;
                    } else {
                        d.pending += 1;
                    }
                }
                OutcomeKind::Released => d.pending += 1,
                OutcomeKind::Dead => {
                    d.failed += 1;
                    d.dead += 1;
                }
                OutcomeKind::Cancelled => d.cancelled += 1,
            }
        }
        self.add_all(per);
    }

    /// Starts the flusher on first use (a runtime is running: this is called from the
    /// engine's async operations).
    fn add_all(&self, per: impl IntoIterator<Item = (i32, Delta)>) {
        let mut any = false;
        {
            let mut m = self.inner.deltas.lock().expect("counter deltas");
            for (lane, d) in per {
                m.entry(lane).or_default().add(&d);
                any = true;
            }
        }
        if any && !self.inner.started.swap(true, Ordering::AcqRel) {
            tokio::spawn(flusher(Arc::downgrade(&self.inner)));
        }
    }

    pub async fn flush(&self) -> Result<()> {
        self.inner.flush().await
    }
}

impl Inner {
    async fn flush(&self) -> Result<()> {
        let _one = self.flushing.lock().await;
        let taken: Vec<(i32, Delta)> = {
            let mut m = self.deltas.lock().expect("counter deltas");
            m.drain().filter(|(_, d)| *d != Delta::default()).collect()
        };
        if taken.is_empty() {
            return Ok(());
        }
        let result = self.write(&taken).await;
        if result.is_err() {
            // Kept for the next flush: a failed statement wrote nothing.
            let mut m = self.deltas.lock().expect("counter deltas");
            for (lane, d) in &taken {
                m.entry(*lane).or_default().add(d);
            }
        }
        result
    }

    async fn write(&self, taken: &[(i32, Delta)]) -> Result<()> {
        let col = |f: fn(&Delta) -> i64| taken.iter().map(|(_, d)| f(d)).collect::<Vec<_>>();
        let lanes: Vec<i32> = taken.iter().map(|(l, _)| *l).collect();
        let client = self.pool.get().await?;
        let stmt = client.prepare_cached(FLUSH).await?;
        client
            .execute(
                &stmt,
                &[
                    &lanes,
                    &col(|d| d.pending),
                    &col(|d| d.running),
                    &col(|d| d.scheduled),
                    &col(|d| d.dead),
                    &col(|d| d.enqueued),
                    &col(|d| d.completed),
                    &col(|d| d.failed),
                    &col(|d| d.cancelled),
                ],
            )
            .await?;
        Ok(())
    }
}

/// Flushes every interval until the engine is gone.
async fn flusher(inner: Weak<Inner>) {
    let interval = match inner.upgrade() {
        Some(i) => i.interval,
        None => return,
    };
    loop {
        tokio::time::sleep(interval).await;
        let Some(inner) = inner.upgrade() else { return };
        if let Err(e) = inner.flush().await {
            tracing::warn!(error = %e, "counter flush failed; kept for the next one");
        }
    }
}

impl Engine {
    /// Counts of the named queues (engine names), from their counters; unknown names are
    /// left out. One statement.
    pub async fn queue_counts(&self, queues: &[String]) -> Result<HashMap<String, QueueCounts>> {
        let client = self.pool().get().await?;
        let rows = client.query(QUEUES, &[&queues]).await?;
        Ok(rows
            .iter()
            .map(|r| {
                let cur = |name: &str| r.get::<_, i64>(name).max(0);
                (
                    r.get("name"),
                    QueueCounts {
                        pending: cur("pending"),
                        running: cur("running"),
                        scheduled: cur("scheduled"),
                        dead: cur("dead"),
                        enqueued: r.get("enqueued"),
                        completed: r.get("completed"),
                        failed: r.get("failed"),
                        cancelled: r.get("cancelled"),
                        recounted_at: r.get("recounted_at"),
                    },
                )
            })
            .collect())
    }

    /// Writes this process's counted deltas now (they are written every
    /// `EngineConfig::counter_flush` anyway; call before a clean shutdown).
    pub async fn flush_counters(&self) -> Result<()> {
        self.counters().flush().await
    }

    /// Replaces the counters of `queue`'s lanes by their true sizes. A lane that some write
    /// reached while its truth was read (the wait covers two flush intervals) is left for a
    /// later recount, unless `force`: then in-flight deltas of statements committed before
    /// the read are counted twice (at most one flush interval of the lane's traffic).
    pub async fn recount_queue(&self, queue: &str, force: bool) -> Result<Recount> {
        validate_queue_name(queue)?;
        let lanes: Vec<i32> = {
            let client = self.pool().get().await?;
            client
                .query(QUEUE_LANES, &[&queue])
                .await?
                .iter()
                .map(|r| r.get("lane"))
                .collect()
        };
        let mut report = Recount {
            lanes: lanes.len(),
            ..Recount::default()
        };
        for lane in lanes {
            match self.recount_lane(lane, force).await? {
                LaneRecount::Stored { drifted } => {
                    report.stored += 1;
                    report.repaired += usize::from(drifted);
                }
                LaneRecount::Busy => report.busy += 1,
            }
        }
        Ok(report)
    }

    pub(crate) async fn recount_lane(&self, lane: i32, force: bool) -> Result<LaneRecount> {
        let client = self.pool().get().await?;
        recount_lane(&**client, lane, force, self.counters().interval() * 2).await
    }
}

pub(crate) enum LaneRecount {
    Stored { drifted: bool },
    Busy,
}

/// Recounts one lane (see [`Engine::recount_queue`]); the leader's duty calls this too.
pub(crate) async fn recount_lane<C: GenericClient>(
    client: &C,
    lane: i32,
    force: bool,
    settle: Duration,
) -> Result<LaneRecount> {
    let counted = client.query_opt(COUNTED, &[&lane]).await?;
    // Both statements name the four counts alike (pending, running, scheduled, dead).
    let counts = |r: &tokio_postgres::Row| -> [i64; 4] {
        ["pending", "running", "scheduled", "dead"].map(|c| r.get(c))
    };
    let version: Option<i64> = counted.as_ref().map(|r| r.get("version"));
    let counted: Option<[i64; 4]> = counted.as_ref().map(counts);
    let row = client.query_one(TRUTH, &[&lane]).await?;
    let truth: [i64; 4] = counts(&row);
    if truth.iter().any(|v| *v < 0) {
        return Err(Error::Conflict(format!(
            "lane {lane}: a recount found negative sizes {truth:?}"
        )));
    }
    if !force {
        // Deltas of statements that committed before the truth was read reach the counters
        // within a flush interval; if one does, the version moves and nothing is stored.
        tokio::time::sleep(settle).await;
    }
    let stored = client
        .query_opt(
            SET,
            &[
                &lane, &truth[0], &truth[1], &truth[2], &truth[3], &version, &force,
            ],
        )
        .await?;
    Ok(match stored {
        Some(_) => LaneRecount::Stored {
            drifted: counted.unwrap_or_default() != truth,
        },
        None => LaneRecount::Busy,
    })
}
