//! pgferry in process the way a Rust user runs it: the worker runtime
//! (`pgferry_core::runtime`) with one queue of `workers` handler slots, a no-op handler, the
//! runtime's own leader. Jobs count when their handler starts (the peer shape's definition,
//! issue 21), with the enqueue → handler-start latency.

use std::sync::Arc;
use std::time::Duration;

use pgferry_core::runtime::{Runtime, RuntimeConfig};
use pgferry_core::{db, migrate, Engine, NewJob};
use tokio_postgres::Config;

use crate::measure::{self, Counters, Report};
use crate::BenchOpts;

pub async fn run(config: &Config, opts: &BenchOpts) -> anyhow::Result<Report> {
    let mut c = measure::connect(config, "migrate").await?;
    migrate::up(&mut c).await?;
    let pools = db::Pools::new(config, "bench", opts.producers + 8);
    let engine = Engine::new(pools, crate::engine_config(opts));
    crate::bench_queue(&engine, "bench", opts).await?;
    let counters = Arc::new(Counters::default());
    let handled = counters.clone();
    let runtime = Runtime::builder(engine.clone(), config.clone())
        .config(RuntimeConfig {
            leader: Some(crate::leader_config(opts)),
            ..RuntimeConfig::default()
        })
        .queue("bench", opts.workers)
        .handler("noop", move |ctx, _args: serde_json::Value| {
            let counters = handled.clone();
            async move {
                counters.record_latencies(std::iter::once(ctx.enqueued_at));
                counters.add_finished(1);
                Ok(None)
            }
        })
        .start();
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
    let report = measure::window(
        "runtime",
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
    runtime.shutdown(Duration::from_secs(10)).await;
    report
}
