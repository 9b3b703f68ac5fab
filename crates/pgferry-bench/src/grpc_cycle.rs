//! The full cycle through the server: a pgferry server runs in this process (engine,
//! leader, gRPC on loopback), producers enqueue over Producer streams and workers take jobs
//! over Worker streams with the Rust client. A job counts only when its completion
//! committed: its ResultAck arrived and was not stale.

use std::sync::Arc;
use std::time::Duration;

use pgferry_client::{JobSpec, Outcome, Producer, Worker, WorkerOptions};
use tokio_postgres::Config;

use crate::bench_server::{Api, BenchServer, QUEUE};
use crate::measure::{self, Counters, Report};
use crate::BenchOpts;

pub async fn run(config: &Config, opts: &BenchOpts) -> anyhow::Result<Report> {
    let server = BenchServer::start(config, opts, Api::Grpc).await?;
    let (url, key) = (server.url.clone(), server.key.clone());
    let counters = Arc::new(Counters::default());
    let payload = crate::payload(opts.payload_bytes);
    let mut tasks: Vec<tokio::task::JoinHandle<anyhow::Result<()>>> = Vec::new();
    for _ in 0..opts.producers {
        let producer = Producer::connect(&url, &key).await?;
        let (counters, payload) = (counters.clone(), payload.clone());
        let batch = opts.enqueue_batch;
        let mut pace = measure::Pacer::new(opts);
        tasks.push(tokio::spawn(async move {
            let jobs: Vec<JobSpec> = (0..batch)
                .map(|_| JobSpec::new(QUEUE, "noop", &payload))
                .collect();
            while pace.next(&counters).await {
                let sent = std::time::Instant::now();
                let ids = producer.enqueue_batch(jobs.clone()).await?;
                counters.add_acked(ids.len() as u64, sent);
            }
            Ok(())
        }));
    }
    // `workers` streams sharing `worker_slots` execution slots.
    let streams = opts.workers.max(1);
    let mut connections = Vec::with_capacity(opts.connections);
    for _ in 0..opts.connections {
        connections.push(pgferry_client::Connection::open(&url).await?);
    }
    for w in 0..streams {
        let slots = opts.worker_slots / streams + usize::from(w < opts.worker_slots % streams);
        let (ack_tx, mut acks) = tokio::sync::mpsc::unbounded_channel();
        let mut wopts = WorkerOptions::new(&url, &key, &[QUEUE], slots.max(1));
        wopts.worker_id = format!("bench-{w}");
        wopts.acks = Some(ack_tx);
        wopts.connection = connections.get(w % connections.len().max(1)).cloned();
        let seen = counters.clone();
        let worker = Worker::new(wopts, move |job: pgferry_client::JobCtx| {
            // Enqueue → delivery, the counterpart of the in-process enqueue → claim.
            seen.record_latencies(std::iter::once(job.enqueued_at));
            async { Outcome::Ok(None) }
        });
        let done = counters.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                match tokio::time::timeout(Duration::from_millis(100), acks.recv()).await {
                    Ok(Some(a)) if !a.stale => done.add_finished(1),
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) if !done.running() => break,
                    Err(_) => {}
                }
            }
            Ok(())
        }));
        let stop = counters.clone();
        tasks.push(tokio::spawn(async move {
            worker
                .run(
                    async move {
                        while stop.running() {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    },
                    Duration::from_secs(10),
                )
                .await?;
            Ok(())
        }));
    }
    let report = measure::window(
        "cycle_grpc",
        config,
        &counters,
        opts,
        measure::Tables {
            schema: "pgferry",
            pattern: "^(ready|receipts|completions|results|ticks)_[0-9]+$",
        },
        tasks,
    )
    .await;
    server.stop().await;
    report
}
