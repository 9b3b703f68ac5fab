//! Fires prepared ahead of their time and committed at it (ADR 0025).
//!
//! A minute boundary is a burst: every `* * * * *` schedule is due at the same instant, and
//! firing them after it means one transaction after another, the last committing seconds
//! late (10,000 schedules: five passes, fire lag p99 1.5–3.2 s on two cores). A fire whose
//! outcome needs no state at its time — a job target with overlap `allow` — is the same
//! fire whenever it is written, so this duty writes it before its time, in a transaction
//! that holds the schedule rows locked and commits at the fire time: the job becomes
//! visible (claimable) at that instant and not before, exactly once (the same rows, lock
//! and primary key as the firer's passes), and a kill before the COMMIT leaves nothing for
//! the next leader to skip.
//!
//! Other fires (workflow targets, overlap policies that look at the previous job, anything
//! this duty did not get to in time) are the firer's passes' (`firer.rs`), which skip rows
//! locked here.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use pgferry_core::Engine;
use tokio_postgres::Client;

use crate::error::Result;
use crate::firer::{execute, fire_schedule, FireReport, FirerConfig, BATCH};
use crate::schedule::Schedule;

const NEXT_PREPARABLE: &str = include_str!("../sql/next_preparable.sql");
const PREPARABLE: &str = include_str!("../sql/preparable.sql");

/// Prepares fires until aborted (leadership lost), reconnecting after errors. Does nothing
/// when `config.prepare_ahead` is zero.
pub(crate) async fn run(engine: Arc<Engine>, pg: tokio_postgres::Config, config: FirerConfig) {
    if config.prepare_ahead.is_zero() {
        return std::future::pending().await;
    }
    loop {
        let mut client = crate::firer::connect(&pg, "scheduler-ahead").await;
        loop {
            match prepare_next(&engine, &mut client, config.prepare_ahead).await {
                Ok(Some(_)) => continue,
                Ok(None) => tokio::time::sleep(config.interval).await,
                Err(e) => {
                    tracing::warn!(error = %e, "scheduler (ahead) pass failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    break;
                }
            }
        }
    }
}

/// Prepares the earliest fire time within `ahead` of now that has preparable schedules,
/// and commits it at that time. `None` when there is none.
pub async fn prepare_next(
    engine: &Engine,
    client: &mut Client,
    ahead: Duration,
) -> Result<Option<FireReport>> {
    let now = SystemTime::now();
    let Some(row) = client
        .query_opt(NEXT_PREPARABLE, &[&now, &(now + ahead)])
        .await?
    else {
        return Ok(None);
    };
    let at: SystemTime = row.try_get("next_fire_at")?;
    Ok(Some(prepare_at(engine, client, at).await?))
}

/// Writes the fires at `at` of the preparable schedules due then (those no other firer
/// holds), batch by batch while there is time, then waits for `at` and commits. Each fire's
/// lag is from `at` to the COMMIT's acknowledgement.
pub async fn prepare_at(
    engine: &Engine,
    client: &mut Client,
    at: SystemTime,
) -> Result<FireReport> {
    let mut report = FireReport::default();
    let began = Instant::now();
    let tx = client.transaction().await?;
    loop {
        let started = Instant::now();
        let rows = tx.query(PREPARABLE, &[&at, &BATCH]).await?;
        let full = rows.len() as i64 >= BATCH;
        report.schedules += rows.len();
        let mut plans = Vec::with_capacity(rows.len());
        for row in rows {
            let s = Schedule::from_row(&row)?;
            plans.push(fire_schedule(engine, &tx, s, at, &mut report).await?);
        }
        execute(engine, &tx, plans, at, Some(at), &mut report).await?;
        // Another batch only if it should be written before `at` (as long as this one
        // took); the rest is the firer's passes' at `at`.
        if !full || SystemTime::now() + started.elapsed() >= at {
            break;
        }
    }
    let writing = began.elapsed();
    // Never before `at` by the clock the fire times are computed with.
    while let Ok(wait) = at.duration_since(SystemTime::now()) {
        tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
    }
    tx.commit().await?;
    // The jobs exist from now: the ticker (this process leads) need not wait for its
    // idle interval to see them.
    engine.signals().growth().grew();
    let lag = SystemTime::now().duration_since(at).unwrap_or_default();
    report.lag.iter_mut().for_each(|l| *l = lag);
    crate::metrics::record(&report);
    crate::metrics::record_prepared(report.fired, writing);
    if SystemTime::now() > at + Duration::from_secs(1) {
        tracing::warn!(
            fires = report.fired,
            writing_ms = writing.as_millis() as u64,
            "fires prepared ahead committed over a second late: prepare_ahead is too short for this many"
        );
    }
    Ok(report)
}
