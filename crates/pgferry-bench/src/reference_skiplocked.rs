//! Reference 1: the classic row-lock queue most Postgres job systems use, producers inserting
//! with binary COPY, in two modes:
//! - [`Mode::Lease`]: claim is `UPDATE … WHERE id = ANY(ARRAY(SELECT … FOR UPDATE SKIP
//!   LOCKED)) RETURNING`, completion a batched DELETE in its own transaction after the
//!   handler ran (at least once: a lost worker's job comes back when its lease ends);
//! - [`Mode::Delete`]: claim and DELETE in one statement, one commit per claim, the handler
//!   started after it (at most once: no lease, a lost worker's job is gone). The fastest a
//!   row-lock queue gets, and the reference of issue 21's table ("SKIP LOCKED claim+DELETE
//!   in one transaction").
//!
//! A worker that finds nothing waits for the one poll token: one idle worker polls (every
//! millisecond), the rest wait for it, and a poll that finds jobs hands the token on at once.
//! 64 workers each polling every millisecond would spend the cores on empty claims (an open
//! loop of 500 jobs/s then reached under 300/s), which no deployed queue does.

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

// The jobs a claim takes, in order, locked and skipped by other claimers. `id =
// ANY(ARRAY(SELECT …))` is the issue's `id IN (SELECT …)` written so that the update or
// delete is always one primary-key probe per claimed id: with `IN`, the planner hash-joined
// the locked ids against a scan of the whole (bloating) table.
macro_rules! taken {
    () => {
        " WHERE id = ANY (ARRAY(SELECT id FROM ref_skiplocked.jobs
                        WHERE state = 0
                        ORDER BY priority, id
                        LIMIT $1
                        FOR UPDATE SKIP LOCKED))
RETURNING id, enqueued_at, kind, args"
    };
}

const CLAIM: &str = concat!(
    "UPDATE ref_skiplocked.jobs SET state = 1, lease_until = now() + interval '5 minutes'",
    taken!()
);

const COMPLETE: &str = "DELETE FROM ref_skiplocked.jobs WHERE id = ANY($1)";

// The same selection as CLAIM, deleted at once: the job leaves the queue when it is taken.
const CLAIM_DELETE: &str = concat!("DELETE FROM ref_skiplocked.jobs", taken!());

/// How a worker takes and finishes a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Claim under a lease, DELETE after the handler: two commits per claim.
    Lease,
    /// Claim and DELETE in one statement: one commit per claim, no lease.
    Delete,
}

impl Mode {
    fn claim(self) -> &'static str {
        match self {
            Mode::Lease => CLAIM,
            Mode::Delete => CLAIM_DELETE,
        }
    }

    /// The variant's name in its report.
    fn variant(self) -> &'static str {
        match self {
            Mode::Lease => "skiplocked",
            Mode::Delete => "skiplocked_delete",
        }
    }
}

pub async fn run(config: &Config, opts: &BenchOpts, mode: Mode) -> anyhow::Result<Report> {
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
    let poll_token = Arc::new(tokio::sync::Mutex::new(()));
    for _ in 0..opts.workers {
        let (config, counters) = (config.clone(), counters.clone());
        let poll_token = poll_token.clone();
        let batch = i64::try_from(opts.claim_batch).unwrap_or(100);
        tasks.push(tokio::spawn(async move {
            let client = measure::connect(&config, "worker").await?;
            // The same planner guard pgferry's own claim runs with: as dead tuples pile up the
            // statistics go stale, and at larger batches the planner switched this claim to a
            // Seq Scan + Sort of the whole table under LockRows (measured: 27k -> 2k jobs/s at
            // claim batch 1000). With it, the claim reads jobs_available in order.
            client.batch_execute("SET enable_seqscan = off").await?;
            let claim = client.prepare(mode.claim()).await?;
            let complete = client.prepare(COMPLETE).await?;
            while counters.running() {
                let mut rows = client.query(&claim, &[&batch]).await?;
                if rows.is_empty() {
                    let _polling = poll_token.lock().await;
                    while rows.is_empty() && counters.running() {
                        rows = client.query(&claim, &[&batch]).await?;
                        if rows.is_empty() {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                }
                counters
                    .record_latencies(rows.iter().map(|r| r.get::<_, SystemTime>("enqueued_at")));
                measure::take_jobs(&rows);
                let n = match mode {
                    Mode::Lease => {
                        let ids: Vec<i64> = rows.iter().map(|r| r.get("id")).collect();
                        client.execute(&complete, &[&ids]).await?
                    }
                    Mode::Delete => rows.len() as u64,
                };
                counters.add_finished(n);
            }
            Ok(())
        }));
    }
    measure::window(
        mode.variant(),
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
