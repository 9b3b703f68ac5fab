//! The engine: enqueue, claim and complete on the append-only log.
//!
//! Every public operation is one statement per batch (statement-count tests pin this):
//! enqueue = one INSERT, claim = one call of `pgferry.claim` per lane tried, complete = one
//! CTE covering success, retries, delayed retries, dead-letters and results.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use deadpool_postgres::Pool;
use serde_json::Value;
use tokio::sync::{watch, Notify};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::GenericClient;

use crate::counters::Counters;
use crate::error::{Error, Result};
use crate::job::{ClaimedJob, Completed, NewJob, Outcome, OutcomeKind};
use crate::lanes::{LaneCache, QueueLanes};

const ENQUEUE: &str = include_str!("sql/enqueue.sql");
const ENQUEUE_SCHEDULED: &str = include_str!("sql/enqueue_scheduled.sql");
const CLAIM: &str = include_str!("sql/claim.sql");
const CLAIM_LIMITED: &str = include_str!("sql/claim_limited.sql");
const COMPLETE: &str = include_str!("sql/complete.sql");
const QUEUE_UPSERT: &str = include_str!("sql/queue_upsert.sql");

/// Limits and defaults of an engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Largest args + meta of one job, in bytes of JSON.
    pub max_payload_bytes: usize,
    /// Largest enqueue or complete batch.
    pub max_batch: usize,
    /// Rows one statement of `list_jobs` reads at most (spread over the queue's lanes).
    pub list_round_rows: i64,
    /// How often this process writes its counter deltas (see counters.rs).
    pub counter_flush: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_payload_bytes: 1 << 20,
            max_batch: 10_000,
            list_round_rows: 4_000,
            counter_flush: Duration::from_secs(1),
        }
    }
}

/// Settings of a queue.
#[derive(Debug, Clone)]
pub struct QueueOptions {
    pub shards: i16,
    pub max_attempts: i32,
    pub lease: Duration,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            shards: 1,
            max_attempts: 25,
            lease: Duration::from_secs(60),
        }
    }
}

pub struct Engine {
    pool: Pool,
    lanes: LaneCache,
    config: EngineConfig,
    /// Latest tick id known to this process; claimers wait on it instead of polling.
    ticks: watch::Sender<i64>,
    /// Job ids whose cancellation was requested (from LISTEN pgferry_cancel).
    cancels: tokio::sync::broadcast::Sender<i64>,
    /// Signalled after each enqueue so an in-process ticker ticks without waiting.
    log_grew: Arc<Notify>,
    /// Per-lane deltas of this process's committed statements (queue counts).
    counters: Counters,
}

impl Engine {
    pub fn new(pool: Pool, config: EngineConfig) -> Arc<Engine> {
        Arc::new(Engine {
            counters: Counters::new(pool.clone(), config.counter_flush),
            pool,
            lanes: LaneCache::default(),
            config,
            ticks: watch::Sender::new(0),
            cancels: tokio::sync::broadcast::Sender::new(1024),
            log_grew: Arc::new(Notify::new()),
        })
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Creates or reconfigures a queue.
    pub async fn upsert_queue(&self, name: &str, opts: &QueueOptions) -> Result<()> {
        crate::job::validate_queue_name(name)?;
        if !(1..=64).contains(&opts.shards) {
            return Err(Error::InvalidArgument {
                field: "shards",
                reason: format!("{} is not in 1..=64", opts.shards),
            });
        }
        let lease_ms = i32::try_from(opts.lease.as_millis()).unwrap_or(i32::MAX);
        let client = self.pool.get().await?;
        client
            .execute(
                QUEUE_UPSERT,
                &[&name, &opts.shards, &opts.max_attempts, &lease_ms],
            )
            .await?;
        self.lanes.invalidate(name);
        Ok(())
    }

    /// Enqueues a batch in one statement; returns job ids in input order. Nothing is written
    /// unless every job is valid.
    pub async fn enqueue(&self, jobs: &[NewJob]) -> Result<Vec<i64>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        if jobs.iter().any(|j| j.unique_key.is_some()) {
            let done = self.enqueue_many(jobs).await?;
            return Ok(done.into_iter().map(|e| e.id).collect());
        }
        let client = self.pool.get().await?;
        let batch = self.enqueue_batch(&**client, jobs).await?;
        let rows = if batch.any_future {
            let stmt = client.prepare_cached(ENQUEUE_SCHEDULED).await?;
            client.query(&stmt, &batch.params_scheduled()).await?
        } else {
            let stmt = client.prepare_cached(ENQUEUE).await?;
            client.query(&stmt, &batch.params()).await?
        };
        self.counters
            .enqueued(batch.lanes.iter().zip(&batch.run_ats));
        self.log_grew.notify_one();
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Enqueues inside the caller's transaction (or on any client): the jobs become
    /// claimable when that transaction commits, and never if it rolls back. One round trip
    /// (`query_typed`: no separate prepare).
    pub async fn enqueue_tx<C: GenericClient>(
        &self,
        client: &C,
        jobs: &[NewJob],
    ) -> Result<Vec<i64>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        if jobs.iter().any(|j| j.unique_key.is_some()) {
            // Taking over a key from a finished holder takes more statements than one
            // round trip inside the caller's transaction allows.
            return Err(Error::InvalidArgument {
                field: "unique_key",
                reason: "not supported by transactional enqueue; use enqueue".into(),
            });
        }
        let batch = self.enqueue_batch(client, jobs).await?;
        let types = [
            Type::INT4_ARRAY,
            Type::TEXT_ARRAY,
            Type::JSONB_ARRAY,
            Type::JSONB_ARRAY,
            Type::INT4_ARRAY,
            Type::TIMESTAMPTZ_ARRAY,
        ];
        let rows = if batch.any_future {
            let typed: Vec<(&(dyn ToSql + Sync), Type)> =
                batch.params_scheduled().into_iter().zip(types).collect();
            client.query_typed(ENQUEUE_SCHEDULED, &typed).await?
        } else {
            let typed: Vec<(&(dyn ToSql + Sync), Type)> =
                batch.params().into_iter().zip(types).collect();
            client.query_typed(ENQUEUE, &typed).await?
        };
        // Counted now: a rolled-back caller transaction leaves drift for the recount.
        self.counters
            .enqueued(batch.lanes.iter().zip(&batch.run_ats));
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Validates a batch and resolves lanes; builds the column arrays of the INSERT.
    pub(crate) async fn enqueue_batch<'a, C: GenericClient>(
        &self,
        client: &C,
        jobs: &'a [NewJob],
    ) -> Result<EnqueueBatch<'a>> {
        if jobs.len() > self.config.max_batch {
            return Err(Error::BatchTooLarge {
                size: jobs.len(),
                limit: self.config.max_batch,
            });
        }
        for (i, job) in jobs.iter().enumerate() {
            job.validate(i, self.config.max_payload_bytes)?;
        }
        let n = jobs.len();
        let mut b = EnqueueBatch {
            lanes: Vec::with_capacity(n),
            kinds: Vec::with_capacity(n),
            args: Vec::with_capacity(n),
            metas: Vec::with_capacity(n),
            max_attempts: Vec::with_capacity(n),
            run_ats: Vec::with_capacity(n),
            any_future: false,
            queues: Vec::with_capacity(n),
            keys: Vec::with_capacity(n),
            periods: Vec::with_capacity(n),
        };
        let now = SystemTime::now();
        let mut last: Option<(&str, u8, Arc<QueueLanes>)> = None;
        for job in jobs {
            let (queue, lane) = match &last {
                Some((name, p, q)) if *name == job.queue && *p == job.priority => {
                    let lane = q.lane_for(job.priority).expect("cached with its lanes");
                    (q.clone(), lane)
                }
                _ => {
                    let (q, lane) = self
                        .lanes
                        .for_enqueue(client, &job.queue, job.priority)
                        .await?;
                    last = Some((&job.queue, job.priority, q.clone()));
                    (q, lane)
                }
            };
            b.lanes.push(lane);
            b.kinds.push(job.kind.as_str());
            b.args.push(&job.args);
            b.metas.push(job.meta.as_ref());
            b.max_attempts
                .push(job.max_attempts.unwrap_or(queue.max_attempts));
            b.any_future |= job.run_at.is_some_and(|t| t > now);
            b.run_ats.push(job.run_at);
            b.queues.push(job.queue.as_str());
            b.keys.push(job.unique_key.as_deref());
            b.periods.push(
                job.unique_period
                    .map(|p| i64::try_from(p.as_millis()).unwrap_or(i64::MAX)),
            );
        }
        Ok(b)
    }

    /// Claims up to `max` jobs of `queue` in one statement: lanes in priority order, the
    /// shards of each priority starting at a rotating offset so concurrent claimers spread
    /// over shards instead of queueing on one lane's lock.
    pub async fn claim(&self, queue: &str, max: usize, worker: &str) -> Result<Vec<ClaimedJob>> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let max = i32::try_from(max.min(self.config.max_batch)).unwrap_or(i32::MAX);
        let client = self.pool.get().await?;
        let lanes = self.lanes.for_claim(&**client, queue).await?;
        if lanes.paused {
            return Ok(Vec::new());
        }
        // The tick known before the claim: a lane found empty now has nothing new until a
        // later tick (claims read the newest tick in the database, never an older one).
        let tick = *self.ticks.borrow();
        let order = lanes.claim_order(tick);
        if order.is_empty() {
            return Ok(Vec::new());
        }
        let rows = match lanes.concurrency {
            None => {
                let stmt = client.prepare_cached(CLAIM).await?;
                client
                    .query(&stmt, &[&order, &max, &worker, &lanes.lease_ms])
                    .await?
            }
            Some(limit) => {
                let stmt = client.prepare_cached(CLAIM_LIMITED).await?;
                let params: [&(dyn ToSql + Sync); 6] = [
                    &lanes.queue_id,
                    &limit,
                    &order,
                    &max,
                    &worker,
                    &lanes.lease_ms,
                ];
                client.query(&stmt, &params).await?
            }
        };
        let mut per_lane: HashMap<i32, usize> = HashMap::new();
        for r in &rows {
            *per_lane.entry(r.get(9)).or_default() += 1;
        }
        lanes.record_claim(&order, &per_lane, max as usize, tick);
        self.counters.claimed(&per_lane);
        Ok(rows
            .iter()
            .map(|r| row_to_claimed(r, lanes.backoff))
            .collect())
    }

    /// Records a batch of outcomes in one statement. Each answer says whether the outcome won
    /// (first for its attempt) or was stale.
    pub async fn complete(&self, outcomes: &[Outcome]) -> Result<Vec<Completed>> {
        if outcomes.is_empty() {
            return Ok(Vec::new());
        }
        if outcomes.len() > self.config.max_batch {
            return Err(Error::BatchTooLarge {
                size: outcomes.len(),
                limit: self.config.max_batch,
            });
        }
        let n = outcomes.len();
        let mut ids = Vec::with_capacity(n);
        let mut attempts = Vec::with_capacity(n);
        let mut segments = Vec::with_capacity(n);
        let mut receipts = Vec::with_capacity(n);
        let mut lanes = Vec::with_capacity(n);
        let mut rsegs = Vec::with_capacity(n);
        let mut codes = Vec::with_capacity(n);
        let mut errors: Vec<Option<&str>> = Vec::with_capacity(n);
        let mut delays: Vec<Option<i64>> = Vec::with_capacity(n);
        let mut results: Vec<Option<&Value>> = Vec::with_capacity(n);
        let mut durations: Vec<Option<i32>> = Vec::with_capacity(n);
        for o in outcomes {
            ids.push(o.job_id);
            attempts.push(o.attempt);
            segments.push(o.segment);
            receipts.push(o.receipt_id);
            lanes.push(o.lane);
            rsegs.push(o.receipt_segment);
            codes.push(o.kind.code());
            errors.push(o.error.as_deref());
            delays.push(match o.kind {
                OutcomeKind::Retry { delay } | OutcomeKind::Snooze { delay } => {
                    Some(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX))
                }
                _ => None,
            });
            results.push(o.result.as_ref());
            durations.push(o.duration_ms);
        }
        let client = self.pool.get().await?;
        let stmt = client.prepare_cached(COMPLETE).await?;
        let rows = client
            .query(
                &stmt,
                &[
                    &ids, &attempts, &segments, &receipts, &lanes, &rsegs, &codes, &errors,
                    &delays, &results, &durations,
                ],
            )
            .await?;
        self.counters.finished(
            outcomes
                .iter()
                .zip(rows.iter())
                .filter(|(_, r)| r.get::<_, bool>(1))
                .map(|(o, _)| o),
        );
        // One row per outcome, in input order (ORDER BY ord).
        Ok(outcomes
            .iter()
            .zip(rows.iter())
            .map(|(o, r)| Completed {
                job_id: o.job_id,
                attempt: o.attempt,
                stale: !r.get::<_, bool>(1),
            })
            .collect())
    }

    /// Drops a queue from this process's lane cache (its settings changed).
    pub(crate) fn forget_queue(&self, name: &str) {
        self.lanes.invalidate(name);
    }

    /// Notified when this process appended to the log (the ticker's early wake-up).
    pub fn log_grew(&self) -> Arc<Notify> {
        self.log_grew.clone()
    }

    /// Waits until a tick newer than `seen` is known, or `timeout` passes; returns the latest
    /// tick id. Claimers call this between empty claims instead of polling.
    pub async fn wait_for_tick(&self, seen: i64, timeout: std::time::Duration) -> i64 {
        let mut rx = self.ticks.subscribe();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|t| *t > seen)).await;
        let latest = *rx.borrow();
        latest
    }

    /// The latest tick id this process has heard of.
    /// Cancellation requests, as job ids, for servers to tell the worker holding the job.
    /// A lagging receiver misses some; heartbeats (`Beat::cancelled`) catch those.
    pub fn subscribe_cancels(&self) -> tokio::sync::broadcast::Receiver<i64> {
        self.cancels.subscribe()
    }

    pub fn publish_cancel(&self, job_id: i64) {
        let _ = self.cancels.send(job_id);
    }

    pub fn subscribe_ticks(&self) -> watch::Receiver<i64> {
        self.ticks.subscribe()
    }

    /// Called by the in-process ticker or a LISTEN task when a tick is seen.
    pub fn publish_tick(&self, tick_id: i64) {
        self.ticks.send_if_modified(|cur| {
            if tick_id > *cur {
                *cur = tick_id;
                true
            } else {
                false
            }
        });
    }
}

fn row_to_claimed(r: &tokio_postgres::Row, backoff: crate::job::Backoff) -> ClaimedJob {
    ClaimedJob {
        receipt_id: r.get(0),
        job_id: r.get(1),
        attempt: r.get(2),
        segment: r.get(3),
        max_attempts: r.get(4),
        kind: r.get(5),
        args: r.get(6),
        meta: r.get(7),
        enqueued_at: r.get::<_, SystemTime>(8),
        lane: r.get(9),
        receipt_segment: r.get(10),
        backoff,
    }
}

/// Column arrays of one enqueue statement.
pub(crate) struct EnqueueBatch<'a> {
    lanes: Vec<i32>,
    kinds: Vec<&'a str>,
    args: Vec<&'a Value>,
    metas: Vec<Option<&'a Value>>,
    max_attempts: Vec<i32>,
    run_ats: Vec<Option<SystemTime>>,
    /// Some job runs later: the statement that also writes `scheduled` is needed.
    any_future: bool,
    queues: Vec<&'a str>,
    keys: Vec<Option<&'a str>>,
    periods: Vec<Option<i64>>,
}

impl EnqueueBatch<'_> {
    /// Lane and run time of the batch's job `i` (counters).
    pub(crate) fn job_at(&self, i: usize) -> (&i32, &Option<SystemTime>) {
        (&self.lanes[i], &self.run_ats[i])
    }

    pub(crate) fn params_unique(&self) -> [&(dyn ToSql + Sync); 9] {
        [
            &self.lanes,
            &self.kinds,
            &self.args,
            &self.metas,
            &self.max_attempts,
            &self.run_ats,
            &self.queues,
            &self.keys,
            &self.periods,
        ]
    }

    fn params_scheduled(&self) -> [&(dyn ToSql + Sync); 6] {
        [
            &self.lanes,
            &self.kinds,
            &self.args,
            &self.metas,
            &self.max_attempts,
            &self.run_ats,
        ]
    }

    fn params(&self) -> [&(dyn ToSql + Sync); 5] {
        [
            &self.lanes,
            &self.kinds,
            &self.args,
            &self.metas,
            &self.max_attempts,
        ]
    }
}
