//! Creating, reading, pausing and deleting schedules, listing their fires, and backfilling
//! a past range. Every call is scoped to one tenant.

use std::sync::Arc;
use std::time::SystemTime;

use pgferry_core::Engine;
use tokio_postgres::types::Json;

use crate::error::{Result, ScheduleError};
use crate::firer::{fire, FireKind};
use crate::schedule::{first_fire, NewSchedule, Schedule};

const INSERT: &str = include_str!("../sql/insert.sql");
const GET: &str = include_str!("../sql/get.sql");
const GET_FOR_UPDATE: &str = include_str!("../sql/get_for_update.sql");
const LIST: &str = include_str!("../sql/list.sql");
const DELETE: &str = include_str!("../sql/delete.sql");
const SET_PAUSED: &str = include_str!("../sql/set_paused.sql");
const LIST_FIRES: &str = include_str!("../sql/list_fires.sql");

/// Most fires one backfill may make.
pub const MAX_BACKFILL: usize = 1000;

/// One recorded fire.
#[derive(Debug, Clone)]
pub struct Fire {
    pub fire_at: SystemTime,
    pub recorded_at: SystemTime,
    /// fired | backfilled | missed | skipped | buffered
    pub outcome: String,
    pub job_id: Option<i64>,
    pub reason: Option<String>,
}

/// Schedules on the engine's database.
#[derive(Clone)]
pub struct Schedules {
    engine: Arc<Engine>,
}

impl Schedules {
    /// A pooled connection, its error as the engine's.
    async fn client(&self) -> Result<deadpool_postgres::Object> {
        Ok(self
            .engine
            .pool()
            .get()
            .await
            .map_err(pgferry_core::Error::from)?)
    }

    pub fn new(engine: Arc<Engine>) -> Schedules {
        Schedules { engine }
    }

    pub async fn create(&self, tenant_id: i64, spec: &NewSchedule) -> Result<Schedule> {
        spec.validate()?;
        let now = SystemTime::now();
        let next = first_fire(spec, &spec.timing(now)?, now)?;
        let target = serde_json::to_value(&spec.target)
            .map_err(|e| ScheduleError::invalid("target", e.to_string()))?;
        let client = self.client().await?;
        let row = client
            .query_opt(
                INSERT,
                &[
                    &tenant_id,
                    &spec.name,
                    &spec.cron,
                    &spec.interval_ms,
                    &spec.timezone,
                    &spec.jitter_ms,
                    &spec.start_at,
                    &spec.end_at,
                    &spec.paused,
                    &Json(&target),
                    &spec.missed.as_str(),
                    &spec.catchup_window_ms,
                    &spec.catchup_max,
                    &spec.overlap.as_str(),
                    &spec.grace_ms,
                    &next,
                    &now,
                ],
            )
            .await?;
        match row {
            Some(row) => Schedule::from_row(&row),
            None => Err(ScheduleError::Exists(spec.name.clone())),
        }
    }

    pub async fn get(&self, tenant_id: i64, name: &str) -> Result<Schedule> {
        let client = self.client().await?;
        let row = client.query_opt(GET, &[&tenant_id, &name]).await?;
        match row {
            Some(row) => Schedule::from_row(&row),
            None => Err(ScheduleError::NotFound(name.into())),
        }
    }

    /// Names after `after`, in name order.
    pub async fn list(&self, tenant_id: i64, after: &str, limit: i64) -> Result<Vec<Schedule>> {
        let client = self.client().await?;
        let rows = client.query(LIST, &[&tenant_id, &after, &limit]).await?;
        rows.iter().map(Schedule::from_row).collect()
    }

    pub async fn delete(&self, tenant_id: i64, name: &str) -> Result<()> {
        let client = self.client().await?;
        match client.execute(DELETE, &[&tenant_id, &name]).await? {
            0 => Err(ScheduleError::NotFound(name.into())),
            _ => Ok(()),
        }
    }

    /// Pauses (no fires, none recorded as missed) or resumes: a resumed schedule's next
    /// fire is the first after now, so the paused time is not caught up.
    pub async fn set_paused(&self, tenant_id: i64, name: &str, paused: bool) -> Result<Schedule> {
        let current = self.get(tenant_id, name).await?;
        let next = current.next_after(SystemTime::now())?;
        let client = self.client().await?;
        let row = client
            .query_opt(SET_PAUSED, &[&tenant_id, &name, &paused, &next])
            .await?;
        match row {
            Some(row) => Schedule::from_row(&row),
            None => Err(ScheduleError::NotFound(name.into())),
        }
    }

    /// Fires recorded before `before`, newest first.
    pub async fn fires(
        &self,
        tenant_id: i64,
        name: &str,
        before: SystemTime,
        limit: i64,
    ) -> Result<Vec<Fire>> {
        self.get(tenant_id, name).await?;
        let client = self.client().await?;
        let rows = client
            .query(LIST_FIRES, &[&tenant_id, &name, &before, &limit])
            .await?;
        rows.iter()
            .map(|r| {
                Ok(Fire {
                    fire_at: r.try_get("fire_at")?,
                    recorded_at: r.try_get("recorded_at")?,
                    outcome: r.try_get("outcome")?,
                    job_id: r.try_get("job_id")?,
                    reason: r.try_get("reason")?,
                })
            })
            .collect()
    }

    /// Runs every fire time of `[from, to]` that has no fire yet (at most
    /// [`MAX_BACKFILL`]), in one transaction; returns the fire times run and their jobs.
    /// Times already fired (by the leader or an earlier backfill) are left alone.
    pub async fn backfill(
        &self,
        tenant_id: i64,
        name: &str,
        from: SystemTime,
        to: SystemTime,
    ) -> Result<Vec<(SystemTime, i64)>> {
        if to < from {
            return Err(ScheduleError::invalid("to", "must not be before from"));
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let row = tx
            .query_opt(GET_FOR_UPDATE, &[&tenant_id, &name])
            .await?
            .ok_or_else(|| ScheduleError::NotFound(name.into()))?;
        let schedule = Schedule::from_row(&row)?;
        let timing = schedule.timing()?;
        let mut times = Vec::new();
        // `from` itself counts.
        let mut at = from - std::time::Duration::from_nanos(1);
        while let Some(t) = first_fire(&schedule.spec, &timing, at)? {
            if t > to {
                break;
            }
            if times.len() == MAX_BACKFILL {
                return Err(ScheduleError::invalid(
                    "to",
                    format!("the range holds more than {MAX_BACKFILL} fire times"),
                ));
            }
            times.push(t);
            at = t;
        }
        let mut done = Vec::new();
        for t in times {
            if let Some(job) = fire(&self.engine, &tx, &schedule, t, FireKind::Backfill).await? {
                done.push((t, job));
            }
        }
        tx.commit().await?;
        crate::metrics::record_backfill(done.len());
        Ok(done)
    }
}
