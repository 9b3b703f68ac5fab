//! The pg_cron mode (docs/ash.md): instead of the server's leader, pg_cron runs the sampler
//! inside the database — `pgferry_ash.sample_minute()` every minute, sampling every interval
//! until the minute ends (pg_cron 1.4 schedules by the minute). For deployments that
//! prefer the history to be taken even while no pgferry server runs. The server's sampler
//! must then be off (`pgferry serve --ash-interval-ms 0`); an advisory lock keeps two cron
//! runs from sampling at once. In this mode backends are attributed to pgferry roles by
//! `application_name` only (which queue a connection serves is known inside the server).

use std::time::Duration;

use tokio_postgres::Client;

use crate::error::{AshError, Result};

const HAS_CRON: &str = include_str!("../sql/cron/has_cron.sql");
const SCHEDULE: &str = include_str!("../sql/cron/schedule.sql");
const UNSCHEDULE: &str = include_str!("../sql/cron/unschedule.sql");

/// Why the pg_cron mode cannot be enabled here.
const NO_CRON: &str = "pg_cron is not installed in this database (it needs \
    shared_preload_libraries = 'pg_cron', cron.database_name set to this database, and \
    CREATE EXTENSION pg_cron)";

/// Schedules the sampler job (`pgferry-ash`); returns pg_cron's job id. `databases`: the
/// databases to sample (`None`: all).
pub async fn enable(
    client: &Client,
    interval: Duration,
    databases: Option<&[String]>,
) -> Result<i64> {
    if interval < Duration::from_millis(100) || interval > Duration::from_secs(60) {
        return Err(AshError::invalid(
            "ash interval",
            format!("{} ms is outside 100 ms..=60 s", interval.as_millis()),
        ));
    }
    if !client
        .query_one(HAS_CRON, &[])
        .await?
        .get::<_, bool>("present")
    {
        return Err(AshError::invalid("pg_cron", NO_CRON));
    }
    let ms = interval.as_millis() as i32;
    let row = client
        .query_one(SCHEDULE, &[&ms, &databases])
        .await
        .map_err(AshError::from_db)?;
    Ok(row.get("job_id"))
}

/// Removes the sampler job; false when none was scheduled.
pub async fn disable(client: &Client) -> Result<bool> {
    if !client
        .query_one(HAS_CRON, &[])
        .await?
        .get::<_, bool>("present")
    {
        return Ok(false);
    }
    Ok(client.query_one(UNSCHEDULE, &[]).await?.get("removed"))
}
