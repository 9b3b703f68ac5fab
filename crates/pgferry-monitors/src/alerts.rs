//! Alerts (a monitor or schedule turned late, failed, or recovered) and the events they
//! send to notification targets. An alert is recorded and notified in the transaction of
//! the state change that raised it: no transition without its alert, no alert twice.

use std::time::SystemTime;

use pgferry_core::Engine;
use serde_json::{json, Value};
use tokio_postgres::types::Json;
use tokio_postgres::GenericClient;

use crate::error::Result;

const INSERT: &str = include_str!("../sql/alert_insert.sql");
const LIST: &str = include_str!("../sql/alert_list.sql");

/// What notification targets receive (the body of the HTTP job, as JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// `<subject type>.<what happened>`: `monitor.late`, `schedule.failed`,
    /// `http_job.recovered`, …
    pub kind: String,
    /// The name of the monitor, schedule, … it is about.
    pub subject: String,
    pub reason: String,
    pub time: SystemTime,
    pub details: Value,
    /// The notification targets (by name) it goes to; None: all of the tenant's whose
    /// filter matches (a monitor that names its targets sets it).
    pub routes: Option<Vec<String>>,
}

impl Event {
    pub fn to_json(&self) -> Value {
        json!({
            "kind": self.kind,
            "subject": self.subject,
            "reason": self.reason,
            "time": pgferry_schedules::schedule::format_time(self.time),
            "details": self.details,
        })
    }
}

/// One recorded alert.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    pub id: i64,
    /// monitor | schedule
    pub subject_type: String,
    pub subject: String,
    /// late | failed | recovered
    pub kind: String,
    pub reason: String,
    pub at: SystemTime,
    pub details: Value,
}

impl Alert {
    fn from_row(r: &tokio_postgres::Row) -> Result<Alert> {
        let Json(details): Json<Value> = r.try_get("details")?;
        Ok(Alert {
            id: r.try_get("id")?,
            subject_type: r.try_get("subject_type")?,
            subject: r.try_get("subject")?,
            kind: r.try_get("kind")?,
            reason: r.try_get("reason")?,
            at: r.try_get("at")?,
            details,
        })
    }
}

/// Records an alert and notifies the tenant's targets (only `routes`, when given), on
/// `client` (the caller's transaction). `about`: (subject type, subject, routes). Returns
/// the alert's id.
#[allow(clippy::too_many_arguments)]
pub async fn raise<C: GenericClient>(
    engine: &Engine,
    client: &C,
    tenant_id: i64,
    about: (&str, &str, Option<&[String]>),
    kind: &str,
    reason: &str,
    at: SystemTime,
    details: Value,
) -> Result<i64> {
    let (subject_type, subject, routes) = about;
    let (id, mut event) = record(
        client,
        tenant_id,
        subject_type,
        subject,
        kind,
        reason,
        at,
        details,
    )
    .await?;
    event.routes = routes.map(<[String]>::to_vec);
    crate::targets::notify(engine, client, tenant_id, &event).await?;
    Ok(id)
}

/// Records an alert on `client` and returns it with its event, which the caller notifies
/// (the duty notifies a whole pass's events with one enqueue).
#[allow(clippy::too_many_arguments)]
pub async fn record<C: GenericClient>(
    client: &C,
    tenant_id: i64,
    subject_type: &str,
    subject: &str,
    kind: &str,
    reason: &str,
    at: SystemTime,
    details: Value,
) -> Result<(i64, Event)> {
    let row = client
        .query_one(
            INSERT,
            &[
                &tenant_id,
                &subject_type,
                &subject,
                &kind,
                &reason,
                &at,
                &Json(&details),
            ],
        )
        .await?;
    let event = Event {
        kind: format!("{subject_type}.{kind}"),
        subject: subject.to_string(),
        reason: reason.to_string(),
        time: at,
        details,
        routes: None,
    };
    crate::metrics::alert(subject_type, kind);
    Ok((row.try_get("id")?, event))
}

/// A subject's alerts, newest first, with ids below `before`.
pub async fn list<C: GenericClient>(
    client: &C,
    tenant_id: i64,
    subject_type: &str,
    subject: &str,
    before: i64,
    limit: i64,
) -> Result<Vec<Alert>> {
    let rows = client
        .query(
            LIST,
            &[&tenant_id, &subject_type, &subject, &before, &limit],
        )
        .await?;
    rows.iter().map(Alert::from_row).collect()
}
