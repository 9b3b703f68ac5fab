//! Reference 1: the classic lease-based queue most Postgres job systems use. Claim is
//! `UPDATE … WHERE id = ANY(ARRAY(SELECT … FOR UPDATE SKIP LOCKED)) RETURNING`, completion
//! a batched DELETE in its own transaction after the handler ran, producers insert with binary
//! COPY.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::pin_mut;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::Type;
use tokio_postgres::Config;

use crate::measure::{self, Counters, Report};
use crate::BenchOpts;

const SCHEMA: &str = "
CREATE SCHEMA ref_skiplocked;
CREATE TABLE ref_skiplocked.jobs (
    id          bigserial PRIMARY KEY,
    priority    smallint NOT NULL DEFAULT 0,
    state       smallint NOT NULL DEFAULT 0,   -- 0 available, 1 running
    kind        text NOT NULL,
    args        jsonb NOT NULL,
    enqueued_at timestamptz NOT NULL DEFAULT now(),
    lease_until timestamptz
);
CREATE INDEX jobs_available ON ref_skiplocked.jobs (priority, id) WHERE state = 0;";

const COPY_IN: &str = "COPY ref_skiplocked.jobs (kind, args) FROM STDIN BINARY";

// `id = ANY(ARRAY(SELECT …))` is the issue's `id IN (SELECT …)` written so that the update
// is always one primary-key probe per claimed id: with `IN`, the planner hash-joined the
// locked ids against a scan of the whole (bloating) table.
const CLAIM: &str = "
UPDATE ref_skiplocked.jobs
   SET state = 1, lease_until = now() + interval '5 minutes'
 WHERE id = ANY (ARRAY(SELECT id FROM ref_skiplocked.jobs
                        WHERE state = 0
                        ORDER BY priority, id
                        LIMIT $1
                        FOR UPDATE SKIP LOCKED))
RETURNING id, enqueued_at, kind, args";

const COMPLETE: &str = "DELETE FROM ref_skiplocked.jobs WHERE id = ANY($1)";

pub async fn run(config: &Config, opts: &BenchOpts) -> anyhow::Result<Report> {
    measure::connect(config, "setup")
        .await?
        .batch_execute(SCHEMA)
        .await?;
    let counters = Arc::new(Counters::default());
    let payload = crate::payload(opts.payload_bytes);
    let mut tasks = Vec::new();
    for _ in 0..opts.producers {
        let (config, counters, payload) = (config.clone(), counters.clone(), payload.clone());
        let batch = opts.enqueue_batch;
        let mut pace = measure::Pacer::new(opts);
        tasks.push(tokio::spawn(async move {
            let client = measure::connect(&config, "producer").await?;
            while pace.next(&counters).await {
                let sent = std::time::Instant::now();
                let sink = client.copy_in(COPY_IN).await?;
                let writer = BinaryCopyInWriter::new(sink, &[Type::TEXT, Type::JSONB]);
                pin_mut!(writer);
                for _ in 0..batch {
                    writer.as_mut().write(&[&"noop", &payload]).await?;
                }
                let n = writer.finish().await?;
                counters.add_acked(n, sent);
            }
            Ok(())
        }));
    }
    for _ in 0..opts.workers {
        let (config, counters) = (config.clone(), counters.clone());
        let batch = i64::try_from(opts.claim_batch).unwrap_or(100);
        tasks.push(tokio::spawn(async move {
            let client = measure::connect(&config, "worker").await?;
            // The same planner guard pgferry's own claim runs with: as dead tuples pile up the
            // statistics go stale, and at larger batches the planner switched this claim to a
            // Seq Scan + Sort of the whole table under LockRows (measured: 27k -> 2k jobs/s at
            // claim batch 1000). With it, the claim reads jobs_available in order.
            client.batch_execute("SET enable_seqscan = off").await?;
            let claim = client.prepare(CLAIM).await?;
            let complete = client.prepare(COMPLETE).await?;
            while counters.running() {
                let rows = client.query(&claim, &[&batch]).await?;
                if rows.is_empty() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                counters
                    .record_latencies(rows.iter().map(|r| r.get::<_, SystemTime>("enqueued_at")));
                measure::take_jobs(&rows);
                let ids: Vec<i64> = rows.iter().map(|r| r.get("id")).collect();
                let n = client.execute(&complete, &[&ids]).await?;
                counters.add_finished(n);
            }
            Ok(())
        }));
    }
    measure::window(
        "skiplocked",
        config,
        &counters,
        opts,
        measure::Tables {
            schema: "ref_skiplocked",
            pattern: "^jobs$",
        },
        tasks,
    )
    .await
}
