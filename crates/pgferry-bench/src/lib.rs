//! `pgferry bench`: the engine's full cycle and reference queues written in plain SQL,
//! run with the same workload (producers keeping the queue depth bounded, claimers completing
//! with a no-op handler) and the same client concurrency, each on a fresh database of one
//! cluster, reported in one JSON shape.

// `compare --shape peer` builds its ratios in one `serde_json::json!` object, deeper than the
// default macro recursion limit of 128.
#![recursion_limit = "256"]

mod bench_server;
mod cpu;
mod cycle;
mod echo;
mod grpc_cycle;
pub mod hogs;
mod http_cycle;
pub mod http_jobs;
pub mod lone_producer;
mod measure;
pub mod paired;
pub mod peer;
pub mod peer_pairs;
mod reference_log;
mod reference_skiplocked;
mod runtime_cycle;
mod scheduled;
pub mod schedules;
pub mod two_process;
pub mod workflow;
pub mod workflow_grpc;
mod workflow_load;
mod workflow_seed;
mod workflow_signal;

use std::time::Duration;

use pgferry_core::{
    Durability, Engine, EngineConfig, Leader, LeaderConfig, QueueOptions, QueueSettings,
};
use serde::Serialize;
use tokio_postgres::{Config, NoTls};

pub use measure::Report;
pub use scheduled::PromotionLag;

/// Workload shared by every variant.
#[derive(Debug, Clone, Serialize)]
pub struct BenchOpts {
    /// Measured window.
    #[serde(serialize_with = "secs")]
    pub duration: Duration,
    /// Not counted: lets caches, plans and autovacuum settle.
    #[serde(serialize_with = "secs")]
    pub warmup: Duration,
    pub producers: usize,
    pub workers: usize,
    /// gRPC cycle only: execution slots over all worker streams (`workers` streams).
    pub worker_slots: usize,
    /// gRPC cycle only: connections the worker streams share, round robin (0: one each, as
    /// separate worker processes have).
    pub connections: usize,
    pub payload_bytes: usize,
    pub enqueue_batch: usize,
    pub claim_batch: usize,
    /// Producers pause while more than this many jobs are waiting.
    pub max_depth: usize,
    /// Keep a transaction with an xid open for the whole run (a long report, a forgotten
    /// session): it holds back the vacuum horizon, which is what makes UPDATE/DELETE queues
    /// accumulate dead tuples and slow down.
    pub hold_xmin: bool,
    /// pgferry only: shards of the benchmark queue (lanes claimed in parallel).
    pub shards: i16,
    /// pgferry only: the ticker's pause after a tick while the log grows.
    #[serde(serialize_with = "secs")]
    pub tick_interval: Duration,
    /// pgferry only: how long a segment stays current. With the leader's retention this sets
    /// how many segments are in use, and so attached (ADR 0009): runs shorter than the
    /// retention never reach the steady number.
    #[serde(serialize_with = "secs")]
    pub segment_duration: Duration,
    /// cycle (in process) only: jobs scheduled far in the future on the benchmark queue
    /// before the run, with a probe of promotion lateness during it (Some(0): the probe and
    /// the settling step alone, the baseline to compare with).
    pub scheduled: Option<usize>,
    /// pgferry only: the benchmark queue's durability (architecture.md §1.7). The references always
    /// commit synchronously.
    #[serde(serialize_with = "durability")]
    pub durability: Durability,
    /// gRPC and HTTP cycles: the server's adaptive group commit (on by default).
    pub group_commit_adaptive: bool,
    /// gRPC and HTTP cycles, adaptive: a caller finding its lane idle runs its own flush
    /// (on by default; `CoalesceConfig::caller_flush`).
    pub group_commit_caller_flush: bool,
    /// Open loop: the producers together send this many jobs per second on a fixed
    /// schedule (batches of `enqueue_batch`), whatever the depth; None: closed loop, as
    /// fast as acknowledgements come while the queue is at most `max_depth` deep.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// pgferry: enqueue batches of at most this many jobs are one INSERT (one round trip),
    /// larger ones a COPY (`EngineConfig::insert_max_rows`; 0: always COPY).
    pub insert_max_rows: usize,
    /// pgferry: the ticker ticks on demand for waiting claimers (`LeaderConfig::tick_on_demand`).
    pub tick_on_demand: bool,
    /// pgferry: claims commit with `synchronous_commit = off` (`EngineConfig::async_claims`,
    /// ADR 0019).
    pub async_claims: bool,
    /// `bench workflow`: A/B pairs of the hot-key phase (rounds without and with the hot
    /// key, in ABBA order; 2 pairs: A B B A).
    pub hot_key_pairs: usize,
    /// Busy loops in processes of their own beside the run (0: none; [`hogs`]): CPU
    /// contention, the way another tenant's work on the machine takes cores away.
    pub cpu_hogs: usize,
    /// `peer_pairs`: A/B pairs of the runtime and one gRPC worker, in ABBA order.
    pub peer_pairs: usize,
}

fn durability<S: serde::Serializer>(d: &Durability, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(d.as_str())
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Default for BenchOpts {
    fn default() -> Self {
        BenchOpts {
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(2),
            producers: 4,
            workers: 8,
            worker_slots: 128,
            connections: 0,
            payload_bytes: 64,
            enqueue_batch: 100,
            claim_batch: 200,
            max_depth: 20_000,
            hold_xmin: false,
            shards: 2,
            tick_interval: Duration::from_millis(2),
            segment_duration: pgferry_core::LeaderConfig::default().segment_duration,
            scheduled: None,
            durability: Durability::Sync,
            group_commit_adaptive: true,
            group_commit_caller_flush: true,
            rate: None,
            insert_max_rows: EngineConfig::default().insert_max_rows,
            tick_on_demand: true,
            async_claims: EngineConfig::default().async_claims,
            hot_key_pairs: 2,
            cpu_hogs: 0,
            peer_pairs: 3,
        }
    }
}

/// The variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// pgferry's engine: ready log, ticks, receipts, completions.
    Cycle,
    /// In process through the worker runtime (`pgferry_core::runtime`), as a Rust user runs
    /// it; jobs count at handler start.
    CycleRuntime,
    /// The same cycle through a server: gRPC producer and worker streams, group commit.
    CycleGrpc,
    /// The same cycle through the server's HTTP API: batch enqueue, long-poll claim,
    /// complete by token; group commit.
    CycleHttp,
    /// Classic lease-based queue: UPDATE … FOR UPDATE SKIP LOCKED, DELETE on completion.
    Skiplocked,
    /// Row-lock queue without a lease: SKIP LOCKED claim and DELETE in one statement.
    SkiplockedDelete,
    /// Minimal append-only log: COPY in, read by cursor, no per-job acknowledgement.
    Log,
    /// The same log plus a durable receipt per read and a durable ack per batch: what two
    /// commits per batch cost, the nearest any acknowledged queue can come to `Log`.
    LogAcked,
}

/// Runs one variant on a fresh database `dbname` created on the cluster of `base`.
pub async fn run(
    variant: Variant,
    base: &Config,
    dbname: &str,
    opts: &BenchOpts,
) -> anyhow::Result<Report> {
    let config = fresh_database(base, dbname).await?;
    // From before the warm-up to the end of the measured window.
    let hogs = hogs::Hogs::start(opts.cpu_hogs)?;
    // Held in the same database, open until the run is over.
    let holder = if opts.hold_xmin {
        let client = measure::connect(&config, "xmin-holder").await?;
        client
            .batch_execute("BEGIN; SELECT pg_current_xact_id();")
            .await?;
        Some(client)
    } else {
        None
    };
    let report = match variant {
        Variant::Cycle => cycle::run(&config, opts).await?,
        Variant::CycleGrpc => grpc_cycle::run(&config, opts).await?,
        Variant::CycleRuntime => runtime_cycle::run(&config, opts).await?,
        Variant::CycleHttp => http_cycle::run(&config, opts).await?,
        Variant::Skiplocked => {
            reference_skiplocked::run(&config, opts, reference_skiplocked::Mode::Lease).await?
        }
        Variant::SkiplockedDelete => {
            reference_skiplocked::run(&config, opts, reference_skiplocked::Mode::Delete).await?
        }
        Variant::Log => reference_log::run(&config, opts, reference_log::Mode::Bare).await?,
        Variant::LogAcked => reference_log::run(&config, opts, reference_log::Mode::Acked).await?,
    };
    drop(holder);
    drop(hogs);
    Ok(report)
}

/// Runs the cycle and the references one after another on the same cluster and adds the
/// ratios. The targets compare `cycle` (synchronous, as the references are) with them;
/// `cycle_async` reports the same cycle on a queue with async durability (architecture.md §1.7: the
/// bench reports both modes), and `log_acked` comes last: it is not one of issue 3's targets
/// but tells how much of the gap to `log` any acknowledged queue pays.
pub async fn compare(base: &Config, opts: &BenchOpts) -> anyhow::Result<serde_json::Value> {
    let sync = BenchOpts {
        durability: Durability::Sync,
        ..opts.clone()
    };
    let cycle = run(Variant::Cycle, base, "bench_cycle", &sync).await?;
    let cycle_async = BenchOpts {
        durability: Durability::Async,
        ..opts.clone()
    };
    let cycle_async = run(Variant::Cycle, base, "bench_cycle_async", &cycle_async).await?;
    let skiplocked = run(Variant::Skiplocked, base, "bench_skiplocked", &sync).await?;
    let log = run(Variant::Log, base, "bench_log", &sync).await?;
    let log_acked = run(Variant::LogAcked, base, "bench_log_acked", &sync).await?;
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    Ok(serde_json::json!({
        "options": sync,
        "cycle": cycle,
        "cycle_async": cycle_async,
        "skiplocked": skiplocked,
        "log": log,
        "log_acked": log_acked,
        "ratios": {
            "cycle_async_vs_cycle_jobs_per_s": ratio(cycle_async.jobs_per_s, cycle.jobs_per_s),
            "cycle_async_vs_log_jobs_per_s": ratio(cycle_async.jobs_per_s, log.jobs_per_s),
            "cycle_vs_skiplocked_jobs_per_s": ratio(cycle.jobs_per_s, skiplocked.jobs_per_s),
            "cycle_vs_log_jobs_per_s": ratio(cycle.jobs_per_s, log.jobs_per_s),
            "cycle_vs_log_wal_bytes_per_job": ratio(cycle.wal_bytes_per_job, log.wal_bytes_per_job),
            "cycle_vs_log_acked_jobs_per_s": ratio(cycle.jobs_per_s, log_acked.jobs_per_s),
            "log_acked_vs_log_jobs_per_s": ratio(log_acked.jobs_per_s, log.jobs_per_s),
        },
    }))
}

/// The cycle through the gRPC server and in process, one after the other on the same
/// cluster, with the ratio of completed jobs per second (gRPC / in-process).
pub async fn grpc_vs_inprocess(
    base: &Config,
    opts: &BenchOpts,
) -> anyhow::Result<serde_json::Value> {
    let inprocess = run(Variant::Cycle, base, "bench_cycle", opts).await?;
    let grpc = run(Variant::CycleGrpc, base, "bench_cycle_grpc", opts).await?;
    let ratio = if inprocess.jobs_per_s > 0.0 {
        grpc.jobs_per_s / inprocess.jobs_per_s
    } else {
        f64::NAN
    };
    Ok(serde_json::json!({
        "options": opts,
        "grpc": grpc,
        "inprocess": inprocess,
        "ratios": { "grpc_vs_inprocess_jobs_per_s": ratio },
    }))
}

/// The cycle through the HTTP API and in process, one after the other on one cluster,
/// with the ratios of completed and of enqueued jobs per second.
pub async fn http_vs_inprocess(
    base: &Config,
    opts: &BenchOpts,
) -> anyhow::Result<serde_json::Value> {
    let inprocess = run(Variant::Cycle, base, "bench_cycle", opts).await?;
    let http = run(Variant::CycleHttp, base, "bench_cycle_http", opts).await?;
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    Ok(serde_json::json!({
        "options": opts,
        "http": http,
        "inprocess": inprocess,
        "ratios": {
            "http_vs_inprocess_jobs_per_s": ratio(http.jobs_per_s, inprocess.jobs_per_s),
            "http_vs_inprocess_enqueued_per_s":
                ratio(http.enqueued_per_s, inprocess.enqueued_per_s),
        },
    }))
}

/// The engine configuration of a pgferry variant.
fn engine_config(opts: &BenchOpts) -> EngineConfig {
    EngineConfig {
        insert_max_rows: opts.insert_max_rows,
        async_claims: opts.async_claims,
        ..EngineConfig::default()
    }
}

/// The leader configuration of a pgferry variant: the run's ticks and segments.
fn leader_config(opts: &BenchOpts) -> LeaderConfig {
    LeaderConfig {
        tick_interval: opts.tick_interval,
        tick_on_demand: opts.tick_on_demand,
        segment_duration: opts.segment_duration,
        ..LeaderConfig::default()
    }
}

/// Runs the leader of `engine` with [`leader_config`] until `stop` says so.
fn spawn_leader(
    engine: &std::sync::Arc<Engine>,
    config: &Config,
    opts: &BenchOpts,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(Leader::new(engine.clone(), config.clone(), leader_config(opts)).run(stop))
}

/// Creates the benchmark queue `name` with the run's shards and durability.
async fn bench_queue(engine: &Engine, name: &str, opts: &BenchOpts) -> anyhow::Result<()> {
    let queue = QueueOptions {
        shards: opts.shards,
        max_attempts: 25,
        lease: Duration::from_secs(300),
    };
    engine.upsert_queue(name, &queue).await?;
    let settings = QueueSettings {
        durability: Some(opts.durability),
        ..Default::default()
    };
    engine.update_queue(name, &settings).await?;
    Ok(())
}

/// Drops and recreates `dbname`; returns a config pointing at it.
pub(crate) async fn fresh_database(base: &Config, dbname: &str) -> anyhow::Result<Config> {
    let mut admin = base.clone();
    admin.dbname("postgres");
    let (client, conn) = admin.connect(NoTls).await?;
    tokio::spawn(conn);
    // The name is one of our constants, never user input.
    // Two calls: a multi-statement string would run as one implicit transaction, which
    // DROP/CREATE DATABASE refuse.
    client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {dbname} WITH (FORCE)"))
        .await?;
    client
        .batch_execute(&format!("CREATE DATABASE {dbname}"))
        .await?;
    let mut cfg = base.clone();
    cfg.dbname(dbname);
    Ok(cfg)
}

/// A JSON payload of about `bytes` bytes.
pub fn payload(bytes: usize) -> serde_json::Value {
    serde_json::json!({ "data": "x".repeat(bytes.saturating_sub(12)) })
}
