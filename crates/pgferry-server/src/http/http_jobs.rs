//! HTTP jobs (docs/http-jobs.md): the check at creation, and the tenant's settings —
//! signing secrets, allow list, rates per destination — and destination transitions under
//! `/v1/http-jobs`.
//!
//! A job on a queue named `http` is run by the server's HTTP worker (pgferry-http-jobs),
//! so its args must be an HTTP request whose destination the SSRF guard accepts with the
//! server's and the tenant's allow lists (address hosts here; names again when resolved
//! before each attempt). Thin: storage and validation are `pgferry_http_jobs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use pgferry_http_jobs::settings::{parse_allow, Rate, Settings, MAX_DESTINATION, MAX_RATES};
use pgferry_http_jobs::{transitions, Allow};
use pgferry_schedules::schedule::format_time;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::extract::{no_nul, Authed, JsonBody, Objects};
use crate::auth::{admin, Principal, Scope};
use crate::single_flight::Flights;
use crate::AppState;

/// The queue name whose jobs are HTTP jobs.
pub const QUEUE: &str = "http";

/// How long a server trusts a tenant's allow list it read (changes made through another
/// server reach this one's creation checks within this; the worker reads them per batch).
const ALLOW_TTL: Duration = Duration::from_secs(2);

/// Tenants' allow lists as creation checks last read them.
///
/// Misses of one tenant at the same moment share one lookup (issue 22: when the entry of a
/// busy tenant expired, every create in flight — 64 in the benchmark — read the allow list
/// at once, each holding one of the pool's connections, every `ALLOW_TTL`; as the auth
/// cache's flights, auth/mod.rs).
#[derive(Default)]
pub struct AllowCache {
    entries: Mutex<HashMap<i64, (Instant, Allow)>>,
    /// Lookups under way, by tenant.
    inflight: Flights<i64>,
    /// Allow-list reads sent to Postgres (tests count them).
    lookups: AtomicU64,
}

impl AllowCache {
    fn get(&self, tenant: i64) -> Option<Allow> {
        let c = self.entries.lock().expect("not poisoned");
        c.get(&tenant)
            .filter(|(at, _)| at.elapsed() < ALLOW_TTL)
            .map(|(_, a)| a.clone())
    }

    fn put(&self, tenant: i64, allow: Allow) {
        self.entries
            .lock()
            .expect("not poisoned")
            .insert(tenant, (Instant::now(), allow));
    }

    fn forget(&self, tenant: i64) {
        self.entries.lock().expect("not poisoned").remove(&tenant);
    }

    /// Drops every cached allow list (tests: an expiry on demand).
    pub fn clear(&self) {
        self.entries.lock().expect("not poisoned").clear();
    }

    /// Allow-list reads sent to Postgres since this cache was made.
    pub fn lookups(&self) -> u64 {
        self.lookups.load(Ordering::Relaxed)
    }

    /// The tenant's allow list, from the cache or from one lookup shared by every caller
    /// that misses meanwhile (a failed lookup is not cached: the next caller tries).
    async fn allow(&self, state: &AppState, tenant: i64) -> ApiResult<Allow> {
        if let Some(a) = self.get(tenant) {
            return Ok(a);
        }
        let flight = self.inflight.join(tenant);
        let _turn = flight.lock.lock().await;
        if let Some(a) = self.get(tenant) {
            return Ok(a);
        }
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let a = settings(state).allow(tenant).await?;
        self.put(tenant, a.clone());
        Ok(a)
    }
}

/// What the caller's HTTP jobs may reach: the server's allow list, plus the tenant's when
/// `needed` (a job or schedule on the `http` queue is being created).
pub async fn allow_for(state: &AppState, p: &Principal, needed: bool) -> ApiResult<Allow> {
    let server = &state.http.config.http_jobs_allow;
    if !needed {
        return Ok(server.clone());
    }
    let tenant = state.http.http_jobs.allow(state, p.tenant_id).await?;
    Ok(server.union(&tenant))
}

/// 400 naming `args` or `args.<field>` unless `args` is a valid, allowed HTTP request.
pub fn check(allow: &Allow, args: &Value) -> ApiResult<()> {
    // From a borrow: no copy of the args per create.
    let req = pgferry_http_jobs::HttpRequest::deserialize(args)
        .map_err(|e| ApiError::bad_request("args", format!("not an HTTP job: {e}")))?;
    req.validate(allow)
        .map_err(|e| ApiError::bad_request(format!("args.{}", e.field), e.reason))
}

fn settings(state: &AppState) -> Settings {
    Settings::new(state.engine.clone())
}

async fn audit(
    state: &AppState,
    p: &Principal,
    action: &str,
    target: &str,
    detail: Value,
) -> ApiResult<()> {
    let client = state
        .engine
        .pool()
        .get()
        .await
        .map_err(|e| ApiError::from(pgferry_core::Error::from(e)))?;
    admin::audit_api(&**client, p, action, target, detail)
        .await
        .map_err(|e| ApiError::from(pgferry_core::Error::from(e)))
}

fn secret_json(s: &pgferry_http_jobs::settings::SecretInfo) -> Value {
    json!({"id": s.id, "prefix": s.prefix, "created_at": format_time(s.created_at)})
}

async fn add_secret(
    state: AppState,
    p: Principal,
    rotate: bool,
) -> ApiResult<(StatusCode, Json<Value>)> {
    p.require(Scope::Admin)?;
    let (info, secret) = settings(&state).add_secret(p.tenant_id, rotate).await?;
    let action = if rotate {
        "http_jobs.secret.rotate"
    } else {
        "http_jobs.secret.create"
    };
    audit(
        &state,
        &p,
        action,
        &info.id.to_string(),
        json!({"via": crate::service::transport::current_name(), "prefix": info.prefix}),
    )
    .await?;
    let mut body = secret_json(&info);
    body["secret"] = secret.into();
    Ok((StatusCode::CREATED, Json(body)))
}

/// `POST /v1/http-jobs/secrets`: a new active secret (409 when two are active).
pub async fn create_secret(
    State(state): State<AppState>,
    Authed(p): Authed,
) -> ApiResult<(StatusCode, Json<Value>)> {
    add_secret(state, p, false).await
}

/// `POST /v1/http-jobs/secrets/rotate`: a new active secret; the oldest goes when two
/// were active.
pub async fn rotate_secret(
    State(state): State<AppState>,
    Authed(p): Authed,
) -> ApiResult<(StatusCode, Json<Value>)> {
    add_secret(state, p, true).await
}

pub async fn list_secrets(
    State(state): State<AppState>,
    Authed(p): Authed,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    let list = settings(&state).list_secrets(p.tenant_id).await?;
    let items: Vec<Value> = list.iter().map(secret_json).collect();
    Ok(Json(json!({ "secrets": items })))
}

pub async fn delete_secret(
    State(state): State<AppState>,
    Authed(p): Authed,
    path: Result<Path<i64>, axum::extract::rejection::PathRejection>,
) -> ApiResult<StatusCode> {
    p.require(Scope::Admin)?;
    let Path(id) = path
        .ok()
        .filter(|Path(id)| *id >= 1)
        .ok_or_else(|| ApiError::bad_request("id", "a secret id (a positive integer)"))?;
    settings(&state).delete_secret(p.tenant_id, id).await?;
    audit(
        &state,
        &p,
        "http_jobs.secret.delete",
        &id.to_string(),
        json!({"via": crate::service::transport::current_name()}),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

fn allow_json(a: &Allow) -> Value {
    let ranges: Vec<&str> = a.ranges.iter().map(|r| r.as_str()).collect();
    let cidrs: Vec<String> = a.cidrs.iter().map(|c| c.to_string()).collect();
    json!({ "ranges": ranges, "cidrs": cidrs })
}

pub async fn get_allow(State(state): State<AppState>, Authed(p): Authed) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    let a = settings(&state).allow(p.tenant_id).await?;
    Ok(Json(allow_json(&a)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowBody {
    #[serde(default)]
    ranges: Vec<String>,
    #[serde(default)]
    cidrs: Vec<String>,
}

impl Objects for AllowBody {}

/// `PUT /v1/http-jobs/allow`: replaces the tenant's allow list.
pub async fn put_allow(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(b): JsonBody<AllowBody>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    let allow = parse_allow(&b.ranges, &b.cidrs).map_err(|(f, r)| ApiError::bad_request(f, r))?;
    settings(&state).put_allow(p.tenant_id, &allow).await?;
    state.http.http_jobs.forget(p.tenant_id);
    let body = allow_json(&allow);
    let mut detail = body.clone();
    detail["via"] = crate::service::transport::current_name().into();
    audit(&state, &p, "http_jobs.allow.set", &p.tenant, detail).await?;
    Ok(Json(body))
}

pub async fn delete_allow(
    State(state): State<AppState>,
    Authed(p): Authed,
) -> ApiResult<StatusCode> {
    p.require(Scope::Admin)?;
    if !settings(&state).delete_allow(p.tenant_id).await? {
        return Err(ApiError::not_found("allow list"));
    }
    state.http.http_jobs.forget(p.tenant_id);
    audit(
        &state,
        &p,
        "http_jobs.allow.delete",
        &p.tenant,
        json!({"via": crate::service::transport::current_name()}),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

fn rate_json(destination: &str, r: &Rate) -> Value {
    json!({"destination": destination, "per_sec": r.per_sec, "burst": r.burst})
}

pub async fn list_rates(
    State(state): State<AppState>,
    Authed(p): Authed,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    let rates = settings(&state).rates(p.tenant_id).await?;
    let items: Vec<Value> = rates.iter().map(|(d, r)| rate_json(d, r)).collect();
    Ok(Json(json!({ "rates": items })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateBody {
    destination: String,
    per_sec: f64,
    #[serde(default = "one")]
    burst: u32,
}

fn one() -> u32 {
    1
}

impl Objects for RateBody {}

fn destination_ok(d: &str) -> ApiResult<()> {
    no_nul("destination", d)?;
    if d.is_empty() || d.len() > MAX_DESTINATION {
        return Err(ApiError::bad_request(
            "destination",
            format!("1 to {MAX_DESTINATION} bytes: host:port, or a job group"),
        ));
    }
    Ok(())
}

/// `PUT /v1/http-jobs/rates`: sets the rate of one destination key (host:port, or a group).
pub async fn put_rate(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(b): JsonBody<RateBody>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    destination_ok(&b.destination)?;
    let rate = Rate {
        per_sec: b.per_sec,
        burst: b.burst,
    };
    rate.validate()
        .map_err(|(f, r)| ApiError::bad_request(f, r))?;
    let s = settings(&state);
    let existing = s.rates(p.tenant_id).await?;
    if existing.len() >= MAX_RATES && !existing.iter().any(|(d, _)| d == &b.destination) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("at most {MAX_RATES} rate limits per tenant"),
        ));
    }
    s.put_rate(p.tenant_id, &b.destination, rate).await?;
    let body = rate_json(&b.destination, &rate);
    let mut detail = body.clone();
    detail["via"] = crate::service::transport::current_name().into();
    audit(&state, &p, "http_jobs.rate.set", &b.destination, detail).await?;
    Ok(Json(body))
}

fn only_param<'a>(pairs: &'a [(String, String)], name: &str) -> ApiResult<Option<&'a str>> {
    let mut found = None;
    for (k, v) in pairs {
        if k != name {
            return Err(ApiError::bad_request(k.as_str(), "unknown parameter"));
        }
        found = Some(v.as_str());
    }
    Ok(found)
}

/// `DELETE /v1/http-jobs/rates?destination=...`
pub async fn delete_rate(
    State(state): State<AppState>,
    Authed(p): Authed,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<StatusCode> {
    p.require(Scope::Admin)?;
    let Query(pairs) = query.map_err(|e| ApiError::bad_request("query", e.body_text()))?;
    let d = only_param(&pairs, "destination")?
        .ok_or_else(|| ApiError::bad_request("destination", "required"))?;
    destination_ok(d)?;
    settings(&state).delete_rate(p.tenant_id, d).await?;
    audit(
        &state,
        &p,
        "http_jobs.rate.delete",
        d,
        json!({"via": crate::service::transport::current_name()}),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

const MAX_PAGE: i64 = 1000;

/// `GET /v1/http-jobs/transitions?before=<id>&limit=<1..1000>`: newest first.
pub async fn list_transitions(
    State(state): State<AppState>,
    Authed(p): Authed,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    let Query(pairs) = query.map_err(|e| ApiError::bad_request("query", e.body_text()))?;
    let mut before = None;
    let mut limit = 100i64;
    for (k, v) in pairs {
        match k.as_str() {
            "before" => {
                before = Some(
                    v.parse::<i64>()
                        .ok()
                        .filter(|n| *n >= 1)
                        .ok_or_else(|| ApiError::bad_request("before", "a transition id"))?,
                )
            }
            "limit" => {
                limit = v
                    .parse::<i64>()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| {
                        ApiError::bad_request("limit", format!("must be 1 to {MAX_PAGE}"))
                    })?
            }
            other => return Err(ApiError::bad_request(other, "unknown parameter")),
        }
    }
    let rows = transitions::list(&state.engine, p.tenant_id, before, limit).await?;
    let next = (rows.len() as i64 == limit)
        .then(|| rows.last().map(|t| t.id))
        .flatten();
    let items: Vec<Value> = rows
        .iter()
        .map(|t| {
            json!({
                "id": t.id,
                "destination": t.destination,
                "kind": t.kind.as_str(),
                "job_id": t.job_id,
                "status": t.status,
                "error": t.error,
                "at": format_time(t.at),
            })
        })
        .collect();
    Ok(Json(json!({ "transitions": items, "next": next })))
}
