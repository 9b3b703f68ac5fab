//! Enqueue: one statement per batch, whatever its size.
//!
//! Jobs to run now — the hot path — go into the log with one binary COPY: the cheapest way
//! into Postgres (one WAL record per heap page instead of per row) and no job-id index entry
//! except one per block of ids (ids.rs, ADR 0006). A batch with a future `run_at` goes through
//! one INSERT … RETURNING (enqueue_scheduled.sql) that also writes `scheduled`; unique keys go
//! through `enqueue_many` (unique.rs).

use std::sync::Arc;
use std::time::SystemTime;

use futures_util::pin_mut;
use serde_json::Value;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, GenericClient, Statement};

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::ids::BLOCK;
use crate::job::NewJob;
use crate::lanes::QueueLanes;

const ENQUEUE_SCHEDULED: &str = include_str!("sql/enqueue_scheduled.sql");
/// Columns a fresh row gets from the engine; `xid` and `enqueued_at` are column defaults
/// (pg_current_xact_id() and now(): stable, so COPY still writes multi-row WAL records).
const COPY_READY: &str = "COPY pgferry.ready (segment, lane, seq, job_id, attempt, max_attempts, \
                          kind, args, meta, by_id) FROM STDIN (FORMAT binary)";
const COPY_TYPES: [Type; 10] = [
    Type::INT2,
    Type::INT4,
    Type::INT8,
    Type::INT8,
    Type::INT4,
    Type::INT4,
    Type::TEXT,
    Type::JSONB,
    Type::JSONB,
    Type::BOOL,
];
const SCHEDULED_TYPES: [Type; 6] = [
    Type::INT4_ARRAY,
    Type::TEXT_ARRAY,
    Type::JSONB_ARRAY,
    Type::JSONB_ARRAY,
    Type::INT4_ARRAY,
    Type::TIMESTAMPTZ_ARRAY,
];

impl Engine {
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
        let client = self.pool().get().await?;
        let batch = self.enqueue_batch(&**client, jobs).await?;
        let client = self
            .writer(client, self.lanes_commit_async(batch.lanes.iter().copied()))
            .await?;
        let ids = if batch.any_future {
            let stmt = client.prepare_cached(ENQUEUE_SCHEDULED).await?;
            let rows = client.query(&stmt, &batch.params_scheduled()).await?;
            rows.iter().map(|r| r.get(0)).collect()
        } else {
            let stmt = client.prepare_cached(COPY_READY).await?;
            self.copy_fresh(&client, &stmt, jobs, &batch).await?
        };
        self.counters()
            .enqueued(batch.lanes.iter().zip(&batch.run_ats));
        self.log_grew().notify_one();
        Ok(ids)
    }

    /// Enqueues inside the caller's transaction (or on any client): the jobs become
    /// claimable when that transaction commits, and never if it rolls back. One statement
    /// (a COPY, prepared on the caller's connection first).
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
        if batch.any_future {
            let typed: Vec<(&(dyn ToSql + Sync), Type)> = batch
                .params_scheduled()
                .into_iter()
                .zip(SCHEDULED_TYPES)
                .collect();
            let rows = client.query_typed(ENQUEUE_SCHEDULED, &typed).await?;
            // Counted now: a rolled-back caller transaction leaves drift for the recount.
            self.counters()
                .enqueued(batch.lanes.iter().zip(&batch.run_ats));
            return Ok(rows.iter().map(|r| r.get(0)).collect());
        }
        let stmt = client.prepare(COPY_READY).await?;
        let ids = self
            .copy_fresh(client.client(), &stmt, jobs, &batch)
            .await?;
        // Counted now: a rolled-back caller transaction leaves drift for the recount.
        self.counters()
            .enqueued(batch.lanes.iter().zip(&batch.run_ats));
        Ok(ids)
    }

    /// Writes a batch of jobs to run now with one COPY; returns their ids in input order.
    /// A COPY that met a segment detached since this process last looked (rotation) wrote
    /// nothing and is retried once with the current segment.
    async fn copy_fresh(
        &self,
        client: &Client,
        stmt: &Statement,
        jobs: &[NewJob],
        batch: &EnqueueBatch<'_>,
    ) -> Result<Vec<i64>> {
        // Group by lane, keeping input order inside each lane (claim order within a lane is
        // (xid, seq) and seq = job_id), then give each group its own block(s) of ids.
        let mut groups: Vec<(i32, Vec<usize>)> = Vec::new();
        for (i, lane) in batch.lanes.iter().enumerate() {
            match groups.iter_mut().find(|(l, _)| l == lane) {
                Some((_, members)) => members.push(i),
                None => groups.push((*lane, vec![i])),
            }
        }
        let blocks: usize = groups
            .iter()
            .map(|(_, m)| m.len().div_ceil(BLOCK as usize))
            .sum();
        let bases = self.ids.take(client, blocks).await?;
        let mut ids = vec![0i64; jobs.len()];
        let mut rows: Vec<(i32, usize, i64)> = Vec::with_capacity(jobs.len());
        let mut base = bases.iter();
        for (lane, members) in &groups {
            for chunk in members.chunks(BLOCK as usize) {
                let b = *base.next().expect("one base per block");
                for (k, &i) in chunk.iter().enumerate() {
                    ids[i] = b + k as i64;
                    rows.push((*lane, i, b + k as i64));
                }
            }
        }
        for retry in [false, true] {
            let segment = self.segment.get(client).await?;
            match copy_rows(client, stmt, segment, &rows, batch).await {
                Ok(()) => return Ok(ids),
                Err(e) if !retry && is_detached_segment(&e) => {
                    tracing::debug!(segment, "segment detached under a COPY; retrying");
                    self.segment.forget();
                }
                Err(e) => return Err(e.into()),
            }
        }
        unreachable!("the second attempt returns")
    }

    /// Validates a batch and resolves lanes; builds the column arrays of the statement.
    pub(crate) async fn enqueue_batch<'a, C: GenericClient>(
        &self,
        client: &C,
        jobs: &'a [NewJob],
    ) -> Result<EnqueueBatch<'a>> {
        let limit = self.config().max_batch;
        if jobs.len() > limit {
            return Err(Error::BatchTooLarge {
                size: jobs.len(),
                limit,
            });
        }
        for (i, job) in jobs.iter().enumerate() {
            job.validate(i, self.config().max_payload_bytes)?;
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
}

/// One COPY of fresh rows: (lane, index into the batch, job id) in write order.
async fn copy_rows(
    client: &Client,
    stmt: &Statement,
    segment: i16,
    rows: &[(i32, usize, i64)],
    batch: &EnqueueBatch<'_>,
) -> std::result::Result<(), tokio_postgres::Error> {
    let sink = client.copy_in(stmt).await?;
    let writer = BinaryCopyInWriter::new(sink, &COPY_TYPES);
    pin_mut!(writer);
    for &(lane, i, id) in rows {
        // The first id of a block is its anchor, the one row of the block indexed by id.
        let anchor = id % BLOCK == 0;
        writer
            .as_mut()
            .write(&[
                &segment,
                &lane,
                &id,
                &id,
                &1i32,
                &batch.max_attempts[i],
                &batch.kinds[i],
                batch.args[i],
                &batch.metas[i],
                &anchor,
            ])
            .await?;
    }
    writer.finish().await?;
    Ok(())
}

/// "no partition of relation … found for row": the segment was detached for freeing.
fn is_detached_segment(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::CHECK_VIOLATION)
        && e.as_db_error()
            .is_some_and(|d| d.message().starts_with("no partition of relation"))
}

/// Column arrays of one enqueue statement.
pub(crate) struct EnqueueBatch<'a> {
    pub(crate) lanes: Vec<i32>,
    kinds: Vec<&'a str>,
    args: Vec<&'a Value>,
    metas: Vec<Option<&'a Value>>,
    max_attempts: Vec<i32>,
    pub(crate) run_ats: Vec<Option<SystemTime>>,
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

    pub(crate) fn params_scheduled(&self) -> [&(dyn ToSql + Sync); 6] {
        [
            &self.lanes,
            &self.kinds,
            &self.args,
            &self.metas,
            &self.max_attempts,
            &self.run_ats,
        ]
    }
}
