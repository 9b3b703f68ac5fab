//! The dead-letter queue of the caller's tenant: list, retry, purge.
//!
//! The engine's filter takes engine queue names; this module always passes the caller's
//! own (one queue, or every queue of the tenant), never "all queues".

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use pgferry_core::dlq::MAX_PAGE;
use pgferry_core::DeadFilter;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::extract::{Authed, JsonBody, Objects};
use super::jobs::unix_ms;
use crate::auth::{user_queue, Principal, Scope};
use crate::service::admin::{self, Via};
use crate::AppState;

/// Which dead jobs (body of retry and purge).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    #[serde(default)]
    queue: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    error_contains: Option<String>,
    #[serde(default)]
    ids: Option<Vec<i64>>,
}

impl Objects for Filter {}

async fn engine_filter(state: &AppState, p: &Principal, f: Filter) -> ApiResult<DeadFilter> {
    let q = admin::DeadQuery {
        queue: f.queue,
        kind: f.kind,
        error_contains: f.error_contains,
        ids: f.ids,
    };
    Ok(admin::dead_filter(&state.engine, p, q).await?)
}

pub async fn list(
    State(state): State<AppState>,
    Authed(p): Authed,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    let Query(pairs) = query.map_err(|e| ApiError::bad_request("query", e.body_text()))?;
    let mut f = Filter::default();
    let mut cursor = None;
    let mut limit = 100u32;
    for (k, v) in pairs {
        match k.as_str() {
            "queue" => f.queue = Some(v),
            "kind" => f.kind = Some(v),
            "error_contains" => f.error_contains = Some(v),
            "cursor" if v.len() > 512 => {
                return Err(ApiError::bad_request("cursor", "at most 512 characters"))
            }
            "cursor" => cursor = Some(v),
            "limit" => {
                limit = v
                    .parse()
                    .ok()
                    .filter(|l| (1..=MAX_PAGE).contains(l))
                    .ok_or_else(|| ApiError::bad_request("limit", "must be 1 to 1000"))?
            }
            _ => return Err(ApiError::bad_request(k, "unknown query parameter")),
        }
    }
    let filter = engine_filter(&state, &p, f).await?;
    let page = state
        .engine
        .list_dead(&filter, cursor.as_deref(), limit)
        .await
        .map_err(|e| match e {
            // A cursor the engine cannot decode is the caller's input.
            pgferry_core::Error::InvalidArgument { .. } => ApiError::from(e).field("cursor"),
            e => e.into(),
        })?;
    let jobs: Vec<Value> = page
        .jobs
        .iter()
        .filter_map(|j| {
            let queue = user_queue(p.tenant_id, &j.queue)?;
            Some(json!({
                "id": j.id,
                "queue": queue,
                "kind": j.kind,
                "state": "dead",
                "args": j.args,
                "meta": j.meta.clone().unwrap_or_else(|| json!({})),
                "priority": j.priority,
                "max_attempts": j.max_attempts,
                "enqueued_at_unix_ms": j.enqueued_at.map(unix_ms),
                "run_at_unix_ms": null,
                "cancel_requested": false,
                "attempts": [{
                    "attempt": j.attempt,
                    "outcome": "dead",
                    "error": j.error,
                    "finished_at_unix_ms": unix_ms(j.died_at),
                }],
            }))
        })
        .collect();
    let mut out = json!({ "jobs": jobs, "has_more": page.has_more });
    if let Some(next) = page.next {
        out["next_cursor"] = json!(next);
    }
    Ok(Json(out))
}

pub async fn retry(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(f): JsonBody<Filter>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    let filter = engine_filter(&state, &p, f).await?;
    let n = admin::retry_dead(&state.engine, &p, &filter, Via::Http).await?;
    Ok(Json(json!({ "count": n })))
}

pub async fn purge(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(f): JsonBody<Filter>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    let filter = engine_filter(&state, &p, f).await?;
    let n = admin::purge_dead(&state.engine, &p, &filter, Via::Http).await?;
    Ok(Json(json!({ "count": n })))
}
