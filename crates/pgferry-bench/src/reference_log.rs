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

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::pin_mut;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::Type;
use tokio_postgres::Config;

use crate::measure::{self, Counters, Report};
use crate::BenchOpts;

const SCHEMA: &str = "
CREATE SCHEMA ref_log;
CREATE TABLE ref_log.events (
    id          bigserial,
    shard       int NOT NULL,
    kind        text NOT NULL,
    args        jsonb NOT NULL,
    enqueued_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_read ON ref_log.events (shard, id);";

const COPY_IN: &str = "COPY ref_log.events (shard, kind, args) FROM STDIN BINARY";

// The job itself (kind, args) goes to the reader, like every queue hands a worker its job.
const READ: &str = "
SELECT id, enqueued_at, kind, args FROM ref_log.events
 WHERE shard = $1 AND id > $2 ORDER BY id LIMIT $3";

pub async fn run(config: &Config, opts: &BenchOpts) -> anyhow::Result<Report> {
    measure::connect(config, "setup")
        .await?
        .batch_execute(SCHEMA)
        .await?;
    let counters = Arc::new(Counters::default());
    let payload = crate::payload(opts.payload_bytes);
    let shards = opts.workers.max(1) as i32;
    let producers = opts.producers.max(1);
    let mut tasks = Vec::new();
    for p in 0..opts.producers {
        let (config, counters, payload) = (config.clone(), counters.clone(), payload.clone());
        let (batch, max_depth) = (opts.enqueue_batch, opts.max_depth as u64);
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
            while counters.running() {
                if counters.depth() > max_depth {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
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
                counters.add_enqueued(n);
            }
            Ok(())
        }));
    }
    for w in 0..opts.workers {
        let (config, counters) = (config.clone(), counters.clone());
        let batch = i64::try_from(opts.claim_batch).unwrap_or(100);
        tasks.push(tokio::spawn(async move {
            let client = measure::connect(&config, "reader").await?;
            let read = client.prepare(READ).await?;
            let (shard, mut cursor) = (w as i32, 0i64);
            while counters.running() {
                let rows = client.query(&read, &[&shard, &cursor, &batch]).await?;
                tracing::trace!(shard, cursor, n = rows.len(), "log read");
                if rows.is_empty() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                counters.record_latencies(rows.iter().map(|r| r.get::<_, SystemTime>(1)));
                measure::take_jobs(&rows, 2, 3);
                cursor = rows.last().map(|r| r.get(0)).unwrap_or(cursor);
                counters.add_finished(rows.len() as u64);
            }
            Ok(())
        }));
    }
    measure::window(
        "log",
        config,
        &counters,
        opts,
        measure::Tables {
            schema: "ref_log",
            pattern: "^events$",
        },
        tasks,
    )
    .await
}
