//! `pgferry bench schedules`: issue 22's target — N schedules firing every minute, fire lag
//! p99 ≤ 1 s — measured the way `pgferry serve` fires schedules: the engine's `Leader` with
//! the firer as a leader duty (default `FirerConfig`), and the worker runtime
//! (`pgferry_core::runtime`) claiming and completing the fired jobs, all in this process.
//!
//! N `* * * * *` schedules of one tenant (targeting a plain job queue) are created through
//! `pgferry_schedules::Schedules`, then M minute boundaries are measured. Per fire:
//! - fire lag: the committed enqueue minus the nominal fire time. The fire row and its job
//!   are written by one transaction; its commit time is `pg_xact_commit_timestamp(xmin)` of
//!   the fire row when the cluster tracks commit timestamps (the private cluster does). Else
//!   the row's `recorded_at` — `now()`, the pass transaction's start — is all the database
//!   knows, an underestimate by the pass's own duration (and, for a fire prepared ahead,
//!   whose `recorded_at` is its fire time, by its whole wait for the COMMIT);
//!   `fire_lag_basis` says which.
//! - start lag: the handler's start (this process's clock) minus the nominal fire time.
//!
//! Fires are counted from the database (`pgferry_sched.fires`) and from the handlers (job
//! meta `schedule.{id,fire_at}`); a missing, duplicate or unstarted fire is listed in
//! `errors` and turns `ok` false.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::{stream, StreamExt};
use pgferry_core::runtime::{Runtime, RuntimeConfig};
use pgferry_core::{db, Engine, EngineConfig, Leader, LeaderConfig, NewJob, QueueOptions};
use pgferry_schedules::schedule::{format_time, parse_time};
use pgferry_schedules::{FirerConfig, NewSchedule, Schedules, Target};
use serde::Serialize;
use serde_json::{json, Value};
use tokio_postgres::Config;

use crate::measure::{self, percentile};

/// Connections of the engine's pool (what `pgferry serve` uses by default).
const SERVER_POOL: usize = 16;
/// Schedules created at once: enough to hide round trips, fewer than the pool.
const CREATE_CONCURRENCY: usize = 12;
/// Handler slots of the worker runtime: a handler is a no-op, so this bounds how fast a
/// minute's jobs start, not how long they run.
const WORKER_SLOTS: usize = 64;
/// A minute stops being waited for this long after its boundary (before the next one).
const MINUTE_WAIT: Duration = Duration::from_secs(55);
/// The user-visible queue the schedules target, and the job kind.
const QUEUE: &str = "minutely";
const KIND: &str = "tick";

/// Every fire of the measured minutes, with its pass (the transaction that wrote it).
const FIRES: &str = "SELECT schedule_id, fire_at, outcome, job_id, recorded_at, \
       xmin::text AS pass, \
       CASE WHEN $2 THEN pg_xact_commit_timestamp(xmin) END AS committed_at \
     FROM pgferry_sched.fires WHERE fire_at = ANY($1)";

#[derive(Debug, Clone, Serialize)]
pub struct SchedulesOpts {
    pub schedules: usize,
    /// Minute boundaries measured, one after the other.
    pub minutes: usize,
    /// The firer's `prepare_ahead` (ms); None: its default.
    pub prepare_ahead_ms: Option<u64>,
}

/// One handler start, as the handler saw it.
struct Start {
    job_id: i64,
    schedule_id: Option<i64>,
    fire_at: Option<SystemTime>,
    at: SystemTime,
}

#[derive(Default)]
struct Starts {
    all: Mutex<Vec<Start>>,
    /// Starts per nominal fire time, as seconds since the epoch (the progress bar's count).
    per_minute: Mutex<HashMap<u64, u64>>,
}

fn epoch_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// p50/p95/p99/max in ms (null when empty).
#[derive(Debug, Clone, Serialize)]
pub struct Lags {
    pub count: usize,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

fn lags(v: &[f32]) -> Lags {
    Lags {
        count: v.len(),
        p50: percentile(v, 0.50),
        p95: percentile(v, 0.95),
        p99: percentile(v, 0.99),
        max: percentile(v, 1.0),
    }
}

/// One pass of the firer that fired at a boundary: one transaction.
#[derive(Debug, Clone, Serialize)]
pub struct Pass {
    pub fires: usize,
    /// The fires' `recorded_at`, ms after the boundary: the transaction's start (`now()`),
    /// or the boundary itself for fires prepared ahead (ADR 0025), which were written up to
    /// `prepare_ahead` before it.
    pub began_ms: f64,
    /// Its commit, ms after the boundary (null without commit timestamps).
    pub committed_ms: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Minute {
    pub fire_at: String,
    pub expected: usize,
    /// Schedules with a `fired` row for this time naming its job.
    pub fired: usize,
    pub missing: usize,
    /// Jobs beyond the first for one (schedule, fire time), as the handlers saw them.
    pub duplicates: usize,
    /// Fire rows of another outcome (missed, skipped, …): none is expected.
    pub other_outcomes: BTreeMap<String, usize>,
    /// Fires whose job's handler started (once or more).
    pub started: usize,
    /// Handler starts of a job already started (a retry or a lost lease).
    pub reruns: usize,
    /// Handler starts whose job is not the one the fire row names.
    pub unrecorded_jobs: usize,
    pub fire_lag_ms: Lags,
    pub start_lag_ms: Lags,
    pub passes: Vec<Pass>,
    /// Fires of this minute the firer prepared ahead (ADR 0025; counted by the firer)…
    pub prepared_fires: u64,
    /// …and how long it wrote them before waiting for the boundary (null: none prepared).
    pub prepare_writing_ms: Option<f64>,
}

/// What the firer prepared ahead for one boundary (its process-wide counters).
struct Prepared {
    fires: u64,
    writing: Option<Duration>,
}

fn bar(prefix: &str, len: u64, template: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len.max(1));
    bar.set_style(
        indicatif::ProgressStyle::with_template(template)
            .expect("template")
            .progress_chars("=> "),
    );
    bar.set_prefix(prefix.to_string());
    bar
}

/// The first whole minute strictly after `t`.
fn next_minute(t: SystemTime) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs((epoch_secs(t) / 60 + 1) * 60)
}

/// Runs the benchmark on `config`'s (fresh) database; returns the report.
pub async fn run(config: &Config, opts: &SchedulesOpts) -> anyhow::Result<Value> {
    let n = opts.schedules.max(1);
    let mut c = measure::connect(config, "migrate").await?;
    pgferry_server::migrate::up(&mut c).await?;
    let tenant_id = pgferry_server::auth::admin::create_tenant(&mut c, "bench").await?;
    let commit_ts: bool = c
        .query_one(
            "SELECT current_setting('track_commit_timestamp') = 'on' AS on",
            &[],
        )
        .await?
        .try_get("on")?;
    let engine = Engine::new(
        db::Pools::new(config, "api", SERVER_POOL),
        EngineConfig::default(),
    );
    let queue = pgferry_server::auth::engine_queue(tenant_id, QUEUE)?;
    engine
        .upsert_queue(&queue, &QueueOptions::default())
        .await?;

    // The leader and its firer duty exactly as `pgferry serve` builds them (run.rs).
    let mut firer = FirerConfig::default();
    if let Some(ms) = opts.prepare_ahead_ms {
        firer.prepare_ahead = Duration::from_millis(ms);
    }
    let leader = Leader::new(engine.clone(), config.clone(), LeaderConfig::default()).with_duty(
        pgferry_schedules::leader_duty(engine.clone(), firer.clone()),
    );
    let duties = leader.duties();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let leader = tokio::spawn(leader.run(stop_rx));

    let starts = Arc::new(Starts::default());
    let seen = starts.clone();
    // The leader above is this process's only one; the runtime must not start another.
    let runtime = Runtime::builder(engine.clone(), config.clone())
        .config(RuntimeConfig {
            leader: None,
            ..RuntimeConfig::default()
        })
        .queue(&queue, WORKER_SLOTS)
        .handler(KIND, move |ctx, _args: Value| {
            let seen = seen.clone();
            async move {
                let at = SystemTime::now();
                let meta = ctx.meta.as_ref().and_then(|m| m.get("schedule"));
                let schedule_id = meta.and_then(|s| s.get("id")).and_then(Value::as_i64);
                let fire_at = meta
                    .and_then(|s| s.get("fire_at"))
                    .and_then(Value::as_str)
                    .and_then(|s| parse_time("fire_at", s).ok());
                if let Some(t) = fire_at {
                    let mut per = seen.per_minute.lock().expect("not poisoned");
                    *per.entry(epoch_secs(t)).or_default() += 1;
                }
                seen.all.lock().expect("not poisoned").push(Start {
                    job_id: ctx.job_id,
                    schedule_id,
                    fire_at,
                    at,
                });
                Ok(None)
            }
        })
        .start();

    // A boundary must not pass while nobody leads: wait for the leader's first duty pass.
    let waited = Instant::now();
    while duties.snapshot().iter().all(|(_, s)| s.passes == 0) {
        anyhow::ensure!(
            waited.elapsed() < Duration::from_secs(30),
            "the leader did not start within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A queue's first job at a priority creates its lane, which a claimer's lane list
    // picks up within a second (lanes.rs): one job first, so no measured fire pays that
    // one-time wait (a queue in use has its lane long before).
    engine
        .enqueue(&[NewJob::new(queue.clone(), KIND, json!({}))])
        .await?;
    while starts.all.lock().expect("not poisoned").is_empty() {
        anyhow::ensure!(
            waited.elapsed() < Duration::from_secs(60),
            "the first job did not start within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let create = create_schedules(&engine, tenant_id, &queue, n).await?;

    // Measured boundaries: whole minutes after creation ended, so every schedule is due at
    // each (one created before an earlier boundary fired there too, unmeasured).
    let first = next_minute(SystemTime::now());
    let boundaries: Vec<SystemTime> = (0..opts.minutes.max(1) as u64)
        .map(|i| first + Duration::from_secs(60 * i))
        .collect();
    let mut prepared = Vec::new();
    for (i, b) in boundaries.iter().enumerate() {
        prepared.push(wait_minute(i, *b, n, &starts).await);
    }
    // Stragglers (a late duplicate) get a moment to show before the count.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let _ = stop_tx.send(true);
    let _ = leader.await;
    // Shuts the engine's pools too; `c` is the bench's own connection.
    let stats = runtime.shutdown(Duration::from_secs(10)).await;

    let rows = c.query(FIRES, &[&boundaries, &commit_ts]).await?;
    let all = std::mem::take(&mut *starts.all.lock().expect("not poisoned"));
    let mut minutes = Vec::new();
    let (mut all_fire, mut all_start) = (Vec::new(), Vec::new());
    let mut errors = Vec::new();
    for (b, p) in boundaries.iter().zip(&prepared) {
        let (mut m, fire, start) = minute(*b, n, &rows, &all)?;
        m.prepared_fires = p.fires;
        m.prepare_writing_ms = p.writing.map(|d| d.as_secs_f64() * 1000.0);
        errors.extend(minute_errors(&m));
        all_fire.extend(fire);
        all_start.extend(start);
        minutes.push(m);
    }
    let sum = |f: fn(&Minute) -> usize| minutes.iter().map(f).sum::<usize>();
    let overall = json!({
        "expected": sum(|m| m.expected),
        "fired": sum(|m| m.fired),
        "missing": sum(|m| m.missing),
        "duplicates": sum(|m| m.duplicates),
        "started": sum(|m| m.started),
        "fire_lag_ms": lags(&all_fire),
        "start_lag_ms": lags(&all_start),
    });
    let p99 = percentile(&all_fire, 0.99);
    Ok(json!({
        "variant": "schedules",
        "ok": errors.is_empty(),
        "errors": errors,
        "opts": opts,
        "fire_lag_basis": if commit_ts { "commit_timestamp" } else {
            "transaction_start (track_commit_timestamp is off: lags exclude each pass's own duration)"
        },
        "firer": {
            "interval_ms": firer.interval.as_millis() as u64,
            "prepare_ahead_ms": firer.prepare_ahead.as_millis() as u64,
        },
        "worker_slots": WORKER_SLOTS,
        "create": create,
        "minutes": minutes,
        "overall": overall,
        "runtime": {
            "completed": stats.completed, "retried": stats.retried, "dead": stats.dead,
        },
        "targets": { "fire_lag_p99_ms_at_most_1000": p99 <= 1000.0 },
    }))
}

/// Creates `n` `* * * * *` schedules through the public API, `CREATE_CONCURRENCY` at once.
async fn create_schedules(
    engine: &Arc<Engine>,
    tenant_id: i64,
    queue: &str,
    n: usize,
) -> anyhow::Result<Value> {
    let api = Schedules::new(engine.clone());
    let b = bar(
        "creating",
        n as u64,
        "{prefix:>16} [{bar:30}] {pos}/{len} schedules",
    );
    let started = Instant::now();
    let mut creates = stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let target = Target::Job {
                queue: queue.to_string(),
                kind: KIND.into(),
                args: json!({}),
                priority: 0,
                max_attempts: None,
            };
            async move {
                let spec = NewSchedule::cron(format!("s{i:06}"), "* * * * *", target);
                api.create(tenant_id, &spec).await
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY);
    while let Some(created) = creates.next().await {
        created?;
        b.inc(1);
    }
    let seconds = started.elapsed().as_secs_f64();
    b.finish_and_clear();
    Ok(json!({
        "schedules": n,
        "seconds": seconds,
        "per_s": n as f64 / seconds.max(1e-9),
        "concurrency": CREATE_CONCURRENCY,
    }))
}

/// Waits for boundary `b`, then until its `n` fires have started (or `MINUTE_WAIT`).
/// Returns what the firer prepared ahead for it.
async fn wait_minute(i: usize, b: SystemTime, n: usize, starts: &Starts) -> Prepared {
    // Counted from before the boundary: fires prepared ahead (ADR 0025) commit at it.
    let fired_before = pgferry_schedules::metrics::fired_total();
    let (prepared_before, _) = pgferry_schedules::metrics::prepared();
    let left = b.duration_since(SystemTime::now()).unwrap_or_default();
    let w = bar(
        &format!("minute {}", i + 1),
        left.as_secs().max(1),
        "{prefix:>16} [{bar:30}] waiting for the boundary, {msg}",
    );
    while let Ok(left) = b.duration_since(SystemTime::now()) {
        w.set_position(w.length().unwrap_or(0).saturating_sub(left.as_secs()));
        w.set_message(format!("{} s left", left.as_secs()));
        tokio::time::sleep(left.min(Duration::from_millis(250))).await;
    }
    w.finish_and_clear();
    let f = bar(
        &format!("minute {}", i + 1),
        n as u64,
        "{prefix:>16} [{bar:30}] {pos}/{len} fires made, {msg}",
    );
    let key = epoch_secs(b);
    loop {
        let fired = pgferry_schedules::metrics::fired_total() - fired_before;
        let started = starts
            .per_minute
            .lock()
            .expect("not poisoned")
            .get(&key)
            .copied()
            .unwrap_or(0);
        f.set_position(fired);
        f.set_message(format!("{started} started"));
        let late = SystemTime::now().duration_since(b).unwrap_or_default() > MINUTE_WAIT;
        if (fired >= n as u64 && started >= n as u64) || late {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f.finish_and_clear();
    let (prepared, last) = pgferry_schedules::metrics::prepared();
    let fires = prepared - prepared_before;
    Prepared {
        fires,
        writing: (fires > 0).then_some(last),
    }
}

fn ms_after(t: SystemTime, b: SystemTime) -> f32 {
    match t.duration_since(b) {
        Ok(d) => d.as_secs_f32() * 1000.0,
        Err(e) => -(e.duration().as_secs_f32() * 1000.0),
    }
}

/// One boundary's counts and lags from the fire rows and the handler starts.
fn minute(
    b: SystemTime,
    n: usize,
    rows: &[tokio_postgres::Row],
    starts: &[Start],
) -> anyhow::Result<(Minute, Vec<f32>, Vec<f32>)> {
    let mut fired: HashMap<i64, Option<i64>> = HashMap::new();
    let mut other_outcomes = BTreeMap::new();
    let mut fire_lag = Vec::new();
    let mut passes: HashMap<String, (usize, SystemTime, Option<SystemTime>)> = HashMap::new();
    for r in rows {
        let at: SystemTime = r.try_get("fire_at")?;
        if at != b {
            continue;
        }
        let outcome: String = r.try_get("outcome")?;
        let job: Option<i64> = r.try_get("job_id")?;
        // A fire is made when its job is: a `fired` row without one enqueued nothing.
        if outcome != "fired" || job.is_none() {
            let what = if outcome == "fired" {
                "fired_without_job".into()
            } else {
                outcome
            };
            *other_outcomes.entry(what).or_insert(0) += 1;
            continue;
        }
        let recorded: SystemTime = r.try_get("recorded_at")?;
        let committed: Option<SystemTime> = r.try_get("committed_at")?;
        fire_lag.push(ms_after(committed.unwrap_or(recorded), b));
        fired.insert(r.try_get("schedule_id")?, job);
        let pass = passes
            .entry(r.try_get("pass")?)
            .or_insert((0, recorded, committed));
        pass.0 += 1;
    }
    // Handler starts of this boundary: jobs per schedule, starts per job.
    let mut jobs: HashMap<i64, HashSet<i64>> = HashMap::new();
    let mut runs: HashMap<i64, usize> = HashMap::new();
    let mut start_lag = Vec::new();
    let mut unrecorded = 0;
    for s in starts.iter().filter(|s| s.fire_at == Some(b)) {
        let Some(id) = s.schedule_id else { continue };
        jobs.entry(id).or_default().insert(s.job_id);
        let count = runs.entry(s.job_id).or_insert(0);
        *count += 1;
        if *count == 1 {
            start_lag.push(ms_after(s.at, b));
        }
        if fired.get(&id).copied().flatten() != Some(s.job_id) {
            unrecorded += 1;
        }
    }
    let mut passes: Vec<Pass> = passes
        .into_values()
        .map(|(fires, began, committed)| Pass {
            fires,
            began_ms: f64::from(ms_after(began, b)),
            committed_ms: committed.map(|c| f64::from(ms_after(c, b))),
        })
        .collect();
    passes.sort_by(|x, y| x.began_ms.total_cmp(&y.began_ms));
    let m = Minute {
        fire_at: format_time(b),
        expected: n,
        fired: fired.len(),
        missing: n.saturating_sub(fired.len()),
        duplicates: jobs.values().map(|j| j.len() - 1).sum(),
        other_outcomes,
        started: fired.keys().filter(|id| jobs.contains_key(id)).count(),
        reruns: runs.values().map(|r| r - 1).sum(),
        unrecorded_jobs: unrecorded,
        fire_lag_ms: lags(&fire_lag),
        start_lag_ms: lags(&start_lag),
        passes,
        prepared_fires: 0,
        prepare_writing_ms: None,
    };
    Ok((m, fire_lag, start_lag))
}

/// What is wrong with a minute, in words; empty when every fire happened once and ran.
fn minute_errors(m: &Minute) -> Vec<String> {
    let mut e = Vec::new();
    let at = &m.fire_at;
    if m.fired != m.expected {
        e.push(format!(
            "{at}: {} of {} fires made ({} missing)",
            m.fired, m.expected, m.missing
        ));
    }
    if m.duplicates > 0 {
        e.push(format!("{at}: {} duplicate fires", m.duplicates));
    }
    for (outcome, k) in &m.other_outcomes {
        e.push(format!("{at}: {k} fires recorded as {outcome}"));
    }
    if m.started != m.fired {
        e.push(format!(
            "{at}: {} of {} fired jobs started",
            m.started, m.fired
        ));
    }
    if m.unrecorded_jobs > 0 {
        e.push(format!(
            "{at}: {} started jobs are not the job their fire row names",
            m.unrecorded_jobs
        ));
    }
    e
}

/// [`run`] on a fresh database `bench_schedules` of `base`'s cluster.
pub async fn run_fresh(base: &Config, opts: &SchedulesOpts) -> anyhow::Result<Value> {
    let config = crate::fresh_database(base, "bench_schedules").await?;
    run(&config, opts).await
}
