//! Repeated alerts while an outage lasts: a monitor with `realert_ms` that is still late or
//! down when its `realert_at` comes raises its alert again (same kind, reason "still …"),
//! routed like its first alert, and the next repeat is due `realert_ms` later. The duty runs
//! this in its pass's transaction, rows locked `SKIP LOCKED`, so a repeat is raised once
//! even with two duties; recovery (or a pause) clears `realert_at` (monitor_set.sql).

use std::time::SystemTime;

use pgferry_schedules::schedule::format_time;
use serde_json::json;
use tokio_postgres::Transaction;

use crate::alerts::{self, Event};
use crate::error::Result;
use crate::monitors::Monitor;

const DUE: &str = include_str!("../sql/monitors_realert_due.sql");

/// The repeats due at `now` (at most `batch`): recorded, with their events for the caller
/// to notify.
pub(crate) async fn repeat_due(
    tx: &Transaction<'_>,
    now: SystemTime,
    batch: i64,
) -> Result<Vec<(i64, Event)>> {
    let mut events = Vec::new();
    for row in tx.query(DUE, &[&now, &batch]).await? {
        let m = Monitor::from_row(&row)?;
        let kind = if m.state == "down" { "failed" } else { "late" };
        let every = m.spec.realert_ms.unwrap_or_default();
        let reason = match m.last_ping_at {
            Some(p) => format!(
                "still {} (last ping {}); repeated every {every} ms",
                m.state,
                format_time(p)
            ),
            None => format!(
                "still {} (never pinged); repeated every {every} ms",
                m.state
            ),
        };
        let details = json!({
            "repeat": true,
            "state": m.state,
            "last_ping_at": m.last_ping_at.map(format_time),
            "consecutive_failures": m.consecutive_failures,
        });
        let (_, mut event) = alerts::record(
            tx,
            m.tenant_id,
            "monitor",
            &m.spec.name,
            kind,
            &reason,
            now,
            details,
        )
        .await?;
        event.routes = m.spec.targets.clone();
        m.schedule_repeat(tx, now).await?;
        events.push((m.tenant_id, event));
    }
    Ok(events)
}
