//! The peer shape (issue 21): the way side-by-side benchmarks of Postgres queues run them —
//! one producer inserting batches of 100 and waiting for each acknowledgement, the queue
//! kept at most 5,000 deep, 64 handlers that each take one job, 256-byte payloads, a job
//! counted when its handler starts (latency enqueue → claim).

use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_postgres::Config;

use crate::measure;
use crate::{run, BenchOpts, Variant};

/// `opts` in the peer shape (duration, warmup, ticks and durability kept).
pub fn shape(opts: &BenchOpts) -> BenchOpts {
    BenchOpts {
        producers: 1,
        enqueue_batch: 100,
        max_depth: 5_000,
        workers: 64,
        worker_slots: 64,
        claim_batch: 1,
        payload_bytes: 256,
        ..opts.clone()
    }
}

/// Latency of one bare durable commit on this cluster (one row, one INSERT per
/// transaction): the floor of any acknowledgement.
#[derive(Debug, Clone, Serialize)]
pub struct CommitLatency {
    pub commits: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Commits one-row INSERTs back to back on one connection for `duration`.
pub async fn bare_commit(base: &Config, duration: Duration) -> anyhow::Result<CommitLatency> {
    let config = crate::fresh_database(base, "bench_commit").await?;
    let c = measure::connect(&config, "commit").await?;
    c.batch_execute("CREATE TABLE bench_commit (x int)").await?;
    let insert = c.prepare("INSERT INTO bench_commit VALUES (1)").await?;
    let mut ms = Vec::new();
    let start = Instant::now();
    while start.elapsed() < duration {
        let t = Instant::now();
        c.execute(&insert, &[]).await?;
        ms.push(t.elapsed().as_secs_f32() * 1000.0);
    }
    Ok(CommitLatency {
        commits: ms.len(),
        p50_ms: measure::percentile(&ms, 0.50),
        p99_ms: measure::percentile(&ms, 0.99),
    })
}

/// `compare --shape peer`: in process (a hand-written claim loop, and the worker runtime),
/// over gRPC, the SKIP LOCKED and acknowledged-log
/// references, and a bare commit, one after the other on one cluster, with the ratios the
/// issue's targets are stated in.
pub async fn compare(base: &Config, opts: &BenchOpts) -> anyhow::Result<serde_json::Value> {
    let opts = shape(opts);
    let commit = bare_commit(base, Duration::from_secs(3)).await?;
    let inprocess = run(Variant::Cycle, base, "bench_cycle", &opts).await?;
    let runtime = run(Variant::CycleRuntime, base, "bench_cycle_runtime", &opts).await?;
    let grpc = run(Variant::CycleGrpc, base, "bench_cycle_grpc", &opts).await?;
    let skiplocked = run(Variant::Skiplocked, base, "bench_skiplocked", &opts).await?;
    let log_acked = run(Variant::LogAcked, base, "bench_log_acked", &opts).await?;
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let ack = |r: &measure::Report| r.enqueue_ack_p50_ms.unwrap_or(f64::NAN);
    Ok(serde_json::json!({
        "shape": "peer",
        "options": opts,
        "bare_commit": commit,
        "inprocess": inprocess,
        "runtime": runtime,
        "grpc": grpc,
        "skiplocked": skiplocked,
        "log_acked": log_acked,
        "ratios": {
            "runtime_vs_log_acked_jobs_per_s": ratio(runtime.jobs_per_s, log_acked.jobs_per_s),
            "runtime_vs_skiplocked_jobs_per_s": ratio(runtime.jobs_per_s, skiplocked.jobs_per_s),
            "grpc_vs_runtime_jobs_per_s": ratio(grpc.jobs_per_s, runtime.jobs_per_s),
            "runtime_ack_p50_vs_bare_commit_p50": ratio(ack(&runtime), commit.p50_ms),
            "inprocess_vs_log_acked_jobs_per_s": ratio(inprocess.jobs_per_s, log_acked.jobs_per_s),
            "inprocess_vs_skiplocked_jobs_per_s": ratio(inprocess.jobs_per_s, skiplocked.jobs_per_s),
            "grpc_vs_inprocess_jobs_per_s": ratio(grpc.jobs_per_s, inprocess.jobs_per_s),
            "inprocess_ack_p50_vs_bare_commit_p50": ratio(ack(&inprocess), commit.p50_ms),
            "grpc_ack_p50_vs_bare_commit_p50": ratio(ack(&grpc), commit.p50_ms),
        },
    }))
}
