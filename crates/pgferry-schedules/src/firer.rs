//! The leader duty that fires due schedules (ADR 0015).
//!
//! Exactly once per (schedule, fire time): a pass locks due schedule rows (`FOR UPDATE
//! SKIP LOCKED`), and for each fire inserts its `fires` row (primary key (schedule, fire
//! time), `ON CONFLICT DO NOTHING`), enqueues the job (`enqueue_tx`) and advances the
//! schedule, all in one transaction. A leader killed before COMMIT leaves nothing (the next
//! leader fires it); one killed after leaves the advanced schedule and the fire row, so
//! nobody fires it again; two leaders at once (a lock lost late) meet the row lock and the
//! primary key.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use pgferry_core::workflow::{Start, Workflows};
use pgferry_core::{Engine, JobState, NewJob};
use serde_json::json;
use tokio_postgres::{Client, Transaction};

use crate::error::Result;
use crate::schedule::{first_fire, ts, Missed, Overlap, Schedule, Target};

const DUE: &str = include_str!("../sql/due.sql");
const BUFFERED: &str = include_str!("../sql/buffered.sql");
const INSERT_FIRE: &str = include_str!("../sql/insert_fire.sql");
const SET_FIRE_JOB: &str = include_str!("../sql/set_fire_job.sql");
const TAKE_BUFFERED: &str = include_str!("../sql/take_buffered.sql");
const ADVANCE: &str = include_str!("../sql/advance.sql");

/// Schedules locked per pass.
const BATCH: i64 = 500;
/// Fire times examined per schedule per pass (an interval of a second after a day down);
/// older ones are neither run nor recorded.
const MAX_SCAN: usize = 1_000_000;
/// Missed fires recorded per schedule per pass (the newest).
const MAX_MISSED_RECORDED: usize = 100;

#[derive(Debug, Clone)]
pub struct FirerConfig {
    /// Pause between passes that found nothing due.
    pub interval: Duration,
}

impl Default for FirerConfig {
    fn default() -> Self {
        FirerConfig {
            interval: Duration::from_millis(200),
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FireReport {
    pub schedules: usize,
    pub fired: usize,
    pub missed: usize,
    pub skipped: usize,
    pub buffered: usize,
    /// Lag of each fire: when it ran after its nominal time.
    pub lag: Vec<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FireKind {
    Fire,
    Backfill,
}

/// The leader duty (see `Leader::with_duty`).
pub fn leader_duty(engine: Arc<Engine>, config: FirerConfig) -> pgferry_core::leader::ExtraDuty {
    Arc::new(move |pg| Box::pin(run(engine.clone(), pg, config.clone())))
}

/// Fires due schedules until aborted (leadership lost), reconnecting after errors.
pub async fn run(engine: Arc<Engine>, pg: tokio_postgres::Config, config: FirerConfig) {
    loop {
        let mut client = match pgferry_core::db::connect(&pg, "scheduler").await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "scheduler cannot connect");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        loop {
            match fire_due(&engine, &mut client, SystemTime::now()).await {
                Ok(report) if report.schedules as i64 >= BATCH => continue,
                Ok(_) => tokio::time::sleep(config.interval).await,
                Err(e) => {
                    tracing::warn!(error = %e, "scheduler pass failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    break;
                }
            }
        }
    }
}

/// One pass: buffered fires whose previous run ended, then schedules due at `now`.
pub async fn fire_due(engine: &Engine, client: &mut Client, now: SystemTime) -> Result<FireReport> {
    let mut released = FireReport::default();
    let tx = client.transaction().await?;
    for row in tx.query(BUFFERED, &[&BATCH]).await? {
        let s = Schedule::from_row(&row)?;
        release_buffered(engine, &tx, &s, now, &mut released).await?;
    }
    tx.commit().await?;
    crate::metrics::record(&released);
    let mut report = FireReport::default();

    let tx = client.transaction().await?;
    let rows = tx.query(DUE, &[&now, &BATCH]).await?;
    report.schedules = rows.len();
    for row in rows {
        let s = Schedule::from_row(&row)?;
        fire_schedule(engine, &tx, &s, now, &mut report).await?;
    }
    tx.commit().await?;
    crate::metrics::record(&report);
    report.fired += released.fired;
    report.lag.extend(released.lag);
    Ok(report)
}

async fn release_buffered(
    engine: &Engine,
    tx: &Transaction<'_>,
    s: &Schedule,
    now: SystemTime,
    report: &mut FireReport,
) -> Result<()> {
    let Some(at) = s.buffered_fire_at else {
        return Ok(());
    };
    if is_active(engine, s.last_job_id).await {
        return Ok(());
    }
    let mut job = s.last_job_id;
    if tx.query_opt(TAKE_BUFFERED, &[&s.id, &at]).await?.is_some() {
        let id = start_target(engine, tx, s, at).await?;
        tx.execute(SET_FIRE_JOB, &[&s.id, &at, &id]).await?;
        report.fired += 1;
        report.lag.push(now.duration_since(at).unwrap_or_default());
        job = Some(id);
    }
    let none: Option<SystemTime> = None;
    tx.execute(ADVANCE, &[&s.id, &s.next_fire_at, &Some(at), &job, &none])
        .await?;
    Ok(())
}

async fn fire_schedule(
    engine: &Engine,
    tx: &Transaction<'_>,
    s: &Schedule,
    now: SystemTime,
    report: &mut FireReport,
) -> Result<()> {
    let timing = s.timing()?;
    // Every nominal time from next_fire_at up to now (the newest MAX_SCAN of them).
    let mut due: VecDeque<SystemTime> = VecDeque::new();
    let mut next = s.next_fire_at;
    let mut scanned = 0;
    while let Some(t) = next.filter(|t| *t <= now) {
        due.push_back(t);
        if due.len() > MAX_MISSED_RECORDED.max(s.spec.catchup_max as usize) + 1 {
            due.pop_front();
        }
        scanned += 1;
        next = if scanned >= MAX_SCAN {
            first_fire(&s.spec, &timing, now)?
        } else {
            first_fire(&s.spec, &timing, t)?
        };
    }
    let grace = Duration::from_millis(s.spec.grace_ms as u64);
    let window = Duration::from_millis(s.spec.catchup_window_ms as u64);
    let late = |t: &SystemTime| now.duration_since(*t).unwrap_or_default();
    let (missed, on_time): (Vec<SystemTime>, Vec<SystemTime>) =
        due.into_iter().partition(|t| late(t) > grace);
    let catchable: Vec<SystemTime> = missed
        .iter()
        .copied()
        .filter(|t| late(t) <= window)
        .collect();
    let mut runs: Vec<SystemTime> = match s.spec.missed {
        Missed::Skip => Vec::new(),
        Missed::RunOnce if on_time.is_empty() => catchable.last().copied().into_iter().collect(),
        Missed::RunOnce => Vec::new(),
        Missed::RunAll => {
            let keep = catchable.len().saturating_sub(s.spec.catchup_max as usize);
            catchable[keep..].to_vec()
        }
    };
    let reason = format!(
        "not fired within its grace of {} ms (engine down or leader changing); missed policy {}",
        s.spec.grace_ms,
        s.spec.missed.as_str()
    );
    for t in missed.iter().filter(|t| !runs.contains(t)) {
        if record(tx, s.id, *t, "missed", Some(&reason)).await? {
            report.missed += 1;
        }
    }
    runs.extend(on_time);

    let mut last_job = s.last_job_id;
    let mut last_fire = s.last_fire_at;
    let mut buffered = s.buffered_fire_at;
    // A job enqueued earlier in this transaction is pending, whatever a lookup says.
    let mut fired_now = false;
    for t in runs {
        let active = fired_now || is_active(engine, last_job).await;
        let workflow = matches!(s.spec.target, Target::Workflow { .. });
        if active && !workflow {
            match s.spec.overlap {
                Overlap::Allow => {}
                Overlap::Skip => {
                    let why = format!("overlap skip: job {} still running", last_job.unwrap_or(0));
                    if record(tx, s.id, t, "skipped", Some(&why)).await? {
                        report.skipped += 1;
                    }
                    continue;
                }
                Overlap::BufferOne if buffered.is_none() => {
                    let why = format!(
                        "overlap buffer_one: waits for job {}",
                        last_job.unwrap_or(0)
                    );
                    if record(tx, s.id, t, "buffered", Some(&why)).await? {
                        report.buffered += 1;
                        buffered = Some(t);
                    }
                    continue;
                }
                Overlap::BufferOne => {
                    let why = "overlap buffer_one: a fire is already waiting";
                    if record(tx, s.id, t, "skipped", Some(why)).await? {
                        report.skipped += 1;
                    }
                    continue;
                }
                Overlap::CancelPrevious => {
                    if let Some(prev) = last_job {
                        let why = format!("cancelled by schedule {}'s next fire", s.spec.name);
                        if let Err(e) = engine.cancel(prev, Some(&why)).await {
                            tracing::debug!(job = prev, error = %e, "previous run not cancelled");
                        }
                    }
                }
            }
        }
        if let Some(id) = fire(engine, tx, s, t, FireKind::Fire).await? {
            report.fired += 1;
            report.lag.push(late(&t));
            last_job = Some(id);
            last_fire = Some(t);
            fired_now = true;
        }
    }
    tx.execute(ADVANCE, &[&s.id, &next, &last_fire, &last_job, &buffered])
        .await?;
    Ok(())
}

/// Records a fire that did not run. False when the time already has a fire.
async fn record(
    tx: &Transaction<'_>,
    schedule: i64,
    at: SystemTime,
    outcome: &str,
    reason: Option<&str>,
) -> Result<bool> {
    Ok(tx
        .query_opt(INSERT_FIRE, &[&schedule, &at, &outcome, &reason])
        .await?
        .is_some())
}

/// Runs the fire at `at` inside `tx`: its fire row, then its job or workflow. `None` when
/// the time already has a fire (another leader, an earlier pass, a backfill).
pub(crate) async fn fire(
    engine: &Engine,
    tx: &Transaction<'_>,
    s: &Schedule,
    at: SystemTime,
    kind: FireKind,
) -> Result<Option<i64>> {
    let outcome = match kind {
        FireKind::Fire => "fired",
        FireKind::Backfill => "backfilled",
    };
    let none: Option<&str> = None;
    if tx
        .query_opt(INSERT_FIRE, &[&s.id, &at, &outcome, &none])
        .await?
        .is_none()
    {
        return Ok(None);
    }
    let id = start_target(engine, tx, s, at).await?;
    tx.execute(SET_FIRE_JOB, &[&s.id, &at, &id]).await?;
    Ok(Some(id))
}

/// Enqueues the schedule's job (or starts its workflow) for the fire at `at`, carrying the
/// fire time in the job's meta (`schedule.fire_at`), delayed by a random jitter.
async fn start_target(
    engine: &Engine,
    tx: &Transaction<'_>,
    s: &Schedule,
    at: SystemTime,
) -> Result<i64> {
    let fire_at = ts(at).to_string();
    let jitter = match s.spec.jitter_ms {
        0 => Duration::ZERO,
        j => Duration::from_millis(rand::random::<u64>() % (j as u64 + 1)),
    };
    let run_at = (!jitter.is_zero()).then(|| SystemTime::now() + jitter);
    match &s.spec.target {
        Target::Job {
            queue,
            kind,
            args,
            priority,
            max_attempts,
        } => {
            let mut job = NewJob::new(queue.clone(), kind.clone(), args.clone())
                .priority(*priority)
                .meta(json!({"schedule": {"id": s.id, "name": s.spec.name, "fire_at": fire_at}}));
            job.max_attempts = *max_attempts;
            job.run_at = run_at;
            let ids = engine.enqueue_tx(tx, &[job]).await?;
            Ok(ids[0])
        }
        Target::Workflow { queue, kind, input } => {
            let mut start = Start::new(kind.clone(), queue.clone(), input.clone());
            start.correlation_key = Some(format!("schedule:{}:{fire_at}", s.id));
            start.run_at = run_at;
            Ok(Workflows::start_tx(tx, &start).await?.id)
        }
    }
}

/// Whether the job is still pending, scheduled or running (an unknown one is not).
async fn is_active(engine: &Engine, job: Option<i64>) -> bool {
    let Some(id) = job else { return false };
    match engine.get_job(id).await {
        Ok(info) => matches!(
            info.state,
            JobState::Pending | JobState::Scheduled | JobState::Running
        ),
        Err(_) => false,
    }
}
