//! `pgferry bench …`: runs against `--database-url` or a private cluster started for the
//! run in a temporary directory (durable settings: fsync and synchronous_commit on).

use std::str::FromStr;
use std::time::Duration;

use pgferry_bench::{BenchOpts, Variant};
use pgferry_pgcluster::{Cluster, ClusterOptions};
use tokio_postgres::Config;

#[derive(clap::Args, Clone)]
pub struct BenchArgs {
    /// Print the report as JSON (the only format today; kept for scripts).
    #[arg(long)]
    pub json: bool,
    /// Measured seconds per variant.
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Warmup seconds per variant (not counted).
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
    /// Claimer tasks (each with its own connection).
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Producer tasks.
    #[arg(long, default_value_t = 4)]
    pub producers: usize,
    #[arg(long, default_value_t = 64)]
    pub payload_bytes: usize,
    #[arg(long, default_value_t = 100)]
    pub enqueue_batch: usize,
    #[arg(long, default_value_t = 200)]
    pub claim_batch: usize,
    /// Hold a transaction with an xid open during each run (vacuum horizon held back).
    #[arg(long)]
    pub hold_xmin: bool,
    /// pgferry: shards of the benchmark queue.
    #[arg(long, default_value_t = 2)]
    pub shards: i16,
    /// pgferry: ticker pause (ms) after a tick while the log grows.
    #[arg(long, default_value_t = 2)]
    pub tick_ms: u64,
    /// pgferry: how long a segment stays current (ms); default: the leader's default.
    #[arg(long)]
    pub segment_ms: Option<u64>,
    /// cycle: run in process (the engine directly) or through a server over gRPC.
    /// workflow --via grpc: the 3-step machine over WorkflowWorker streams beside in-process
    /// workers of the same run.
    #[arg(long, value_enum, default_value_t = Via::Inprocess)]
    pub via: Via,
    /// cycle --via grpc: execution slots over all worker streams (`--workers` streams).
    #[arg(long, default_value_t = 128)]
    pub worker_slots: usize,
    /// cycle --via grpc: HTTP/2 connections the worker streams share, round robin (0: a
    /// connection per stream, as separate worker processes have).
    #[arg(long, default_value_t = 0)]
    pub connections: usize,
    /// cycle --via grpc|http: also run the in-process cycle on the same cluster and report
    /// the ratio of completed jobs per second.
    #[arg(long)]
    pub compare_inprocess: bool,
    /// Producers pause while more jobs than this wait (enqueued, not finished). A large
    /// value lets them run free: `enqueued_per_s` is then the enqueue rate the path allows
    /// while workers run.
    #[arg(long, default_value_t = 20_000)]
    pub max_depth: usize,
    /// cycle (in process): jobs scheduled 30 days ahead on the benchmark queue before the
    /// run; the report adds how late due jobs were handed out during it (0: that probe
    /// alone, the baseline to compare with).
    #[arg(long)]
    pub scheduled: Option<usize>,
    /// pgferry: the benchmark queue's durability (`compare` runs the cycle in both modes).
    #[arg(long, value_enum, default_value_t = DurabilityArg::Sync)]
    pub durability: DurabilityArg,
    /// Workload shape. `peer`: one producer of batches of 100 waiting for each
    /// acknowledgement, depth at most 5,000, 64 single-job handlers, 256-byte payloads
    /// (overrides those flags); `compare --shape peer` runs in process, gRPC (64 one-slot
    /// streams, and one worker stream of 64 slots), skiplocked (under a lease, and
    /// skiplocked_delete: claim and DELETE in one statement), log_acked and a bare commit,
    /// with the ratios of issue 21.
    #[arg(long, value_enum, default_value_t = Shape::Default)]
    pub shape: Shape,
    /// gRPC/HTTP cycles: the server's adaptive group commit (flush at once when nothing
    /// else is being written); false: always wait the group-commit window.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub group_commit_adaptive: bool,
    /// gRPC/HTTP cycles, adaptive group commit: a request that finds its flush lane idle is
    /// written by its own task (false: always handed to the collector task).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub group_commit_caller_flush: bool,
    /// Open loop: producers send this many jobs per second in total on a fixed schedule,
    /// whatever the depth (default: closed loop). `--shape open-loop` defaults it to 500.
    #[arg(long)]
    pub rate: Option<f64>,
    /// pgferry: enqueue batches of at most this many jobs are written by one INSERT (one
    /// round trip), larger ones by a COPY (0: always COPY).
    #[arg(long, default_value_t = pgferry_core::EngineConfig::default().insert_max_rows)]
    pub insert_max_rows: usize,
    /// pgferry: the ticker ticks at once when the log grew and claimers wait (false: it
    /// always waits `--tick-ms` between ticks while the log grows).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub tick_on_demand: bool,
    /// pgferry: claims commit with synchronous_commit = off (ADR 0019; false: claims commit
    /// like every other write, one WAL flush each).
    #[arg(long, default_value_t = pgferry_core::EngineConfig::default().async_claims, action = clap::ArgAction::Set)]
    pub async_claims: bool,
    /// workflow: A/B pairs of the hot-key phase (rounds without and with the hot key, in
    /// ABBA order), reported with each pair's ratio and a 95% interval of their mean.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=20))]
    pub hot_key_pairs: u16,
    /// Busy loops in processes of their own beside each run (CPU contention; default none,
    /// `--shape peer-pairs`: one per core for its contended pairs).
    #[arg(long)]
    pub cpu_hogs: Option<usize>,
    /// `--shape peer-pairs`: pairs of runs (A B B A …) in each condition.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=20))]
    pub peer_pairs: u16,
    /// Use this database instead of a private cluster.
    #[arg(long, env = "PGFERRY_BENCH_DATABASE_URL")]
    pub database_url: Option<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The flags as given (defaults: 4 producers, 8 workers claiming 200 at a time).
    Default,
    /// How side-by-side benchmarks of Postgres queues run (docs/performance.md).
    Peer,
    /// The peer shape's consumers at light load: one producer of single jobs at `--rate`
    /// (default 500) jobs/s, open loop.
    OpenLoop,
    /// `cycle` only: a lone producer of single jobs with nothing consuming, its
    /// acknowledgement in process, with an idempotency key, over gRPC and refused by the
    /// server, beside a bare one-row commit in the same rounds: back to back, or each after
    /// an idle gap of 1/`--rate` s.
    LoneProducer,
    /// `cycle` only: the runtime against one gRPC worker of 64 slots in the peer shape, as
    /// `--peer-pairs` ABBA pairs, quiet and then beside `--cpu-hogs` busy loops (default:
    /// one per core); each pair's ratio and how much of its quiet rate each path kept.
    PeerPairs,
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Inprocess,
    Grpc,
    /// HTTP/JSON API: batch enqueue, long-poll claim (`--claim-batch`) and complete per
    /// `--workers` task.
    Http,
    /// The worker runtime in process (`pgferry_core::runtime`, `--workers` slots; jobs
    /// count at handler start).
    Runtime,
}

/// architecture.md §1.7: `async` commits the queue's writes with synchronous_commit = off.
#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum DurabilityArg {
    Sync,
    Async,
}

#[derive(clap::ValueEnum, Clone, Copy)]
pub enum RefKind {
    /// Lease-based: SKIP LOCKED claim under a lease, DELETE after the handler.
    Skiplocked,
    /// No lease: SKIP LOCKED claim and DELETE in one statement (issue 21's reference).
    SkiplockedDelete,
    Log,
    /// The log plus a durable receipt and a durable ack per batch (not an issue-3 target).
    LogAcked,
}

#[derive(clap::Subcommand)]
pub enum BenchCmd {
    /// pgferry's engine: enqueue → claim → complete.
    Cycle(BenchArgs),
    /// One of the plain-SQL reference queues.
    Reference {
        #[arg(long)]
        kind: RefKind,
        #[command(flatten)]
        args: BenchArgs,
    },
    /// All three in one process on one cluster, with ratios.
    Compare(BenchArgs),
    /// Durable workflows: a 3-step machine and its code-first twin beside `cycle` of the
    /// same run, signal round trips, a fan-out of 100 children, a hot concurrency key
    /// (docs/workflows.md).
    Workflow(BenchArgs),
    /// Two `pgferry serve` processes on one database serving one queue at a light fixed
    /// rate: per-process enqueue → start p50/p99 (leader and non-leader), optionally the
    /// leader killed and the takeover measured (docs/performance.md).
    TwoProcess(TwoProcessArgs),
    /// Active session history: sample cost under simulated load, readers over seeded
    /// history, rotation, and the sampler's effect on the cycle (docs/performance.md).
    Ash(crate::ash_cmd::AshBenchArgs),
    /// HTTP jobs: runlater's load profile through the HTTP API (70% create immediate HTTP
    /// jobs, 15% delayed ones, 15% list) delivered to a loopback target; saturation, then
    /// half of it (docs/performance.md).
    HttpJobs(HttpJobsArgs),
    /// Schedules (issue 22): N `* * * * *` schedules fired by the leader duty `serve` runs,
    /// their jobs run by the worker runtime; per minute boundary, fire lag (committed
    /// enqueue) and start lag p50/p95/p99/max, missing and duplicate fires
    /// (docs/performance.md).
    Schedules(SchedulesArgs),
}

#[derive(clap::Args, Clone)]
pub struct SchedulesArgs {
    /// Print the report as JSON (the only format; kept for scripts).
    #[arg(long)]
    pub json: bool,
    /// Schedules firing every minute.
    #[arg(long, default_value_t = 10_000)]
    pub schedules: usize,
    /// Minute boundaries measured, one after the other.
    #[arg(long, default_value_t = 2)]
    pub minutes: usize,
    /// The firer's `prepare_ahead` in ms (ADR 0025); 0 fires every schedule after its time.
    /// Default: the firer's default (what `pgferry serve` uses).
    #[arg(long)]
    pub prepare_ahead_ms: Option<u64>,
    /// Use this database instead of a private cluster (`track_commit_timestamp = on` makes
    /// the fire lag count to the commit; without it, to each pass's start).
    #[arg(long, env = "PGFERRY_BENCH_DATABASE_URL")]
    pub database_url: Option<String>,
}

#[derive(clap::Args, Clone)]
pub struct HttpJobsArgs {
    /// Print the report as JSON (the only format; kept for scripts).
    #[arg(long)]
    pub json: bool,
    /// Measured seconds per window.
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Warmup seconds (not counted).
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
    /// Closed-loop API clients of the saturation window.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Immediate jobs of the backlog window (enqueued at once; 0: no backlog window).
    #[arg(long, default_value_t = 20_000)]
    pub backlog: u64,
    /// The HTTP-job worker's requests at once per destination key (the bench has one
    /// destination, its target); the default is the server's.
    #[arg(long, default_value_t = pgferry_http_jobs::worker::WorkerConfig::default().per_destination)]
    pub per_destination: usize,
    /// Use this database instead of a private cluster.
    #[arg(long, env = "PGFERRY_BENCH_DATABASE_URL")]
    pub database_url: Option<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum EnqueueVia {
    Both,
    First,
    Second,
}

#[derive(clap::Args, Clone)]
pub struct TwoProcessArgs {
    /// Print the report as JSON (the only format; kept for scripts).
    #[arg(long)]
    pub json: bool,
    /// Measured seconds per window.
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Warmup seconds (not counted).
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
    /// Jobs per second enqueued through each process, one per request.
    #[arg(long, default_value_t = 50.0)]
    pub rate: f64,
    /// Execution slots of the worker attached to each process.
    #[arg(long, default_value_t = 8)]
    pub slots: usize,
    /// After the first window, SIGKILL the leader: report the takeover gap and a second
    /// window served by the other process alone.
    #[arg(long)]
    pub kill_leader: bool,
    /// Which processes enqueue: both, first (the leader) or second (workers of both
    /// processes claim either way).
    #[arg(long, value_enum, default_value_t = EnqueueVia::Both)]
    pub enqueue_via: EnqueueVia,
    /// The pgferry binary to start (default: this one), e.g. an older build to compare.
    #[arg(long)]
    pub server_bin: Option<std::path::PathBuf>,
    /// Use this database instead of a private cluster.
    #[arg(long, env = "PGFERRY_BENCH_DATABASE_URL")]
    pub database_url: Option<String>,
}

impl BenchArgs {
    pub(crate) fn opts(&self) -> BenchOpts {
        let opts = self.flag_opts();
        match self.shape {
            Shape::Default | Shape::LoneProducer => opts,
            Shape::Peer | Shape::PeerPairs => pgferry_bench::peer::shape(&opts),
            Shape::OpenLoop => pgferry_bench::peer::open_loop(
                &opts,
                self.rate.unwrap_or(pgferry_bench::peer::OPEN_LOOP_RATE),
            ),
        }
    }

    fn flag_opts(&self) -> BenchOpts {
        BenchOpts {
            duration: Duration::from_secs(self.duration),
            warmup: Duration::from_secs(self.warmup),
            producers: self.producers,
            workers: self.workers,
            worker_slots: self.worker_slots,
            connections: self.connections,
            payload_bytes: self.payload_bytes,
            enqueue_batch: self.enqueue_batch,
            claim_batch: self.claim_batch,
            hold_xmin: self.hold_xmin,
            shards: self.shards,
            tick_interval: Duration::from_millis(self.tick_ms),
            segment_duration: self
                .segment_ms
                .map(Duration::from_millis)
                .unwrap_or(pgferry_core::LeaderConfig::default().segment_duration),
            max_depth: self.max_depth,
            scheduled: self.scheduled,
            durability: match self.durability {
                DurabilityArg::Sync => pgferry_core::Durability::Sync,
                DurabilityArg::Async => pgferry_core::Durability::Async,
            },
            group_commit_adaptive: self.group_commit_adaptive,
            group_commit_caller_flush: self.group_commit_caller_flush,
            rate: self.rate,
            insert_max_rows: self.insert_max_rows,
            tick_on_demand: self.tick_on_demand,
            async_claims: self.async_claims,
            hot_key_pairs: usize::from(self.hot_key_pairs),
            cpu_hogs: self.cpu_hogs.unwrap_or(0),
            peer_pairs: usize::from(self.peer_pairs),
        }
    }
}

pub async fn run(cmd: BenchCmd) -> anyhow::Result<()> {
    let args = match &cmd {
        BenchCmd::Cycle(a)
        | BenchCmd::Compare(a)
        | BenchCmd::Workflow(a)
        | BenchCmd::Reference { args: a, .. } => a.clone(),
        BenchCmd::Ash(a) => return crate::ash_cmd::bench(a.clone()).await,
        BenchCmd::TwoProcess(a) => return two_process(a.clone()).await,
        BenchCmd::HttpJobs(a) => return http_jobs(a.clone()).await,
        BenchCmd::Schedules(a) => return schedules(a.clone()).await,
    };
    let (base, cluster) = private_or_given(&args.database_url).await?;
    let opts = args.opts();
    let out = match cmd {
        BenchCmd::Cycle(_) if args.via == Via::Grpc && args.compare_inprocess => {
            pgferry_bench::grpc_vs_inprocess(&base, &opts).await?
        }
        BenchCmd::Cycle(_) if args.shape == Shape::LoneProducer => {
            let gap = args.rate.map(|r| Duration::from_secs_f64(1.0 / r.max(1.0)));
            serde_json::to_value(
                pgferry_bench::lone_producer::run(&base, gap, opts.duration, opts.payload_bytes)
                    .await?,
            )?
        }
        BenchCmd::Cycle(_) if args.shape == Shape::PeerPairs => {
            let hogs = args.cpu_hogs.unwrap_or_else(pgferry_bench::peer::cores);
            pgferry_bench::peer_pairs::quiet_and_contended(&base, &opts, hogs).await?
        }
        BenchCmd::Cycle(_) if args.via == Via::Http && args.compare_inprocess => {
            pgferry_bench::http_vs_inprocess(&base, &opts).await?
        }
        BenchCmd::Cycle(_) if args.via == Via::Http => serde_json::to_value(
            pgferry_bench::run(Variant::CycleHttp, &base, "bench_cycle_http", &opts).await?,
        )?,
        BenchCmd::Cycle(_) if args.via == Via::Grpc => serde_json::to_value(
            pgferry_bench::run(Variant::CycleGrpc, &base, "bench_cycle_grpc", &opts).await?,
        )?,
        BenchCmd::Cycle(_) if args.via == Via::Runtime => serde_json::to_value(
            pgferry_bench::run(Variant::CycleRuntime, &base, "bench_cycle_runtime", &opts).await?,
        )?,
        BenchCmd::Cycle(_) => serde_json::to_value(
            pgferry_bench::run(Variant::Cycle, &base, "bench_cycle", &opts).await?,
        )?,
        BenchCmd::Reference { kind, .. } => {
            let (v, db) = match kind {
                RefKind::Skiplocked => (Variant::Skiplocked, "bench_skiplocked"),
                RefKind::SkiplockedDelete => (Variant::SkiplockedDelete, "bench_skiplocked"),
                RefKind::Log => (Variant::Log, "bench_log"),
                RefKind::LogAcked => (Variant::LogAcked, "bench_log_acked"),
            };
            serde_json::to_value(pgferry_bench::run(v, &base, db, &opts).await?)?
        }
        BenchCmd::Compare(_) if args.shape == Shape::Peer => {
            pgferry_bench::peer::compare(&base, &opts).await?
        }
        BenchCmd::Compare(_) => pgferry_bench::compare(&base, &opts).await?,
        BenchCmd::Workflow(_) if args.via == Via::Grpc => {
            pgferry_bench::workflow_grpc::run(&base, &opts).await?
        }
        BenchCmd::Workflow(_) => pgferry_bench::workflow::run(&base, &opts).await?,
        BenchCmd::Ash(_)
        | BenchCmd::TwoProcess(_)
        | BenchCmd::HttpJobs(_)
        | BenchCmd::Schedules(_) => {
            unreachable!("answered above")
        }
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    stop_private(cluster).await
}

/// A private cluster in a temporary directory (stopped by the caller), or the given URL.
type Private = Option<(Cluster, tempfile::TempDir)>;

async fn private_or_given(url: &Option<String>) -> anyhow::Result<(Config, Private)> {
    private_or_given_with(url, &[]).await
}

/// [`private_or_given`] with `extra` settings for the private cluster.
async fn private_or_given_with(
    url: &Option<String>,
    extra: &[(&str, &str)],
) -> anyhow::Result<(Config, Private)> {
    let extra: Vec<(String, String)> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Ok(match url {
        Some(url) => (Config::from_str(url)?, None),
        None => {
            let dir = tempfile::Builder::new()
                .prefix("pgferry-bench-")
                .tempdir()?;
            let mut opts = ClusterOptions::new(dir.path().join("pg"));
            opts.listen_tcp = false;
            opts.settings = vec![
                ("max_connections".into(), "200".into()),
                ("shared_buffers".into(), "512MB".into()),
                ("max_wal_size".into(), "4GB".into()),
            ];
            opts.settings.extend(extra);
            let cluster = tokio::task::spawn_blocking(move || Cluster::start(opts)).await??;
            (
                Config::from_str(&cluster.conn_string("postgres"))?,
                Some((cluster, dir)),
            )
        }
    })
}

async fn stop_private(cluster: Private) -> anyhow::Result<()> {
    if let Some((cluster, dir)) = cluster {
        tokio::task::spawn_blocking(move || cluster.stop()).await??;
        drop(dir);
    }
    Ok(())
}

async fn two_process(args: TwoProcessArgs) -> anyhow::Result<()> {
    let (base, cluster) = private_or_given(&args.database_url).await?;
    let opts = pgferry_bench::two_process::TwoProcessOpts {
        server_bin: match args.server_bin {
            Some(p) => p,
            None => std::env::current_exe()?,
        },
        warmup: Duration::from_secs(args.warmup),
        duration: Duration::from_secs(args.duration.max(1)),
        rate_per_process: args.rate,
        slots: args.slots.max(1),
        kill_leader: args.kill_leader,
        enqueue_via: match args.enqueue_via {
            EnqueueVia::Both => None,
            EnqueueVia::First => Some(0),
            EnqueueVia::Second => Some(1),
        },
    };
    let report = pgferry_bench::two_process::run(&base, &opts).await;
    stop_private(cluster).await?;
    println!("{}", serde_json::to_string_pretty(&report?)?);
    Ok(())
}

async fn http_jobs(args: HttpJobsArgs) -> anyhow::Result<()> {
    let (base, cluster) = private_or_given(&args.database_url).await?;
    let opts = pgferry_bench::http_jobs::HttpJobsOpts {
        duration_s: args.duration,
        warmup_s: args.warmup,
        clients: args.clients,
        backlog: args.backlog,
        per_destination: args.per_destination,
    };
    let report = pgferry_bench::http_jobs::run_fresh(&base, &opts).await;
    stop_private(cluster).await?;
    println!("{}", serde_json::to_string_pretty(&report?)?);
    Ok(())
}

async fn schedules(args: SchedulesArgs) -> anyhow::Result<()> {
    // Commit timestamps let the report count fire lag to each pass's COMMIT.
    let (base, cluster) =
        private_or_given_with(&args.database_url, &[("track_commit_timestamp", "on")]).await?;
    let opts = pgferry_bench::schedules::SchedulesOpts {
        schedules: args.schedules,
        minutes: args.minutes,
        prepare_ahead_ms: args.prepare_ahead_ms,
    };
    let report = pgferry_bench::schedules::run_fresh(&base, &opts).await;
    stop_private(cluster).await?;
    let report = report?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    // A missing or duplicate fire fails the command too, after the report.
    if report["ok"] != serde_json::Value::Bool(true) {
        anyhow::bail!("schedules bench: {}", report["errors"]);
    }
    Ok(())
}
