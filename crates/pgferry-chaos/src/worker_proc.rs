//! The body of `pgferry chaos-worker`: a gRPC worker in its own process (so that the suite's
//! SIGKILL is a real one) whose handler appends every execution and every acknowledged result
//! to its ledger file before anything else happens.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pgferry_client::{Outcome, Worker, WorkerOptions};
use rand::Rng;

use crate::ledger::{now_us, LedgerWriter, WorkerEntry};

/// What a chaos worker process is told on its command line.
#[derive(Debug, Clone)]
pub struct WorkerArgs {
    pub grpc_url: String,
    pub api_key: String,
    pub queue: String,
    pub ledger: PathBuf,
    pub worker_id: String,
    pub slots: usize,
    /// Each execution takes a random time up to this (jobs are in flight when a fault hits).
    pub work_ms: u64,
    /// Runs the suite's workflow machines over HTTP (wf_worker.rs) instead of jobs.
    pub workflows: bool,
    /// The server's HTTP address (the workflow worker's).
    pub http_url: String,
}

impl WorkerArgs {
    /// The arguments of `pgferry chaos-worker` that reproduce these.
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "chaos-worker".into(),
            "--grpc-url".into(),
            self.grpc_url.clone(),
            "--api-key".into(),
            self.api_key.clone(),
            "--queue".into(),
            self.queue.clone(),
            "--ledger".into(),
            self.ledger.display().to_string(),
            "--worker-id".into(),
            self.worker_id.clone(),
            "--slots".into(),
            self.slots.to_string(),
            "--work-ms".into(),
            self.work_ms.to_string(),
        ]
        .into_iter()
        .chain(
            self.workflows
                .then(|| {
                    [
                        "--workflows".into(),
                        "--http-url".into(),
                        self.http_url.clone(),
                    ]
                })
                .into_iter()
                .flatten(),
        )
        .collect()
    }
}

/// Works until SIGTERM/SIGINT (then drains briefly) or until killed.
pub async fn run_worker(args: WorkerArgs) -> anyhow::Result<()> {
    if args.workflows {
        return crate::wf_worker::run(args).await;
    }
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let ledger = Arc::new(LedgerWriter::open(&args.ledger)?);
    let (ack_tx, mut ack_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut opts = WorkerOptions::new(&args.grpc_url, &args.api_key, &[&args.queue], args.slots);
    opts.worker_id = args.worker_id.clone();
    opts.acks = Some(ack_tx);
    opts.reconnect_max = Duration::from_millis(500);

    let acks = {
        let (ledger, worker) = (ledger.clone(), args.worker_id.clone());
        tokio::spawn(async move {
            while let Some(ack) = ack_rx.recv().await {
                let entry = WorkerEntry::Ack {
                    at: now_us(),
                    id: ack.id,
                    attempt: ack.attempt,
                    stale: ack.stale,
                    worker: worker.clone(),
                };
                if let Err(e) = ledger.append(&entry) {
                    eprintln!("chaos-worker: writing the ledger: {e}");
                    std::process::exit(3);
                }
            }
        })
    };
    let work_ms = args.work_ms.max(1);
    let worker_id = args.worker_id.clone();
    let handler = move |job: pgferry_client::JobCtx| {
        let ledger = ledger.clone();
        let worker = worker_id.clone();
        async move {
            let entry = WorkerEntry::Start {
                at: now_us(),
                id: job.id,
                attempt: job.attempt,
                worker,
            };
            if let Err(e) = ledger.append(&entry) {
                eprintln!("chaos-worker: writing the ledger: {e}");
                std::process::exit(3);
            }
            let ms = rand::thread_rng().gen_range(0..=work_ms);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Outcome::Ok(None)
        }
    };
    let worker = Worker::new(opts, handler);
    let shutdown = async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    };
    worker.run(shutdown, Duration::from_secs(5)).await?;
    // Acks already received are written; the channel closes with the worker.
    let _ = tokio::time::timeout(Duration::from_secs(2), acks).await;
    Ok(())
}
