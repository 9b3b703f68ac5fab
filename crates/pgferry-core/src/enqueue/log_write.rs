//! Writing fresh rows into the log: ids by lane, then one INSERT (small batches, one round
//! trip) or one COPY (large ones) committed before the caller hears of it (architecture.md
//! §1.6), and the INSERT … RETURNING of jobs to run later.

use futures_util::pin_mut;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, GenericClient, Statement};

use super::{EnqueueBatch, KeyOf, RecordParams};
use crate::engine::Engine;
use crate::error::Result;
use crate::ids::BLOCK;

/// Columns a fresh row gets from the engine; `xid` and `enqueued_at` are column defaults
/// (pg_current_xact_id() and now(): stable, so COPY still writes multi-row WAL records).
pub(super) const COPY_READY: &str =
    "COPY pgferry.ready (segment, lane, seq, job_id, attempt, max_attempts, \
                          kind, args, meta, by_id) FROM STDIN (FORMAT binary)";
pub(super) const COPY_TYPES: [Type; 10] = [
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

impl Engine {
    /// Gives every fresh row its id: rows grouped by lane, input order kept inside each lane
    /// (claim order within a lane is (xid, seq) and seq = job_id), each group its own
    /// block(s) of ids.
    pub(super) async fn assign_ids<C: GenericClient>(
        &self,
        client: &C,
        batch: &EnqueueBatch<'_>,
    ) -> Result<FreshRows> {
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
        let bases = self.ids.take(client, self.pool(), blocks).await?;
        let mut ids = vec![0i64; batch.lanes.len()];
        let mut rows: Vec<(i32, usize, i64)> = Vec::with_capacity(batch.lanes.len());
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
        Ok(FreshRows { ids, rows })
    }

    /// Writes fresh rows with one INSERT in an implicit transaction (enqueue_ready.sql; with
    /// the requests' key records, enqueue_ready_keyed.sql): one round trip. `execute` returns at the ReadyForQuery that follows the commit, so an
    /// error at commit reaches the caller (architecture.md §1.6). A segment detached since
    /// this process last looked is handled as in [`Self::copy_committed`].
    pub(super) async fn insert_committed(
        &self,
        client: &Client,
        stmt: &Statement,
        fresh: &FreshRows,
        batch: &EnqueueBatch<'_>,
        keyed: Option<(&[KeyOf<'_>], &[usize])>,
    ) -> Result<Vec<i64>> {
        let record = keyed.map(|(keys, lens)| RecordParams::new(keys, lens, &fresh.ids));
        let n = fresh.rows.len();
        let (mut lanes, mut ids, mut max_attempts) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let (mut kinds, mut args, mut metas, mut anchors) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for &(lane, i, id) in &fresh.rows {
            lanes.push(lane);
            ids.push(id);
            max_attempts.push(batch.max_attempts[i]);
            kinds.push(batch.kinds[i]);
            args.push(batch.args[i]);
            metas.push(batch.metas[i]);
            anchors.push(id % BLOCK == 0);
        }
        for retry in [false, true] {
            let segment = self.segment.get(client).await?;
            let mut params: Vec<&(dyn ToSql + Sync)> = vec![
                &segment,
                &lanes,
                &ids,
                &max_attempts,
                &kinds,
                &args,
                &metas,
                &anchors,
            ];
            if let Some(r) = &record {
                params.extend(r.as_params());
            }
            match client.execute(stmt, &params).await {
                Ok(_) => return Ok(fresh.ids.clone()),
                Err(e) if !retry && is_detached_segment(&e) => {
                    tracing::debug!(segment, "segment detached under an INSERT; retrying");
                    self.segment.forget();
                }
                Err(e) => return Err(e.into()),
            }
        }
        unreachable!("the second attempt returns")
    }

    /// Writes fresh rows with one COPY inside BEGIN … COMMIT, pipelined: BEGIN goes with the
    /// COPY's start, the key records and COMMIT with its end, so this costs the COPY's own
    /// two round trips. Returns only after COMMIT's reply (architecture.md §1.6): tokio-postgres
    /// finishes a COPY at its CommandComplete, before an implicit transaction's commit at
    /// the following Sync, so without the explicit COMMIT a backend terminated in between
    /// (or a failing commit) would roll back rows already reported written (issue 17).
    /// A COPY that met a segment detached since this process last looked (rotation) wrote
    /// nothing and is retried once with the current segment.
    pub(super) async fn copy_committed(
        &self,
        client: &Client,
        stmt: &Statement,
        fresh: &FreshRows,
        batch: &EnqueueBatch<'_>,
        record: Option<(&Statement, &[KeyOf<'_>], &[usize])>,
    ) -> Result<Vec<i64>> {
        let params = record.map(|(_, keys, lens)| RecordParams::new(keys, lens, &fresh.ids));
        for retry in [false, true] {
            let segment = self.segment.get(client).await?;
            let (_, sink) = tokio::try_join!(client.batch_execute("BEGIN"), client.copy_in(stmt))?;
            let copied = async {
                let writer = BinaryCopyInWriter::new(sink, &COPY_TYPES);
                pin_mut!(writer);
                write_rows(writer.as_mut(), segment, &fresh.rows, batch).await?;
                // try_join! polls in order: the key records are sent before COMMIT, and if
                // they fail before being sent, COMMIT is never sent (the caller rolls back).
                match (&record, &params) {
                    (Some((rec, _, _)), Some(p)) => {
                        let params = p.as_params();
                        tokio::try_join!(
                            writer.finish(),
                            client.execute(*rec, &params),
                            client.batch_execute("COMMIT")
                        )?;
                    }
                    _ => {
                        tokio::try_join!(writer.finish(), client.batch_execute("COMMIT"))?;
                    }
                }
                Ok::<(), tokio_postgres::Error>(())
            }
            .await;
            match copied {
                Ok(()) => return Ok(fresh.ids.clone()),
                Err(e) if !retry && is_detached_segment(&e) => {
                    tracing::debug!(segment, "segment detached under a COPY; retrying");
                    let _ = client.batch_execute("ROLLBACK").await;
                    self.segment.forget();
                }
                Err(e) => return Err(e.into()),
            }
        }
        unreachable!("the second attempt returns")
    }
}

/// One COPY of fresh rows on the caller's transaction: (lane, index into the batch, job id)
/// in write order.
pub(super) async fn copy_rows(
    client: &Client,
    stmt: &Statement,
    segment: i16,
    rows: &[(i32, usize, i64)],
    batch: &EnqueueBatch<'_>,
) -> std::result::Result<(), tokio_postgres::Error> {
    let sink = client.copy_in(stmt).await?;
    let writer = BinaryCopyInWriter::new(sink, &COPY_TYPES);
    pin_mut!(writer);
    write_rows(writer.as_mut(), segment, rows, batch).await?;
    writer.finish().await?;
    Ok(())
}

async fn write_rows(
    mut writer: std::pin::Pin<&mut BinaryCopyInWriter>,
    segment: i16,
    rows: &[(i32, usize, i64)],
    batch: &EnqueueBatch<'_>,
) -> std::result::Result<(), tokio_postgres::Error> {
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
    Ok(())
}

/// A batch with jobs to run later: one INSERT … RETURNING that also writes `scheduled`.
/// Without keys, an implicit transaction: `query` returns after the ReadyForQuery that
/// follows its commit, so an error at commit reaches the caller. With keys, BEGIN with the
/// insert, then the key records with COMMIT (the records need the ids it returns).
pub(super) async fn scheduled_committed(
    client: &Client,
    stmt: &Statement,
    batch: &EnqueueBatch<'_>,
    record: Option<(&Statement, &[KeyOf<'_>], &[usize])>,
) -> Result<Vec<i64>> {
    let Some((rec, keys, lens)) = record else {
        let rows = client.query(stmt, &batch.params_scheduled()).await?;
        return Ok(rows.iter().map(|r| r.get("job_id")).collect());
    };
    let params = batch.params_scheduled();
    let (_, rows) = tokio::try_join!(client.batch_execute("BEGIN"), client.query(stmt, &params))?;
    let ids: Vec<i64> = rows.iter().map(|r| r.get("job_id")).collect();
    let p = RecordParams::new(keys, lens, &ids);
    let params = p.as_params();
    tokio::try_join!(client.execute(rec, &params), client.batch_execute("COMMIT"))?;
    Ok(ids)
}

/// Ids of fresh rows: `ids` in input order, `rows` as (lane, input index, id) in write order.
pub(super) struct FreshRows {
    pub(super) ids: Vec<i64>,
    pub(super) rows: Vec<(i32, usize, i64)>,
}

/// "no partition of relation … found for row": the segment was detached for freeing.
pub(super) fn is_detached_segment(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::CHECK_VIOLATION)
        && e.as_db_error()
            .is_some_and(|d| d.message().starts_with("no partition of relation"))
}
