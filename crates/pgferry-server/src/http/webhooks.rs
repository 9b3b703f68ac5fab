//! Inbound webhook endpoints of the caller's tenant (docs/monitors.md) and the
//! unauthenticated receiver `POST /in/{slug}`, which answers after COMMIT.
//!
//! Thin: verification, storage, dedup and fan-out are `pgferry_monitors::webhooks`.

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use pgferry_monitors::webhooks::{Signature, MAX_EVENT_BYTES};
use pgferry_monitors::{Endpoint, MonitorError, NewEndpoint, Webhooks};
use pgferry_schedules::schedule::{format_time, parse_time};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::extract::{no_nul, Authed, JsonBody, Objects};
use super::monitors::{api, audit, name_ok, present, url_allowed};
use super::paging::{name_page, page, pairs};
use crate::auth::Scope;
use crate::AppState;

fn store(state: &AppState) -> Webhooks {
    Webhooks::new(state.engine.clone())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignatureBody {
    #[serde(default, deserialize_with = "present")]
    scheme: Option<String>,
    header: String,
    secret: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateEndpoint {
    slug: String,
    #[serde(default, deserialize_with = "present")]
    signature: Option<SignatureBody>,
    #[serde(default, deserialize_with = "present")]
    event_id_header: Option<String>,
    targets: Vec<String>,
}

impl Objects for CreateEndpoint {
    const OBJECTS: &'static [&'static str] = &["", "signature"];
}

/// An endpoint as the API shows it: never the secret.
fn endpoint_json(e: &Endpoint) -> Value {
    json!({
        "slug": e.spec.slug,
        "path": format!("/in/{}", e.spec.slug),
        "signature": e.spec.signature.as_ref().map(|s| json!({"scheme": s.scheme, "header": s.header})),
        "event_id_header": e.spec.event_id_header,
        "targets": e.spec.targets,
        "created_at": format_time(e.created_at),
    })
}

pub async fn create(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(b): JsonBody<CreateEndpoint>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    p.require(Scope::Admin)?;
    no_nul("slug", &b.slug)?;
    let signature = match b.signature {
        Some(s) => {
            no_nul("signature.header", &s.header)?;
            no_nul("signature.secret", &s.secret)?;
            Some(Signature {
                scheme: s.scheme.unwrap_or_else(|| "hmac_sha256".into()),
                header: s.header.to_ascii_lowercase(),
                secret: s.secret,
            })
        }
        None => None,
    };
    if let Some(h) = &b.event_id_header {
        no_nul("event_id_header", h)?;
    }
    let spec = NewEndpoint {
        slug: b.slug,
        signature,
        event_id_header: b.event_id_header.map(|h| h.to_ascii_lowercase()),
        targets: b.targets,
    };
    spec.validate().map_err(api)?;
    for t in &spec.targets {
        url_allowed(&state, "targets", t)?;
    }
    let e = store(&state)
        .create(p.tenant_id, &spec)
        .await
        .map_err(api)?;
    audit(&state, &p, "webhook_endpoint.create", &e.spec.slug).await?;
    Ok((StatusCode::CREATED, Json(endpoint_json(&e))))
}

pub async fn list(
    State(state): State<AppState>,
    Authed(p): Authed,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    let (after, limit) = name_page(query)?;
    let rows = store(&state)
        .list(p.tenant_id, &after, limit)
        .await
        .map_err(api)?;
    let next = (rows.len() as i64 == limit)
        .then(|| rows.last().map(|e| e.spec.slug.clone()))
        .flatten();
    let items: Vec<Value> = rows.iter().map(endpoint_json).collect();
    Ok(Json(json!({"endpoints": items, "next": next})))
}

pub async fn get(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(slug): Path<String>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    name_ok("slug", &slug)?;
    let e = store(&state).get(p.tenant_id, &slug).await.map_err(api)?;
    Ok(Json(endpoint_json(&e)))
}

pub async fn delete(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(slug): Path<String>,
) -> ApiResult<StatusCode> {
    p.require(Scope::Admin)?;
    name_ok("slug", &slug)?;
    store(&state)
        .delete(p.tenant_id, &slug)
        .await
        .map_err(api)?;
    audit(&state, &p, "webhook_endpoint.delete", &slug).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `?after=<event id>&limit=<1..1000>`: stored events, oldest first; `next` is the cursor.
pub async fn events(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(slug): Path<String>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    name_ok("slug", &slug)?;
    let (mut after, mut limit) = (0i64, 100i64);
    for (k, v) in pairs(query)? {
        match k.as_str() {
            "after" => {
                after = v
                    .parse::<i64>()
                    .ok()
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| ApiError::bad_request("after", "an event id (0 or more)"))?
            }
            "limit" => limit = page("limit", &v)?,
            other => return Err(ApiError::bad_request(other, "unknown parameter")),
        }
    }
    let rows = store(&state)
        .events(p.tenant_id, &slug, after, limit)
        .await
        .map_err(api)?;
    let next = (rows.len() as i64 == limit)
        .then(|| rows.last().map(|e| e.id))
        .flatten();
    let items: Vec<Value> = rows
        .iter()
        .map(|e| {
            json!({
                "id": e.id,
                "received_at": format_time(e.received_at),
                "provider_event_id": e.provider_event_id,
                "headers": e.headers,
                "body": e.body,
            })
        })
        .collect();
    Ok(Json(json!({"events": items, "next": next})))
}

pub async fn replay_one(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path((slug, id)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    name_ok("slug", &slug)?;
    let id: i64 = id
        .parse()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| ApiError::bad_request("id", "an event id (1 or more)"))?;
    let jobs = store(&state)
        .replay_one(p.tenant_id, &slug, id)
        .await
        .map_err(api)?;
    audit(&state, &p, "webhook_endpoint.replay", &slug).await?;
    Ok(Json(
        json!({"events": 1, "deliveries": jobs.len(), "job_ids": jobs}),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayBody {
    since: String,
}

impl Objects for ReplayBody {}

pub async fn replay_since(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(slug): Path<String>,
    JsonBody(b): JsonBody<ReplayBody>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    name_ok("slug", &slug)?;
    let since = parse_time("since", &b.since).map_err(|e| match e {
        pgferry_schedules::ScheduleError::Invalid { field, reason } => {
            ApiError::bad_request(field, reason)
        }
        e => ApiError::internal(e.to_string()),
    })?;
    let (events, jobs) = store(&state)
        .replay_since(p.tenant_id, &slug, since)
        .await
        .map_err(api)?;
    audit(&state, &p, "webhook_endpoint.replay", &slug).await?;
    Ok(Json(json!({"events": events, "deliveries": jobs})))
}

/// `POST /in/{slug}` (no API key): 200 `{event_id, duplicate, deliveries}` once committed;
/// 401 on a missing or wrong signature, 404 for an unknown slug, 413 over the size limit.
pub async fn receive(
    State(state): State<AppState>,
    Path(slug): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    if body.len() > MAX_EVENT_BYTES {
        pgferry_monitors::metrics::inbound("too_large");
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("an inbound event is at most {MAX_EVENT_BYTES} bytes"),
        ));
    }
    let pairs: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    match store(&state).receive(&slug, &pairs, &body).await {
        Ok(r) => {
            pgferry_monitors::metrics::inbound(if r.duplicate { "duplicate" } else { "accepted" });
            Ok(Json(json!({
                "event_id": r.event_id,
                "duplicate": r.duplicate,
                "deliveries": r.deliveries,
            })))
        }
        Err(e) => {
            match &e {
                MonitorError::Signature(_) => pgferry_monitors::metrics::inbound("bad_signature"),
                MonitorError::NotFound { .. } => {
                    pgferry_monitors::metrics::inbound("unknown_endpoint")
                }
                _ => {}
            }
            Err(api(e))
        }
    }
}
