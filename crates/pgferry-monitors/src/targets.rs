//! Notification targets and [`notify`]: an event becomes one HTTP job per matching target
//! on the tenant's `http` queue, so delivery gets the HTTP worker's retries, SSRF checks
//! and attempt history, and happens only if the caller's transaction commits.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use pgferry_core::{Engine, NewJob};
use serde_json::json;
use tokio_postgres::GenericClient;

use crate::alerts::Event;
use crate::error::{validate_name, MonitorError, Result};

const INSERT: &str = include_str!("../sql/target_insert.sql");
const GET: &str = include_str!("../sql/target_get.sql");
const LIST: &str = include_str!("../sql/target_list.sql");
const UPDATE: &str = include_str!("../sql/target_update.sql");
const DELETE: &str = include_str!("../sql/target_delete.sql");
const ENABLED: &str = include_str!("../sql/targets_enabled.sql");

/// Most event filters of one target.
pub const MAX_EVENTS: usize = 32;
/// Longest URL of a target.
pub const MAX_URL: usize = 2048;
/// Attempts of a notification's HTTP job.
pub const NOTIFY_ATTEMPTS: i32 = 10;

#[derive(Debug, Clone, PartialEq)]
pub struct NewTarget {
    pub name: String,
    pub url: String,
    /// Kinds (`monitor.late`) or families (`monitor.*`); empty: every event.
    pub events: Vec<String>,
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub name: String,
    pub url: String,
    pub events: Vec<String>,
    pub enabled: bool,
    pub created_at: SystemTime,
}

impl Target {
    fn from_row(r: &tokio_postgres::Row) -> Result<Target> {
        Ok(Target {
            name: r.try_get("name")?,
            url: r.try_get("url")?,
            events: r.try_get("events")?,
            enabled: r.try_get("enabled")?,
            created_at: r.try_get("created_at")?,
        })
    }

    /// Whether an event of `kind` goes to this target.
    pub fn wants(&self, kind: &str) -> bool {
        self.events.is_empty()
            || self.events.iter().any(|f| match f.strip_suffix(".*") {
                Some(family) => kind.split_once('.').is_some_and(|(f, _)| f == family),
                None => f == kind,
            })
    }
}

/// Checks a URL's shape (the server checks its destination with the SSRF guard).
pub fn validate_url(url: &str) -> Result<()> {
    if url.is_empty() || url.len() > MAX_URL {
        return Err(MonitorError::invalid(
            "url",
            format!("must be 1 to {MAX_URL} characters"),
        ));
    }
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(MonitorError::invalid("url", "must be an http or https URL"));
    }
    Ok(())
}

/// Checks an event filter list.
pub fn validate_events(events: &[String]) -> Result<()> {
    if events.len() > MAX_EVENTS {
        return Err(MonitorError::invalid(
            "events",
            format!("at most {MAX_EVENTS} entries"),
        ));
    }
    let part = |s: &str| {
        !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_lowercase() || c == '_')
    };
    for e in events {
        let ok = match e.split_once('.') {
            Some((family, what)) => part(family) && (what == "*" || part(what)),
            None => false,
        };
        if !ok {
            return Err(MonitorError::invalid(
                "events",
                format!("{e:?} is not an event kind like monitor.late or a family like monitor.*"),
            ));
        }
    }
    Ok(())
}

impl NewTarget {
    pub fn validate(&self) -> Result<()> {
        validate_name("name", &self.name)?;
        validate_url(&self.url)?;
        validate_events(&self.events)
    }
}

/// Notification targets on the engine's database, scoped to one tenant per call.
#[derive(Clone)]
pub struct Targets {
    engine: Arc<Engine>,
}

impl Targets {
    pub fn new(engine: Arc<Engine>) -> Targets {
        Targets { engine }
    }

    pub async fn create(&self, tenant_id: i64, t: &NewTarget) -> Result<Target> {
        t.validate()?;
        let c = self.engine.pool().get().await?;
        match c
            .query_opt(
                INSERT,
                &[&tenant_id, &t.name, &t.url, &t.events, &t.enabled],
            )
            .await?
        {
            Some(r) => Target::from_row(&r),
            None => Err(MonitorError::Exists {
                what: "notification target",
                name: t.name.clone(),
            }),
        }
    }

    pub async fn get(&self, tenant_id: i64, name: &str) -> Result<Target> {
        let c = self.engine.pool().get().await?;
        match c.query_opt(GET, &[&tenant_id, &name]).await? {
            Some(r) => Target::from_row(&r),
            None => Err(MonitorError::not_found("notification target")),
        }
    }

    pub async fn list(&self, tenant_id: i64, after: &str, limit: i64) -> Result<Vec<Target>> {
        let c = self.engine.pool().get().await?;
        let rows = c.query(LIST, &[&tenant_id, &after, &limit]).await?;
        rows.iter().map(Target::from_row).collect()
    }

    /// Changes the given fields.
    pub async fn update(
        &self,
        tenant_id: i64,
        name: &str,
        url: Option<&str>,
        events: Option<&[String]>,
        enabled: Option<bool>,
    ) -> Result<Target> {
        if let Some(u) = url {
            validate_url(u)?;
        }
        if let Some(e) = events {
            validate_events(e)?;
        }
        let c = self.engine.pool().get().await?;
        let events: Option<Vec<String>> = events.map(|e| e.to_vec());
        match c
            .query_opt(UPDATE, &[&tenant_id, &name, &url, &events, &enabled])
            .await?
        {
            Some(r) => Target::from_row(&r),
            None => Err(MonitorError::not_found("notification target")),
        }
    }

    pub async fn delete(&self, tenant_id: i64, name: &str) -> Result<()> {
        let c = self.engine.pool().get().await?;
        match c.execute(DELETE, &[&tenant_id, &name]).await? {
            0 => Err(MonitorError::not_found("notification target")),
            _ => Ok(()),
        }
    }
}

/// Delivers `event` to each enabled target of `tenant_id` whose filter matches, as an HTTP
/// job (POST, JSON body) on the tenant's `http` queue, enqueued on `client` — the caller's
/// transaction, so the notification exists exactly when the state change that caused it
/// commits. Returns the jobs' ids (none when no target matches).
pub async fn notify<C: GenericClient>(
    engine: &Engine,
    client: &C,
    tenant_id: i64,
    event: &Event,
) -> Result<Vec<i64>> {
    notify_all(engine, client, &[(tenant_id, event.clone())]).await
}

/// [`notify`] for many events (of any tenants) with one enqueue; each tenant's targets are
/// read once.
pub async fn notify_all<C: GenericClient>(
    engine: &Engine,
    client: &C,
    events: &[(i64, Event)],
) -> Result<Vec<i64>> {
    let mut targets: HashMap<i64, Vec<Target>> = HashMap::new();
    let mut jobs = Vec::new();
    for (tenant_id, event) in events {
        if !targets.contains_key(tenant_id) {
            let rows = client.query(ENABLED, &[tenant_id]).await?;
            let list = rows.iter().map(Target::from_row).collect::<Result<_>>()?;
            targets.insert(*tenant_id, list);
        }
        let body = event.to_json().to_string();
        let routed = |t: &&Target| event.routes.as_ref().is_none_or(|r| r.contains(&t.name));
        for t in targets[tenant_id]
            .iter()
            .filter(|t| t.wants(&event.kind))
            .filter(routed)
        {
            let args = json!({
                "method": "POST",
                "url": t.url,
                "headers": {
                    "content-type": "application/json",
                    "pgferry-event": event.kind,
                },
                "body": body,
                "timeout_ms": 10_000,
            });
            jobs.push(
                NewJob::new(crate::http_queue(*tenant_id), "http", args)
                    .max_attempts(NOTIFY_ATTEMPTS)
                    .meta(json!({"notification": {"target": t.name, "event": event.kind}})),
            );
        }
    }
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let ids = engine.enqueue_tx(client, &jobs).await?;
    crate::metrics::notified(ids.len());
    Ok(ids)
}
