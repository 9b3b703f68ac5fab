//! Every schedule is also a monitor: the watcher reads the schedules' fires in recording
//! order and raises the monitors' alerts for a schedule —
//! - `late` when a fire was missed (engine down past the grace/catch-up window, or skipped
//!   by the missed-run policy),
//! - `failed` when a fire was skipped by the overlap policy or its job ended dead or
//!   cancelled,
//! - `recovered` when a later fire's job completed (a workflow target: when it started).
//!
//! It reads `pgferry_sched.fires` and `schedules` only; its own state (health per schedule,
//! fires whose job is still running, the cursor) is in `pgferry_mon`.

use std::time::{Duration, SystemTime};

use pgferry_core::{Engine, JobState};
use pgferry_schedules::schedule::format_time;
use serde_json::json;
use tokio_postgres::Transaction;

use crate::alerts;
use crate::error::Result;

const CURSOR_GET: &str = include_str!("../sql/cursor_get.sql");
const CURSOR_SET: &str = include_str!("../sql/cursor_set.sql");
const FIRES_SINCE: &str = include_str!("../sql/fires_since.sql");
const RUN_INSERT: &str = include_str!("../sql/run_insert.sql");
const RUNS_PENDING: &str = include_str!("../sql/runs_pending.sql");
const RUN_DELETE: &str = include_str!("../sql/run_delete.sql");
const HEALTH_ENSURE: &str = include_str!("../sql/health_ensure.sql");
const HEALTH_GET: &str = include_str!("../sql/health_get.sql");
const HEALTH_SET: &str = include_str!("../sql/health_set.sql");

/// What a fire says about its schedule's health.
#[derive(Debug, Clone)]
struct Verdict {
    schedule_id: i64,
    tenant_id: i64,
    name: String,
    fire_at: SystemTime,
    /// None: good; Some((alert kind, cause, reason)): bad.
    bad: Option<(&'static str, &'static str, String)>,
    job_id: Option<i64>,
}

/// One pass at `now`: new fires (recorded at least `settle` ago), then fires whose job was
/// running. Returns the alerts raised.
pub async fn watch(
    engine: &Engine,
    tx: &Transaction<'_>,
    now: SystemTime,
    settle: Duration,
    batch: i64,
) -> Result<usize> {
    let mut verdicts = Vec::new();
    let cur = tx.query_one(CURSOR_GET, &[]).await?;
    let (mut rec, mut sid, mut fat): (SystemTime, i64, SystemTime) = (
        cur.try_get("recorded_at")?,
        cur.try_get("schedule_id")?,
        cur.try_get("fire_at")?,
    );
    let until = now.checked_sub(settle).unwrap_or(SystemTime::UNIX_EPOCH);
    let rows = tx
        .query(FIRES_SINCE, &[&rec, &sid, &fat, &until, &batch])
        .await?;
    let (mut run_s, mut run_t, mut run_j) = (Vec::new(), Vec::new(), Vec::new());
    for r in &rows {
        rec = r.try_get("recorded_at")?;
        sid = r.try_get("schedule_id")?;
        fat = r.try_get("fire_at")?;
        let outcome: String = r.try_get("outcome")?;
        let reason: Option<String> = r.try_get("reason")?;
        let job: Option<i64> = r.try_get("job_id")?;
        let workflow =
            r.try_get::<_, Option<String>>("target_type")?.as_deref() == Some("workflow");
        let reason = reason.unwrap_or_default();
        let bad = match outcome.as_str() {
            "missed" => Some((
                "late",
                "missed",
                format!("fire at {} missed: {reason}", format_time(fat)),
            )),
            "skipped" => Some((
                "failed",
                "skipped",
                format!("fire at {} skipped: {reason}", format_time(fat)),
            )),
            "fired" | "backfilled" => match job {
                // Its job decides later.
                Some(j) if !workflow => {
                    run_s.push(sid);
                    run_t.push(fat);
                    run_j.push(j);
                    continue;
                }
                _ => None,
            },
            // buffered: runs later (as a fire row of its own outcome).
            _ => continue,
        };
        verdicts.push(Verdict {
            schedule_id: sid,
            tenant_id: r.try_get("tenant_id")?,
            name: r.try_get("name")?,
            fire_at: fat,
            bad,
            job_id: job,
        });
    }
    if !rows.is_empty() {
        tx.execute(CURSOR_SET, &[&rec, &sid, &fat]).await?;
    }
    if !run_s.is_empty() {
        tx.execute(RUN_INSERT, &[&run_s, &run_t, &run_j]).await?;
    }
    // Fires whose job was running (including the ones just added).
    for r in tx.query(RUNS_PENDING, &[&batch]).await? {
        let job: i64 = r.try_get("job_id")?;
        let fire_at: SystemTime = r.try_get("fire_at")?;
        let schedule_id: i64 = r.try_get("schedule_id")?;
        let bad = match engine.get_job(job).await {
            Ok(info) => match info.state {
                JobState::Completed => None,
                JobState::Dead | JobState::Cancelled => Some((
                    "failed",
                    "job_failed",
                    format!(
                        "fire at {}: job {job} ended {}",
                        format_time(fire_at),
                        info.state.as_str()
                    ),
                )),
                _ => continue,
            },
            // Gone (purged): nothing to say about it.
            Err(pgferry_core::Error::NotFound { .. }) => {
                tx.execute(RUN_DELETE, &[&schedule_id, &fire_at]).await?;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        tx.execute(RUN_DELETE, &[&schedule_id, &fire_at]).await?;
        verdicts.push(Verdict {
            schedule_id,
            tenant_id: r.try_get("tenant_id")?,
            name: r.try_get("name")?,
            fire_at,
            bad,
            job_id: Some(job),
        });
    }
    verdicts.sort_by_key(|v| (v.schedule_id, v.fire_at));
    let mut raised = 0;
    for v in verdicts {
        if apply(engine, tx, v, now).await? {
            raised += 1;
        }
    }
    Ok(raised)
}

/// A verdict's transition of the schedule's health; true when it raised an alert.
async fn apply(engine: &Engine, tx: &Transaction<'_>, v: Verdict, now: SystemTime) -> Result<bool> {
    tx.execute(HEALTH_ENSURE, &[&v.schedule_id]).await?;
    let h = tx.query_one(HEALTH_GET, &[&v.schedule_id]).await?;
    let state: String = h.try_get("state")?;
    let bad_at: Option<SystemTime> = h.try_get("bad_fire_at")?;
    let details = |cause: &str| {
        json!({
            "cause": cause,
            "fire_at": format_time(v.fire_at),
            "job_id": v.job_id,
        })
    };
    match &v.bad {
        Some((kind, cause, reason)) => {
            let newest = bad_at.map_or(v.fire_at, |b| b.max(v.fire_at));
            if state != "up" {
                tx.execute(HEALTH_SET, &[&v.schedule_id, &state, &Some(newest)])
                    .await?;
                return Ok(false);
            }
            let to = if *kind == "late" { "late" } else { "down" };
            tx.execute(HEALTH_SET, &[&v.schedule_id, &to, &Some(newest)])
                .await?;
            alerts::raise(
                engine,
                tx,
                v.tenant_id,
                ("schedule", &v.name, None),
                kind,
                reason,
                now,
                details(cause),
            )
            .await?;
            Ok(true)
        }
        None => {
            // Only a fire after the bad one recovers (a slow job of an older fire does not).
            if state == "up" || bad_at.is_some_and(|b| v.fire_at <= b) {
                return Ok(false);
            }
            let none: Option<SystemTime> = None;
            tx.execute(HEALTH_SET, &[&v.schedule_id, &"up", &none])
                .await?;
            let reason = format!(
                "fire at {} succeeded after being {state}",
                format_time(v.fire_at)
            );
            alerts::raise(
                engine,
                tx,
                v.tenant_id,
                ("schedule", &v.name, None),
                "recovered",
                &reason,
                now,
                details("succeeded"),
            )
            .await?;
            Ok(true)
        }
    }
}
