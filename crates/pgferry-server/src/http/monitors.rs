//! Heartbeat monitors, notification targets and alerts of the caller's tenant
//! (docs/monitors.md), and the unauthenticated ping URLs `/ping/{token}[/start|/fail]`.
//!
//! Thin: validation, storage and transitions are `pgferry_monitors`; this maps errors to
//! the API's shape, checks target URLs with the HTTP jobs' SSRF guard, and writes the
//! audit log.

use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use pgferry_monitors::error::validate_name;
use pgferry_monitors::{
    Monitor, MonitorError, Monitors, NewMonitor, NewTarget, PingKind, Target, Targets,
};
use pgferry_schedules::schedule::format_time;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::extract::{no_nul, Authed, JsonBody, Objects};
use super::paging::{name_page, page, pairs};
use crate::auth::{admin, Principal, Scope};
use crate::AppState;

/// An optional field that, when present, must not be null (the document does not declare
/// these nullable): absent is `None`, `null` is a 400 naming the field.
pub(crate) fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// A monitors error in the API's shape.
pub(crate) fn api(e: MonitorError) -> ApiError {
    match e {
        MonitorError::Invalid { field, reason } => ApiError::bad_request(field, reason),
        MonitorError::NotFound { what } => ApiError::not_found(what),
        MonitorError::Exists { what, name } => ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("a {what} named {name:?} already exists"),
        ),
        MonitorError::Signature(m) => ApiError::new(StatusCode::UNAUTHORIZED, "bad_signature", m),
        MonitorError::Schedule(pgferry_schedules::ScheduleError::Invalid { field, reason }) => {
            ApiError::bad_request(field, reason)
        }
        MonitorError::Engine(e) => ApiError::from_engine(&e),
        MonitorError::Db(e) => ApiError::from(pgferry_core::Error::from(e)),
        other => ApiError::internal(other.to_string()),
    }
}

pub(crate) async fn audit(
    state: &AppState,
    p: &Principal,
    action: &str,
    name: &str,
) -> ApiResult<()> {
    audit_with(state, p, action, name, json!({})).await
}

/// [`audit`] with more detail (`detail` an object; `via` is added).
pub(crate) async fn audit_with(
    state: &AppState,
    p: &Principal,
    action: &str,
    name: &str,
    mut detail: Value,
) -> ApiResult<()> {
    detail["via"] = json!(crate::service::transport::current_name());
    let client = state
        .engine
        .pool()
        .get()
        .await
        .map_err(|e| ApiError::from(pgferry_core::Error::from(e)))?;
    admin::audit_api(&**client, p, action, name, detail)
        .await
        .map_err(|e| ApiError::from(pgferry_core::Error::from(e)))
}

pub(crate) fn name_ok(field: &'static str, name: &str) -> ApiResult<()> {
    validate_name(field, name).map_err(api)
}

/// 400 naming `field` unless the HTTP jobs' guard accepts `url` as a POST destination of
/// the caller's tenant: the server's allow list plus the tenant's own, the list its
/// deliveries (HTTP jobs of the tenant) are checked with before each attempt.
pub(crate) async fn url_allowed(
    state: &AppState,
    p: &Principal,
    field: &str,
    url: &str,
) -> ApiResult<()> {
    no_nul(field, url)?;
    let allow = super::http_jobs::allow_for(state, p, true).await?;
    let args = json!({"method": "POST", "url": url});
    super::http_jobs::check(&allow, &args)
        .map_err(|e| ApiError::bad_request(field, e.message.clone()))
}

// ---- monitors ----

fn monitors(state: &AppState) -> Monitors {
    Monitors::new(state.engine.clone())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateMonitor {
    name: String,
    #[serde(default, deserialize_with = "present")]
    period_ms: Option<i64>,
    #[serde(default, deserialize_with = "present")]
    cron: Option<String>,
    #[serde(default, deserialize_with = "present")]
    timezone: Option<String>,
    #[serde(default, deserialize_with = "present")]
    grace_ms: Option<i64>,
    #[serde(default, deserialize_with = "present")]
    failure_threshold: Option<i32>,
    #[serde(default, deserialize_with = "present")]
    targets: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    realert_ms: Option<i64>,
}

impl Objects for CreateMonitor {}

fn monitor_json(m: &Monitor) -> Value {
    let t = |v: Option<SystemTime>| v.map(format_time);
    json!({
        "name": m.spec.name,
        "period_ms": m.spec.period_ms,
        "cron": m.spec.cron,
        "timezone": m.spec.timezone,
        "grace_ms": m.spec.grace_ms,
        "failure_threshold": m.spec.failure_threshold,
        "targets": m.spec.targets,
        "realert_ms": m.spec.realert_ms,
        "state": m.state,
        "ping_path": format!("/ping/{}", m.token),
        "due_at": t(m.due_at),
        "started_at": t(m.started_at),
        "consecutive_failures": m.consecutive_failures,
        "last_ping_at": t(m.last_ping_at),
        "created_at": format_time(m.created_at),
    })
}

pub async fn create(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(b): JsonBody<CreateMonitor>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    p.require(Scope::Admin)?;
    no_nul("name", &b.name)?;
    if let Some(c) = &b.cron {
        no_nul("cron", c)?;
    }
    if let Some(tz) = &b.timezone {
        no_nul("timezone", tz)?;
    }
    let spec = NewMonitor {
        name: b.name,
        period_ms: b.period_ms,
        cron: b.cron,
        timezone: b.timezone.unwrap_or_else(|| "UTC".into()),
        grace_ms: b.grace_ms.unwrap_or(60_000),
        failure_threshold: b.failure_threshold.unwrap_or(1),
        targets: b.targets,
        realert_ms: b.realert_ms,
    };
    spec.validate().map_err(api)?;
    // Named targets must exist now (deleting one later drops it from the routing).
    for name in spec.targets.iter().flatten() {
        if let Err(e) = targets(&state).get(p.tenant_id, name).await {
            return Err(match e {
                MonitorError::NotFound { .. } => ApiError::bad_request(
                    "targets",
                    format!("no notification target named {name:?}"),
                ),
                e => api(e),
            });
        }
    }
    let m = monitors(&state)
        .create(p.tenant_id, &spec)
        .await
        .map_err(api)?;
    audit(&state, &p, "monitor.create", &m.spec.name).await?;
    Ok((StatusCode::CREATED, Json(monitor_json(&m))))
}

/// `?after=<name>&limit=<1..1000>`.
pub async fn list(
    State(state): State<AppState>,
    Authed(p): Authed,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    let (after, limit) = name_page(query)?;
    let rows = monitors(&state)
        .list(p.tenant_id, &after, limit)
        .await
        .map_err(api)?;
    let next = (rows.len() as i64 == limit)
        .then(|| rows.last().map(|m| m.spec.name.clone()))
        .flatten();
    let items: Vec<Value> = rows.iter().map(monitor_json).collect();
    Ok(Json(json!({"monitors": items, "next": next})))
}

pub async fn get(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    name_ok("name", &name)?;
    let m = monitors(&state)
        .get(p.tenant_id, &name)
        .await
        .map_err(api)?;
    Ok(Json(monitor_json(&m)))
}

pub async fn delete(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    p.require(Scope::Admin)?;
    name_ok("name", &name)?;
    monitors(&state)
        .delete(p.tenant_id, &name)
        .await
        .map_err(api)?;
    audit(&state, &p, "monitor.delete", &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn set_paused(
    state: AppState,
    p: Principal,
    name: String,
    paused: bool,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    name_ok("name", &name)?;
    let m = monitors(&state)
        .set_paused(p.tenant_id, &name, paused)
        .await
        .map_err(api)?;
    let action = if paused {
        "monitor.pause"
    } else {
        "monitor.resume"
    };
    audit(&state, &p, action, &name).await?;
    Ok(Json(monitor_json(&m)))
}

pub async fn pause(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    set_paused(state, p, name, true).await
}

pub async fn resume(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    set_paused(state, p, name, false).await
}

/// `?limit=<1..1000>`: the newest pings (at most the 100 kept), newest first.
pub async fn pings(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    name_ok("name", &name)?;
    let mut limit = 100i64;
    for (k, v) in pairs(query)? {
        match k.as_str() {
            "limit" => limit = page("limit", &v)?,
            other => return Err(ApiError::bad_request(other, "unknown parameter")),
        }
    }
    let rows = monitors(&state)
        .pings(p.tenant_id, &name, limit)
        .await
        .map_err(api)?;
    let items: Vec<Value> = rows
        .iter()
        .map(|r| json!({"kind": r.kind, "at": format_time(r.at), "body": r.body}))
        .collect();
    Ok(Json(json!({"pings": items})))
}

/// `?type=monitor|schedule&subject=<name>&before=<id>&limit=<1..1000>`: a monitor's or a
/// schedule's alerts, newest first.
pub async fn alerts(
    State(state): State<AppState>,
    Authed(p): Authed,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    let (mut kind, mut subject, mut before, mut limit) = (None, None, i64::MAX, 100i64);
    for (k, v) in pairs(query)? {
        match k.as_str() {
            "type" => match v.as_str() {
                "monitor" | "schedule" => kind = Some(v),
                _ => return Err(ApiError::bad_request("type", "must be monitor or schedule")),
            },
            "subject" => {
                no_nul("subject", &v)?;
                if v.is_empty() || v.len() > 128 {
                    return Err(ApiError::bad_request(
                        "subject",
                        "must be 1 to 128 characters",
                    ));
                }
                subject = Some(v)
            }
            "before" => {
                before = v
                    .parse::<i64>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| ApiError::bad_request("before", "an alert id (1 or more)"))?
            }
            "limit" => limit = page("limit", &v)?,
            other => return Err(ApiError::bad_request(other, "unknown parameter")),
        }
    }
    let kind = kind.ok_or_else(|| ApiError::bad_request("type", "required"))?;
    let subject = subject.ok_or_else(|| ApiError::bad_request("subject", "required"))?;
    let client = state
        .engine
        .pool()
        .get()
        .await
        .map_err(|e| ApiError::from(pgferry_core::Error::from(e)))?;
    let rows =
        pgferry_monitors::alerts::list(&**client, p.tenant_id, &kind, &subject, before, limit)
            .await
            .map_err(api)?;
    let items: Vec<Value> = rows
        .iter()
        .map(|a| {
            json!({
                "id": a.id,
                "type": a.subject_type,
                "subject": a.subject,
                "kind": a.kind,
                "reason": a.reason,
                "at": format_time(a.at),
                "details": a.details,
            })
        })
        .collect();
    Ok(Json(json!({"alerts": items})))
}

// ---- pings (no API key: the token is the secret) ----

async fn ping_as(
    state: &AppState,
    token: &str,
    kind: PingKind,
    body: &Bytes,
) -> ApiResult<Json<Value>> {
    // Before the lookup: a looping caller costs no query (known or unknown token alike).
    state.http.public_limiter.check("monitor token", token)?;
    let text = (!body.is_empty()).then(|| String::from_utf8_lossy(body).replace('\0', ""));
    let m = monitors(state)
        .ping(token, kind, text.as_deref())
        .await
        // Unknown and malformed tokens answer alike.
        .map_err(|e| match e {
            MonitorError::NotFound { .. } => ApiError::not_found("monitor"),
            e => api(e),
        })?;
    Ok(Json(json!({"ok": true, "state": m.state})))
}

pub async fn ping(
    State(state): State<AppState>,
    Path(token): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    ping_as(&state, &token, PingKind::Success, &body).await
}

pub async fn ping_start(
    State(state): State<AppState>,
    Path(token): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    ping_as(&state, &token, PingKind::Start, &body).await
}

pub async fn ping_fail(
    State(state): State<AppState>,
    Path(token): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    ping_as(&state, &token, PingKind::Fail, &body).await
}

// ---- notification targets ----

fn targets(state: &AppState) -> Targets {
    Targets::new(state.engine.clone())
}

fn target_json(t: &Target) -> Value {
    json!({
        "name": t.name,
        "url": t.url,
        "events": t.events,
        "enabled": t.enabled,
        "created_at": format_time(t.created_at),
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTarget {
    name: String,
    url: String,
    #[serde(default, deserialize_with = "present")]
    events: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    enabled: Option<bool>,
}

impl Objects for CreateTarget {}

fn events_ok(events: &[String]) -> ApiResult<()> {
    for e in events {
        no_nul("events", e)?;
    }
    Ok(())
}

pub async fn create_target(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(b): JsonBody<CreateTarget>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    p.require(Scope::Admin)?;
    no_nul("name", &b.name)?;
    let t = NewTarget {
        name: b.name,
        url: b.url,
        events: b.events.unwrap_or_default(),
        enabled: b.enabled.unwrap_or(true),
    };
    events_ok(&t.events)?;
    t.validate().map_err(api)?;
    url_allowed(&state, &p, "url", &t.url).await?;
    let t = targets(&state).create(p.tenant_id, &t).await.map_err(api)?;
    audit(&state, &p, "notification_target.create", &t.name).await?;
    Ok((StatusCode::CREATED, Json(target_json(&t))))
}

pub async fn list_targets(
    State(state): State<AppState>,
    Authed(p): Authed,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    let (after, limit) = name_page(query)?;
    let rows = targets(&state)
        .list(p.tenant_id, &after, limit)
        .await
        .map_err(api)?;
    let next = (rows.len() as i64 == limit)
        .then(|| rows.last().map(|t| t.name.clone()))
        .flatten();
    let items: Vec<Value> = rows.iter().map(target_json).collect();
    Ok(Json(json!({"targets": items, "next": next})))
}

pub async fn get_target(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    name_ok("name", &name)?;
    let t = targets(&state).get(p.tenant_id, &name).await.map_err(api)?;
    Ok(Json(target_json(&t)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateTarget {
    #[serde(default, deserialize_with = "present")]
    url: Option<String>,
    #[serde(default, deserialize_with = "present")]
    events: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    enabled: Option<bool>,
}

impl Objects for UpdateTarget {}

pub async fn update_target(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
    JsonBody(b): JsonBody<UpdateTarget>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    name_ok("name", &name)?;
    if let Some(e) = &b.events {
        events_ok(e)?;
    }
    if let Some(u) = &b.url {
        pgferry_monitors::targets::validate_url(u).map_err(api)?;
        url_allowed(&state, &p, "url", u).await?;
    }
    let t = targets(&state)
        .update(
            p.tenant_id,
            &name,
            b.url.as_deref(),
            b.events.as_deref(),
            b.enabled,
        )
        .await
        .map_err(api)?;
    audit(&state, &p, "notification_target.update", &name).await?;
    Ok(Json(target_json(&t)))
}

pub async fn delete_target(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    p.require(Scope::Admin)?;
    name_ok("name", &name)?;
    targets(&state)
        .delete(p.tenant_id, &name)
        .await
        .map_err(api)?;
    audit(&state, &p, "notification_target.delete", &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
