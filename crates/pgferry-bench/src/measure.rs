//! What every variant measures, the same way: jobs finished in the window, enqueue→claim
//! latency, WAL written, dead tuples left on its tables.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use tokio_postgres::{Client, Config};

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub variant: String,
    /// Jobs whose completion committed inside the window (for `log`: jobs read).
    pub jobs: u64,
    pub duration_s: f64,
    pub jobs_per_s: f64,
    pub enqueued_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Enqueue acknowledgement latency of a producer's request (sent → committed answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enqueue_ack_p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enqueue_ack_p99_ms: Option<f64>,
    pub dead_tuples: i64,
    pub rows_updated_or_deleted: i64,
    pub wal_bytes_per_job: f64,
    /// CPU per job in the window: this process and the cluster (cpu.rs); `None` when the
    /// cluster is not a local process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_per_job: Option<crate::cpu::PerJob>,
    /// cycle --scheduled: far-future jobs waiting during the run, and how late due jobs
    /// were handed out meanwhile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduled_waiting: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion_lag: Option<crate::scheduled::PromotionLag>,
}

/// Shared counters of one run.
#[derive(Default)]
pub struct Counters {
    pub enqueued: AtomicU64,
    pub finished: AtomicU64,
    /// Finished inside the measured window.
    pub counted: AtomicU64,
    pub enqueued_counted: AtomicU64,
    pub measuring: AtomicBool,
    pub stop: AtomicBool,
    latencies_ms: Mutex<Vec<f32>>,
    /// Enqueue acknowledgement latencies (request sent → committed answer), ms.
    acks_ms: Mutex<Vec<f32>>,
}

impl Counters {
    pub fn depth(&self) -> u64 {
        self.enqueued
            .load(Ordering::Relaxed)
            .saturating_sub(self.finished.load(Ordering::Relaxed))
    }

    pub fn add_enqueued(&self, n: u64) {
        self.enqueued.fetch_add(n, Ordering::Relaxed);
        if self.measuring.load(Ordering::Relaxed) {
            self.enqueued_counted.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Counts `n` jobs enqueued by a request sent at `sent`, and its acknowledgement latency.
    pub fn add_acked(&self, n: u64, sent: std::time::Instant) {
        if self.measuring.load(Ordering::Relaxed) {
            let ms = sent.elapsed().as_secs_f32() * 1000.0;
            self.acks_ms.lock().expect("acks").push(ms);
        }
        self.add_enqueued(n);
    }

    pub fn add_finished(&self, n: u64) {
        self.finished.fetch_add(n, Ordering::Relaxed);
        if self.measuring.load(Ordering::Relaxed) {
            self.counted.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Records enqueue→claim latencies (claimed now) of jobs enqueued at `enqueued`.
    pub fn record_latencies(&self, enqueued: impl Iterator<Item = SystemTime>) {
        if !self.measuring.load(Ordering::Relaxed) {
            return;
        }
        let now = SystemTime::now();
        let ms = enqueued.map(|t| now.duration_since(t).unwrap_or_default().as_secs_f32() * 1000.0);
        self.latencies_ms.lock().expect("latencies").extend(ms);
    }

    fn percentile(&self, p: f64) -> f64 {
        percentile(&self.latencies_ms.lock().expect("latencies"), p)
    }

    fn ack_percentile(&self, p: f64) -> Option<f64> {
        let v = self.acks_ms.lock().expect("acks");
        (!v.is_empty()).then(|| percentile(&v, p))
    }

    pub fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }
}

/// When a producer sends its next request. Closed loop (no `rate`): at once, unless more
/// than `max_depth` jobs wait. Open loop (`rate` jobs/s over all producers): on a fixed
/// schedule, whatever the acknowledgements take — a late request is sent at once and the
/// schedule is kept, so a slow acknowledgement shows as latency, not as a lower rate.
pub struct Pacer {
    max_depth: u64,
    every: Option<tokio::time::Interval>,
}

impl Pacer {
    /// The pacer of one of `opts.producers` producers sending batches of `opts.enqueue_batch`.
    pub fn new(opts: &crate::BenchOpts) -> Pacer {
        let every = opts.rate.filter(|r| *r > 0.0).map(|rate| {
            let per_producer = rate / opts.producers.max(1) as f64;
            let period = Duration::from_secs_f64(opts.enqueue_batch.max(1) as f64 / per_producer);
            let mut i = tokio::time::interval(period);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            i
        });
        Pacer {
            max_depth: opts.max_depth as u64,
            every,
        }
    }

    /// Waits until the next request is due; false once the run is over.
    pub async fn next(&mut self, counters: &Counters) -> bool {
        match &mut self.every {
            Some(every) => {
                every.tick().await;
            }
            None => {
                while counters.running() && counters.depth() > self.max_depth {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
        counters.running()
    }
}

/// The `p` quantile (0..=1) of `v`; NaN when empty.
pub fn percentile(v: &[f32], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    f64::from(v[i])
}

/// A connection with pgferry's own session settings (jit off), so every variant runs under
/// identical conditions.
pub async fn connect(config: &Config, role: &str) -> anyhow::Result<Client> {
    Ok(pgferry_core::db::connect(config, &format!("bench-{role}")).await?)
}

async fn wal_lsn(c: &Client) -> anyhow::Result<i64> {
    Ok(c.query_one(
        "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint AS lsn",
        &[],
    )
    .await?
    .get("lsn"))
}

/// The relations a variant writes: `pattern` is a regex over relation names in `schema`.
#[derive(Clone, Copy)]
pub struct Tables<'a> {
    pub schema: &'a str,
    pub pattern: &'a str,
}

/// Drives the warmup and the measured window while the variant's tasks run, then stops them
/// and reads WAL and dead-tuple figures.
pub async fn window(
    variant: &str,
    config: &Config,
    counters: &Arc<Counters>,
    opts: &crate::BenchOpts,
    tables: Tables<'_>,
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
) -> anyhow::Result<Report> {
    let (warmup, duration) = (opts.warmup, opts.duration);
    let admin = connect(config, "admin").await?;
    let bar = indicatif::ProgressBar::new(duration.as_secs().max(1));
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len}s {msg}")
            .expect("template")
            .progress_chars("=> "),
    );
    bar.set_prefix(variant.to_string());
    tokio::time::sleep(warmup).await;
    let wal0 = wal_lsn(&admin).await?;
    let cpu0 = crate::cpu::Sample::take(&admin).await;
    counters.measuring.store(true, Ordering::SeqCst);
    let start = Instant::now();
    while start.elapsed() < duration {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let secs = start.elapsed().as_secs_f64();
        bar.set_position(secs as u64);
        bar.set_message(format!(
            "{:.0} jobs/s",
            counters.counted.load(Ordering::Relaxed) as f64 / secs
        ));
    }
    counters.measuring.store(false, Ordering::SeqCst);
    let elapsed = start.elapsed().as_secs_f64();
    let wal1 = wal_lsn(&admin).await?;
    let cpu1 = crate::cpu::Sample::take(&admin).await;
    counters.stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await??;
    }
    bar.finish_and_clear();
    let jobs = counters.counted.load(Ordering::SeqCst);
    let (dead, upd_del) = dead_tuples(&admin, tables.schema, tables.pattern).await?;
    Ok(Report {
        variant: variant.to_string(),
        jobs,
        duration_s: elapsed,
        jobs_per_s: jobs as f64 / elapsed,
        enqueued_per_s: counters.enqueued_counted.load(Ordering::SeqCst) as f64 / elapsed,
        p50_ms: counters.percentile(0.50),
        p99_ms: counters.percentile(0.99),
        enqueue_ack_p50_ms: counters.ack_percentile(0.50),
        enqueue_ack_p99_ms: counters.ack_percentile(0.99),
        dead_tuples: dead,
        rows_updated_or_deleted: upd_del,
        wal_bytes_per_job: if jobs > 0 {
            (wal1 - wal0) as f64 / jobs as f64
        } else {
            f64::NAN
        },
        cpu_per_job: cpu0.zip(cpu1).and_then(|(a, b)| a.per_job(&b, jobs)),
        scheduled_waiting: None,
        promotion_lag: None,
    })
}

/// Dead tuples and update/delete counts on the variant's tables. Statistics reach the
/// shared view when backends report (at most once a second while busy, and at exit); the
/// workers' connections are closed by now, so poll briefly until the numbers settle.
async fn dead_tuples(admin: &Client, schema: &str, tables: &str) -> anyhow::Result<(i64, i64)> {
    let q = "SELECT coalesce(sum(n_dead_tup), 0)::bigint AS dead,
                    coalesce(sum(n_tup_upd + n_tup_del), 0)::bigint AS upd_del,
                    coalesce(sum(n_tup_ins), 0)::bigint AS ins
               FROM pg_stat_user_tables WHERE schemaname = $1 AND relname ~ $2";
    let mut last = (-1i64, -1i64, -1i64);
    for _ in 0..20 {
        let r = admin.query_one(q, &[&schema, &tables]).await?;
        let now: (i64, i64, i64) = (r.get("dead"), r.get("upd_del"), r.get("ins"));
        if now == last {
            break;
        }
        last = now;
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    Ok((last.0, last.1))
}

/// Decodes the jobs a reference queue handed to a worker (kind and JSON args), as pgferry's
/// claim does for its workers: the same work per job for every variant. The values are only
/// passed through `black_box`, so the decoding cannot be optimised away. Each reference
/// names them `kind` and `args`, as pgferry's claim does.
pub fn take_jobs(rows: &[tokio_postgres::Row]) {
    for r in rows {
        let job: (String, serde_json::Value) = (r.get("kind"), r.get("args"));
        std::hint::black_box(job);
    }
}
