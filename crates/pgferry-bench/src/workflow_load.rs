//! Load for `bench workflow`: bulk starts (`Workflows::start_many`, one statement per
//! batch of instances; `pgferry.wf_start` per instance for seeding and keyed starts),
//! producers that keep the number of steps waiting bounded, and the measured window with
//! its progress bar.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use pgferry_core::workflow::{Start, WorkerStats, Workflows};
use serde_json::json;
use tokio_postgres::{Client, Config};

use crate::measure::{self, Counters};
use crate::BenchOpts;

/// Starts `n` instances of `kind` on `queue` in one statement (the SQL function any
/// language calls).
const START_BULK: &str = "SELECT count(*) FROM generate_series(1, $1::int) g,
    LATERAL pgferry.wf_start($2::text, $3::text, 'start', jsonb_build_object('i', g), NULL,
                             NULL, NULL, NULL, NULL, 0::smallint, NULL, NULL) s";
/// The same with concurrency key `$4 || (g % $5)` (limit 1); `$4 = 'hot'` and `$5 = 1`
/// put every instance on one key, marked `"hot": true` in its input.
const START_BULK_KEYED: &str = "SELECT count(*) FROM generate_series(1, $1::int) g,
    LATERAL pgferry.wf_start($2::text, $3::text, 'start',
                             CASE WHEN $4::text = 'hot' THEN jsonb_build_object('i', g, 'hot', true)
                                  ELSE jsonb_build_object('i', g) END,
                             NULL, NULL,
                             CASE WHEN $5::int = 1 THEN $4::text ELSE $4::text || (g % $5::int) END,
                             1, NULL, 0::smallint, NULL, NULL) s";

pub fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

pub async fn start_bulk(c: &Client, kind: &str, queue: &str, n: i64) -> anyhow::Result<()> {
    let mut left = n;
    while left > 0 {
        let batch = left.min(5000) as i32;
        c.query_one(START_BULK, &[&batch, &kind, &queue]).await?;
        left -= i64::from(batch);
    }
    Ok(())
}

pub async fn start_bulk_keyed(
    c: &Client,
    kind: &str,
    queue: &str,
    n: i32,
    key: &str,
) -> anyhow::Result<()> {
    c.query_one(START_BULK_KEYED, &[&n, &kind, &queue, &key, &1i32])
        .await?;
    Ok(())
}

/// Polls `sql` (a count, in a column named `count`) until it returns `want` (at most a minute).
pub async fn wait_for(c: &Client, sql: &str, want: i64) -> anyhow::Result<()> {
    for _ in 0..6000 {
        let n: i64 = c.query_one(sql, &[]).await?.get("count");
        if n == want {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    anyhow::bail!("timed out waiting for {sql} = {want}")
}

/// Starts instances of `kind` (3 steps each) in batches of `enqueue_batch` while fewer than
/// `max_depth` steps wait.
pub fn producer(
    config: Config,
    counters: Arc<Counters>,
    kind: &'static str,
    queue: &'static str,
    opts: &BenchOpts,
) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    producer_on(config, counters, kind, queue.to_string(), opts)
}

/// [`producer`] on a queue named at run time (a tenant's queue in the engine).
pub fn producer_on(
    config: Config,
    counters: Arc<Counters>,
    kind: &'static str,
    queue: String,
    opts: &BenchOpts,
) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    let (batch, max_depth) = (opts.enqueue_batch as i32, opts.max_depth as u64);
    // Batches through `Workflows::start_many` (one set-based statement, as a user starts
    // a batch), or, with PGFERRY_BENCH_WORKFLOW_START=function, through `wf_start` per
    // instance as before (for comparisons in one binary).
    let per_instance = std::env::var("PGFERRY_BENCH_WORKFLOW_START").as_deref() == Ok("function");
    tokio::spawn(async move {
        let c = measure::connect(&config, "wf-producer").await?;
        let wf = Workflows::new(pgferry_core::db::pool(&config, "wf-producer", 1));
        let mut n = 0i64;
        while counters.running() {
            if counters.depth() > max_depth {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
            if per_instance {
                c.query_one(START_BULK, &[&batch, &kind, &queue]).await?;
            } else {
                let starts: Vec<Start> = (0..batch)
                    .map(|_| {
                        n += 1;
                        Start::new(kind, queue.as_str(), json!({ "i": n }))
                    })
                    .collect();
                wf.start_many(&starts).await?;
            }
            counters.add_enqueued(3 * batch as u64);
        }
        Ok(())
    })
}

/// Like [`producer`] with instances spread over 1000 concurrency keys `<key_prefix><n>`
/// (limit 1 each; keys are global names, so each round has its own). Its depth is what it
/// started minus the steps the handlers counted (`counters.finished`): no count query on
/// the instances table, whose cost would grow with the run and with the hot key's rows.
pub fn keyed_producer(
    config: Config,
    counters: Arc<Counters>,
    queue: &'static str,
    key_prefix: String,
    opts: &BenchOpts,
) -> tokio::task::JoinHandle<anyhow::Result<()>> {
    let (batch, max_depth) = (opts.enqueue_batch as i32, opts.max_depth as u64);
    tokio::spawn(async move {
        let c = measure::connect(&config, "wf-producer").await?;
        while counters.running() {
            if counters.depth() > max_depth {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
            let started = c
                .query_one(
                    START_BULK_KEYED,
                    &[&batch, &"three", &queue, &key_prefix, &1000i32],
                )
                .await;
            match started {
                Ok(_) => counters.add_enqueued(3 * batch as u64),
                // Its starts lock keys in their order while outcomes lock them in their
                // instances' order: Postgres may abort the batch, which is started again
                // (nothing of it was written), as an application would.
                Err(e)
                    if e.code()
                        == Some(&tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    })
}

/// What a window measured.
pub struct Window {
    pub jobs: u64,
    pub duration_s: f64,
    pub jobs_per_s: f64,
    pub enqueued_per_s: f64,
    /// CPU per step of the bench process and of the cluster over the window (cpu.rs).
    pub cpu_per_step: Option<crate::cpu::PerJob>,
}

/// Warmup, then the measured window with a progress bar; steps are counted from the
/// workers' stats. Stops the producer at the end.
pub async fn window(
    label: &str,
    config: &Config,
    counters: &Arc<Counters>,
    stats: &[Arc<WorkerStats>],
    opts: &BenchOpts,
    producer: tokio::task::JoinHandle<anyhow::Result<()>>,
) -> anyhow::Result<Window> {
    let steps = || -> u64 { stats.iter().map(|s| s.steps.load(Ordering::Relaxed)).sum() };
    // Feed the producer's depth check while warming up and measuring.
    let feed = {
        let counters = counters.clone();
        let stats: Vec<_> = stats.to_vec();
        tokio::spawn(async move {
            let mut seen = 0;
            while counters.running() {
                let now: u64 = stats.iter().map(|s| s.steps.load(Ordering::Relaxed)).sum();
                counters.add_finished(now - seen);
                seen = now;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let admin = crate::measure::connect(config, "cpu").await?;
    let w = measured(label, counters, steps, opts, producer, Some(&admin)).await;
    feed.await?;
    w
}

/// [`window`] for steps counted elsewhere (`applied`), whose counter also feeds `counters`.
pub async fn window_counted(
    label: &str,
    counters: &Arc<Counters>,
    applied: &Arc<std::sync::atomic::AtomicU64>,
    opts: &BenchOpts,
    producer: tokio::task::JoinHandle<anyhow::Result<()>>,
) -> anyhow::Result<Window> {
    measured(
        label,
        counters,
        || applied.load(Ordering::Relaxed),
        opts,
        producer,
        None,
    )
    .await
}

async fn measured(
    label: &str,
    counters: &Arc<Counters>,
    steps: impl Fn() -> u64,
    opts: &BenchOpts,
    producer: tokio::task::JoinHandle<anyhow::Result<()>>,
    cpu_admin: Option<&Client>,
) -> anyhow::Result<Window> {
    let bar = indicatif::ProgressBar::new(opts.duration.as_secs().max(1));
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>14} [{bar:30}] {pos}/{len}s {msg}")
            .expect("template")
            .progress_chars("=> "),
    );
    bar.set_prefix(label.to_string());
    tokio::time::sleep(opts.warmup).await;
    let cpu0 = match cpu_admin {
        Some(c) => crate::cpu::Sample::take(c).await,
        None => None,
    };
    let (s0, e0) = (steps(), counters.enqueued.load(Ordering::Relaxed));
    let start = Instant::now();
    while start.elapsed() < opts.duration {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let secs = start.elapsed().as_secs_f64();
        bar.set_position(secs as u64);
        bar.set_message(format!("{:.0} steps/s", (steps() - s0) as f64 / secs));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let (s1, e1) = (steps(), counters.enqueued.load(Ordering::Relaxed));
    let cpu1 = match cpu_admin {
        Some(c) => crate::cpu::Sample::take(c).await,
        None => None,
    };
    counters.stop.store(true, Ordering::SeqCst);
    producer.await??;
    bar.finish_and_clear();
    Ok(Window {
        jobs: s1 - s0,
        duration_s: elapsed,
        jobs_per_s: (s1 - s0) as f64 / elapsed,
        enqueued_per_s: (e1 - e0) as f64 / 3.0 / elapsed,
        cpu_per_step: cpu0.zip(cpu1).and_then(|(a, b)| a.per_job(&b, s1 - s0)),
    })
}
