//! The signal path's own saturation, for `pgferry bench workflow`'s signal phase: the
//! round trip's p99 is measured at half of it (issue 19: "signal resume p99 ≤ 20 ms at half
//! of saturation").
//!
//! Before, the phase ran at half of the three-step machine's saturation in round trips
//! (steps/s ÷ 3 ÷ 2). A signal round trip is not three plain steps: each signal is its own
//! transaction with a synchronous commit, and the open-loop senders saturated the signal
//! path at that rate, so the phase measured their queue (p50 of seconds, ADR 0018). Here the
//! path is driven closed-loop first: `SENDERS` tasks, each sending its next signal once the
//! previous one is acknowledged, to instances parked on their await, while the workers
//! resume them. Round trips completed per second (resumed handlers) is its saturation.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use pgferry_core::db;
use pgferry_core::workflow::{ClaimedStep, Machine, Outcome, Target, Workflows};
use serde_json::{json, Value};
use tokio_postgres::Config;

use crate::measure;
use crate::workflow::spawn_workers;
use crate::workflow_load as load;
use crate::BenchOpts;

/// Concurrent closed-loop senders (and their pool's connections): as many as the open-loop
/// phase's sender pool, so both phases send through the same number of connections.
const SENDERS: usize = 32;

/// Drives the signal path closed-loop for `opts.warmup` then `opts.duration`; returns its
/// saturation in round trips per second (resumed handlers in the measured window) and the
/// figures behind it. `upper` (round trips/s no faster than which the path can run: the
/// three-step machine's) sizes how many instances are parked for it.
pub async fn saturation(
    config: &Config,
    wf: &Workflows,
    opts: &BenchOpts,
    upper: f64,
) -> anyhow::Result<(f64, Value)> {
    let resumed = Arc::new(AtomicU64::new(0));
    let measuring = Arc::new(AtomicBool::new(false));
    let (r2, m2) = (resumed.clone(), measuring.clone());
    let machine = Machine::new("ping_sat")
        .step("start", |_s: ClaimedStep| async move {
            Outcome::await_signals(&["ping"], "pong", None)
        })
        .step("pong", move |_s: ClaimedStep| {
            if m2.load(Ordering::Relaxed) {
                r2.fetch_add(1, Ordering::Relaxed);
            }
            async move { Outcome::done(json!(1)) }
        });
    let admin = measure::connect(config, "admin").await?;
    let secs = (opts.duration + opts.warmup).as_secs_f64();
    let total = (upper.max(100.0) * secs * 1.5) as i64 + 1000;
    load::start_bulk(&admin, "ping_sat", "signal_sat", total).await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (workers, _stats) = spawn_workers(wf, opts, "signal_sat", &[machine], &stop_rx);
    load::wait_for(
        &admin,
        "SELECT count(*) FROM pgferry.wf_instances
          WHERE queue = 'signal_sat' AND status <> 'awaiting'",
        0,
    )
    .await?;
    let ids: Arc<Vec<i64>> = Arc::new(
        admin
            .query(
                "SELECT id FROM pgferry.wf_instances WHERE queue = 'signal_sat' ORDER BY id",
                &[],
            )
            .await?
            .iter()
            .map(|r| r.get("id"))
            .collect(),
    );
    let senders = Workflows::new(db::pool(config, "bench-wf-signal-sat", SENDERS));
    let next = Arc::new(AtomicUsize::new(0));
    let acked = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + opts.warmup + opts.duration;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..SENDERS {
        let (wf, ids, next, acked) = (senders.clone(), ids.clone(), next.clone(), acked.clone());
        tasks.spawn(async move {
            while Instant::now() < end {
                let Some(id) = ids.get(next.fetch_add(1, Ordering::Relaxed)).copied() else {
                    break;
                };
                wf.signal(&Target::Id(id), "ping", &json!(load::now_ms()))
                    .await?;
                acked.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        });
    }
    tokio::time::sleep(opts.warmup).await;
    let acked0 = acked.load(Ordering::Relaxed);
    measuring.store(true, Ordering::SeqCst);
    let t = Instant::now();
    tokio::time::sleep(opts.duration).await;
    measuring.store(false, Ordering::SeqCst);
    let elapsed = t.elapsed().as_secs_f64();
    let acked1 = acked.load(Ordering::Relaxed);
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    // Ran out of parked instances before the end: the figure is a lower bound.
    let exhausted = next.load(Ordering::Relaxed) >= ids.len();
    let _ = stop_tx.send(true);
    for w in workers {
        w.await??;
    }
    let round_trips = resumed.load(Ordering::Relaxed);
    let per_s = round_trips as f64 / elapsed;
    Ok((
        per_s,
        json!({
            "senders": SENDERS,
            "round_trips_per_s": per_s,
            "signals_acknowledged_per_s": (acked1 - acked0) as f64 / elapsed,
            "round_trips_measured": round_trips,
            "instances_parked": ids.len(),
            "ran_out_of_instances": exhausted,
            "measured_s": elapsed,
        }),
    ))
}
