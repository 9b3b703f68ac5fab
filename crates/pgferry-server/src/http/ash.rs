//! `/v1/ash/*`: active session history of the database (docs/ash.md). The data is
//! database-wide (every tenant's backends, and any other application's), so every route
//! needs the admin scope; a key without it gets 403 before anything is read. Another
//! tenant's queue and job names are never shown ([`crate::ash_scope`]).
//!
//! Times are unix milliseconds; a window defaults to the last hour up to now.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use pgferry_ash::read::{self, Dimension, Window};
use pgferry_ash::AshError;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::extract::Authed;
use crate::auth::Scope;
use crate::AppState;

type Pairs = Result<Query<Vec<(String, String)>>, QueryRejection>;

/// The query parameters of every ASH route (each route accepts a subset).
#[derive(Default)]
struct Params {
    since_ms: Option<i64>,
    until_ms: Option<i64>,
    by: Option<String>,
    limit: Option<i32>,
    bucket_s: Option<u64>,
    time_ms: Option<i64>,
}

fn number<T: std::str::FromStr>(field: &str, v: &str) -> ApiResult<T> {
    v.parse()
        .map_err(|_| ApiError::bad_request(field, "must be an integer"))
}

fn params(query: Pairs, allowed: &[&str]) -> ApiResult<Params> {
    let Query(pairs) = query.map_err(|e| ApiError::bad_request("query", e.body_text()))?;
    let mut p = Params::default();
    for (k, v) in pairs {
        if !allowed.contains(&k.as_str()) {
            return Err(ApiError::bad_request(k, "unknown query parameter"));
        }
        match k.as_str() {
            "since_ms" => p.since_ms = Some(number(&k, &v)?),
            "until_ms" => p.until_ms = Some(number(&k, &v)?),
            "by" => p.by = Some(v),
            "limit" => p.limit = Some(number(&k, &v)?),
            "bucket_s" => p.bucket_s = Some(number(&k, &v)?),
            "time_ms" => p.time_ms = Some(number(&k, &v)?),
            _ => unreachable!("allowed lists only known names"),
        }
    }
    Ok(p)
}

fn now_ms() -> i64 {
    read::ms(SystemTime::now())
}

impl Params {
    fn window(&self) -> ApiResult<Window> {
        let until = self.until_ms.unwrap_or_else(now_ms);
        let since = self.since_ms.unwrap_or((until - 3_600_000).max(0));
        Window::from_ms(since, until).map_err(api_error)
    }
}

fn api_error(e: AshError) -> ApiError {
    match e {
        // The timeline's bucket is a width in seconds over HTTP.
        AshError::InvalidArgument {
            field: "bucket",
            reason,
        } => ApiError::bad_request("bucket_s", reason),
        AshError::InvalidArgument { field, reason } => ApiError::bad_request(field, reason),
        AshError::NotInstalled => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "active session history is not installed (run `pgferry migrate up`)",
        ),
        e => {
            tracing::error!(error = %e, "ash reader failed");
            ApiError::internal("reading active session history failed")
        }
    }
}

async fn client(state: &AppState) -> ApiResult<deadpool_postgres::Object> {
    Ok(state
        .engine
        .pool()
        .get()
        .await
        .map_err(pgferry_core::Error::from)?)
}

const WINDOW: [&str; 2] = ["since_ms", "until_ms"];

/// GET /v1/ash/aas?by=…: average active sessions by one dimension.
pub async fn aas(
    State(state): State<AppState>,
    Authed(p): Authed,
    q: Pairs,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    let q = params(q, &["since_ms", "until_ms", "by"])?;
    let by: Dimension =
        q.by.as_deref()
            .unwrap_or("wait_type")
            .parse()
            .map_err(api_error)?;
    let w = q.window()?;
    let rows = read::aas_by_tenant(&**client(&state).await?, by, w, p.tenant_id)
        .await
        .map_err(api_error)?;
    let rows = crate::ash_scope::slices(p.tenant_id, by, rows);
    Ok(Json(
        json!({ "by": by, "window": window_json(w), "slices": rows }),
    ))
}

/// GET /v1/ash/top_waits
pub async fn top_waits(
    State(state): State<AppState>,
    Authed(p): Authed,
    q: Pairs,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    let q = params(q, &["since_ms", "until_ms", "limit"])?;
    let w = q.window()?;
    let rows = read::top_waits(&**client(&state).await?, w, q.limit.unwrap_or(10))
        .await
        .map_err(api_error)?;
    Ok(Json(json!({ "window": window_json(w), "waits": rows })))
}

/// GET /v1/ash/top_queries
pub async fn top_queries(
    State(state): State<AppState>,
    Authed(p): Authed,
    q: Pairs,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    let q = params(q, &["since_ms", "until_ms", "limit"])?;
    let w = q.window()?;
    let rows = read::top_queries(&**client(&state).await?, w, q.limit.unwrap_or(10))
        .await
        .map_err(api_error)?;
    Ok(Json(json!({ "window": window_json(w), "queries": rows })))
}

/// GET /v1/ash/cpu_vs_waiting
pub async fn cpu_vs_waiting(
    State(state): State<AppState>,
    Authed(p): Authed,
    q: Pairs,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    let w = params(q, &WINDOW)?.window()?;
    let r = read::cpu_vs_waiting(&**client(&state).await?, w)
        .await
        .map_err(api_error)?;
    Ok(Json(json!({ "window": window_json(w), "split": r })))
}

/// GET /v1/ash/timeline?bucket_s=…: AAS per bucket stacked by wait type, with the
/// sampler's coverage of each bucket and the database's vCPUs (for a CPU line).
pub async fn timeline(
    State(state): State<AppState>,
    Authed(p): Authed,
    q: Pairs,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    let q = params(q, &["since_ms", "until_ms", "bucket_s"])?;
    let w = q.window()?;
    let bucket_s = q.bucket_s.unwrap_or(60);
    if !(1..=31_536_000).contains(&bucket_s) {
        return Err(ApiError::bad_request(
            "bucket_s",
            "must be 1 to 31536000 seconds (a year)",
        ));
    }
    let bucket = Duration::from_secs(bucket_s);
    let points = read::timeline(&**client(&state).await?, w, bucket)
        .await
        .map_err(api_error)?;
    Ok(Json(json!({
        "window": window_json(w),
        "bucket_s": bucket.as_secs(),
        "vcpus": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "points": points,
    })))
}

/// GET /v1/ash/at?time_ms=…: what was running, and the blocking chains, at a moment.
pub async fn at(
    State(state): State<AppState>,
    Authed(p): Authed,
    q: Pairs,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    let q = params(q, &["time_ms"])?;
    let t = q.time_ms.unwrap_or_else(now_ms);
    if !(0..=253_402_300_799_999).contains(&t) {
        return Err(ApiError::bad_request(
            "time_ms",
            "must be a unix time in ms",
        ));
    }
    let moment = UNIX_EPOCH + Duration::from_millis(t as u64);
    let c = client(&state).await?;
    let activity = read::activity_at(&c, moment).await.map_err(api_error)?;
    let activity = crate::ash_scope::activity(p.tenant_id, activity);
    let blocking = read::blocking_at(&c, moment).await.map_err(api_error)?;
    Ok(Json(
        json!({ "time_ms": t, "activity": activity, "blocking": blocking }),
    ))
}

fn window_json(w: Window) -> Value {
    json!({ "since_ms": read::ms(w.since), "until_ms": read::ms(w.until) })
}
