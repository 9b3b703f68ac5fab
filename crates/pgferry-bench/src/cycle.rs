//! pgferry's engine, in process: producers enqueue batches, claimers claim and complete
//! with a no-op handler, the leader ticks/rotates/rescues. Jobs count when their completion
//! committed.

use std::sync::Arc;
use std::time::Duration;

use pgferry_core::{db, migrate, Engine, NewJob};
use tokio_postgres::Config;

use crate::measure::{self, Counters, Report};
use crate::BenchOpts;

pub async fn run(config: &Config, opts: &BenchOpts) -> anyhow::Result<Report> {
    let mut c = measure::connect(config, "migrate").await?;
    migrate::up(&mut c).await?;
    let pools = db::Pools::new(config, "bench", opts.producers + opts.workers + 2);
    let engine = Engine::new(pools, crate::engine_config(opts));
    crate::bench_queue(&engine, "bench", opts).await?;
    if let Some(n) = opts.scheduled {
        crate::scheduled::preload(&engine, "bench", n).await?;
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let leader = crate::spawn_leader(&engine, config, opts, stop_rx);
    let counters = Arc::new(Counters::default());
    let payload = crate::payload(opts.payload_bytes);
    let mut tasks = Vec::new();
    for _ in 0..opts.producers {
        let (engine, counters, payload) = (engine.clone(), counters.clone(), payload.clone());
        let batch = opts.enqueue_batch;
        let mut pace = measure::Pacer::new(opts);
        tasks.push(tokio::spawn(async move {
            let jobs: Vec<_> = (0..batch)
                .map(|_| NewJob::new("bench", "noop", payload.clone()))
                .collect();
            while pace.next(&counters).await {
                let sent = std::time::Instant::now();
                let ids = engine.enqueue(&jobs).await?;
                counters.add_acked(ids.len() as u64, sent);
            }
            Ok(())
        }));
    }
    for w in 0..opts.workers {
        let (engine, counters) = (engine.clone(), counters.clone());
        let batch = opts.claim_batch;
        tasks.push(tokio::spawn(async move {
            let worker = format!("bench-{w}");
            let mut tick = 0;
            while counters.running() {
                let jobs = engine.claim("bench", batch, &worker).await?;
                if jobs.is_empty() {
                    tick = engine
                        .signals()
                        .wait_for_tick(tick, Duration::from_millis(20))
                        .await;
                    continue;
                }
                counters.record_latencies(jobs.iter().map(|j| j.enqueued_at));
                let outcomes: Vec<_> = jobs.iter().map(|j| j.completed(None)).collect();
                let done = engine.complete(&outcomes).await?;
                counters.add_finished(done.iter().filter(|d| !d.stale).count() as u64);
            }
            Ok(())
        }));
    }
    let lags = if opts.scheduled.is_some() {
        let (probe, lags) = crate::scheduled::probe(engine.clone(), counters.clone());
        tasks.extend(probe);
        Some(lags)
    } else {
        None
    };
    let mut report = measure::window(
        "cycle",
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
    if let (Ok(r), Some(lags)) = (&mut report, &lags) {
        r.scheduled_waiting = opts.scheduled;
        r.promotion_lag = crate::scheduled::summarize(lags);
    }
    let _ = stop_tx.send(true);
    let _ = leader.await;
    engine.pool().close();
    report
}
