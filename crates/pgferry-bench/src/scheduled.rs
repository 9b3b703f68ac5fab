//! `--scheduled N`: a million jobs waiting for their run time must not slow the hot path.
//! The cycle's queue gets N far-future jobs before the run (through the engine, 10,000 per
//! statement), and a probe measures how late due jobs are handed out while the cycle runs:
//! every 200 ms it enqueues one job due a second later on its own queue and claims it as soon
//! as the leader's promoter has moved it into the log.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use pgferry_core::{Engine, NewJob};
use serde::Serialize;

use crate::measure::Counters;

/// Jobs per enqueue statement while preloading (the engine's largest batch).
const PRELOAD_BATCH: usize = 10_000;
const PROBE_QUEUE: &str = "bench-probe";

/// How late due jobs were claimed: claim time minus run_at.
#[derive(Debug, Clone, Serialize)]
pub struct PromotionLag {
    pub probes: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Enqueues `n` jobs on `queue` due in 30 days, then lets the database settle as it would
/// have long before a steady-state run (the jobs were scheduled earlier, not during it):
/// vacuum and analyze `scheduled`, and a checkpoint (skipped without the privilege).
pub async fn preload(engine: &Engine, queue: &str, n: usize) -> anyhow::Result<()> {
    let later = SystemTime::now() + Duration::from_secs(30 * 86_400);
    let mut left = n;
    while left > 0 {
        let k = left.min(PRELOAD_BATCH);
        let jobs: Vec<_> = (0..k)
            .map(|_| NewJob::new(queue, "later", serde_json::json!({})).run_at(later))
            .collect();
        engine.enqueue(&jobs).await?;
        left -= k;
    }
    let client = engine.pool().get().await?;
    client
        .batch_execute("VACUUM (ANALYZE) pgferry.scheduled")
        .await?;
    if let Err(e) = client.batch_execute("CHECKPOINT").await {
        eprintln!("preload: no checkpoint ({e})");
    }
    Ok(())
}

type Task = tokio::task::JoinHandle<anyhow::Result<()>>;

/// The probe's tasks (a producer and a claimer) and where they record lags (ms).
pub fn probe(engine: Arc<Engine>, counters: Arc<Counters>) -> (Vec<Task>, Arc<Mutex<Vec<f64>>>) {
    let lags = Arc::new(Mutex::new(Vec::new()));
    let producer = {
        let (engine, counters) = (engine.clone(), counters.clone());
        tokio::spawn(async move {
            while counters.running() {
                let due = SystemTime::now() + Duration::from_secs(1);
                let job = NewJob::new(PROBE_QUEUE, "probe", serde_json::json!({}))
                    .run_at(due)
                    .meta(serde_json::json!({ "due_ms": unix_ms(due) }));
                engine.enqueue(&[job]).await?;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(())
        })
    };
    let claimer = {
        let lags = lags.clone();
        tokio::spawn(async move {
            let mut tick = 0;
            while counters.running() {
                let jobs = engine.claim(PROBE_QUEUE, 10, "probe").await?;
                if jobs.is_empty() {
                    tick = engine
                        .signals()
                        .wait_for_tick(tick, Duration::from_millis(20))
                        .await;
                    continue;
                }
                let now = unix_ms(SystemTime::now());
                if counters
                    .measuring
                    .load(std::sync::atomic::Ordering::Relaxed)
                {
                    let mut l = lags.lock().expect("lags");
                    for j in &jobs {
                        let due = j.meta.as_ref().and_then(|m| m["due_ms"].as_f64());
                        l.extend(due.map(|d| now - d));
                    }
                }
                let outcomes: Vec<_> = jobs.iter().map(|j| j.completed(None)).collect();
                engine.complete(&outcomes).await?;
            }
            Ok(())
        })
    };
    (vec![producer, claimer], lags)
}

pub fn summarize(lags: &Mutex<Vec<f64>>) -> Option<PromotionLag> {
    let mut v = lags.lock().expect("lags").clone();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    Some(PromotionLag {
        probes: v.len(),
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: *v.last().expect("not empty"),
    })
}

fn unix_ms(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}
