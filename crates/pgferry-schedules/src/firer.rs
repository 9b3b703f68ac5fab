//! The leader duty that fires due schedules (ADR 0015).
//!
//! Exactly once per (schedule, fire time): a pass locks due schedule rows (`FOR UPDATE
//! SKIP LOCKED`), and for each fire inserts its `fires` row (primary key (schedule, fire
//! time), `ON CONFLICT DO NOTHING`), enqueues the job (`enqueue_tx`) and advances the
//! schedule, all in one transaction. A leader killed before COMMIT leaves nothing (the next
//! leader fires it); one killed after leaves the advanced schedule and the fire row, so
//! nobody fires it again; two leaders at once (a lock lost late) meet the row lock and the
//! primary key.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use pgferry_core::workflow::{Start, Workflows};
use pgferry_core::{Engine, JobState, NewJob};
use serde_json::json;
use tokio_postgres::{Client, Transaction};

use crate::error::{Result, ScheduleError};
use crate::schedule::{first_fire, ts, Missed, Overlap, Schedule, Target};

const DUE: &str = include_str!("../sql/due.sql");
const BUFFERED: &str = include_str!("../sql/buffered.sql");
const INSERT_FIRE: &str = include_str!("../sql/insert_fire.sql");
const SET_FIRE_JOB: &str = include_str!("../sql/set_fire_job.sql");
const TAKE_BUFFERED: &str = include_str!("../sql/take_buffered.sql");
const ADVANCE: &str = include_str!("../sql/advance.sql");
const INSERT_FIRES: &str = include_str!("../sql/insert_fires.sql");
const FIRES_TAKEN: &str = include_str!("../sql/fires_taken.sql");
const ADVANCE_MANY: &str = include_str!("../sql/advance_many.sql");

/// What a pass decided for one schedule; written for all schedules of the pass at once
/// (a few statements per pass, not per fire).
pub(crate) struct Plan {
    schedule: Schedule,
    fires: Vec<SystemTime>,
    next: Option<SystemTime>,
    last_fire: Option<SystemTime>,
    buffered: Option<SystemTime>,
}

/// Schedules locked per pass.
pub(crate) const BATCH: i64 = 2000;
/// Fire times examined per schedule per pass (an interval of a second after a day down);
/// older ones are neither run nor recorded.
const MAX_SCAN: usize = 1_000_000;
/// Missed fires recorded per schedule per pass (the newest).
const MAX_MISSED_RECORDED: usize = 100;

#[derive(Debug, Clone)]
pub struct FirerConfig {
    /// Pause between passes that found nothing due.
    pub interval: Duration,
    /// How long before its time a fire that needs no state at that time (a job target,
    /// overlap `allow`) is written, in a transaction committed at its time (ADR 0025,
    /// `ahead.rs`). Zero: every fire is written after its time. A change to such a
    /// schedule (pause, update, delete, backfill) made in this window waits for the fire.
    pub prepare_ahead: Duration,
}

impl Default for FirerConfig {
    fn default() -> Self {
        FirerConfig {
            interval: Duration::from_millis(200),
            prepare_ahead: Duration::from_secs(3),
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
    /// A fire run on request (the leader's own fires are written by a pass at once).
    Backfill,
}

/// The leader duty (see `Leader::with_duty`).
pub fn leader_duty(engine: Arc<Engine>, config: FirerConfig) -> pgferry_core::leader::ExtraDuty {
    Arc::new(move |pg| Box::pin(run(engine.clone(), pg, config.clone())))
}

/// Fires due schedules until aborted (leadership lost), reconnecting after errors: the
/// passes below, and beside them the fires prepared ahead (`ahead.rs`) on a connection of
/// their own.
pub async fn run(engine: Arc<Engine>, pg: tokio_postgres::Config, config: FirerConfig) {
    tokio::join!(
        run_passes(engine.clone(), pg.clone(), config.clone()),
        crate::ahead::run(engine, pg, config)
    );
}

/// A connection named `name`, retried every second until Postgres answers.
pub(crate) async fn connect(pg: &tokio_postgres::Config, name: &str) -> Client {
    loop {
        match pgferry_core::db::connect(pg, name).await {
            Ok(c) => return c,
            Err(e) => {
                tracing::warn!(error = %e, connection = name, "scheduler cannot connect");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

async fn run_passes(engine: Arc<Engine>, pg: tokio_postgres::Config, config: FirerConfig) {
    loop {
        let mut client = connect(&pg, "scheduler").await;
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
    // The jobs exist from the COMMIT: `enqueue_tx` told no one, so tell the ticker now
    // (a pass right after a tick does not look for such writers; leader/ticker.rs).
    if released.fired > 0 {
        engine.signals().growth().grew();
    }
    let mut report = FireReport::default();

    let tx = client.transaction().await?;
    let rows = tx.query(DUE, &[&now, &BATCH]).await?;
    report.schedules = rows.len();
    let mut plans = Vec::with_capacity(rows.len());
    for row in rows {
        let s = Schedule::from_row(&row)?;
        plans.push(fire_schedule(engine, &tx, s, now, &mut report).await?);
    }
    execute(engine, &tx, plans, now, None, &mut report).await?;
    tx.commit().await?;
    if report.fired > 0 {
        engine.signals().growth().grew();
    }
    // Lag counts to the COMMIT (when the job exists), not to the start of the pass.
    let pass = SystemTime::now().duration_since(now).unwrap_or_default();
    for lag in &mut report.lag {
        *lag += pass;
    }
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

pub(crate) async fn fire_schedule(
    engine: &Engine,
    tx: &Transaction<'_>,
    s: Schedule,
    now: SystemTime,
    report: &mut FireReport,
) -> Result<Plan> {
    let mut fires = Vec::new();
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

    let last_job = s.last_job_id;
    let mut last_fire = s.last_fire_at;
    let mut buffered = s.buffered_fire_at;
    // A job enqueued earlier in this transaction is pending, whatever a lookup says.
    let mut fired_now = false;
    for t in runs {
        let workflow = matches!(s.spec.target, Target::Workflow { .. });
        // Only a policy other than allow needs the previous job's state (a lookup).
        let checks = s.spec.overlap != Overlap::Allow && !workflow;
        if checks && (fired_now || is_active(engine, last_job).await) {
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
        fires.push(t);
        last_fire = Some(t);
        fired_now = true;
    }
    Ok(Plan {
        schedule: s,
        fires,
        next,
        last_fire,
        buffered,
    })
}

/// Writes a pass's plans: the times that already have a fire (a backfill, an earlier pass)
/// are read and run nothing; the jobs are enqueued in one `enqueue_tx` (workflows one by
/// one); then each fire row is written once, with its job, and every schedule advanced, in
/// one statement each. Every writer of fire rows holds the schedule's row lock, as this
/// pass does, so the times read as free stay free until COMMIT; should one not, the
/// INSERT finds it and the pass fails (rolled back: no job without its fire row).
/// `prepared_for`: the fire time of a pass prepared ahead (`ahead.rs`), recorded as the
/// fires' `recorded_at`.
pub(crate) async fn execute(
    engine: &Engine,
    tx: &Transaction<'_>,
    plans: Vec<Plan>,
    now: SystemTime,
    prepared_for: Option<SystemTime>,
    report: &mut FireReport,
) -> Result<()> {
    let (ids, times): (Vec<i64>, Vec<SystemTime>) = plans
        .iter()
        .flat_map(|p| p.fires.iter().map(|t| (p.schedule.id, *t)))
        .unzip();
    let mut taken = HashSet::new();
    if !ids.is_empty() {
        for row in tx.query(FIRES_TAKEN, &[&ids, &times]).await? {
            let id: i64 = row.try_get("schedule_id")?;
            let at: SystemTime = row.try_get("fire_at")?;
            taken.insert((id, at));
        }
    }
    let mut free: Vec<(i64, SystemTime)> = ids
        .into_iter()
        .zip(times)
        .filter(|f| !taken.contains(f))
        .collect();
    free.sort();
    let by_id: HashMap<i64, &Schedule> =
        plans.iter().map(|p| (p.schedule.id, &p.schedule)).collect();
    let mut jobs = Vec::new();
    let mut job_fires = Vec::new();
    let mut fire_jobs: Vec<(i64, SystemTime, i64)> = Vec::new();
    for (id, t) in &free {
        let s = by_id[id];
        match new_job(s, *t, prepared_for) {
            Some(job) => {
                jobs.push(job);
                job_fires.push((*id, *t));
            }
            None => fire_jobs.push((*id, *t, start_target(engine, tx, s, *t).await?)),
        }
    }
    if !jobs.is_empty() {
        let job_ids = engine.enqueue_tx(tx, &jobs).await?;
        fire_jobs.extend(job_fires.iter().zip(job_ids).map(|((s, t), j)| (*s, *t, j)));
    }
    if !fire_jobs.is_empty() {
        let (s, t, j): (Vec<i64>, Vec<SystemTime>, Vec<i64>) = unzip3(&fire_jobs);
        let written = tx.query(INSERT_FIRES, &[&s, &t, &j, &prepared_for]).await?;
        if written.len() != fire_jobs.len() {
            let mine: HashSet<(i64, SystemTime)> = written
                .iter()
                .map(|r| Ok((r.try_get("schedule_id")?, r.try_get("fire_at")?)))
                .collect::<Result<_>>()?;
            let lost = fire_jobs.iter().find(|f| !mine.contains(&(f.0, f.1)));
            return Err(ScheduleError::FireRaced {
                schedule: lost.map_or(0, |f| f.0),
            });
        }
    }
    fire_jobs.sort();
    // The newest fire's job of each schedule is its last job.
    let last_job = |id: i64| fire_jobs.iter().rev().find(|f| f.0 == id).map(|f| f.2);
    for (_, t, _) in &fire_jobs {
        report.fired += 1;
        report.lag.push(now.duration_since(*t).unwrap_or_default());
    }
    let ids: Vec<i64> = plans.iter().map(|p| p.schedule.id).collect();
    let next: Vec<Option<SystemTime>> = plans.iter().map(|p| p.next).collect();
    let last_fire: Vec<Option<SystemTime>> = plans.iter().map(|p| p.last_fire).collect();
    let jobs: Vec<Option<i64>> = plans.iter().map(|p| last_job(p.schedule.id)).collect();
    let buffered: Vec<Option<SystemTime>> = plans.iter().map(|p| p.buffered).collect();
    if !ids.is_empty() {
        tx.execute(ADVANCE_MANY, &[&ids, &next, &last_fire, &jobs, &buffered])
            .await?;
    }
    Ok(())
}

fn unzip3(v: &[(i64, SystemTime, i64)]) -> (Vec<i64>, Vec<SystemTime>, Vec<i64>) {
    (
        v.iter().map(|x| x.0).collect(),
        v.iter().map(|x| x.1).collect(),
        v.iter().map(|x| x.2).collect(),
    )
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
        Target::Job { .. } => {
            let job = new_job(s, at, None).expect("a job target");
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

/// The job of a job target's fire at `at` (None for a workflow target). A jitter delays it
/// from `jitter_from` (the fire time of a fire prepared ahead), else from now.
fn new_job(s: &Schedule, at: SystemTime, jitter_from: Option<SystemTime>) -> Option<NewJob> {
    let Target::Job {
        queue,
        kind,
        args,
        priority,
        max_attempts,
    } = &s.spec.target
    else {
        return None;
    };
    let fire_at = ts(at).to_string();
    let mut job = NewJob::new(queue.clone(), kind.clone(), args.clone())
        .priority(*priority)
        .meta(json!({"schedule": {"id": s.id, "name": s.spec.name, "fire_at": fire_at}}));
    job.max_attempts = *max_attempts;
    if s.spec.jitter_ms > 0 {
        let j = rand::random::<u64>() % (s.spec.jitter_ms as u64 + 1);
        job.run_at = Some(jitter_from.unwrap_or_else(SystemTime::now) + Duration::from_millis(j));
    }
    Some(job)
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
