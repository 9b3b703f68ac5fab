//! Reference 2: a minimal append-only log, as fast as it can be made: producers COPY rows
//! into shards, each consumer reads its own shard by an in-memory cursor on the id, with no
//! per-job acknowledgement and no durable cursor. It is the floor pgferry chases.
//!
//! Each shard has exactly one writer: a producer's COPYs run one after another on its
//! connection, so ids inside a shard become visible in increasing order and an id cursor
//! never skips a row. (With several writers per shard, a COPY committing lower ids after a
//! reader passed them loses those rows — measured: the unread backlog grew until the depth
//! bound stopped the producers.) pgferry needs no such constraint: tick visibility lets any
//! number of producers share a lane.
//!
//! `log-acked` is the same log plus the two durable writes any queue with acknowledgements
//! owes per batch, and nothing else: the read appends a receipt row (the batch's ids and the
//! cursor after it, in the read's own commit) and the reader then commits one ack row for the
//! batch. The cursor still lives in memory (the receipt would restore it after a restart);
//! no lane lock, no visibility ticks, no stale check. It measures what those two commits
//! cost on this machine, i.e. the closest any design with a durable claim and a durable
//! per-batch outcome can come to the plain log.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::pin_mut;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::Type;
use tokio_postgres::Config;

use crate::measure::{self, Counters, Report};
use crate::BenchOpts;

// Append-only tables are not vacuumed for their inserts, as pgferry's log partitions are not
// (ADR 0011): the floor gets every advantage pgferry takes.
const SCHEMA: &str = "
CREATE SCHEMA ref_log;
CREATE TABLE ref_log.events (
    id          bigserial,
    shard       int NOT NULL,
    kind        text NOT NULL,
    args        jsonb NOT NULL,
    enqueued_at timestamptz NOT NULL DEFAULT now()
) WITH (autovacuum_vacuum_insert_threshold = -1);
CREATE INDEX events_read ON ref_log.events (shard, id);";

// log-acked only: the durable cursor (latest receipt of a shard) and the per-batch acks.
const SCHEMA_ACKED: &str = "
CREATE TABLE ref_log.receipts (
    receipt_id bigserial,
    shard      int NOT NULL,
    last_id    bigint NOT NULL,
    ids        bigint[] NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now()
) WITH (autovacuum_vacuum_insert_threshold = -1);
CREATE INDEX receipts_cursor ON ref_log.receipts (shard, receipt_id DESC);
CREATE TABLE ref_log.acks (
    receipt_id  bigint NOT NULL,
    ids         bigint[] NOT NULL,
    finished_at timestamptz NOT NULL DEFAULT now()
) WITH (autovacuum_vacuum_insert_threshold = -1);
CREATE INDEX acks_receipt ON ref_log.acks (receipt_id);";

const COPY_IN: &str = "COPY ref_log.events (shard, kind, args) FROM STDIN BINARY";

// The job itself (kind, args) goes to the reader, like every queue hands a worker its job.
const READ: &str = "
SELECT id, enqueued_at, kind, args FROM ref_log.events
 WHERE shard = $1 AND id > $2 ORDER BY id LIMIT $3";

// log-acked: the same read, and the receipt appended in the same statement (so in the same
// commit). An empty read writes nothing (HAVING), like an idle pgferry claim.
const READ_ACKED: &str = "
WITH r AS (
    SELECT id, enqueued_at, kind, args FROM ref_log.events
     WHERE shard = $1 AND id > $2 ORDER BY id LIMIT $3
), rec AS (
    INSERT INTO ref_log.receipts (shard, last_id, ids)
    SELECT $1, max(r.id), array_agg(r.id) FROM r HAVING count(*) > 0
    RETURNING receipt_id
)
SELECT r.id, r.enqueued_at, r.kind, r.args, rec.receipt_id FROM r, rec ORDER BY r.id";

const ACK: &str = "INSERT INTO ref_log.acks (receipt_id, ids) VALUES ($1, $2)";

/// Which log: the bare floor, or the floor plus a durable receipt and ack per batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Bare,
    Acked,
}

pub async fn run(config: &Config, opts: &BenchOpts, mode: Mode) -> anyhow::Result<Report> {
    let setup = measure::connect(config, "setup").await?;
    setup.batch_execute(SCHEMA).await?;
    if mode == Mode::Acked {
        setup.batch_execute(SCHEMA_ACKED).await?;
    }
    drop(setup);
    let counters = Arc::new(Counters::default());
    let payload = crate::payload(opts.payload_bytes);
    let shards = opts.workers.max(1) as i32;
    let producers = opts.producers.max(1);
    let mut tasks = Vec::new();
    for p in 0..opts.producers {
        let (config, counters, payload) = (config.clone(), counters.clone(), payload.clone());
        let batch = opts.enqueue_batch;
        let mut pace = measure::Pacer::new(opts);
        tasks.push(tokio::spawn(async move {
            let client = measure::connect(&config, "producer").await?;
            tracing::debug!(p, "log producer connected");
            // Shards this producer owns: s % producers == p (one writer per shard).
            let mut owned: Vec<i32> = (0..shards)
                .filter(|s| *s as usize % producers == p)
                .collect();
            if owned.is_empty() {
                owned.push(p as i32 % shards);
            }
            let mut next = 0usize;
            while pace.next(&counters).await {
                let sent = std::time::Instant::now();
                let sink = client.copy_in(COPY_IN).await?;
                let writer = BinaryCopyInWriter::new(sink, &[Type::INT4, Type::TEXT, Type::JSONB]);
                pin_mut!(writer);
                // A whole batch goes to one shard, so it is one run of ids in that shard.
                let shard = owned[next % owned.len()];
                next = next.wrapping_add(1);
                for _ in 0..batch {
                    writer.as_mut().write(&[&shard, &"noop", &payload]).await?;
                }
                let n = writer.finish().await?;
                if counters.enqueued.load(std::sync::atomic::Ordering::Relaxed) == 0 {
                    tracing::debug!(n, "log: first batch committed");
                }
                counters.add_acked(n, sent);
            }
            Ok(())
        }));
    }
    for w in 0..opts.workers {
        let (config, counters) = (config.clone(), counters.clone());
        let batch = i64::try_from(opts.claim_batch).unwrap_or(100);
        tasks.push(tokio::spawn(async move {
            let client = measure::connect(&config, "reader").await?;
            let read = client
                .prepare(if mode == Mode::Acked {
                    READ_ACKED
                } else {
                    READ
                })
                .await?;
            let ack = match mode {
                Mode::Acked => Some(client.prepare(ACK).await?),
                Mode::Bare => None,
            };
            let (shard, mut cursor) = (w as i32, 0i64);
            while counters.running() {
                let rows = client.query(&read, &[&shard, &cursor, &batch]).await?;
                tracing::trace!(shard, cursor, n = rows.len(), "log read");
                if rows.is_empty() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                counters
                    .record_latencies(rows.iter().map(|r| r.get::<_, SystemTime>("enqueued_at")));
                measure::take_jobs(&rows);
                cursor = rows.last().map(|r| r.get("id")).unwrap_or(cursor);
                if let Some(ack) = &ack {
                    // After the handler, as a queue's completion: counted once committed.
                    let receipt: i64 = rows[0].get("receipt_id");
                    let ids: Vec<i64> = rows.iter().map(|r| r.get("id")).collect();
                    client.execute(ack, &[&receipt, &ids]).await?;
                }
                counters.add_finished(rows.len() as u64);
            }
            Ok(())
        }));
    }
    let (name, pattern) = match mode {
        Mode::Bare => ("log", "^events$"),
        Mode::Acked => ("log_acked", "^(events|receipts|acks)$"),
    };
    measure::window(
        name,
        config,
        &counters,
        opts,
        measure::Tables {
            schema: "ref_log",
            pattern,
        },
        tasks,
    )
    .await
}
