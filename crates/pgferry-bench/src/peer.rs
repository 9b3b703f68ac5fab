//! The peer shape (issue 21): the way side-by-side benchmarks of Postgres queues run them —
//! one producer inserting batches of 100 and waiting for each acknowledgement, the queue
//! kept at most 5,000 deep, 64 handlers that each take one job, 256-byte payloads, a job
//! counted when its handler starts (latency enqueue → claim).

use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_postgres::Config;

use crate::measure;
use crate::{run, BenchOpts, Variant};

/// The light-load rate of issue 21 (single jobs per second).
pub const OPEN_LOOP_RATE: f64 = 500.0;

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

/// The peer shape over gRPC the way the runtime runs it: one worker process (one Worker
/// stream) with the 64 handler slots, as River's, Oban's and pg-boss's clients run, where
/// [`shape`] over gRPC is 64 streams of one slot each (64 processes of one handler).
pub fn one_worker(opts: &BenchOpts) -> BenchOpts {
    BenchOpts {
        workers: 1,
        ..opts.clone()
    }
}

/// The peer shape over gRPC as 64 one-slot workers of one process: [`shape`]'s 64 streams
/// multiplexed on one connection (`pgferry_client::Connection`), where [`shape`] gives each
/// stream a connection of its own, as separate processes have.
pub fn one_connection(opts: &BenchOpts) -> BenchOpts {
    BenchOpts {
        connections: 1,
        ..opts.clone()
    }
}

/// The light-load workload of issue 21: the peer shape's consumers, one producer sending
/// single jobs on a fixed schedule of `rate` jobs/s (open loop).
pub fn open_loop(opts: &BenchOpts, rate: f64) -> BenchOpts {
    BenchOpts {
        enqueue_batch: 1,
        rate: Some(rate),
        ..shape(opts)
    }
}

/// The peer shape at a fixed rate of half what `saturated` reached (open loop).
fn half_of(opts: &BenchOpts, saturated: &measure::Report) -> BenchOpts {
    BenchOpts {
        rate: Some((saturated.jobs_per_s / 2.0).max(1.0)),
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

/// Commits one-row INSERTs on one connection for `duration`: back to back (`every`: None),
/// or one every `every` — a commit paid after an idle gap costs more than one in a tight
/// loop (the backend and the client wake up for it), so an open loop's acknowledgement is
/// compared with commits at its own cadence too.
pub async fn bare_commit(
    base: &Config,
    every: Option<Duration>,
    duration: Duration,
) -> anyhow::Result<CommitLatency> {
    let config = crate::fresh_database(base, "bench_commit").await?;
    let c = measure::connect(&config, "commit").await?;
    c.batch_execute("CREATE TABLE bench_commit (x int)").await?;
    commits(&c, every, duration).await
}

/// One-row INSERTs into `bench_commit` on `c` for `duration`, back to back or paced.
async fn commits(
    c: &tokio_postgres::Client,
    every: Option<Duration>,
    duration: Duration,
) -> anyhow::Result<CommitLatency> {
    let insert = c.prepare("INSERT INTO bench_commit VALUES (1)").await?;
    let mut pace = every.map(tokio::time::interval);
    let mut ms = Vec::new();
    let start = Instant::now();
    while start.elapsed() < duration {
        if let Some(pace) = pace.as_mut() {
            pace.tick().await;
        }
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

/// Bare one-row commits every 10 ms on their own connection and table while a variant runs
/// (after its warmup, for its window): the floor of an acknowledgement under the same load,
/// where [`bare_commit`] measures it on an idle cluster.
async fn commit_probe(config: Config, opts: &BenchOpts) -> anyhow::Result<CommitLatency> {
    let c = measure::connect(&config, "commit-probe").await?;
    tokio::time::sleep(opts.warmup).await;
    commits(&c, Some(Duration::from_millis(10)), opts.duration).await
}

/// Runs `variant` with [`commit_probe`] beside it.
async fn run_probed(
    variant: Variant,
    base: &Config,
    dbname: &str,
    opts: &BenchOpts,
    probe_db: &Config,
) -> anyhow::Result<(measure::Report, CommitLatency)> {
    let (report, probe) = tokio::join!(
        run(variant, base, dbname, opts),
        commit_probe(probe_db.clone(), opts)
    );
    Ok((report?, probe?))
}

/// `compare --shape peer`: in process (a hand-written claim loop, and the worker runtime),
/// over gRPC (64 single-slot streams, on a connection each and on one shared connection,
/// and one worker of 64 slots), the SKIP LOCKED and acknowledged-log
/// references, and a bare commit, one after the other on one cluster, with the ratios the
/// issue's targets are stated in.
pub async fn compare(base: &Config, opts: &BenchOpts) -> anyhow::Result<serde_json::Value> {
    let opts = shape(opts);
    let commit = bare_commit(base, None, Duration::from_secs(3)).await?;
    // The same commit at the open loop's cadence, on the idle cluster: the floor of the
    // open loop's acknowledgement, paid after the same idle gaps.
    let open_loop_gap = Duration::from_secs_f64(1.0 / OPEN_LOOP_RATE);
    let commit_at_rate = bare_commit(base, Some(open_loop_gap), Duration::from_secs(3)).await?;
    // A lone producer of single jobs, nothing consuming, each path's acknowledgement beside a
    // bare commit in the same rounds: back to back, and at the open loop's cadence.
    let lone = crate::lone_producer::run(base, None, Duration::from_secs(3), 256).await?;
    let lone_at_rate =
        crate::lone_producer::run(base, Some(open_loop_gap), Duration::from_secs(3), 256).await?;
    let probe_db = crate::fresh_database(base, "bench_commit_probe").await?;
    measure::connect(&probe_db, "setup")
        .await?
        .batch_execute("CREATE TABLE bench_commit (x int)")
        .await?;
    let inprocess = run(Variant::Cycle, base, "bench_cycle", &opts).await?;
    let (runtime, runtime_probe) = run_probed(
        Variant::CycleRuntime,
        base,
        "bench_cycle_runtime",
        &opts,
        &probe_db,
    )
    .await?;
    let (grpc, grpc_probe) = run_probed(
        Variant::CycleGrpc,
        base,
        "bench_cycle_grpc",
        &opts,
        &probe_db,
    )
    .await?;
    let grpc_one = run(
        Variant::CycleGrpc,
        base,
        "bench_cycle_grpc",
        &one_worker(&opts),
    )
    .await?;
    let grpc_one_conn = run(
        Variant::CycleGrpc,
        base,
        "bench_cycle_grpc",
        &one_connection(&opts),
    )
    .await?;
    let skiplocked = run(Variant::Skiplocked, base, "bench_skiplocked", &opts).await?;
    let skiplocked_delete = run(Variant::SkiplockedDelete, base, "bench_skiplocked", &opts).await?;
    let log_acked = run(Variant::LogAcked, base, "bench_log_acked", &opts).await?;
    // Half of saturation, each path at half of its own saturated rate.
    let runtime_half = run(
        Variant::CycleRuntime,
        base,
        "bench_cycle_runtime",
        &half_of(&opts, &runtime),
    )
    .await?;
    let grpc_half = run(
        Variant::CycleGrpc,
        base,
        "bench_cycle_grpc",
        &half_of(&opts, &grpc),
    )
    .await?;
    // Light load: 500 single jobs per second.
    let light = open_loop(&opts, OPEN_LOOP_RATE);
    let (runtime_light, runtime_light_probe) = run_probed(
        Variant::CycleRuntime,
        base,
        "bench_cycle_runtime",
        &light,
        &probe_db,
    )
    .await?;
    let (grpc_light, grpc_light_probe) = run_probed(
        Variant::CycleGrpc,
        base,
        "bench_cycle_grpc",
        &light,
        &probe_db,
    )
    .await?;
    let grpc_one_light = run(
        Variant::CycleGrpc,
        base,
        "bench_cycle_grpc",
        &one_worker(&light),
    )
    .await?;
    let skiplocked_light = run(Variant::Skiplocked, base, "bench_skiplocked", &light).await?;
    let skiplocked_delete_light =
        run(Variant::SkiplockedDelete, base, "bench_skiplocked", &light).await?;
    // The runtime against one gRPC worker as ABBA pairs, quiet and beside one busy loop per
    // core: runs of at most 6 s, so that the pairs add about two minutes.
    let pair_opts = BenchOpts {
        duration: opts.duration.min(Duration::from_secs(6)),
        warmup: opts.warmup.min(Duration::from_secs(2)),
        ..opts.clone()
    };
    let pairs = crate::peer_pairs::quiet_and_contended(base, &pair_opts, cores()).await?;
    let pair_mean = |k: &str| {
        pairs[k]["pairs"]["pair_ratio_mean"]
            .as_f64()
            .unwrap_or(f64::NAN)
    };
    let kept = |k: &str| pairs[k].as_f64().unwrap_or(f64::NAN);
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let ack = |r: &measure::Report| r.enqueue_ack_p50_ms.unwrap_or(f64::NAN);
    // CPU per job (bench process + cluster): what the paths cost whatever else ran.
    let cpu = |r: &measure::Report| r.cpu_per_job.map_or(f64::NAN, |c| c.total_us);
    let ratios = serde_json::json!({
        "runtime_vs_log_acked_jobs_per_s": ratio(runtime.jobs_per_s, log_acked.jobs_per_s),
        "runtime_vs_skiplocked_jobs_per_s": ratio(runtime.jobs_per_s, skiplocked.jobs_per_s),
        "grpc_vs_runtime_jobs_per_s": ratio(grpc.jobs_per_s, runtime.jobs_per_s),
        "grpc_one_worker_vs_runtime_jobs_per_s": ratio(grpc_one.jobs_per_s, runtime.jobs_per_s),
        "grpc_one_worker_vs_runtime_jobs_per_s_pair_mean": pair_mean("quiet"),
        "grpc_one_worker_vs_runtime_jobs_per_s_pair_mean_under_contention":
            pair_mean("contended"),
        "grpc_one_worker_kept_vs_runtime_kept_under_contention": ratio(
            kept("grpc_one_worker_kept_under_contention"),
            kept("runtime_kept_under_contention"),
        ),
        "grpc_one_connection_vs_runtime_jobs_per_s":
            ratio(grpc_one_conn.jobs_per_s, runtime.jobs_per_s),
        "runtime_vs_grpc_cpu_per_job": ratio(cpu(&runtime), cpu(&grpc)),
        "runtime_vs_grpc_one_connection_cpu_per_job": ratio(cpu(&runtime), cpu(&grpc_one_conn)),
        "runtime_vs_grpc_one_worker_cpu_per_job": ratio(cpu(&runtime), cpu(&grpc_one)),
        "runtime_ack_p50_vs_bare_commit_p50": ratio(ack(&runtime), commit.p50_ms),
        "lone_producer_engine_ack_p50_vs_bare_commit_p50": lone.engine_ack_p50_vs_bare_commit_p50,
        "lone_producer_grpc_ack_p50_vs_bare_commit_p50": lone.grpc_ack_p50_vs_bare_commit_p50,
        "lone_producer_engine_plus_tcp_round_trip_p50_vs_bare_commit_p50":
            lone.engine_plus_tcp_round_trip_p50_vs_bare_commit_p50,
        "lone_producer_at_rate_engine_plus_tcp_round_trip_p50_vs_bare_commit_p50":
            lone_at_rate.engine_plus_tcp_round_trip_p50_vs_bare_commit_p50,
        "lone_producer_at_rate_engine_ack_p50_vs_bare_commit_p50":
            lone_at_rate.engine_ack_p50_vs_bare_commit_p50,
        "lone_producer_at_rate_grpc_ack_p50_vs_bare_commit_p50":
            lone_at_rate.grpc_ack_p50_vs_bare_commit_p50,
        "inprocess_vs_log_acked_jobs_per_s": ratio(inprocess.jobs_per_s, log_acked.jobs_per_s),
        "inprocess_vs_skiplocked_jobs_per_s": ratio(inprocess.jobs_per_s, skiplocked.jobs_per_s),
        "grpc_vs_inprocess_jobs_per_s": ratio(grpc.jobs_per_s, inprocess.jobs_per_s),
        "inprocess_ack_p50_vs_bare_commit_p50": ratio(ack(&inprocess), commit.p50_ms),
        "grpc_ack_p50_vs_bare_commit_p50": ratio(ack(&grpc), commit.p50_ms),
        "runtime_ack_p50_vs_bare_commit_under_load_p50":
            ratio(ack(&runtime), runtime_probe.p50_ms),
        "grpc_ack_p50_vs_bare_commit_under_load_p50": ratio(ack(&grpc), grpc_probe.p50_ms),
        "open_loop_runtime_ack_p50_vs_bare_commit_p50": ratio(ack(&runtime_light), commit.p50_ms),
        "open_loop_grpc_ack_p50_vs_bare_commit_p50": ratio(ack(&grpc_light), commit.p50_ms),
        "open_loop_runtime_ack_p50_vs_bare_commit_at_rate_p50":
            ratio(ack(&runtime_light), commit_at_rate.p50_ms),
        "open_loop_grpc_ack_p50_vs_bare_commit_at_rate_p50":
            ratio(ack(&grpc_light), commit_at_rate.p50_ms),
        "open_loop_grpc_one_worker_ack_p50_vs_bare_commit_at_rate_p50":
            ratio(ack(&grpc_one_light), commit_at_rate.p50_ms),
        "open_loop_runtime_ack_p50_vs_bare_commit_under_load_p50":
            ratio(ack(&runtime_light), runtime_light_probe.p50_ms),
        "open_loop_grpc_ack_p50_vs_bare_commit_under_load_p50":
            ratio(ack(&grpc_light), grpc_light_probe.p50_ms),
        "open_loop_runtime_p50_vs_skiplocked_p50": ratio(runtime_light.p50_ms, skiplocked_light.p50_ms),
        "open_loop_runtime_p99_vs_skiplocked_p99": ratio(runtime_light.p99_ms, skiplocked_light.p99_ms),
        "open_loop_grpc_p50_vs_skiplocked_p50": ratio(grpc_light.p50_ms, skiplocked_light.p50_ms),
        "open_loop_grpc_p99_vs_skiplocked_p99": ratio(grpc_light.p99_ms, skiplocked_light.p99_ms),
        "open_loop_grpc_one_worker_p50_vs_skiplocked_p50":
            ratio(grpc_one_light.p50_ms, skiplocked_light.p50_ms),
        "open_loop_grpc_one_worker_p99_vs_skiplocked_p99":
            ratio(grpc_one_light.p99_ms, skiplocked_light.p99_ms),
        "runtime_vs_skiplocked_delete_jobs_per_s":
            ratio(runtime.jobs_per_s, skiplocked_delete.jobs_per_s),
        "open_loop_runtime_p50_vs_skiplocked_delete_p50":
            ratio(runtime_light.p50_ms, skiplocked_delete_light.p50_ms),
        "open_loop_runtime_p99_vs_skiplocked_delete_p99":
            ratio(runtime_light.p99_ms, skiplocked_delete_light.p99_ms),
        "open_loop_grpc_one_worker_p50_vs_skiplocked_delete_p50":
            ratio(grpc_one_light.p50_ms, skiplocked_delete_light.p50_ms),
        "open_loop_grpc_one_worker_p99_vs_skiplocked_delete_p99":
            ratio(grpc_one_light.p99_ms, skiplocked_delete_light.p99_ms),
    });
    Ok(serde_json::json!({
        "shape": "peer",
        "options": opts,
        "bare_commit": commit,
        "bare_commit_at_open_loop_rate": commit_at_rate,
        "lone_producer": { "back_to_back": lone, "at_open_loop_rate": lone_at_rate },
        "bare_commit_under_load": {
            "runtime": runtime_probe,
            "grpc": grpc_probe,
            "open_loop_runtime": runtime_light_probe,
            "open_loop_grpc": grpc_light_probe,
        },
        "inprocess": inprocess,
        "runtime": runtime,
        "grpc": grpc,
        "grpc_one_worker": grpc_one,
        "grpc_one_connection": grpc_one_conn,
        "skiplocked": skiplocked,
        "skiplocked_delete": skiplocked_delete,
        "log_acked": log_acked,
        "half_saturation": { "runtime": runtime_half, "grpc": grpc_half },
        "open_loop": {
            "rate": OPEN_LOOP_RATE,
            "runtime": runtime_light,
            "grpc": grpc_light,
            "grpc_one_worker": grpc_one_light,
            "skiplocked": skiplocked_light,
            "skiplocked_delete": skiplocked_delete_light,
        },
        "grpc_one_worker_vs_runtime_pairs": pairs,
        "ratios": ratios,
    }))
}

/// Cores of this machine: one busy loop each makes the contended pairs.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, usize::from)
}
