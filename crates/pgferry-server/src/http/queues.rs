//! Queues of the caller's tenant: list, get, settings, pause/resume.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::Json;
use pgferry_core::QueueOptions;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::extract::{Authed, JsonBody, Objects};
use crate::auth::namespace::{tenant_prefix, user_queue};
use crate::auth::{admin, Principal, Scope};
use crate::AppState;

const QUEUES_LIST: &str = include_str!("sql/queues_list.sql");
const QUEUE_GET: &str = include_str!("sql/queue_get.sql");

/// A queue row as the API shows it (user name, no tenant prefix).
fn queue_json(p: &Principal, row: &tokio_postgres::Row) -> Option<Value> {
    let engine_name: String = row.get(0);
    let name = user_queue(p.tenant_id, &engine_name)?;
    Some(json!({
        "name": name,
        "paused": row.get::<_, bool>(4),
        "settings": {
            "shards": row.get::<_, i16>(1),
            "max_attempts": row.get::<_, i32>(2),
            "lease_ms": row.get::<_, i32>(3),
        },
    }))
}

async fn load(state: &AppState, p: &Principal, name: &str) -> ApiResult<Option<Value>> {
    let engine_name = p.queue(name)?;
    let client = state
        .engine
        .pool()
        .get()
        .await
        .map_err(pgferry_core::Error::from)?;
    let row = client
        .query_opt(QUEUE_GET, &[&engine_name])
        .await
        .map_err(pgferry_core::Error::from)?;
    Ok(row.and_then(|r| queue_json(p, &r)))
}

pub async fn list(State(state): State<AppState>, Authed(p): Authed) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    let client = state
        .engine
        .pool()
        .get()
        .await
        .map_err(pgferry_core::Error::from)?;
    let rows = client
        .query(QUEUES_LIST, &[&tenant_prefix(p.tenant_id)])
        .await
        .map_err(pgferry_core::Error::from)?;
    let queues: Vec<Value> = rows.iter().filter_map(|r| queue_json(&p, r)).collect();
    Ok(Json(json!({ "queues": queues })))
}

pub async fn get(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    load(&state, &p, &name)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found("queue"))
}

/// Settings to change; absent ones keep their value (or the default for a new queue).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    #[serde(default)]
    shards: Option<i16>,
    #[serde(default)]
    max_attempts: Option<i32>,
    #[serde(default)]
    lease_ms: Option<u32>,
}

impl Objects for Settings {}

/// Creates the queue or changes its settings.
pub async fn update(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
    JsonBody(s): JsonBody<Settings>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    let engine_name = p.queue(&name)?;
    let mut opts = QueueOptions::default();
    if let Some(cur) = load(&state, &p, &name).await? {
        let st = &cur["settings"];
        opts.shards = st["shards"].as_i64().map_or(opts.shards, |v| v as i16);
        opts.max_attempts = st["max_attempts"]
            .as_i64()
            .map_or(opts.max_attempts, |v| v as i32);
        opts.lease = st["lease_ms"]
            .as_u64()
            .map_or(opts.lease, Duration::from_millis);
    }
    if let Some(v) = s.shards {
        opts.shards = v;
    }
    if let Some(v) = s.max_attempts {
        if !(1..=pgferry_core::job::MAX_ATTEMPTS_LIMIT).contains(&v) {
            return Err(ApiError::bad_request("max_attempts", "must be 1 to 1000"));
        }
        opts.max_attempts = v;
    }
    if let Some(v) = s.lease_ms {
        if !(100..=86_400_000).contains(&v) {
            return Err(ApiError::bad_request(
                "lease_ms",
                "must be 100 to 86400000 (one day)",
            ));
        }
        opts.lease = Duration::from_millis(v.into());
    }
    state.engine.upsert_queue(&engine_name, &opts).await?;
    let client = state
        .engine
        .pool()
        .get()
        .await
        .map_err(pgferry_core::Error::from)?;
    let detail = json!({
        "shards": opts.shards,
        "max_attempts": opts.max_attempts,
        "lease_ms": opts.lease.as_millis() as u64,
    });
    admin::audit_api(&**client, &p, "queue.update", &name, detail)
        .await
        .map_err(pgferry_core::Error::from)?;
    drop(client);
    load(&state, &p, &name)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::internal("queue vanished after update"))
}

/// Pause and resume wait on the engine's queue pause operation.
pub async fn pause(Authed(p): Authed, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    p.queue(&name)?;
    Err(ApiError::not_implemented(
        "queue pause (engine pause_queue)",
    ))
}

pub async fn resume(Authed(p): Authed, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    p.queue(&name)?;
    Err(ApiError::not_implemented(
        "queue resume (engine resume_queue)",
    ))
}
