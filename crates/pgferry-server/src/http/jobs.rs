//! Jobs: enqueue (single and batch), lookups, cancel/retry, and the dead-letter queue. A
//! job's JSON form is in `job_view.rs`, the listing (`GET /v1/jobs`) in `job_list.rs`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::Json;
use pgferry_core::job::json_size;
use pgferry_core::{Acked, EnqueueRequest, IdempotencyKey, JobInfo, NewJob};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::extract::{no_nul, no_nul_json, Authed, JsonBody, Objects};
use crate::auth::namespace::tenant_scope;
use crate::auth::{Principal, Scope};
use crate::service::admin;
use crate::AppState;

pub use super::job_list::list;
pub(crate) use super::job_view::{job_json, unix_ms};

/// A job as submitted. Unknown fields are rejected (a typo must not be silently ignored).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    queue: String,
    kind: String,
    #[serde(default)]
    args: Value,
    #[serde(default)]
    meta: Option<BTreeMap<String, String>>,
    #[serde(default)]
    priority: Option<u8>,
    #[serde(default)]
    max_attempts: Option<i32>,
    /// Not before this instant (Unix ms). Exclusive with `delay_ms`.
    #[serde(default)]
    run_at_unix_ms: Option<i64>,
    /// Not before now + this. Exclusive with `run_at_unix_ms`.
    #[serde(default)]
    delay_ms: Option<u64>,
    /// While a job with this key holds it, enqueueing another answers the holder's id.
    #[serde(default)]
    unique_key: Option<String>,
}

/// Longest delay / furthest run_at accepted (about ten years): beyond it is a client bug.
const MAX_DELAY_MS: u64 = 10 * 366 * 24 * 3600 * 1000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    jobs: Vec<JobSpec>,
}

impl Objects for JobSpec {}
impl Objects for Batch {
    const OBJECTS: &'static [&'static str] = &["", "jobs[]"];
}

/// Validates one job and maps its queue into the caller's namespace. Errors name fields
/// relative to the job (`queue`, `args`); batch callers prefix `jobs[i]`.
fn to_new_job(
    state: &AppState,
    p: &Principal,
    mut spec: JobSpec,
    traceparent: Option<&str>,
    http_allow: &pgferry_http_jobs::Allow,
) -> ApiResult<NewJob> {
    let engine_queue = p.queue(&spec.queue)?;
    // The request's trace context travels with the job unless the job carries its own.
    if let Some(tp) = traceparent {
        let meta = spec.meta.get_or_insert_with(BTreeMap::new);
        meta.entry(crate::trace::TRACEPARENT.to_string())
            .or_insert_with(|| tp.to_string());
    }
    no_nul_json("args", &spec.args)?;
    if spec.queue == super::http_jobs::QUEUE {
        super::http_jobs::check(http_allow, &spec.args)?;
    }
    if let Some(m) = &spec.meta {
        for (k, v) in m {
            no_nul("meta", k)?;
            no_nul("meta", v)?;
        }
    }
    if let Some(k) = &spec.unique_key {
        no_nul("unique_key", k)?;
    }
    let meta = spec
        .meta
        .map(|m| serde_json::to_value(m).unwrap_or(Value::Null));
    let size = json_size(&spec.args) + meta.as_ref().map_or(0, json_size);
    let limit = state.http.config.max_job_bytes;
    if size > limit {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("args and meta are {size} bytes, over the limit of {limit} bytes"),
        )
        .field("args"));
    }
    let mut job = NewJob::new(engine_queue, spec.kind, spec.args);
    if let Some(m) = meta {
        job = job.meta(m);
    }
    if let Some(pr) = spec.priority {
        job = job.priority(pr);
    }
    if let Some(n) = spec.max_attempts {
        job = job.max_attempts(n);
    }
    match (spec.run_at_unix_ms, spec.delay_ms) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "delay_ms",
                "give run_at_unix_ms or delay_ms, not both",
            ))
        }
        (Some(at), None) => {
            let at = u64::try_from(at)
                .ok()
                .filter(|at| *at <= now_ms().saturating_add(MAX_DELAY_MS))
                .ok_or_else(|| {
                    ApiError::bad_request("run_at_unix_ms", "must be 0 to ten years from now")
                })?;
            job = job.run_at(UNIX_EPOCH + Duration::from_millis(at));
        }
        (None, Some(d)) => {
            if d > MAX_DELAY_MS {
                return Err(ApiError::bad_request(
                    "delay_ms",
                    "must be at most ten years",
                ));
            }
            job = job.delay(Duration::from_millis(d));
        }
        (None, None) => {}
    }
    if let Some(k) = spec.unique_key {
        job = job.unique(k);
    }
    job.validate(0, limit)?;
    Ok(job)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Enqueues one request through the server's enqueue use case (group commit; unique keys
/// to the engine directly), with the request's `Idempotency-Key` if it has one.
async fn enqueue(
    state: &AppState,
    p: &Principal,
    headers: &HeaderMap,
    jobs: Vec<NewJob>,
    queues: &[String],
) -> ApiResult<Acked> {
    let mut request = EnqueueRequest::new(jobs);
    if let Some(key) = idempotency_key(headers, p)? {
        request = request.idempotency_key(key);
    }
    Ok(crate::service::enqueue(
        &state.coalescers,
        &state.metrics,
        &p.tenant,
        request,
        queues,
    )
    .await?)
}

const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The `Idempotency-Key` header, validated and scoped to the caller's tenant.
fn idempotency_key(headers: &HeaderMap, p: &Principal) -> ApiResult<Option<IdempotencyKey>> {
    let Some(raw) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let bad = |reason: &str| ApiError::bad_request("Idempotency-Key", reason);
    let text = raw
        .to_str()
        .map_err(|_| bad("must be visible ASCII characters"))?;
    match IdempotencyKey::new(text) {
        Ok(k) => Ok(Some(k.scoped(&tenant_scope(p.tenant_id)))),
        Err(pgferry_core::Error::InvalidName { reason, .. }) => Err(bad(reason)),
        Err(e) => Err(e.into()),
    }
}

/// 201 when this request wrote jobs; 200 (and `Idempotent-Replayed: true`) when it was
/// answered from its idempotency key or every job was a unique key's duplicate.
fn enqueue_answer(done: &Acked, body: Value) -> (StatusCode, HeaderMap, Json<Value>) {
    let mut headers = HeaderMap::new();
    if done.replayed {
        headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    let status = if done.replayed || done.duplicates.iter().all(|d| *d) {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    (status, headers, Json(body))
}

/// The request's `traceparent` header, if well-formed (see [`crate::trace`]).
fn traceparent(headers: &HeaderMap) -> Option<&str> {
    crate::trace::valid(headers.get(crate::trace::TRACEPARENT)?.to_str().ok()?)
}

pub async fn enqueue_one(
    State(state): State<AppState>,
    Authed(p): Authed,
    headers: HeaderMap,
    JsonBody(spec): JsonBody<JobSpec>,
) -> ApiResult<(StatusCode, HeaderMap, Json<Value>)> {
    p.require(Scope::Produce)?;
    let queue = spec.queue.clone();
    let allow = super::http_jobs::allow_for(&state, &p, queue == super::http_jobs::QUEUE).await?;
    let job = to_new_job(&state, &p, spec, traceparent(&headers), &allow)?;
    let done = enqueue(&state, &p, &headers, vec![job], &[queue]).await?;
    let (Some(&id), Some(&duplicate)) = (done.ids.first(), done.duplicates.first()) else {
        return Err(ApiError::internal("enqueue returned no id"));
    };
    let body = json!({ "job_id": id, "duplicate": duplicate, "replayed": done.replayed });
    Ok(enqueue_answer(&done, body))
}

pub async fn enqueue_batch(
    State(state): State<AppState>,
    Authed(p): Authed,
    headers: HeaderMap,
    JsonBody(batch): JsonBody<Batch>,
) -> ApiResult<(StatusCode, HeaderMap, Json<Value>)> {
    p.require(Scope::Produce)?;
    let max = state.http.config.max_batch;
    if batch.jobs.is_empty() {
        return Err(ApiError::bad_request(
            "jobs",
            "a batch needs at least one job",
        ));
    }
    if batch.jobs.len() > max {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "batch_too_large",
            format!(
                "batch of {} jobs is over the limit of {max}",
                batch.jobs.len()
            ),
        )
        .field("jobs"));
    }
    let queues: Vec<String> = batch.jobs.iter().map(|j| j.queue.clone()).collect();
    let http = queues.iter().any(|q| q == super::http_jobs::QUEUE);
    let allow = super::http_jobs::allow_for(&state, &p, http).await?;
    // Validate everything before writing anything: never a partial batch.
    let mut jobs = Vec::with_capacity(batch.jobs.len());
    for (i, spec) in batch.jobs.into_iter().enumerate() {
        jobs.push(
            to_new_job(&state, &p, spec, traceparent(&headers), &allow)
                .map_err(|e| e.within(&format!("jobs[{i}]")))?,
        );
    }
    let done = enqueue(&state, &p, &headers, jobs, &queues).await?;
    let body = json!({
        "job_ids": done.ids,
        "duplicates": done.duplicates,
        "replayed": done.replayed,
    });
    Ok(enqueue_answer(&done, body))
}

/// Parses a job id path segment.
pub(super) fn job_id(raw: &str) -> ApiResult<i64> {
    raw.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::bad_request("id", "job id must be a positive integer"))
}

/// The job `id` if it belongs to the caller's tenant; another tenant's job is "not found",
/// exactly like an id that does not exist.
pub(super) async fn own_job(state: &AppState, p: &Principal, id: i64) -> ApiResult<JobInfo> {
    admin::own_job(&state.engine, p, id)
        .await
        .map_err(job_error)
}

/// An admin use case's error as the answer: an unknown (or another tenant's) job is the
/// plain `job not found`.
fn job_error(e: pgferry_core::Error) -> ApiError {
    match e {
        pgferry_core::Error::NotFound { what: "job", .. } => ApiError::not_found("job"),
        e => e.into(),
    }
}

pub async fn get(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    let job = own_job(&state, &p, job_id(&id)?).await?;
    Ok(Json(job_json(&p, &job)))
}

pub async fn cancel(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Produce)?;
    let id = job_id(&id)?;
    let job = admin::cancel_job(&state.engine, &p, id, "api")
        .await
        .map_err(job_error)?;
    Ok(Json(job_json(&p, &job)))
}

/// Runs a dead-lettered job again (same id, history kept). Other states are a conflict:
/// pending, scheduled and running jobs will run anyway; completed and cancelled ones are
/// final.
pub async fn retry(
    State(state): State<AppState>,
    Authed(p): Authed,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    p.require(Scope::Produce)?;
    let id = job_id(&id)?;
    let job = admin::retry_job(&state.engine, &p, id)
        .await
        .map_err(job_error)?;
    Ok(Json(job_json(&p, &job)))
}
