//! The engine: enqueue, claim and complete on the append-only log.
//!
//! Every public operation is one statement per batch (statement-count tests pin this):
//! enqueue = one INSERT or COPY (enqueue/log_write.rs), claim = one call of `pgferry.claim_lanes`, complete = one
//! CTE covering success, retries, delayed retries, dead-letters and results.
//!
//! `Engine` is the handle; its work lives with the concern, one file each: enqueue
//! (enqueue.rs, unique.rs, idempotency.rs), claim and complete (here, completion.rs),
//! heartbeats and hand-over (control.rs), lookups and listings (lookup.rs, listing.rs), the
//! dead-letter queue (dlq.rs), cancellation (cancelling.rs), queues and their settings
//! (queues.rs), queue counts (counters.rs). What it keeps in memory is in parts of their
//! own: the pools (db.rs), the lane cache and busy lanes (lanes.rs), id blocks and the
//! current segment (ids.rs), and what the process hears about the log — ticks,
//! cancellations, growth — in [`Signals`] (signals.rs, `engine.signals()`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use deadpool_postgres::{Object, Pool};
use tokio_postgres::types::ToSql;

use crate::counters::Counters;
use crate::db::Pools;
use crate::error::{Error, Result};
use crate::ids::{IdBlocks, SegmentCache};
use crate::job::{ClaimedJob, Completed, Outcome};
use crate::lanes::{BusyLanes, LaneCache};
use crate::signals::Signals;

const CLAIM: &str = include_str!("sql/claim.sql");
const CLAIM_LIMITED: &str = include_str!("sql/claim_limited.sql");
const QUEUE_UPSERT: &str = include_str!("sql/queue_upsert.sql");
const LANE_HEAD_AGE: &str = include_str!("sql/lane_head_age.sql");

/// Limits and defaults of an engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Largest args + meta of one job, in bytes of JSON.
    pub max_payload_bytes: usize,
    /// Largest enqueue or complete batch.
    pub max_batch: usize,
    /// Rows one statement of `list_jobs` reads at most (spread over the queue's lanes);
    /// a call's first statements read fewer (`listing::round_rows`).
    pub list_round_rows: i64,
    /// How often this process writes its counter deltas (see counters.rs).
    pub counter_flush: Duration,
    /// Batches of jobs due now with at most this many jobs (and no idempotency key) are
    /// written by one INSERT, acknowledged in one round trip; larger ones by a COPY, two
    /// round trips but cheaper per row (enqueue/log_write.rs). 0: always COPY.
    pub insert_max_rows: usize,
    /// Claims commit with `synchronous_commit = off` (ADR 0019): a claim acknowledges nothing,
    /// one lost in a crash is a lease never taken (its jobs are claimed again), and the
    /// outcome's synchronous commit flushes it first. Takes one WAL flush off every claim.
    /// `false`: claims commit like the server's other writes.
    pub async_claims: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_payload_bytes: 1 << 20,
            max_batch: 10_000,
            list_round_rows: 4_000,
            counter_flush: Duration::from_secs(1),
            insert_max_rows: 16,
            async_claims: true,
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
    /// Sessions with `synchronous_commit = off`, for queues that chose async durability
    /// (db.rs); None: those queues commit synchronously.
    async_pool: Option<Pool>,
    pub(crate) lanes: LaneCache,
    /// Lanes this process's claims hold right now (lanes.rs).
    busy: BusyLanes,
    /// Job id blocks reserved by this process (enqueue.rs, ids.rs).
    pub(crate) ids: IdBlocks,
    /// The segment this process's COPYs write to.
    pub(crate) segment: SegmentCache,
    config: EngineConfig,
    /// Ticks, cancellations and log growth as this process hears and tells them.
    signals: Signals,
    /// Per-lane deltas of this process's committed statements (queue counts).
    counters: Counters,
}

impl Engine {
    /// An engine over `pools`: a [`Pools`] from [`Pools::new`], or a single `Pool` (then
    /// every write commits synchronously, whatever its queue's durability).
    pub fn new(pools: impl Into<Pools>, config: EngineConfig) -> Arc<Engine> {
        let Pools {
            sync: pool,
            async_commit,
        } = pools.into();
        Arc::new(Engine {
            counters: Counters::new(pool.clone(), config.counter_flush),
            pool,
            async_pool: async_commit,
            lanes: LaneCache::default(),
            busy: BusyLanes::default(),
            ids: IdBlocks::default(),
            segment: SegmentCache::default(),
            config,
            signals: Signals::default(),
        })
    }

    /// Closes both pools: checked-out connections close when returned, new checkouts fail.
    /// Call once nothing uses the engine any more (the runtime's shutdown does).
    pub fn close(&self) {
        self.pool.close();
        if let Some(p) = &self.async_pool {
            p.close();
        }
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

    /// Whether writes of `queue` alone would commit asynchronously, as far as this process
    /// knows (a queue not used here yet counts as synchronous). The server routes requests
    /// by it, so that group commit does not merge an async queue's writes into flushes that
    /// must commit synchronously.
    pub fn commits_async(&self, queue: &str) -> bool {
        self.async_pool.is_some() && self.lanes.is_async(queue)
    }

    /// [`Engine::commits_async`] for outcomes: every lane belongs to an async queue.
    pub fn lanes_commit_async(&self, lanes: impl IntoIterator<Item = i32>) -> bool {
        self.async_pool.is_some() && self.lanes.all_async(lanes)
    }

    /// The connection a hot-path write runs on: `client` (synchronous), or one of the async
    /// pool when the write may commit asynchronously ([`Engine::commits_async`],
    /// [`Engine::lanes_commit_async`]). Swapping costs a pool checkout, not a round trip.
    pub(crate) async fn writer(&self, client: Object, async_commit: bool) -> Result<Object> {
        match &self.async_pool {
            Some(pool) if async_commit => {
                drop(client);
                Ok(pool.get().await?)
            }
            _ => Ok(client),
        }
    }

    /// [`Engine::writer`] for a write that needs no connection before it: checks out from the
    /// right pool at once instead of taking a synchronous one only to swap it.
    async fn writer_for(&self, async_commit: bool) -> Result<Object> {
        match &self.async_pool {
            Some(pool) if async_commit => Ok(pool.get().await?),
            _ => Ok(self.pool.get().await?),
        }
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
        let client = self.writer(client, lanes.async_commit).await?;
        let _serving = crate::serving::serve(&client, "claimer", queue, "");
        // Claim-time aging: how long the heads of starved lower priorities have waited (a
        // probe at most every aging/4 per queue, only while a priority is not being served).
        for (p, lanes_p) in lanes.heads_to_probe() {
            let stmt = client.prepare_cached(LANE_HEAD_AGE).await?;
            let waited: Option<f64> = client
                .query_one(&stmt, &[&lanes_p])
                .await?
                .get("waited_seconds");
            lanes.record_head(p, waited.map(|s| Duration::from_secs_f64(s.max(0.0))));
        }
        // The tick known before the claim: a lane found empty now has nothing new until a
        // later tick (claims read the newest tick in the database, never an older one).
        let tick = self.signals.latest_tick();
        let held = self
            .busy
            .take(lanes.claim_order(tick), |l| lanes.priority_of(l));
        if held.lanes.is_empty() {
            return Ok(Vec::new());
        }
        let order = &held.lanes;
        let lease_until = SystemTime::now()
            + std::time::Duration::from_millis(u64::try_from(lanes.lease_ms).unwrap_or(0));
        let rows = match lanes.concurrency {
            None => {
                let stmt = client.prepare_cached(CLAIM).await?;
                let params: [&(dyn ToSql + Sync); 5] = [
                    order,
                    &max,
                    &worker,
                    &lanes.lease_ms,
                    &self.config.async_claims,
                ];
                client.query(&stmt, &params).await?
            }
            Some(limit) => {
                let stmt = client.prepare_cached(CLAIM_LIMITED).await?;
                let params: [&(dyn ToSql + Sync); 7] = [
                    &lanes.queue_id,
                    &limit,
                    order,
                    &max,
                    &worker,
                    &lanes.lease_ms,
                    &self.config.async_claims,
                ];
                client.query(&stmt, &params).await?
            }
        };
        let Some(first) = rows.first() else {
            lanes.record_claim(order, &HashMap::new(), max as usize, tick);
            return Ok(Vec::new());
        };
        // Columns by name, resolved once per batch rather than once per row and field.
        let cols = ClaimColumns::of(first)?;
        let mut per_lane: HashMap<i32, usize> = HashMap::new();
        for r in &rows {
            *per_lane.entry(r.get(cols.lane)).or_default() += 1;
        }
        lanes.record_claim(order, &per_lane, max as usize, tick);
        drop(held);
        self.counters.claimed(&per_lane);
        // The receipt went to the current segment: what COPYs should write to (ids.rs).
        self.segment.observe(first.get(cols.receipt_segment));
        Ok(rows
            .iter()
            .map(|r| {
                let mut job = row_to_claimed(r, &cols, lanes.backoff, lease_until);
                job.priority = lanes.priority_of(job.lane).map_or(0, |p| p as u8);
                job
            })
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
        let client = self
            .writer_for(self.lanes_commit_async(outcomes.iter().map(|o| o.lane)))
            .await?;
        let _serving = crate::serving::serve(&client, "completer", "", "");
        let won = crate::completion::record(&client, outcomes).await?;
        self.counters.finished(
            outcomes
                .iter()
                .zip(won.iter())
                .filter(|(_, w)| **w)
                .map(|(o, _)| o),
        );
        Ok(outcomes
            .iter()
            .zip(won.iter())
            .map(|(o, w)| Completed {
                job_id: o.job_id,
                attempt: o.attempt,
                stale: !*w,
            })
            .collect())
    }

    /// Tells this process which segment is current (the rotator's NOTIFY, via the listener):
    /// enqueues write there from now on (ids.rs).
    pub fn observe_segment(&self, segment: i16) {
        self.segment.observe(segment);
    }

    /// Drops a queue from this process's lane cache (its settings changed).
    pub(crate) fn forget_queue(&self, name: &str) {
        self.lanes.invalidate(name);
    }

    /// Ticks, cancellations and log growth (signals.rs).
    pub fn signals(&self) -> &Signals {
        &self.signals
    }
}

/// Positions of the columns of a claim's rows (claim.sql, claim_limited.sql), found by name.
struct ClaimColumns {
    receipt_id: usize,
    job_id: usize,
    attempt: usize,
    job_segment: usize,
    max_attempts: usize,
    kind: usize,
    args: usize,
    meta: usize,
    enqueued_at: usize,
    lane: usize,
    receipt_segment: usize,
}

impl ClaimColumns {
    fn of(row: &tokio_postgres::Row) -> Result<ClaimColumns> {
        let at = |name: &'static str| {
            row.columns()
                .iter()
                .position(|c| c.name() == name)
                .ok_or_else(|| Error::InvalidArgument {
                    field: "claim",
                    reason: format!("internal: the claim statement returns no column {name}"),
                })
        };
        Ok(ClaimColumns {
            receipt_id: at("receipt_id")?,
            job_id: at("job_id")?,
            attempt: at("attempt")?,
            job_segment: at("job_segment")?,
            max_attempts: at("max_attempts")?,
            kind: at("kind")?,
            args: at("args")?,
            meta: at("meta")?,
            enqueued_at: at("enqueued_at")?,
            lane: at("lane")?,
            receipt_segment: at("receipt_segment")?,
        })
    }
}

fn row_to_claimed(
    r: &tokio_postgres::Row,
    c: &ClaimColumns,
    backoff: crate::job::Backoff,
    lease_until: SystemTime,
) -> ClaimedJob {
    ClaimedJob {
        receipt_id: r.get(c.receipt_id),
        job_id: r.get(c.job_id),
        attempt: r.get(c.attempt),
        segment: r.get(c.job_segment),
        max_attempts: r.get(c.max_attempts),
        kind: r.get(c.kind),
        args: r.get(c.args),
        meta: r.get(c.meta),
        enqueued_at: r.get::<_, SystemTime>(c.enqueued_at),
        lane: r.get(c.lane),
        receipt_segment: r.get(c.receipt_segment),
        backoff,
        priority: 0,
        lease_until,
    }
}
