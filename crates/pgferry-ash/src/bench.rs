//! `pgferry bench ash`: simulated load (backends really waiting on locks, advisory locks,
//! sleeps, idle transactions, and one burning CPU), the cost of a sample at two loads, the
//! readers over seeded history (1 h, 24 h, 30 d) with their plans, and a day's rotation.
//! The CLI adds the sampler on/off comparison of `bench cycle`.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::task::JoinHandle;
use tokio_postgres::{Client, Config, NoTls};

use crate::config::SamplerConfig;
use crate::encode::encode_data;
use crate::error::Result;
use crate::read::{self, Window};
use crate::sampler::Sampler;
use crate::{migrate, seed};

const EXPLAIN_LOAD: &str = include_str!("../sql/bench/explain_load.sql");
const ROW_BYTES: &str = include_str!("../sql/bench/row_bytes.sql");
const WAL_LSN: &str = include_str!("../sql/bench/wal_lsn.sql");
const LOAD_READY: &str = include_str!("../sql/bench/load_ready.sql");
const LOAD_STOP: &str = include_str!("../sql/bench/load_stop.sql");
const SLOT_STATS: &str = include_str!("../sql/bench/slot_stats.sql");
const CURRENT_PERIOD: &str = include_str!("../sql/bench/current_period.sql");
const FLUSH_STATS: &str = include_str!("../sql/bench/flush_stats.sql");
const TRUNCATE_SLOT: &str = include_str!("../sql/bench/truncate_slot.sql");

async fn connect(pg: &Config, app: &str) -> Result<Client> {
    let mut cfg = pg.clone();
    cfg.application_name(app);
    cfg.options("-c jit=off");
    let (client, conn) = cfg.connect(NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// `n` backends of the simulated load, kept busy until [`Load::stop`].
pub struct Load {
    control: Client,
    _holder: Client,
    tasks: Vec<JoinHandle<()>>,
}

/// Starts `n` waiting backends in the database of `pg`: 30% wait on a table lock, 20% on
/// an advisory lock (both held by one idle transaction), 30% sleep (ten distinct query
/// shapes), 20% sit idle in a transaction, and one burns CPU.
pub async fn start_load(pg: &Config, n: usize) -> Result<Load> {
    let control = connect(pg, "ash-bench-control").await?;
    control
        .batch_execute("CREATE TABLE IF NOT EXISTS ash_bench_lock (id int)")
        .await?;
    let holder = connect(pg, "ash-bench-load").await?;
    holder
        .batch_execute(
            "BEGIN; LOCK TABLE ash_bench_lock IN ACCESS EXCLUSIVE MODE; \
             SELECT pg_advisory_xact_lock(42)",
        )
        .await?;
    let mut tasks = Vec::new();
    for i in 0..n.saturating_sub(1) {
        let c = connect(pg, "ash-bench-load").await?;
        let sql = if i == 0 {
            "SELECT count(*) FROM generate_series(1, 4000000000)".to_string()
        } else {
            match i % 10 {
                0..=2 => "SELECT count(*) FROM ash_bench_lock".to_string(),
                3 | 4 => "SELECT pg_advisory_xact_lock(42)".to_string(),
                5..=7 => format!(
                    "SELECT pg_sleep(3600){}",
                    ", 1".repeat(i % 10 + (i / 10) % 10)
                ),
                _ => {
                    c.batch_execute("BEGIN; SELECT 1").await?;
                    tasks.push(tokio::spawn(async move {
                        // Idle in transaction until terminated.
                        std::future::pending::<()>().await;
                        drop(c);
                    }));
                    continue;
                }
            }
        };
        tasks.push(tokio::spawn(async move {
            let _ = c.simple_query(&sql).await;
        }));
    }
    for _ in 0..600 {
        let busy: i64 = control.query_one(LOAD_READY, &[]).await?.get("busy");
        if busy as usize >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(Load {
        control,
        _holder: holder,
        tasks,
    })
}

impl Load {
    pub async fn stop(self) -> Result<()> {
        self.control.query_one(LOAD_STOP, &[]).await?;
        for t in self.tasks {
            t.abort();
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SampleCost {
    pub active_backends: usize,
    pub samples: usize,
    /// Backends counted per sample (the load plus anything else busy on the cluster).
    pub sampled_per_sample: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
    pub data_ints_per_sample: f64,
    pub bytes_per_row: f64,
    pub wal_bytes_per_sample: f64,
    pub combos: usize,
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The cost of `samples` samples (after three that fill the dictionaries) with `n`
/// simulated backends busy.
pub async fn sample_cost(pg: &Config, n: usize, samples: usize) -> Result<SampleCost> {
    let load = start_load(pg, n).await?;
    let client = connect(pg, "ash-bench").await?;
    let mut sampler =
        Sampler::with_client(connect(pg, "pgferry-ash").await?, SamplerConfig::default()).await?;
    for _ in 0..3 {
        sampler.run_once().await?;
    }
    let start: SystemTime = client.query_one("SELECT now() AS t", &[]).await?.get("t");
    let wal0: f64 = client.query_one(WAL_LSN, &[]).await?.get("lsn");
    let mut times = Vec::with_capacity(samples);
    let (mut sampled, mut ints) = (0usize, 0usize);
    for _ in 0..samples {
        let t = Instant::now();
        let r = sampler.run_once().await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        sampled += r.sampled;
        ints += r.data_len;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let wal1: f64 = client.query_one(WAL_LSN, &[]).await?.get("lsn");
    let row = client.query_one(ROW_BYTES, &[&start]).await?;
    load.stop().await?;
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(SampleCost {
        active_backends: n,
        samples,
        sampled_per_sample: sampled as f64 / samples as f64,
        mean_ms: mean,
        p50_ms: pct(&times, 0.5),
        p95_ms: pct(&times, 0.95),
        max_ms: times.last().copied().unwrap_or(0.0),
        data_ints_per_sample: ints as f64 / samples as f64,
        bytes_per_row: row.get("bytes"),
        wal_bytes_per_sample: (wal1 - wal0) / samples as f64,
        combos: sampler.combos(),
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct ReaderLatency {
    pub window: String,
    pub reader: String,
    pub runs: usize,
    pub median_ms: f64,
    pub max_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Rotation {
    pub rows_before: i64,
    pub bytes_before: i64,
    /// The TRUNCATE statement alone (what readers can be queued behind).
    pub truncate_ms: f64,
    /// With its transaction: a commit that unlinks files always flushes WAL.
    pub ms: f64,
    pub rows_after: i64,
    pub dead_tuples_after: i64,
    pub bytes_after: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct History {
    pub raw_rows: u64,
    pub seed_s: f64,
    pub readers: Vec<ReaderLatency>,
    /// EXPLAIN (ANALYZE, BUFFERS) of the load every reader is built on, per window.
    pub plans: Vec<(String, Vec<String>)>,
    pub rotation: Rotation,
}

/// Seeds 30 days of history (hour rollups for 30 d, minute rollups for 8 d, raw samples
/// of 50 backends in 20 combos every second for the last 2 d) and times the readers.
pub async fn history(pg: &Config, runs: usize) -> Result<History> {
    let client = connect(pg, "ash-bench").await?;
    let t0 = Instant::now();
    let combos = seed::combos(&client, 4).await?;
    let mut backends: Vec<i32> = (0..50).map(|i| combos[i % combos.len()]).collect();
    let data = encode_data(&mut backends);
    let mut fewer: Vec<i32> = (0..20).map(|i| combos[(i * 3) % combos.len()]).collect();
    let other = encode_data(&mut fewer);
    let now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
    let (minute_now, hour_now) = (now_s / 60 * 60, now_s / 3600 * 3600);
    let raw_rows = seed::samples(
        &client,
        at(now_s - 2 * 86_400),
        at(now_s),
        1000,
        &data,
        &other,
    )
    .await?;
    seed::rollups(
        &client,
        (at(minute_now - 8 * 86_400), at(minute_now)),
        (at(hour_now - 30 * 86_400), at(hour_now)),
        &data,
    )
    .await?;
    client.batch_execute("ANALYZE pgferry_ash.sample, pgferry_ash.rollup_1m, pgferry_ash.rollup_1h, pgferry_ash.combo, pgferry_ash.wait_event").await?;
    let seed_s = t0.elapsed().as_secs_f64();

    let mut readers = Vec::new();
    let mut plans = Vec::new();
    // Ragged ends (not minute-aligned), as a user's "last N" is.
    let end_ms = read::ms(SystemTime::now()) - 7_300;
    for (name, len) in [
        ("1h", 3_600_000i64),
        ("24h", 86_400_000),
        ("30d", 30 * 86_400_000),
    ] {
        let w = Window::from_ms(end_ms - len, end_ms)?;
        for reader in [
            "top_waits",
            "top_queries",
            "aas_by_wait_event",
            "timeline_60_buckets",
            "cpu_vs_waiting",
        ] {
            let mut times = Vec::new();
            for _ in 0..runs {
                let t = Instant::now();
                // Rows read, so the answer is really fetched and decoded.
                let rows = match reader {
                    "top_waits" => read::top_waits(&client, w, 10).await?.len(),
                    "top_queries" => read::top_queries(&client, w, 10).await?.len(),
                    "aas_by_wait_event" => read::aas_by(&client, read::Dimension::WaitEvent, w)
                        .await?
                        .len(),
                    "timeline_60_buckets" => {
                        read::timeline(&client, w, Duration::from_millis((len / 60) as u64))
                            .await?
                            .len()
                    }
                    _ => usize::from(read::cpu_vs_waiting(&client, w).await?.covered_seconds > 0.0),
                };
                debug_assert!(rows > 0, "{reader} over {name} read nothing");
                times.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            times.sort_by(|a, b| a.total_cmp(b));
            readers.push(ReaderLatency {
                window: name.into(),
                reader: reader.into(),
                runs,
                median_ms: pct(&times, 0.5),
                max_ms: times.last().copied().unwrap_or(0.0),
            });
        }
        let plan: Vec<String> = client
            .query(EXPLAIN_LOAD, &[&w.since, &w.until])
            .await?
            .iter()
            .map(|r| r.get::<_, String>("QUERY PLAN"))
            .collect();
        plans.push((name.to_string(), plan));
    }

    // Rotation of yesterday's full day.
    let period: i64 = client
        .query_one(CURRENT_PERIOD, &[])
        .await?
        .get("period_no");
    let slot = ((period - 1) % 3) as i32;
    let slot16 = slot as i16;
    let before = client.query_one(SLOT_STATS, &[&slot16]).await?;
    let t = Instant::now();
    client
        .batch_execute("BEGIN; SET LOCAL lock_timeout = '50ms'")
        .await?;
    let t_stmt = Instant::now();
    client.execute(TRUNCATE_SLOT, &[&slot]).await?;
    let truncate_ms = t_stmt.elapsed().as_secs_f64() * 1000.0;
    client.batch_execute("COMMIT").await?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    client.query_one(FLUSH_STATS, &[]).await?;
    let after = client.query_one(SLOT_STATS, &[&slot16]).await?;
    Ok(History {
        raw_rows,
        seed_s,
        readers,
        plans,
        rotation: Rotation {
            rows_before: before.get("rows"),
            bytes_before: before.get("bytes"),
            truncate_ms,
            ms,
            rows_after: after.get("rows"),
            dead_tuples_after: after.get("dead"),
            bytes_after: after.get("bytes"),
        },
    })
}

/// Creates `name` afresh on the cluster of `base` with the ash schema; its config.
pub async fn fresh_database(base: &Config, name: &str) -> Result<Config> {
    let admin = connect(base, "ash-bench").await?;
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await?;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await?;
    let mut cfg = base.clone();
    cfg.dbname(name);
    let mut c = connect(&cfg, "ash-bench").await?;
    migrate::up(&mut c).await?;
    Ok(cfg)
}

/// What the sampler cost while it ran beside another workload (`bench ash`'s cycle pairs).
#[derive(Debug, Clone, Serialize)]
pub struct Duty {
    pub samples: usize,
    pub wall_s: f64,
    pub sample_ms_mean: f64,
    pub sample_ms_max: f64,
    /// Sum of the samples' wall times over (wall time × this machine's cores): an upper
    /// bound of the machine share the sampler took (a sample's wall time includes waiting
    /// for a CPU the workload holds).
    pub busy_share_of_machine: f64,
    /// CPU seconds of the sampler's backend, from /proc (None when the database is not a
    /// local Linux process).
    pub backend_cpu_s: Option<f64>,
    pub backend_cpu_share_of_machine: Option<f64>,
}

/// utime + stime of a local process, in seconds (`/proc/<pid>/stat`; USER_HZ is 100 on
/// every Linux architecture pgferry builds for).
fn proc_cpu_s(pid: i32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    // utime and stime: fields 14 and 15 of proc(5), 11 and 12 after the ')'.
    const UTIME: usize = 11;
    const STIME: usize = 12;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(UTIME)?.parse::<f64>().ok()? + f.get(STIME)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Samples every `config.interval`, as the leader does, until `stop` turns true; times
/// every sample and measures the sampler backend's CPU.
pub async fn sample_until(
    pg: &Config,
    config: SamplerConfig,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Duty> {
    let client = pgferry_core::db::connect(pg, "ash").await?;
    let pid: i32 = client
        .query_one("SELECT pg_backend_pid() AS pid", &[])
        .await?
        .get("pid");
    let interval = config.interval;
    let mut sampler = Sampler::with_client(client, config).await?;
    let cpu0 = proc_cpu_s(pid);
    let started = Instant::now();
    let mut times = Vec::new();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.wait_for(|s| *s) => break,
        }
        let t = Instant::now();
        sampler.run_once().await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let wall_s = started.elapsed().as_secs_f64();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let backend_cpu_s = match (cpu0, proc_cpu_s(pid)) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let busy_ms: f64 = times.iter().sum();
    Ok(Duty {
        samples: times.len(),
        wall_s,
        sample_ms_mean: busy_ms / times.len().max(1) as f64,
        sample_ms_max: times.iter().copied().fold(0.0, f64::max),
        busy_share_of_machine: busy_ms / 1000.0 / (wall_s * cores),
        backend_cpu_s,
        backend_cpu_share_of_machine: backend_cpu_s.map(|c| c / (wall_s * cores)),
    })
}
