//! The leader duty of monitors: each pass marks monitors past their deadline late (index
//! scan on `due_at`, rows locked `SKIP LOCKED`) and watches the schedules' fires
//! ([`crate::schedule_watch`]). Each pass is one transaction: its state changes, alerts and
//! notification jobs commit together, so a leader killed mid-pass leaves the work to the
//! next one and nothing twice.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use pgferry_core::Engine;
use tokio_postgres::Client;

use crate::error::Result;
use crate::monitors::{mark_late, Monitor};

const DUE: &str = include_str!("../sql/monitors_due.sql");
const MONITOR_STATES: &str = include_str!("../sql/monitor_states.sql");
const HEALTH_STATES: &str = include_str!("../sql/health_states.sql");

#[derive(Debug, Clone)]
pub struct DutyConfig {
    /// Pause between passes that found a page's worth of nothing.
    pub interval: Duration,
    /// How long after a fire's recording the watcher reads it: longer than any firer
    /// transaction, whose fires all carry its start time.
    pub settle: Duration,
    /// Monitors and fires per pass.
    pub batch: i64,
}

impl Default for DutyConfig {
    fn default() -> Self {
        DutyConfig {
            interval: Duration::from_secs(1),
            settle: Duration::from_secs(10),
            batch: 1000,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DutyReport {
    /// Monitors found past their deadline.
    pub due: usize,
    /// Of those, the ones that turned late (an alert each).
    pub late: usize,
    /// Alerts raised for schedules.
    pub schedule_alerts: usize,
    /// Alerts repeated for monitors still late or down (`realert_ms`).
    pub repeats: usize,
}

/// The leader duty (see `Leader::with_duty`).
pub fn leader_duty(engine: Arc<Engine>, config: DutyConfig) -> pgferry_core::leader::ExtraDuty {
    Arc::new(move |pg| Box::pin(run(engine.clone(), pg, config.clone())))
}

/// Runs passes until aborted (leadership lost), reconnecting after errors.
pub async fn run(engine: Arc<Engine>, pg: tokio_postgres::Config, config: DutyConfig) {
    let mut passes = 0u64;
    loop {
        let mut client = match pgferry_core::db::connect(&pg, "monitors").await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "monitor duty cannot connect");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        loop {
            match run_once(&engine, &mut client, SystemTime::now(), &config).await {
                Ok(r) if r.due as i64 >= config.batch || r.repeats as i64 >= config.batch => {
                    continue
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "monitor duty pass failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    break;
                }
            }
            // The state gauges every ten passes: a GROUP BY over small tables.
            if passes.is_multiple_of(10) {
                if let Err(e) = refresh_states(&client).await {
                    tracing::debug!(error = %e, "monitor states not counted");
                }
            }
            passes += 1;
            tokio::time::sleep(config.interval).await;
        }
    }
}

/// One pass as if the time were `now` (tests drive time through it).
pub async fn run_once(
    engine: &Engine,
    client: &mut Client,
    now: SystemTime,
    config: &DutyConfig,
) -> Result<DutyReport> {
    let mut report = DutyReport::default();
    let tx = client.transaction().await?;
    let mut events = Vec::new();
    for row in tx.query(DUE, &[&now, &config.batch]).await? {
        report.due += 1;
        if let Some(e) = mark_late(&tx, Monitor::from_row(&row)?, now).await? {
            events.push(e);
        }
    }
    report.late = events.len();
    let repeats = crate::realert::repeat_due(&tx, now, config.batch).await?;
    report.repeats = repeats.len();
    events.extend(repeats);
    // The pass's notifications in one enqueue (a COPY), not one per alert.
    crate::targets::notify_all(engine, &tx, &events).await?;
    report.schedule_alerts =
        crate::schedule_watch::watch(engine, &tx, now, config.settle, config.batch).await?;
    tx.commit().await?;
    if !events.is_empty() || report.schedule_alerts > 0 {
        // The notifications exist from the COMMIT; `enqueue_tx` told the ticker nothing.
        engine.signals().growth().grew();
    }
    Ok(report)
}

/// Counts monitors and watched schedules by state for `/metrics`.
pub async fn refresh_states(client: &Client) -> Result<()> {
    let mut monitors = Vec::new();
    for r in client.query(MONITOR_STATES, &[]).await? {
        monitors.push((r.try_get::<_, String>("state")?, r.try_get::<_, i64>("n")?));
    }
    let mut schedules = Vec::new();
    for r in client.query(HEALTH_STATES, &[]).await? {
        schedules.push((r.try_get::<_, String>("state")?, r.try_get::<_, i64>("n")?));
    }
    crate::metrics::set_states(monitors, schedules);
    Ok(())
}
