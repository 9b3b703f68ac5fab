//! Enqueue: one statement per batch, whatever its size.
//!
//! Jobs to run now — the hot path — go into the log in one statement (log_write.rs): a small
//! batch as one INSERT in an implicit transaction (one round trip), a larger one as one
//! binary COPY, the cheapest way into Postgres (one WAL record per heap page instead of per
//! row); either way no job-id index entry except one per block of ids (ids.rs, ADR 0006). A batch with a future `run_at` goes through
//! one INSERT … RETURNING (enqueue_scheduled.sql) that also writes `scheduled`; unique keys go
//! through `enqueue_many` (unique.rs).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::GenericClient;

use crate::bound_params::bind_params;
use crate::db::OpenTxn;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::idempotency::{
    fingerprint, is_key_taken, reused, Acked, EnqueueRequest, IdempotencyKey,
};
use crate::job::NewJob;
use crate::lanes::QueueLanes;

mod log_write;
use log_write::{copy_rows, is_detached_segment, scheduled_committed, COPY_READY};

const ENQUEUE_SCHEDULED: &str = include_str!("../sql/enqueue_scheduled.sql");
const ENQUEUE_READY: &str = include_str!("../sql/enqueue_ready.sql");
const ENQUEUE_READY_KEYED: &str = include_str!("../sql/enqueue_ready_keyed.sql");
const IDEMPOTENCY_RECORD: &str = include_str!("../sql/idempotency_record.sql");
const IDEMPOTENCY_LOOKUP: &str = include_str!("../sql/idempotency_lookup.sql");
const LOCK_TIMEOUT_LOCAL: &str = include_str!("../sql/lock_timeout_local.sql");
const SCHEDULED_TYPES: [Type; 6] = [
    Type::INT4_ARRAY,
    Type::TEXT_ARRAY,
    Type::JSONB_ARRAY,
    Type::JSONB_ARRAY,
    Type::INT4_ARRAY,
    Type::TIMESTAMPTZ_ARRAY,
];

impl Engine {
    /// Enqueues a batch in one statement; returns job ids in input order, once the COMMIT of
    /// the rows is confirmed. Nothing is written unless every job is valid.
    pub async fn enqueue(&self, jobs: &[NewJob]) -> Result<Vec<i64>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        if jobs.iter().any(|j| j.unique_key.is_some()) {
            let done = self.enqueue_many(jobs).await?;
            return Ok(done.into_iter().map(|e| e.id).collect());
        }
        let jobs: Vec<&NewJob> = jobs.iter().collect();
        let mut written = self.write_requests(&jobs, &[], &[]).await?;
        Ok(written.pop().expect("one request"))
    }

    /// Enqueues one request with an idempotency key: the first request with `key` writes
    /// its jobs; a retry with the same key (within the retention) answers the same ids with
    /// `replayed: true` and writes nothing. See [`Engine::enqueue_requests`].
    pub async fn enqueue_idempotent(
        &self,
        key: IdempotencyKey,
        jobs: Vec<NewJob>,
    ) -> Result<Acked> {
        let request = EnqueueRequest::new(jobs).idempotency_key(key);
        let mut answers = self
            .enqueue_requests(std::slice::from_ref(&request))
            .await?;
        answers.pop().expect("one answer")
    }

    /// Enqueues several producers' requests together (group commit): one transaction for
    /// all of them, answered after its COMMIT. Each request is all or nothing. A request
    /// whose idempotency key was seen before is answered from the key (nothing written), or
    /// refused if the key was used for different jobs; the others are written. The outer
    /// error is everyone's (the database, the connection); the inner one a request's own.
    pub async fn enqueue_requests(
        &self,
        requests: &[EnqueueRequest],
    ) -> Result<Vec<Result<Acked>>> {
        let mut answers: Vec<Option<Result<Acked>>> = (0..requests.len()).map(|_| None).collect();
        let mut pending = Vec::new();
        for (i, r) in requests.iter().enumerate() {
            if r.jobs.is_empty() {
                answers[i] = Some(Ok(Acked::written(Vec::new())));
            } else if r.jobs.iter().any(|j| j.unique_key.is_some()) {
                answers[i] = Some(self.enqueue_unique_request(r).await);
            } else {
                pending.push(i);
            }
        }
        let fingerprints: Vec<Option<Vec<u8>>> = requests
            .iter()
            .map(|r| r.idempotency_key.as_ref().map(|_| fingerprint(&r.jobs)))
            .collect();
        // Optimistic: a retry is rare, so the flush is written as if every key were new; a
        // key that exists aborts the whole transaction, and the keys found are answered from
        // the table before the rest is written again. A few rounds at most (each answers at
        // least one request, unless the key's holder vanished in between).
        for _ in 0..=KEY_ROUNDS {
            if pending.is_empty() {
                break;
            }
            let mut jobs = Vec::new();
            let mut lens = Vec::with_capacity(pending.len());
            let mut keys = Vec::new();
            for &i in &pending {
                jobs.extend(requests[i].jobs.iter());
                lens.push(requests[i].jobs.len());
                if let (Some(k), Some(f)) = (&requests[i].idempotency_key, &fingerprints[i]) {
                    keys.push(KeyOf {
                        request: lens.len() - 1,
                        key: k,
                        fingerprint: f,
                    });
                }
            }
            match self.write_requests(&jobs, &lens, &keys).await {
                Ok(ids) => {
                    for (&i, ids) in pending.iter().zip(ids) {
                        answers[i] = Some(Ok(Acked::written(ids)));
                    }
                    pending.clear();
                }
                Err(Error::Db(e)) if is_key_taken(&e) => {
                    let found = self
                        .stored_keys(keys.iter().map(|k| k.key.as_str()))
                        .await?;
                    pending.retain(|&i| {
                        let Some(key) = &requests[i].idempotency_key else {
                            return true;
                        };
                        let Some((fp, ids)) = found.get(key.as_str()) else {
                            return true;
                        };
                        answers[i] = Some(if Some(fp) == fingerprints[i].as_ref() {
                            Ok(Acked::replayed(ids.clone()))
                        } else {
                            Err(reused(key))
                        });
                        false
                    });
                }
                Err(e) => return Err(e),
            }
        }
        if !pending.is_empty() {
            return Err(Error::Conflict(
                "idempotency keys kept changing while the request was written; retry".into(),
            ));
        }
        Ok(answers
            .into_iter()
            .map(|a| a.expect("every request answered"))
            .collect())
    }

    /// A request with unique keys goes through [`Engine::enqueue_many`], whose key takeover
    /// takes several statements. Its idempotency key is looked up first and recorded after
    /// the jobs committed: a retry after a crash between the two writes again, where the
    /// request's unique keys answer their holders (see docs/http-api.md).
    async fn enqueue_unique_request(&self, r: &EnqueueRequest) -> Result<Acked> {
        let Some(key) = &r.idempotency_key else {
            return Ok(Acked::unique(self.enqueue_many(&r.jobs).await?));
        };
        let fp = fingerprint(&r.jobs);
        if let Some((stored, ids)) = self.stored_keys([key.as_str()]).await?.remove(key.as_str()) {
            return if stored == fp {
                Ok(Acked::replayed(ids))
            } else {
                Err(reused(key))
            };
        }
        let done = Acked::unique(self.enqueue_many(&r.jobs).await?);
        let ids = &done.ids;
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached(IDEMPOTENCY_RECORD).await?;
        let n = i32::try_from(ids.len()).unwrap_or(i32::MAX);
        let record = client
            .execute(
                &stmt,
                &[
                    &[key.as_str()].as_slice(),
                    &[&fp].as_slice(),
                    ids,
                    &[1i32].as_slice(),
                    &[n].as_slice(),
                ],
            )
            .await;
        match record {
            Err(e) if is_key_taken(&e) => {
                // A concurrent retry wrote the request too: both hold unique keys, so both
                // answer the same holders; the first record stands.
            }
            other => {
                other?;
            }
        }
        Ok(done)
    }

    /// Stored (fingerprint, ids) of the keys that exist.
    async fn stored_keys<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k str>,
    ) -> Result<HashMap<String, (Vec<u8>, Vec<i64>)>> {
        let keys: Vec<&str> = keys.into_iter().collect();
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached(IDEMPOTENCY_LOOKUP).await?;
        let rows = client.query(&stmt, &[&keys]).await?;
        Ok(rows
            .iter()
            .map(|r| (r.get("key"), (r.get("fingerprint"), r.get("job_ids"))))
            .collect())
    }

    /// Writes the jobs of one or more requests (`lens`: jobs per request, in order; empty:
    /// one request) and the idempotency keys of some of them, in one transaction; answers
    /// each request's ids once its COMMIT is confirmed.
    async fn write_requests(
        &self,
        jobs: &[&NewJob],
        lens: &[usize],
        keys: &[KeyOf<'_>],
    ) -> Result<Vec<Vec<i64>>> {
        let client = self.pool().get().await?;
        let batch = self.enqueue_batch(&**client, jobs, false).await?;
        let client = self
            .writer(client, self.lanes_commit_async(batch.lanes.iter().copied()))
            .await?;
        let _serving = crate::serving::serve(
            &client,
            "enqueuer",
            crate::serving::single(jobs.iter().map(|j| j.queue.as_str())),
            crate::serving::single(jobs.iter().map(|j| j.kind.as_str())),
        );
        // From here a transaction may be open on the connection: cancelled, it is closed.
        let client = OpenTxn::new(client);
        let record = match keys.is_empty() {
            true => None,
            false => Some(client.prepare_cached(IDEMPOTENCY_RECORD).await?),
        };
        let written = if batch.any_future {
            let stmt = client.prepare_cached(ENQUEUE_SCHEDULED).await?;
            scheduled_committed(
                &client,
                &stmt,
                &batch,
                record.as_ref().map(|s| (s, keys, lens)),
            )
            .await
        } else if jobs.len() <= self.config().insert_max_rows {
            let keyed = (!keys.is_empty()).then_some((keys, lens));
            let stmt = match keyed {
                None => client.prepare_cached(ENQUEUE_READY).await?,
                Some(_) => client.prepare_cached(ENQUEUE_READY_KEYED).await?,
            };
            let rows = self.assign_ids(&***client, &batch).await?;
            self.insert_committed(&client, &stmt, &rows, &batch, keyed)
                .await
        } else {
            let stmt = client.prepare_cached(COPY_READY).await?;
            let rows = self.assign_ids(&***client, &batch).await?;
            self.copy_committed(
                &client,
                &stmt,
                &rows,
                &batch,
                record.as_ref().map(|s| (s, keys, lens)),
            )
            .await
        };
        let ids = match written {
            Ok(ids) => ids,
            Err(e) => {
                // The transaction may still be open (an error before its COMMIT was sent):
                // end it so the pooled connection is clean. Harmless if it ended already.
                if client.batch_execute("ROLLBACK").await.is_ok() {
                    client.close();
                }
                return Err(e);
            }
        };
        client.close();
        self.counters()
            .enqueued(batch.lanes.iter().zip(&batch.run_ats));
        self.signals().growth().grew();
        Ok(split(ids, lens))
    }

    /// Enqueues inside the caller's transaction (or on any client): the jobs become
    /// claimable when that transaction commits, and never if it rolls back. One statement
    /// (a COPY, prepared on the caller's connection first). The caller's COMMIT is what
    /// makes the jobs exist; this returns before it. Call `signals().growth().grew()` after
    /// that COMMIT to have them ticked at once; otherwise the leader's next full tick pass
    /// sees them, at most `idle_tick_interval` later (leader/ticker.rs).
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
        let jobs: Vec<&NewJob> = jobs.iter().collect();
        let batch = self.enqueue_batch(client, &jobs, true).await?;
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
            return Ok(rows.iter().map(|r| r.get("job_id")).collect());
        }
        let stmt = client.prepare(COPY_READY).await?;
        let rows = self.assign_ids(client.client(), &batch).await?;
        for retry in [false, true] {
            let segment = self.segment.get(client.client()).await?;
            match copy_rows(client.client(), &stmt, segment, &rows.rows, &batch).await {
                Ok(()) => break,
                Err(e) if !retry && is_detached_segment(&e) => {
                    tracing::debug!(segment, "segment detached under a COPY; retrying");
                    self.segment.forget();
                }
                Err(e) => return Err(e.into()),
            }
        }
        // Counted now: a rolled-back caller transaction leaves drift for the recount.
        self.counters()
            .enqueued(batch.lanes.iter().zip(&batch.run_ats));
        Ok(rows.ids)
    }

    /// The lanes of `queue` at `priority` for an enqueue inside a caller's transaction.
    /// Cached: no statement. Otherwise resolved on a pooled connection of the engine's own:
    /// read as committed, or created and committed there at once, then cached. A queue or
    /// lanes created in the caller's transaction must not be cached: they would outlive its
    /// rollback (LaneCache::for_enqueue), and every other enqueue of the queue would wait
    /// for it to end. Only when that is impossible (no pooled connection free right now —
    /// the caller may hold the last one — or another transaction's uncommitted insert of
    /// the same queue, possibly the caller's own, holds the lock past `lock_timeout`) are
    /// they created in the caller's transaction, uncached.
    async fn lanes_in_txn<C: GenericClient>(
        &self,
        client: &C,
        queue: &str,
        priority: u8,
    ) -> Result<(Arc<QueueLanes>, i32)> {
        if let Some(hit) = self.lanes.cached_for_enqueue(queue, priority) {
            return Ok(hit);
        }
        let now = deadpool_postgres::Timeouts {
            wait: Some(std::time::Duration::ZERO),
            ..deadpool_postgres::Timeouts::new()
        };
        if let Ok(mut own) = self.pool().timeout_get(&now).await {
            if let Some(hit) = self
                .lanes
                .committed_for_enqueue(&**own, queue, priority)
                .await?
            {
                return Ok(hit);
            }
            let created = async {
                let tx = own.transaction().await?;
                tx.query_one(LOCK_TIMEOUT_LOCAL, &[]).await?;
                self.lanes.for_enqueue(&*tx, queue, priority, true).await?;
                tx.commit().await?;
                Ok::<_, Error>(())
            }
            .await;
            match created {
                Ok(()) => {
                    if let Some(hit) = self
                        .lanes
                        .committed_for_enqueue(&**own, queue, priority)
                        .await?
                    {
                        return Ok(hit);
                    }
                }
                Err(e) if e.is_lock_timeout() => {}
                Err(e) => return Err(e),
            }
        }
        self.lanes.for_enqueue(client, queue, priority, true).await
    }

    /// Validates a batch and resolves lanes; builds the column arrays of the statement.
    ///
    /// `in_txn`: `client` is a caller's transaction (`enqueue_tx`), which may roll back what
    /// it writes; queues and lanes not cached yet are then resolved as [`Self::lanes_in_txn`]
    /// says.
    pub(crate) async fn enqueue_batch<'a, C: GenericClient>(
        &self,
        client: &C,
        jobs: &[&'a NewJob],
        in_txn: bool,
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
        for &job in jobs {
            let (queue, lane) = match &last {
                Some((name, p, q)) if *name == job.queue && *p == job.priority => {
                    let lane = q.lane_for(job.priority).expect("cached with its lanes");
                    (q.clone(), lane)
                }
                _ => {
                    let (q, lane) = if in_txn {
                        self.lanes_in_txn(client, &job.queue, job.priority).await?
                    } else {
                        self.lanes
                            .for_enqueue(client, &job.queue, job.priority, false)
                            .await?
                    };
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

/// Rounds of answering existing keys before a flush gives up.
const KEY_ROUNDS: usize = 3;

/// A keyed request of a flush: its position among the flush's requests.
struct KeyOf<'a> {
    request: usize,
    key: &'a IdempotencyKey,
    fingerprint: &'a [u8],
}

/// Parameters of idempotency_record.sql.
struct RecordParams<'a> {
    keys: Vec<&'a str>,
    fingerprints: Vec<&'a [u8]>,
    ids: &'a [i64],
    firsts: Vec<i32>,
    lens: Vec<i32>,
}

impl<'a> RecordParams<'a> {
    fn new(keys: &[KeyOf<'a>], lens: &[usize], ids: &'a [i64]) -> RecordParams<'a> {
        // Where each request starts among the flush's ids (1-based, as SQL arrays are).
        let mut starts = Vec::with_capacity(lens.len().max(1));
        let mut at = 1usize;
        for n in lens {
            starts.push(at);
            at += n;
        }
        if lens.is_empty() {
            starts.push(1);
        }
        let len_of = |r: usize| lens.get(r).copied().unwrap_or(ids.len());
        RecordParams {
            keys: keys.iter().map(|k| k.key.as_str()).collect(),
            fingerprints: keys.iter().map(|k| k.fingerprint).collect(),
            ids,
            firsts: keys.iter().map(|k| starts[k.request] as i32).collect(),
            lens: keys.iter().map(|k| len_of(k.request) as i32).collect(),
        }
    }
}

bind_params!(RecordParams<'_> {
    fn as_params, const PARAMS = [keys, fingerprints, ids, firsts, lens];
});

/// A flush's ids cut back into its requests (`lens` empty: one request).
fn split(ids: Vec<i64>, lens: &[usize]) -> Vec<Vec<i64>> {
    if lens.is_empty() {
        return vec![ids];
    }
    let mut rest = ids.into_iter();
    lens.iter()
        .map(|&n| rest.by_ref().take(n).collect())
        .collect()
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
}

bind_params!(EnqueueBatch<'_> {
    fn params_unique, const PARAMS_UNIQUE = [
        lanes, kinds, args, metas, max_attempts, run_ats, queues, keys, periods,
    ];
    fn params_scheduled, const PARAMS_SCHEDULED = [
        lanes, kinds, args, metas, max_attempts, run_ats,
    ];
});

#[cfg(test)]
mod params_tests {
    use super::*;
    use crate::bound_params::assert_declared;

    #[test]
    fn each_statement_declares_the_parameters_its_struct_binds() {
        assert_declared(ENQUEUE_SCHEDULED, EnqueueBatch::PARAMS_SCHEDULED);
        assert_declared(crate::unique::ENQUEUE_UNIQUE, EnqueueBatch::PARAMS_UNIQUE);
        assert_declared(IDEMPOTENCY_RECORD, RecordParams::PARAMS);
    }
}
