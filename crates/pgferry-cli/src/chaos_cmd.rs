//! `pgferry chaos`: the fault-injection suite (docs/reliability.md). JSON report on stdout,
//! progress on stderr; exits non-zero when an invariant did not hold.
//! `pgferry chaos-worker` (hidden) is the worker process the suite starts and SIGKILLs.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use pgferry_chaos::{ChaosConfig, Fault, WorkerArgs};

#[derive(clap::Args)]
pub struct ChaosArgs {
    /// Print the report as JSON (the only format; kept for scripts).
    #[arg(long)]
    pub json: bool,
    /// Faults to run, in order (repeatable; default: all). worker-kill, terminate-2,
    /// terminate-10, pg-restart, pg-crash, server-kill, leader-takeover, xid-hold,
    /// failover-sync, failover-async, pool-exhaustion.
    #[arg(long = "fault", value_parser = parse_fault)]
    pub faults: Vec<Fault>,
    /// Seconds each fault lasts (repeated faults) or jobs flow after it (one-shot faults).
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Seconds of jobs flowing before the fault (the baseline throughput).
    #[arg(long, default_value_t = 3)]
    pub warmup: u64,
    /// Seconds producers keep going after the fault window.
    #[arg(long, default_value_t = 3)]
    pub recovery: u64,
    /// Jobs per second the producers aim for together (the termination faults run theirs
    /// as fast as the server answers).
    #[arg(long, default_value_t = 2000)]
    pub rate: u64,
    /// Jobs per producer batch (default: 200 for the termination faults, 50 otherwise).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Producers (default 3; the termination faults' all over HTTP, otherwise every third
    /// over gRPC).
    #[arg(long)]
    pub producers: Option<usize>,
    /// Use a fresh database on this Postgres instead of a private cluster (faults that stop
    /// or replace Postgres are skipped). Only the suite's own servers' sessions are touched.
    #[arg(long, env = "PGFERRY_CHAOS_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Run the faults against workflows instead of jobs (worker-kill, terminate-2 and
    /// pg-restart; default: those three): --rate is then orders per second (default 30).
    #[arg(long)]
    pub workflows: bool,
}

fn parse_fault(name: &str) -> Result<Fault, String> {
    Fault::parse(name).ok_or_else(|| {
        let names: Vec<&str> = Fault::ALL.iter().map(|f| f.name()).collect();
        format!("unknown fault {name:?}; faults are {}", names.join(", "))
    })
}

pub async fn run(args: ChaosArgs) -> anyhow::Result<()> {
    if args.workflows {
        return run_workflows(args).await;
    }
    let bin = std::env::current_exe().context("locating the pgferry binary")?;
    let mut cfg = ChaosConfig::new(bin);
    cfg.database_url = args.database_url.clone();
    cfg.duration = Duration::from_secs(args.duration.max(1));
    cfg.warmup = Duration::from_secs(args.warmup.max(2));
    cfg.recovery = Duration::from_secs(args.recovery);
    cfg.rate = args.rate.max(1);
    cfg.batch = args.batch;
    cfg.producers = args.producers;
    cfg.progress = true;
    let faults = if args.faults.is_empty() {
        Fault::ALL.to_vec()
    } else {
        args.faults.clone()
    };
    let mut reports = Vec::new();
    let mut skipped = Vec::new();
    let mut failed = Vec::new();
    for fault in faults {
        if fault.needs_own_cluster() && cfg.database_url.is_some() {
            skipped.push(serde_json::json!({
                "fault": fault.name(),
                "reason": "needs a cluster the suite starts itself (not --database-url)",
            }));
            continue;
        }
        eprintln!("pgferry chaos: {} — {}", fault.name(), fault.description());
        // Ctrl-C or SIGTERM ends the run; dropping it stops what it started.
        let stop = crate::run::shutdown_signal()?;
        let report = tokio::select! {
            r = pgferry_chaos::run_fault(&cfg, fault) => {
                r.with_context(|| format!("running fault {}", fault.name()))?
            }
            () = stop => anyhow::bail!("interrupted during fault {}", fault.name()),
        };
        if !report.passed {
            failed.push(fault.name());
        }
        reports.push(report);
    }
    let out = serde_json::json!({
        "passed": failed.is_empty(),
        "faults": reports,
        "skipped": skipped,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    if failed.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("invariants violated under: {}", failed.join(", "))
    }
}

/// `pgferry chaos --workflows`: the workflow scenario under each fault.
async fn run_workflows(args: ChaosArgs) -> anyhow::Result<()> {
    let bin = std::env::current_exe().context("locating the pgferry binary")?;
    let mut cfg = ChaosConfig::new(bin);
    cfg.database_url = args.database_url.clone();
    cfg.duration = Duration::from_secs(args.duration.max(1));
    cfg.warmup = Duration::from_secs(args.warmup.max(1));
    cfg.recovery = Duration::from_secs(args.recovery);
    cfg.rate = if args.rate == 2000 {
        30
    } else {
        args.rate.max(1)
    };
    cfg.worker_slots = 4;
    let faults = if args.faults.is_empty() {
        vec![Fault::WorkerKill, Fault::Terminate2, Fault::PgRestart]
    } else {
        args.faults.clone()
    };
    let mut reports = Vec::new();
    let mut failed = Vec::new();
    for fault in faults {
        eprintln!("pgferry chaos --workflows: {}", fault.name());
        let stop = crate::run::shutdown_signal()?;
        let report = tokio::select! {
            r = pgferry_chaos::run_workflow_fault(&cfg, fault) => {
                r.with_context(|| format!("running fault {} against workflows", fault.name()))?
            }
            () = stop => anyhow::bail!("interrupted during fault {}", fault.name()),
        };
        if !report.passed {
            failed.push(fault.name());
        }
        reports.push(report);
    }
    let out = serde_json::json!({ "passed": failed.is_empty(), "workflows": reports });
    println!("{}", serde_json::to_string_pretty(&out)?);
    if failed.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("workflow invariants violated under: {}", failed.join(", "))
    }
}

#[derive(clap::Args)]
pub struct WorkerCmd {
    #[arg(long)]
    pub grpc_url: String,
    #[arg(long)]
    pub api_key: String,
    #[arg(long)]
    pub queue: String,
    #[arg(long)]
    pub ledger: PathBuf,
    #[arg(long)]
    pub worker_id: String,
    #[arg(long, default_value_t = 64)]
    pub slots: usize,
    #[arg(long, default_value_t = 20)]
    pub work_ms: u64,
    /// Run the suite's workflow machines over HTTP instead of jobs.
    #[arg(long)]
    pub workflows: bool,
    #[arg(long, default_value = "")]
    pub http_url: String,
}

pub async fn worker(cmd: WorkerCmd) -> anyhow::Result<()> {
    pgferry_chaos::run_worker(WorkerArgs {
        grpc_url: cmd.grpc_url,
        api_key: cmd.api_key,
        queue: cmd.queue,
        ledger: cmd.ledger,
        worker_id: cmd.worker_id,
        slots: cmd.slots,
        work_ms: cmd.work_ms,
        workflows: cmd.workflows,
        http_url: cmd.http_url,
    })
    .await
}
