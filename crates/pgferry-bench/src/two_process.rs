//! `bench two-process` (issue 27): two real `pgferry serve` processes on one database
//! serving one queue — the normal production shape — at a light fixed enqueue rate. One
//! producer and one worker are attached to each process; every job's enqueue → start
//! latency is recorded by the process whose worker started it, so the leader's and the
//! non-leader's figures come apart. With `kill_leader` the leader is killed (SIGKILL) after
//! the first window: the report adds the takeover gap (kill → the other process's "became
//! leader") and a second window served by the survivor alone.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use indicatif::{ProgressBar, ProgressStyle};
use pgferry_client::{JobSpec, Outcome, Producer, Worker, WorkerOptions};
use pgferry_server::auth::{admin, Scopes};
use serde::Serialize;
use tokio_postgres::config::Host;
use tokio_postgres::Config;

use crate::measure;

/// Settings of a two-process run.
#[derive(Debug, Clone)]
pub struct TwoProcessOpts {
    /// The `pgferry` binary to start twice (the running one by default; another build to
    /// compare before/after).
    pub server_bin: PathBuf,
    pub warmup: Duration,
    /// Length of each measured window.
    pub duration: Duration,
    /// Jobs per second enqueued through each process (one job per request).
    pub rate_per_process: f64,
    /// Execution slots of each process's worker.
    pub slots: usize,
    /// Kill the leader after the first window and measure the survivor alone.
    pub kill_leader: bool,
    /// Which processes enqueue (both workers claim either way): 0 the first (the
    /// leader), 1 the second, None both.
    pub enqueue_via: Option<usize>,
}

/// One process's figures in one window (jobs bucketed by when they were enqueued).
#[derive(Debug, Clone, Serialize)]
pub struct ProcessFigures {
    pub process: &'static str,
    pub leader: bool,
    /// Jobs this process's worker started.
    pub started: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Enqueue requests sent through this process, acknowledged.
    pub enqueued: usize,
    pub enqueue_ack_p50_ms: f64,
    pub enqueue_ack_p99_ms: f64,
    /// Enqueue → start of the jobs enqueued through this process, whichever process's
    /// worker started them (tells a slow tick after a non-leader's enqueue from a slow
    /// wake-up of a non-leader's claimer).
    pub enqueued_here_p50_ms: f64,
    pub enqueued_here_p99_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Window {
    pub window: &'static str,
    pub seconds: f64,
    pub processes: Vec<ProcessFigures>,
    /// Jobs enqueued in the window that no worker started before the report.
    pub not_started: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct TwoProcessReport {
    pub mode: &'static str,
    pub options: serde_json::Value,
    pub windows: Vec<Window>,
    /// kill_leader: SIGKILL of the leader → "became leader" logged by the other process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub takeover_ms: Option<f64>,
}

/// One started job: which process's worker, when it was enqueued, how long it waited.
struct Start {
    process: usize,
    enqueued_at: SystemTime,
    ms: f32,
}

/// One acknowledged enqueue: through which process, when, how long the answer took.
struct Ack {
    process: usize,
    sent_at: SystemTime,
    ms: f32,
    id: i64,
}

#[derive(Default)]
struct Log {
    starts: Mutex<Vec<(Start, i64)>>,
    acks: Mutex<Vec<Ack>>,
}

/// A `pgferry serve` child with its gRPC address; its stderr lines are watched for
/// "became leader" (the instant is kept).
struct Server {
    child: Child,
    grpc: String,
    leader_at: Arc<Mutex<Option<Instant>>>,
    tail: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(bin: &PathBuf, url: &str) -> anyhow::Result<Server> {
        let mut child = Command::new(bin)
            .args(["serve", "--database-url", url])
            .args(["--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"])
            .env("PGFERRY_LOG", "info")
            .env_remove("PGFERRY_LOG_FORMAT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {}: {e}", bin.display()))?;
        let leader_at = Arc::new(Mutex::new(None));
        let tail = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("piped stderr");
        {
            let (leader_at, tail) = (leader_at.clone(), tail.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if line.contains("became leader") {
                        leader_at
                            .lock()
                            .expect("leader_at")
                            .get_or_insert_with(Instant::now);
                    }
                    let mut t = tail.lock().expect("tail");
                    t.push(line);
                    if t.len() > 50 {
                        t.remove(0);
                    }
                }
            });
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("pgferry: listening grpc=") {
                    let _ = tx.send(url.to_string());
                }
            }
        });
        let grpc = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(url) => url,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                let tail = tail.lock().expect("tail").join("\n");
                anyhow::bail!("{} serve did not start:\n{tail}", bin.display());
            }
        };
        Ok(Server {
            child,
            grpc,
            leader_at,
            tail,
        })
    }

    fn leader_at(&self) -> Option<Instant> {
        *self.leader_at.lock().expect("leader_at")
    }

    /// Waits until this process logged "became leader"; returns when it did.
    async fn wait_leader(&self, timeout: Duration) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(at) = self.leader_at() {
                return Ok(at);
            }
            if Instant::now() > deadline {
                let tail = self.tail.lock().expect("tail").join("\n");
                anyhow::bail!("no \"became leader\" within {timeout:?}:\n{tail}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGKILL is enough: the database is the benchmark's own and dropped next run.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sleeps `d` while the bar counts its seconds.
async fn advance(bar: &ProgressBar, msg: &'static str, d: Duration) {
    bar.set_message(msg);
    let (from, start) = (bar.position(), Instant::now());
    while start.elapsed() < d {
        tokio::time::sleep(Duration::from_millis(250).min(d.saturating_sub(start.elapsed()))).await;
        bar.set_position(from + start.elapsed().as_secs());
    }
    bar.set_position(from + d.as_secs());
}

/// A libpq key-value string for `config` (the children get it on their command line).
fn conn_string(config: &Config) -> String {
    let mut parts = Vec::new();
    if let Some(h) = config.get_hosts().first() {
        match h {
            Host::Tcp(s) => parts.push(format!("host={s}")),
            Host::Unix(p) => parts.push(format!("host={}", p.display())),
        }
    }
    if let Some(p) = config.get_ports().first() {
        parts.push(format!("port={p}"));
    }
    if let Some(u) = config.get_user() {
        parts.push(format!("user={u}"));
    }
    if let Some(pw) = config.get_password() {
        parts.push(format!("password={}", String::from_utf8_lossy(pw)));
    }
    if let Some(d) = config.get_dbname() {
        parts.push(format!("dbname={d}"));
    }
    parts.join(" ")
}

pub async fn run(base: &Config, opts: &TwoProcessOpts) -> anyhow::Result<TwoProcessReport> {
    let config = crate::fresh_database(base, "bench_two_process").await?;
    let key = {
        let mut c = measure::connect(&config, "migrate").await?;
        pgferry_server::migrate::up(&mut c).await?;
        admin::create_tenant(&mut c, "bench").await?;
        let (_, key) = admin::create_key(&mut c, "bench", Scopes::all(), Some("bench")).await?;
        key.expose().to_string()
    };
    let url = conn_string(&config);
    // The first process takes the leader lock before the second starts.
    let mut servers = vec![Server::start(&opts.server_bin, &url)?];
    servers[0].wait_leader(Duration::from_secs(30)).await?;
    servers.push(Server::start(&opts.server_bin, &url)?);

    let log = Arc::new(Log::default());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut producer_stops = Vec::new();
    let mut tasks = Vec::new();
    for (i, server) in servers.iter().enumerate() {
        let producer = Producer::connect(&server.grpc, &key).await?;
        let (ptx, mut prx) = tokio::sync::watch::channel(false);
        producer_stops.push(ptx);
        let enqueues = opts.enqueue_via.is_none_or(|v| v == i);
        let log_p = log.clone();
        let period = Duration::from_secs_f64(1.0 / opts.rate_per_process.max(0.1));
        tasks.push(tokio::spawn(async move {
            let mut every = tokio::time::interval(period);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let args = serde_json::json!({});
            if !enqueues {
                return;
            }
            loop {
                tokio::select! {
                    _ = every.tick() => {}
                    _ = prx.changed() => return,
                }
                let (sent_at, t) = (SystemTime::now(), Instant::now());
                // A failed enqueue (the process was killed) ends this producer.
                match producer.enqueue(JobSpec::new("bench", "noop", &args)).await {
                    Ok(id) => log_p.acks.lock().expect("acks").push(Ack {
                        process: i,
                        sent_at,
                        ms: t.elapsed().as_secs_f32() * 1000.0,
                        id,
                    }),
                    Err(_) => return,
                }
            }
        }));
        let mut wopts = WorkerOptions::new(&server.grpc, &key, &["bench"], opts.slots);
        wopts.worker_id = format!("bench-process-{i}");
        let log_w = log.clone();
        let worker = Worker::new(wopts, move |job: pgferry_client::JobCtx| {
            let now = SystemTime::now();
            let ms = now
                .duration_since(job.enqueued_at)
                .unwrap_or_default()
                .as_secs_f32()
                * 1000.0;
            log_w.starts.lock().expect("starts").push((
                Start {
                    process: i,
                    enqueued_at: job.enqueued_at,
                    ms,
                },
                job.id,
            ));
            async { Outcome::Ok(None) }
        });
        let mut stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            let _ = worker
                .run(
                    async move {
                        let _ = stop.wait_for(|s| *s).await;
                    },
                    Duration::from_secs(2),
                )
                .await;
        }));
    }

    let total = opts.warmup + opts.duration * if opts.kill_leader { 2 } else { 1 };
    let bar = ProgressBar::new(total.as_secs().max(1));
    bar.set_style(
        ProgressStyle::with_template("{msg:>22} [{bar:30}] {pos}/{len} s")
            .expect("template")
            .progress_chars("=> "),
    );
    advance(&bar, "warmup", opts.warmup).await;
    let w1 = (SystemTime::now(), Instant::now());
    advance(&bar, "both processes", opts.duration).await;
    let w1_end = SystemTime::now();
    let mut windows = vec![("both_processes", w1.0, w1_end, w1.1.elapsed())];
    let mut takeover_ms = None;
    if opts.kill_leader {
        let _ = producer_stops[0].send(true);
        let killed = Instant::now();
        servers[0].child.kill()?;
        let _ = servers[0].child.wait();
        let took = servers[1].wait_leader(Duration::from_secs(60)).await?;
        takeover_ms = Some(took.saturating_duration_since(killed).as_secs_f64() * 1000.0);
        let w2 = (SystemTime::now(), Instant::now());
        advance(&bar, "leader killed", opts.duration).await;
        windows.push((
            "after_leader_killed",
            w2.0,
            SystemTime::now(),
            w2.1.elapsed(),
        ));
    }
    for p in &producer_stops {
        let _ = p.send(true);
    }
    // Jobs enqueued at the end of the window still start.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = t.await;
    }
    bar.finish_and_clear();

    let starts = std::mem::take(&mut *log.starts.lock().expect("starts"));
    let acks = std::mem::take(&mut *log.acks.lock().expect("acks"));
    let started: std::collections::HashMap<i64, f32> =
        starts.iter().map(|(s, id)| (*id, s.ms)).collect();
    let leader_of = |i: usize, window: &str| {
        (i == 0 && window == "both_processes") || (i == 1 && window == "after_leader_killed")
    };
    let out = windows
        .into_iter()
        .map(|(name, from, to, len)| {
            let in_window = |t: SystemTime| t >= from && t < to;
            let processes = (0..servers.len())
                .filter(|&i| name == "both_processes" || i == 1)
                .map(|i| {
                    let ms: Vec<f32> = starts
                        .iter()
                        .filter(|(s, _)| s.process == i && in_window(s.enqueued_at))
                        .map(|(s, _)| s.ms)
                        .collect();
                    let mine = || {
                        acks.iter()
                            .filter(move |a| a.process == i && in_window(a.sent_at))
                    };
                    let ack_ms: Vec<f32> = mine().map(|a| a.ms).collect();
                    let here_ms: Vec<f32> =
                        mine().filter_map(|a| started.get(&a.id).copied()).collect();
                    ProcessFigures {
                        process: if i == 0 { "first" } else { "second" },
                        leader: leader_of(i, name),
                        started: ms.len(),
                        p50_ms: measure::percentile(&ms, 0.50),
                        p99_ms: measure::percentile(&ms, 0.99),
                        max_ms: measure::percentile(&ms, 1.0),
                        enqueued: ack_ms.len(),
                        enqueue_ack_p50_ms: measure::percentile(&ack_ms, 0.50),
                        enqueue_ack_p99_ms: measure::percentile(&ack_ms, 0.99),
                        enqueued_here_p50_ms: measure::percentile(&here_ms, 0.50),
                        enqueued_here_p99_ms: measure::percentile(&here_ms, 0.99),
                    }
                })
                .collect();
            let not_started = acks
                .iter()
                .filter(|a| in_window(a.sent_at) && !started.contains_key(&a.id))
                .count();
            Window {
                window: name,
                seconds: len.as_secs_f64(),
                processes,
                not_started,
            }
        })
        .collect();
    drop(servers);
    Ok(TwoProcessReport {
        mode: "two_process",
        options: serde_json::json!({
            "server_bin": opts.server_bin.display().to_string(),
            "warmup_s": opts.warmup.as_secs_f64(),
            "duration_s": opts.duration.as_secs_f64(),
            "rate_per_process": opts.rate_per_process,
            "slots": opts.slots,
            "kill_leader": opts.kill_leader,
            "enqueue_via": match opts.enqueue_via {
                None => "both",
                Some(0) => "first",
                Some(_) => "second",
            },
        }),
        windows: out,
        takeover_ms,
    })
}
