//! Workflow instances of the caller's tenant (docs/workflows.md): start, get, list, signal,
//! cancel, retry. Queues go through the tenant namespace like jobs' queues; concurrency and
//! rate keys (global names in the engine) get the tenant's prefix too, so tenants never
//! share a slot or a bucket. An instance of another tenant is a 404, as for an unknown id.

use std::time::{Duration, SystemTime};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use pgferry_core::workflow::{
    ConcurrencyStrategy, InstanceFilter, InstanceInfo, Start, Target, Workflows,
};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::extract::{no_nul, no_nul_json, Authed, JsonBody, Objects};
use super::jobs::unix_ms;
use crate::auth::namespace::tenant_prefix;
use crate::auth::{user_queue, Principal, Scope};
use crate::service::admin::{self as service, Via};
use crate::AppState;

const MAX_UNIX_MS: u64 = 253_402_300_799_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartBody {
    kind: String,
    queue: String,
    #[serde(default)]
    input: Value,
    #[serde(default)]
    step: Option<String>,
    #[serde(default)]
    state: Option<Value>,
    #[serde(default)]
    correlation_key: Option<String>,
    #[serde(default)]
    concurrency_key: Option<String>,
    #[serde(default)]
    concurrency_limit: Option<i32>,
    /// `queue` (default), `cancel_in_progress`, `cancel_newest` or `round_robin`.
    #[serde(default)]
    concurrency_strategy: Option<String>,
    #[serde(default)]
    rate_key: Option<String>,
    #[serde(default)]
    priority: Option<u8>,
    #[serde(default)]
    run_at_unix_ms: Option<u64>,
    #[serde(default)]
    max_attempts: Option<i32>,
}

impl Objects for StartBody {}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalBody {
    name: String,
    #[serde(default)]
    payload: Value,
    /// Only on `/v1/workflows/signal` (by correlation key).
    #[serde(default)]
    queue: Option<String>,
    #[serde(default)]
    correlation_key: Option<String>,
}

impl Objects for SignalBody {}

fn wf(state: &AppState) -> Workflows {
    Workflows::of(&state.engine)
}

/// A key as the engine stores it: the tenant's prefix, then the user's key.
fn tenant_key(p: &Principal, field: &'static str, key: &str) -> ApiResult<String> {
    no_nul(field, key)?;
    if key.is_empty() || key.chars().count() > 256 {
        return Err(ApiError::bad_request(field, "must be 1 to 256 characters"));
    }
    Ok(format!("{}{key}", tenant_prefix(p.tenant_id)))
}

fn user_key(p: &Principal, key: Option<&str>) -> Option<String> {
    let prefix = tenant_prefix(p.tenant_id);
    key.map(|k| k.strip_prefix(&prefix).unwrap_or(k).to_string())
}

fn instance_id(raw: &str) -> ApiResult<i64> {
    raw.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::bad_request("id", "a workflow instance id is a positive integer"))
}

/// The instance, if it is the caller's tenant's.
async fn own_instance(state: &AppState, p: &Principal, id: i64) -> ApiResult<InstanceInfo> {
    match wf(state).get(id).await {
        Ok(i) if user_queue(p.tenant_id, &i.queue).is_some() => Ok(i),
        Ok(_) | Err(pgferry_core::Error::NotFound { .. }) => {
            Err(ApiError::not_found("workflow instance"))
        }
        Err(e) => Err(e.into()),
    }
}

fn instance_json(p: &Principal, i: &InstanceInfo) -> Value {
    json!({
        "id": i.id,
        "kind": i.kind,
        "queue": user_queue(p.tenant_id, &i.queue),
        "step": i.step,
        "status": i.status,
        "state": i.state,
        "input": i.input,
        "result": i.result,
        "error": i.error,
        "attempt": i.attempt,
        "max_attempts": i.max_attempts,
        "priority": i.priority,
        "awaits": i.awaits,
        "await_deadline_unix_ms": i.await_deadline.map(unix_ms),
        "parent_id": i.parent_id,
        "children_pending": i.children_pending,
        "correlation_key": i.correlation_key,
        "concurrency_key": user_key(p, i.concurrency_key.as_deref()),
        "rate_key": user_key(p, i.rate_key.as_deref()),
        "worker": i.worker,
        "inbox_pending": i.inbox_pending,
        "created_at_unix_ms": unix_ms(i.created_at),
        "updated_at_unix_ms": unix_ms(i.updated_at),
        "finished_at_unix_ms": i.finished_at.map(unix_ms),
        "history": i.history,
    })
}

pub async fn start(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(b): JsonBody<StartBody>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    p.require(Scope::Produce)?;
    no_nul_json("input", &b.input)?;
    if let Some(st) = &b.state {
        no_nul_json("state", st)?;
    }
    let mut s = Start::new(b.kind, p.queue(&b.queue)?, b.input);
    if let Some(step) = b.step {
        s.step = step;
    }
    s.state = b.state;
    if let Some(k) = &b.correlation_key {
        no_nul("correlation_key", k)?;
    }
    s.correlation_key = b.correlation_key;
    s.concurrency_key = b
        .concurrency_key
        .map(|k| tenant_key(&p, "concurrency_key", &k))
        .transpose()?;
    s.concurrency_limit = b.concurrency_limit;
    s.concurrency_strategy = b
        .concurrency_strategy
        .as_deref()
        .map(ConcurrencyStrategy::parse)
        .transpose()?;
    s.rate_key = b
        .rate_key
        .map(|k| tenant_key(&p, "rate_key", &k))
        .transpose()?;
    s.priority = b.priority.unwrap_or(0);
    if let Some(ms) = b.run_at_unix_ms {
        if ms > MAX_UNIX_MS {
            return Err(ApiError::bad_request(
                "run_at_unix_ms",
                "after the year 9999",
            ));
        }
        s.run_at = Some(SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
    }
    s.max_attempts = b.max_attempts;
    let started = wf(&state).start(&s).await?;
    let status = if started.duplicate {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((
        status,
        Json(json!({ "id": started.id, "duplicate": started.duplicate })),
    ))
}

pub async fn get(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    let i = own_instance(&state, &p, instance_id(&id)?).await?;
    Ok(Json(instance_json(&p, &i)))
}

pub async fn list(
    State(state): State<AppState>,
    Authed(p): Authed,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    let Query(pairs) = query.map_err(|e| ApiError::bad_request("query", e.body_text()))?;
    let mut f = InstanceFilter::default();
    let mut queue = None;
    for (k, v) in pairs {
        match k.as_str() {
            "queue" => queue = Some(v),
            "kind" => {
                pgferry_core::job::validate_kind(&v)?;
                f.kind = Some(v)
            }
            "status" => {
                if !pgferry_core::workflow::STATUSES.contains(&v.as_str()) {
                    return Err(ApiError::bad_request("status", "not a workflow status"));
                }
                f.status = Some(v)
            }
            "correlation_key" => {
                no_nul("correlation_key", &v)?;
                if v.is_empty() || v.chars().count() > 256 {
                    return Err(ApiError::bad_request(
                        "correlation_key",
                        "must be 1 to 256 characters",
                    ));
                }
                f.correlation_key = Some(v)
            }
            "before" => {
                f.before = Some(instance_id(&v).map_err(|_| {
                    ApiError::bad_request("before", "the `next` of the previous page")
                })?)
            }
            "limit" => {
                f.limit = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or_else(|| ApiError::bad_request("limit", "an integer in 1..=1000"))?
            }
            other => {
                return Err(ApiError::bad_request(
                    other.to_string(),
                    "unknown query parameter",
                ))
            }
        }
    }
    let queue = queue.ok_or_else(|| ApiError::bad_request("queue", "required"))?;
    f.queue = p.queue(&queue)?;
    let page = wf(&state).list(&f).await?;
    let items: Vec<Value> = page
        .instances
        .iter()
        .map(|i| {
            json!({
                "id": i.id, "kind": i.kind, "queue": queue, "step": i.step,
                "status": i.status, "attempt": i.attempt, "parent_id": i.parent_id,
                "correlation_key": i.correlation_key,
                "concurrency_key": user_key(&p, i.concurrency_key.as_deref()),
                "error": i.error,
                "created_at_unix_ms": unix_ms(i.created_at),
                "updated_at_unix_ms": unix_ms(i.updated_at),
                "finished_at_unix_ms": i.finished_at.map(unix_ms),
            })
        })
        .collect();
    Ok(Json(json!({
        "instances": items,
        "has_more": page.has_more,
        "next": page.next.map(|n| n.to_string()),
    })))
}

fn signal_json(s: pgferry_core::workflow::SignalSent) -> Json<Value> {
    Json(json!({
        "signal_id": s.signal_id,
        "instance_id": s.instance_id,
        "delivered": s.delivered,
    }))
}

pub async fn signal(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(id): Path<String>,
    JsonBody(b): JsonBody<SignalBody>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Produce)?;
    if b.queue.is_some() || b.correlation_key.is_some() {
        return Err(ApiError::bad_request(
            "queue",
            "by id: no queue or correlation_key (use /v1/workflows/signal for those)",
        ));
    }
    no_nul("name", &b.name)?;
    no_nul_json("payload", &b.payload)?;
    let id = own_instance(&state, &p, instance_id(&id)?).await?.id;
    Ok(signal_json(
        wf(&state)
            .signal(&Target::Id(id), &b.name, &b.payload)
            .await?,
    ))
}

pub async fn signal_by_key(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(b): JsonBody<SignalBody>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Produce)?;
    no_nul("name", &b.name)?;
    no_nul_json("payload", &b.payload)?;
    let queue = b
        .queue
        .ok_or_else(|| ApiError::bad_request("queue", "required"))?;
    let key = b
        .correlation_key
        .ok_or_else(|| ApiError::bad_request("correlation_key", "required"))?;
    no_nul("correlation_key", &key)?;
    let target = Target::Correlation {
        queue: p.queue(&queue)?,
        key,
    };
    Ok(signal_json(
        wf(&state).signal(&target, &b.name, &b.payload).await?,
    ))
}

pub async fn cancel(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(id): Path<String>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Produce)?;
    let Query(pairs) = query.map_err(|e| ApiError::bad_request("query", e.body_text()))?;
    let mut reason = None;
    for (k, v) in pairs {
        match k.as_str() {
            "reason" => {
                no_nul("reason", &v)?;
                if v.chars().count() > 1024 {
                    return Err(ApiError::bad_request(
                        "reason",
                        "must be at most 1024 characters",
                    ));
                }
                reason = Some(v);
            }
            other => {
                return Err(ApiError::bad_request(
                    other.to_string(),
                    "unknown query parameter",
                ))
            }
        }
    }
    let id = own_instance(&state, &p, instance_id(&id)?).await?.id;
    let previous = wf(&state).cancel(id, reason.as_deref()).await?;
    let i = own_instance(&state, &p, id).await?;
    Ok(Json(
        json!({ "previous_status": previous, "instance": instance_json(&p, &i) }),
    ))
}

pub async fn retry(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Produce)?;
    let id = own_instance(&state, &p, instance_id(&id)?).await?.id;
    let step = wf(&state).retry(id).await?;
    Ok(Json(json!({ "id": id, "step": step })))
}

/// `retention_ms` must be present: a number, or null for the server's default (an empty
/// body resetting a queue's retention by accident would be a silent loss of history).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionBody {
    #[serde(default, deserialize_with = "present")]
    retention_ms: Option<Option<u64>>,
}

impl Objects for RetentionBody {}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    Option::<u64>::deserialize(d).map(Some)
}

/// How long ended instances of one of the caller's queues are kept (`null`: the server's
/// default, `LeaderConfig::workflow_retention`).
pub async fn get_retention(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    let ms = service::workflow_retention(&state.engine, &p, &name).await?;
    Ok(Json(json!({ "queue": name, "retention_ms": ms })))
}

/// Sets (or, with null, clears) a queue's retention of ended instances; audited.
pub async fn put_retention(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
    JsonBody(b): JsonBody<RetentionBody>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    // The queue first, as before: a bad name is reported even with a bad body.
    p.queue(&name)?;
    let Some(ms) = b.retention_ms else {
        return Err(ApiError::bad_request(
            "retention_ms",
            "required: milliseconds, or null for the server's default",
        ));
    };
    let ms = service::set_workflow_retention(&state.engine, &p, &name, ms, Via::Http).await?;
    Ok(Json(json!({ "queue": name, "retention_ms": ms })))
}
