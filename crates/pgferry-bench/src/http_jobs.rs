//! `pgferry bench http-jobs`: runlater's load profile through the HTTP API — 70% create an
//! immediate HTTP job, 15% create a delayed one, 15% list jobs — on a pgferry server in
//! this process (engine, leader, HTTP API, the HTTP job service `pgferry serve` runs),
//! with the jobs delivered to a loopback target HTTP server in this process too.
//!
//! Two windows: `saturation` (closed loop, `clients` requests in flight: the API's
//! capacity, and the deliveries per second meanwhile), then `half_saturation` (open loop
//! at half the measured request rate: API latency, and create→delivered latency of the
//! immediate jobs, timed from just before the create request to the target's receipt),
//! then `backlog` (a number of immediate jobs enqueued through the engine at once: how
//! fast the HTTP job worker delivers with the API out of the way).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::http::HeaderMap;
use pgferry_core::{db, Engine, EngineConfig, Leader, LeaderConfig, NewJob};
use pgferry_http_jobs::ssrf::Range;
use pgferry_http_jobs::{Allow, Settings};
use pgferry_server::{AppState, ServerConfig};
use rand::Rng;
use serde::Serialize;
use serde_json::{json, Value};
use tokio_postgres::Config;

use crate::measure::percentile;

/// Connections of the server's pool (what `pgferry serve` uses by default).
const SERVER_POOL: usize = 16;
/// Delayed jobs wait this long: beyond the run, so they are created, listed, not sent.
const DELAY_MS: u64 = 600_000;
/// Most open-loop requests in flight (a stalled server cannot pile up unbounded tasks).
const OPEN_LOOP_MAX: usize = 4096;

#[derive(Debug, Clone, Serialize)]
pub struct HttpJobsOpts {
    pub duration_s: u64,
    pub warmup_s: u64,
    /// Closed-loop clients of the saturation window.
    pub clients: usize,
    /// Immediate jobs of the `backlog` window (0: no such window).
    pub backlog: u64,
    /// The worker's requests at once per destination key.
    pub per_destination: usize,
}

/// The `backlog` window: the worker's delivery capacity with the API out of the way.
#[derive(Debug, Clone, Serialize)]
pub struct Backlog {
    pub jobs: u64,
    /// Enqueueing them (through the engine, batches of [`BACKLOG_BATCH`]).
    pub enqueue_seconds: f64,
    /// From the first enqueue to the last delivery.
    pub seconds: f64,
    pub delivered: u64,
    pub deliveries_per_s: f64,
}

/// Jobs per enqueue of the backlog window.
const BACKLOG_BATCH: usize = 1000;
/// Longest wait for the backlog to be delivered.
const BACKLOG_WAIT: Duration = Duration::from_secs(180);

#[derive(Debug, Clone, Serialize)]
pub struct Window {
    pub seconds: f64,
    pub api_requests: u64,
    pub api_req_per_s: f64,
    pub api_p50_ms: f64,
    pub api_p95_ms: f64,
    pub api_p99_ms: f64,
    /// The same latencies by request kind: creates (immediate and delayed) and lists.
    pub create_p50_ms: f64,
    pub create_p95_ms: f64,
    pub list_p50_ms: f64,
    pub list_p95_ms: f64,
    pub errors: u64,
    pub creates_immediate: u64,
    pub creates_delayed: u64,
    pub lists: u64,
    pub deliveries_per_s: f64,
    /// Immediate jobs created in the window and delivered (within the drain after it).
    pub delivered: u64,
    pub undelivered: u64,
    pub create_to_delivered_p50_ms: f64,
    pub create_to_delivered_p99_ms: f64,
}

/// What the target and the clients count, per window.
#[derive(Default)]
struct Tally {
    /// Deliveries of any job (target side).
    deliveries: AtomicU64,
    /// Create→delivered of immediate jobs tagged with the current window.
    delivered_ms: Mutex<Vec<f32>>,
    api_ms: Mutex<Vec<f32>>,
    /// The successful lists' latencies (also in `api_ms`).
    list_ms: Mutex<Vec<f32>>,
    /// The successful creates' latencies (also in `api_ms`).
    create_ms: Mutex<Vec<f32>>,
    errors: AtomicU64,
    immediate: AtomicU64,
    delayed: AtomicU64,
    lists: AtomicU64,
    first_error: Mutex<Option<String>>,
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
        * 1000.0
}

struct Shared {
    http: reqwest::Client,
    /// The API's two addresses, parsed once: a client that parsed them for every request
    /// spent its share of the machine on URL parsing.
    create_url: reqwest::Url,
    list_url: reqwest::Url,
    key: String,
    /// The target's address as each job carries it.
    hook: String,
    counting: Arc<Counting>,
}

impl Shared {
    fn tally(&self) -> Arc<Tally> {
        self.counting.tally.lock().expect("not poisoned").clone()
    }

    /// One request of the mix; records its latency or error.
    async fn one(&self, rng_pick: u32) {
        let tally = self.tally();
        let window = self.counting.window.load(Ordering::Relaxed);
        let started = Instant::now();
        let result = if rng_pick < 85 {
            let immediate = rng_pick < 70;
            let mut job = json!({
                "queue": "http",
                "kind": "http",
                "args": {
                    "method": "POST",
                    "url": self.hook,
                    "headers": {
                        "x-bench-created-ms": format!("{:.3}", now_ms()),
                        "x-bench-window": if immediate { window.to_string() } else { "0".into() },
                    },
                    "body": "{\"order\":42}",
                },
            });
            if !immediate {
                job["delay_ms"] = DELAY_MS.into();
            }
            let r = self
                .http
                .post(self.create_url.clone())
                .bearer_auth(&self.key)
                .json(&job)
                .send()
                .await;
            if immediate {
                tally.immediate.fetch_add(1, Ordering::Relaxed);
            } else {
                tally.delayed.fetch_add(1, Ordering::Relaxed);
            }
            r
        } else {
            tally.lists.fetch_add(1, Ordering::Relaxed);
            self.http
                .get(self.list_url.clone())
                .bearer_auth(&self.key)
                .send()
                .await
        };
        let ok = match result {
            Ok(resp) => {
                let status = resp.status();
                let body = resp.bytes().await;
                if status.is_success() && body.is_ok() {
                    true
                } else {
                    let mut e = tally.first_error.lock().expect("not poisoned");
                    e.get_or_insert_with(|| format!("{status}: {body:?}"));
                    false
                }
            }
            Err(err) => {
                let mut e = tally.first_error.lock().expect("not poisoned");
                e.get_or_insert_with(|| err.to_string());
                false
            }
        };
        if ok {
            let ms = started.elapsed().as_secs_f32() * 1000.0;
            tally.api_ms.lock().expect("not poisoned").push(ms);
            let by_kind = if rng_pick < 85 {
                &tally.create_ms
            } else {
                &tally.list_ms
            };
            by_kind.lock().expect("not poisoned").push(ms);
        } else {
            tally.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The loopback target: counts deliveries, and times the current window's immediate jobs.
async fn start_target(counting: Arc<Counting>) -> anyhow::Result<String> {
    let app = axum::Router::new().fallback(move |headers: HeaderMap| {
        let s = counting.clone();
        async move {
            let tally = s.tally.lock().expect("not poisoned").clone();
            tally.deliveries.fetch_add(1, Ordering::Relaxed);
            let window = headers
                .get("x-bench-window")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            let created = headers
                .get("x-bench-created-ms")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<f64>().ok());
            if let Some(created) = created {
                if window != 0 && window == s.window.load(Ordering::Relaxed) {
                    let ms = (now_ms() - created) as f32;
                    tally.delivered_ms.lock().expect("not poisoned").push(ms);
                }
            }
            "ok"
        }
    });
    let listener = pgferry_server::listen(([127, 0, 0, 1], 0).into())?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(url)
}

/// What the target shares with the clients: the window whose immediate jobs are timed
/// (1 saturation, 2 half; 0 none) and its tally.
struct Counting {
    window: AtomicU64,
    tally: Mutex<Arc<Tally>>,
}

fn window_report(t: &Tally, seconds: f64, deliveries: u64) -> Window {
    let api = t.api_ms.lock().expect("not poisoned");
    let delivered = t.delivered_ms.lock().expect("not poisoned");
    let creates = t.create_ms.lock().expect("not poisoned");
    let lists = t.list_ms.lock().expect("not poisoned");
    let requests = api.len() as u64 + t.errors.load(Ordering::SeqCst);
    let immediate = t.immediate.load(Ordering::SeqCst);
    Window {
        seconds,
        api_requests: requests,
        api_req_per_s: requests as f64 / seconds,
        api_p50_ms: percentile(&api, 0.50),
        api_p95_ms: percentile(&api, 0.95),
        api_p99_ms: percentile(&api, 0.99),
        create_p50_ms: percentile(&creates, 0.50),
        create_p95_ms: percentile(&creates, 0.95),
        list_p50_ms: percentile(&lists, 0.50),
        list_p95_ms: percentile(&lists, 0.95),
        errors: t.errors.load(Ordering::SeqCst),
        creates_immediate: immediate,
        creates_delayed: t.delayed.load(Ordering::SeqCst),
        lists: t.lists.load(Ordering::SeqCst),
        deliveries_per_s: deliveries as f64 / seconds,
        delivered: delivered.len() as u64,
        undelivered: immediate.saturating_sub(delivered.len() as u64),
        create_to_delivered_p50_ms: percentile(&delivered, 0.50),
        create_to_delivered_p99_ms: percentile(&delivered, 0.99),
    }
}

fn bar(name: &str, secs: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(secs.max(1));
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>16} [{bar:30}] {pos}/{len}s {msg}")
            .expect("template")
            .progress_chars("=> "),
    );
    bar.set_prefix(name.to_string());
    bar
}

/// Runs the benchmark on `config`'s (fresh) database; returns the report.
pub async fn run(config: &Config, opts: &HttpJobsOpts) -> anyhow::Result<Value> {
    let (tenant_id, key) = crate::bench_server::bench_tenant(config).await?;
    let engine = Engine::new(
        db::Pools::new(config, "api", SERVER_POOL),
        EngineConfig::default(),
    );
    // The tenant (not the server) may reach loopback, as a hosted tenant would be allowed
    // its own ranges; the target is on loopback.
    Settings::new(engine.clone())
        .put_allow(tenant_id, &Allow::of(&[Range::Loopback]))
        .await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let leader = tokio::spawn(
        Leader::new(engine.clone(), config.clone(), LeaderConfig::default()).run(stop_rx.clone()),
    );
    let mut server_config = ServerConfig::default();
    // The benchmark is the only client: no per-key rate limit in the way.
    server_config.http.rate_per_sec = 1e9;
    server_config.http.rate_burst = 1e9;
    let app = AppState::new(engine.clone(), server_config).await?;
    let listener = pgferry_server::listen(([127, 0, 0, 1], 0).into())?;
    let base = format!("http://{}", listener.local_addr()?);
    let mut server_stop = stop_rx.clone();
    let server = tokio::spawn(pgferry_server::serve_http(listener, app, async move {
        let _ = server_stop.wait_for(|s| *s).await;
    }));
    // What `pgferry serve` runs with, but for `per_destination` when given.
    let worker_config = pgferry_http_jobs::worker::WorkerConfig {
        per_destination: opts.per_destination,
        ..Default::default()
    };
    let worker_json = json!({
        "batch": worker_config.batch,
        "per_destination": worker_config.per_destination,
        "queue_in_flight": worker_config.queue_in_flight,
        "max_in_flight": worker_config.max_in_flight,
    });
    let service = tokio::spawn(pgferry_http_jobs::service::run(
        engine.clone(),
        pgferry_http_jobs::ExecutorConfig::default(),
        worker_config,
        stop_rx.clone(),
    ));

    let counting = Arc::new(Counting {
        window: AtomicU64::new(0),
        tally: Mutex::new(Arc::new(Tally::default())),
    });
    let target = start_target(counting.clone()).await?;
    let shared = Arc::new(Shared {
        http: reqwest::Client::builder()
            .no_proxy()
            // Every connection opened is kept: a pool that closed those past a cap would
            // open and close connections whenever the open loop's concurrency crossed it
            // ("A second per dropped SYN", docs/performance.md).
            .pool_max_idle_per_host(OPEN_LOOP_MAX.max(opts.clients))
            .build()?,
        create_url: reqwest::Url::parse(&format!("{base}/v1/jobs"))?,
        list_url: reqwest::Url::parse(&format!("{base}/v1/jobs?queue=http&limit=50"))?,
        key,
        hook: format!("{target}/hook"),
        counting: counting.clone(),
    });
    // One tally for clients and target per window.
    let begin = |window: u64| {
        let t = Arc::new(Tally::default());
        *counting.tally.lock().expect("not poisoned") = t.clone();
        counting.window.store(window, Ordering::SeqCst);
        t
    };
    let duration = Duration::from_secs(opts.duration_s.max(1));

    // Saturation: closed loop.
    let running = Arc::new(AtomicBool::new(true));
    let mut clients = Vec::new();
    for _ in 0..opts.clients.max(1) {
        let (s, running) = (shared.clone(), running.clone());
        clients.push(tokio::spawn(async move {
            while running.load(Ordering::Relaxed) {
                let pick = rand::thread_rng().gen_range(0..100);
                s.one(pick).await;
            }
        }));
    }
    begin(0);
    tokio::time::sleep(Duration::from_secs(opts.warmup_s)).await;
    let sat = begin(1);
    let b = bar("saturation", duration.as_secs());
    let start = Instant::now();
    while start.elapsed() < duration {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let secs = start.elapsed().as_secs_f64();
        b.set_position(secs as u64);
        b.set_message(format!(
            "{:.0} req/s, {:.0} deliveries/s",
            sat.api_ms.lock().expect("not poisoned").len() as f64 / secs,
            sat.deliveries.load(Ordering::Relaxed) as f64 / secs
        ));
    }
    let seconds = start.elapsed().as_secs_f64();
    let deliveries = sat.deliveries.load(Ordering::SeqCst);
    begin(0);
    running.store(false, Ordering::SeqCst);
    for c in clients {
        c.await?;
    }
    b.finish_and_clear();
    let saturation = window_report(&sat, seconds, deliveries);
    let sat_error = sat.first_error.lock().expect("not poisoned").clone();

    // Let the backlog of the saturation window drain before the latency window.
    let drain = Instant::now();
    let mut last = u64::MAX;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let t = shared.tally();
        let n = t.deliveries.swap(0, Ordering::SeqCst);
        if n == 0 || drain.elapsed() > Duration::from_secs(120) || (n < 50 && last < 50) {
            break;
        }
        last = n;
    }

    // Half of saturation: open loop at a fixed rate.
    let rate = saturation.api_req_per_s / 2.0;
    let half = begin(2);
    let b = bar("half_saturation", duration.as_secs());
    let start = Instant::now();
    let inflight = Arc::new(tokio::sync::Semaphore::new(OPEN_LOOP_MAX));
    let mut sent = 0u64;
    let mut skipped = 0u64;
    while start.elapsed() < duration {
        let due = (start.elapsed().as_secs_f64() * rate) as u64;
        while sent < due {
            sent += 1;
            match inflight.clone().try_acquire_owned() {
                Ok(permit) => {
                    let s = shared.clone();
                    let pick = rand::thread_rng().gen_range(0..100);
                    tokio::spawn(async move {
                        s.one(pick).await;
                        drop(permit);
                    });
                }
                Err(_) => skipped += 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        b.set_position(start.elapsed().as_secs());
    }
    let seconds = start.elapsed().as_secs_f64();
    let deliveries = half.deliveries.load(Ordering::SeqCst);
    // Wait for the window's requests, then up to 10 s for its immediate jobs to arrive.
    let _ = inflight.acquire_many(OPEN_LOOP_MAX as u32).await;
    let wait = Instant::now();
    while wait.elapsed() < Duration::from_secs(10)
        && (half.delivered_ms.lock().expect("not poisoned").len() as u64)
            < half.immediate.load(Ordering::SeqCst)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    b.finish_and_clear();
    let half_saturation = window_report(&half, seconds, deliveries);
    let half_error = half.first_error.lock().expect("not poisoned").clone();

    let backlog = if opts.backlog > 0 {
        let queue = format!("t{tenant_id}.http");
        Some(backlog_window(&engine, &queue, &shared, opts.backlog, &begin).await?)
    } else {
        None
    };
    begin(0);

    let _ = stop_tx.send(true);
    let _ = server.await;
    let _ = service.await;
    let _ = leader.await;
    engine.pool().close();
    Ok(json!({
        "variant": "http_jobs",
        "profile": {"create_immediate": 0.70, "create_delayed": 0.15, "list": 0.15,
                    "delayed_by_ms": DELAY_MS, "list_limit": 50},
        "opts": opts,
        "worker": worker_json,
        "saturation": saturation,
        "saturation_first_error": sat_error,
        "half_saturation": half_saturation,
        "half_saturation_rate_req_per_s": rate,
        "half_saturation_skipped": skipped,
        "half_saturation_first_error": half_error,
        "backlog": backlog,
        "targets": {
            "api_req_per_s_at_least_5000": saturation.api_req_per_s >= 5000.0,
            "api_p95_ms_at_most_50": saturation.api_p95_ms <= 50.0,
            "zero_errors": saturation.errors == 0 && half_saturation.errors == 0,
            "deliveries_per_s_at_least_5000": saturation.deliveries_per_s >= 5000.0,
            "create_to_delivered_p99_ms_at_most_1000_at_half": half_saturation.create_to_delivered_p99_ms <= 1000.0,
            "backlog_deliveries_per_s_at_least_5000": backlog.as_ref().map(|b| b.deliveries_per_s >= 5000.0),
        },
    }))
}

/// Enqueues `jobs` immediate HTTP jobs straight into the tenant's engine queue `queue` (the
/// API's own cost out of the way) and times their delivery to the target.
async fn backlog_window(
    engine: &Engine,
    queue: &str,
    shared: &Shared,
    jobs: u64,
    begin: &impl Fn(u64) -> Arc<Tally>,
) -> anyhow::Result<Backlog> {
    let tally = begin(3);
    let b = bar("backlog", jobs);
    let start = Instant::now();
    let mut left = jobs;
    while left > 0 {
        let n = left.min(BACKLOG_BATCH as u64);
        let batch: Vec<NewJob> = (0..n)
            .map(|_| {
                NewJob::new(
                    queue,
                    "http",
                    json!({
                        "method": "POST",
                        "url": shared.hook,
                        "body": "{\"order\":42}",
                    }),
                )
            })
            .collect();
        engine.enqueue(&batch).await?;
        left -= n;
    }
    let enqueue_seconds = start.elapsed().as_secs_f64();
    let mut last = (start.elapsed(), 0);
    while start.elapsed() < BACKLOG_WAIT {
        let n = tally.deliveries.load(Ordering::SeqCst);
        if n != last.1 {
            last = (start.elapsed(), n);
        }
        b.set_position(n);
        if n >= jobs {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    b.finish_and_clear();
    let (at, delivered) = last;
    let seconds = at.as_secs_f64();
    Ok(Backlog {
        jobs,
        enqueue_seconds,
        seconds,
        delivered,
        deliveries_per_s: delivered as f64 / seconds.max(1e-9),
    })
}

/// [`run`] on a fresh database `bench_http_jobs` of `base`'s cluster.
pub async fn run_fresh(base: &Config, opts: &HttpJobsOpts) -> anyhow::Result<Value> {
    let config = crate::fresh_database(base, "bench_http_jobs").await?;
    run(&config, opts).await
}
