//! Queues of the caller's tenant: list, get, settings, pause/resume.
//!
//! Reads come from `pgferry.queues` directly (filtered by the tenant's prefix); writes go
//! through the engine (`upsert_queue` for shards and creation, `update_queue` for the rest,
//! `pause_queue`/`resume_queue`). Job counts come from the engine's counters
//! (`queue_counts`: one statement for any number of queues, no table scan).

use std::time::Duration;

use axum::extract::{Path, State};
use axum::Json;
use std::collections::HashMap;

use pgferry_core::cancelling::MAX_CANCEL;
use pgferry_core::{CancelFilter, Durability, JobState, QueueCounts, QueueOptions, QueueSettings};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::extract::{Authed, JsonBody, Objects};
use crate::auth::namespace::{tenant_prefix, user_queue};
use crate::auth::{admin, Principal, Scope};
use crate::service::{self, admin::Via};
use crate::AppState;

const QUEUES_LIST: &str = include_str!("sql/queues_list.sql");
const QUEUE_GET: &str = include_str!("sql/queue_get.sql");

/// A queue's counts as the API shows them.
pub(super) fn counts_json(c: &QueueCounts) -> Value {
    json!({
        "pending": c.pending,
        "running": c.running,
        "scheduled": c.scheduled,
        "dead": c.dead,
        "enqueued": c.enqueued,
        "completed": c.completed,
        "failed": c.failed,
        "cancelled": c.cancelled,
    })
}

/// A queue row as the API shows it (user name, no tenant prefix), with its counts.
fn queue_json(
    p: &Principal,
    row: &tokio_postgres::Row,
    counts: &HashMap<String, QueueCounts>,
) -> Option<Value> {
    let engine_name: String = row.get("name");
    let name = user_queue(p.tenant_id, &engine_name)?;
    let c = counts.get(&engine_name).copied().unwrap_or_default();
    Some(json!({
        "counts": counts_json(&c),
        "name": name,
        "paused": row.get::<_, bool>("paused"),
        "settings": {
            "shards": row.get::<_, i16>("shards"),
            "max_attempts": row.get::<_, i32>("max_attempts"),
            "lease_ms": row.get::<_, i32>("lease_ms"),
            "backoff_base_ms": row.get::<_, i32>("backoff_base_ms"),
            "backoff_cap_ms": row.get::<_, i32>("backoff_cap_ms"),
            "retention_ms": row.get::<_, i64>("retention_ms"),
            "aging_ms": row.get::<_, i32>("aging_ms"),
            "concurrency": row.get::<_, Option<i32>>("concurrency"),
            "durability": Durability::from_async_commit(row.get("async_commit")).as_str(),
        },
    }))
}

fn db<E: Into<pgferry_core::Error>>(e: E) -> ApiError {
    ApiError::from(e.into())
}

async fn load(state: &AppState, p: &Principal, name: &str) -> ApiResult<Option<Value>> {
    let engine_name = p.queue(name)?;
    let client = state.engine.pool().get().await.map_err(db)?;
    let row = client
        .query_opt(QUEUE_GET, &[&engine_name])
        .await
        .map_err(db)?;
    drop(client);
    let Some(row) = row else { return Ok(None) };
    let counts = state.engine.queue_counts(&[engine_name]).await?;
    Ok(queue_json(p, &row, &counts))
}

async fn load_existing(state: &AppState, p: &Principal, name: &str) -> ApiResult<Json<Value>> {
    load(state, p, name)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found("queue"))
}

/// Engine names of every queue of the caller's tenant.
pub async fn list(State(state): State<AppState>, Authed(p): Authed) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    let client = state.engine.pool().get().await.map_err(db)?;
    let rows = client
        .query(QUEUES_LIST, &[&tenant_prefix(p.tenant_id)])
        .await
        .map_err(db)?;
    drop(client);
    let names: Vec<String> = rows.iter().map(|r| r.get("name")).collect();
    let counts = state.engine.queue_counts(&names).await?;
    let queues: Vec<Value> = rows
        .iter()
        .filter_map(|r| queue_json(&p, r, &counts))
        .collect();
    Ok(Json(json!({ "queues": queues })))
}

pub async fn get(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    load_existing(&state, &p, &name).await
}

/// Settings to change; absent (or null) ones keep their value (or the default for a new
/// queue).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    #[serde(default)]
    shards: Option<i16>,
    #[serde(default)]
    max_attempts: Option<i32>,
    #[serde(default)]
    lease_ms: Option<u64>,
    #[serde(default)]
    backoff_base_ms: Option<u64>,
    #[serde(default)]
    backoff_cap_ms: Option<u64>,
    #[serde(default)]
    retention_ms: Option<u64>,
    #[serde(default)]
    aging_ms: Option<u64>,
    /// Most jobs of the queue running at once across servers; 0 removes the limit.
    #[serde(default)]
    concurrency: Option<u32>,
    /// "sync" or "async" (architecture.md §1.7); parsed in `update` so that any bad value, not only
    /// a bad JSON type, is a 400 naming `durability`.
    #[serde(default)]
    durability: Option<String>,
}

impl Objects for Settings {}

/// `Some(duration)` after checking `v` against `lo..=hi` (milliseconds).
fn ms_in(field: &str, v: Option<u64>, lo: u64, hi: u64) -> ApiResult<Option<Duration>> {
    match v {
        None => Ok(None),
        Some(v) if (lo..=hi).contains(&v) => Ok(Some(Duration::from_millis(v))),
        Some(_) => Err(ApiError::bad_request(
            field,
            format!("must be {lo} to {hi}"),
        )),
    }
}

/// Creates the queue or changes its settings. Everything is validated before anything is
/// written.
pub async fn update(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
    JsonBody(s): JsonBody<Settings>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    let engine_name = p.queue(&name)?;
    if s.shards.is_some_and(|n| !(1..=64).contains(&n)) {
        return Err(ApiError::bad_request("shards", "must be 1 to 64"));
    }
    if s.concurrency.is_some_and(|n| n > 1_000_000) {
        return Err(ApiError::bad_request("concurrency", "must be 0 to 1000000"));
    }
    if s.max_attempts
        .is_some_and(|n| !(1..=pgferry_core::job::MAX_ATTEMPTS_LIMIT).contains(&n))
    {
        return Err(ApiError::bad_request("max_attempts", "must be 1 to 1000"));
    }
    // The engine's typed error: a 400 naming `durability`.
    let durability = s.durability.as_deref().map(str::parse).transpose()?;
    let settings = QueueSettings {
        max_attempts: s.max_attempts,
        lease: ms_in("lease_ms", s.lease_ms, 100, 86_400_000)?,
        backoff_base: ms_in("backoff_base_ms", s.backoff_base_ms, 0, 86_400_000)?,
        backoff_cap: ms_in("backoff_cap_ms", s.backoff_cap_ms, 0, 604_800_000)?,
        retention: ms_in("retention_ms", s.retention_ms, 0, 31_536_000_000)?,
        aging: ms_in("aging_ms", s.aging_ms, 0, 86_400_000)?,
        paused: None,
        concurrency: s.concurrency,
        durability,
    };
    let current = load(&state, &p, &name).await?;
    if current.is_none() || s.shards.is_some() {
        // Creation and the shard count go through upsert_queue, which also sets
        // max_attempts and lease: keep the current values (update_queue applies changes).
        let cur = current.as_ref().map(|c| &c["settings"]);
        let d = QueueOptions::default();
        let opts = QueueOptions {
            shards: s
                .shards
                .or_else(|| cur.and_then(|c| c["shards"].as_i64()).map(|v| v as i16))
                .unwrap_or(d.shards),
            max_attempts: cur
                .and_then(|c| c["max_attempts"].as_i64())
                .map_or(d.max_attempts, |v| v as i32),
            lease: cur
                .and_then(|c| c["lease_ms"].as_u64())
                .map_or(d.lease, Duration::from_millis),
        };
        state.engine.upsert_queue(&engine_name, &opts).await?;
    }
    state.engine.update_queue(&engine_name, &settings).await?;
    let client = state.engine.pool().get().await.map_err(db)?;
    let detail = s.as_detail();
    admin::audit_api(&**client, &p, "queue.update", &name, detail)
        .await
        .map_err(db)?;
    drop(client);
    load_existing(&state, &p, &name).await
}

impl Settings {
    fn as_detail(&self) -> Value {
        json!({
            "shards": self.shards,
            "max_attempts": self.max_attempts,
            "lease_ms": self.lease_ms,
            "backoff_base_ms": self.backoff_base_ms,
            "backoff_cap_ms": self.backoff_cap_ms,
            "retention_ms": self.retention_ms,
            "aging_ms": self.aging_ms,
            "concurrency": self.concurrency,
            "durability": self.durability,
        })
    }
}

async fn set_paused(state: &AppState, p: &Principal, name: &str, paused: bool) -> ApiResult<()> {
    service::admin::set_paused(&state.engine, p, name, paused, Via::Http).await?;
    Ok(())
}

/// Stops handing out the queue's jobs (on every server within about a second).
pub async fn pause(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    set_paused(&state, &p, &name, true).await?;
    load_existing(&state, &p, &name).await
}

pub async fn resume(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    set_paused(&state, &p, &name, false).await?;
    load_existing(&state, &p, &name).await
}

/// Which of a queue's jobs to cancel (body of `POST /v1/queues/{name}/cancel`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    #[serde(default)]
    kind: Option<String>,
    /// Any of pending, scheduled, running; absent or empty: all three.
    #[serde(default)]
    states: Option<Vec<String>>,
    #[serde(default)]
    limit: Option<u32>,
}

impl Objects for CancelBody {}

/// Cancels the queue's pending, scheduled and running jobs matching a filter, up to `limit`
/// per call (`has_more` says to call again). Audited.
pub async fn cancel_jobs(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(name): Path<String>,
    JsonBody(b): JsonBody<CancelBody>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    p.queue(&name)?;
    if b.states.as_ref().is_some_and(|s| s.len() > 3) {
        return Err(ApiError::bad_request("states", "at most 3 states"));
    }
    let mut states = Vec::new();
    for (i, s) in b.states.iter().flatten().enumerate() {
        states.push(
            [JobState::Pending, JobState::Scheduled, JobState::Running]
                .into_iter()
                .find(|st| st.as_str() == s)
                .ok_or_else(|| {
                    ApiError::bad_request(
                        format!("states[{i}]"),
                        "one of pending, scheduled, running",
                    )
                })?,
        );
    }
    if let Some(k) = &b.kind {
        pgferry_core::job::validate_kind(k)?;
    }
    let limit = match b.limit {
        None => 10_000,
        Some(l) if (1..=MAX_CANCEL).contains(&l) => l,
        Some(_) => return Err(ApiError::bad_request("limit", "must be 1 to 100000")),
    };
    // An unknown queue is NOT_FOUND (decided by the use case).
    let f = CancelFilter {
        kind: b.kind.clone(),
        states,
    };
    let done =
        service::admin::cancel_matching(&state.engine, &p, &name, &f, limit, Via::Http).await?;
    let cancelled = json!({
        "scheduled": done.scheduled,
        "pending": done.pending,
        "running": done.running,
    });
    Ok(Json(
        json!({ "cancelled": cancelled, "has_more": done.has_more }),
    ))
}
