//! Jobs: enqueue (single and batch), lookups, cancel/retry, and the dead-letter queue.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use pgferry_core::NewJob;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::extract::{Authed, JsonBody, Objects};
use crate::auth::{Principal, Scope};
use crate::metrics::JobCounter;
use crate::AppState;

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
}

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
fn to_new_job(state: &AppState, p: &Principal, spec: JobSpec) -> ApiResult<NewJob> {
    let engine_queue = p.queue(&spec.queue)?;
    let meta = spec
        .meta
        .map(|m| serde_json::to_value(m).unwrap_or(Value::Null));
    let size = json_len(&spec.args) + meta.as_ref().map_or(0, json_len);
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
    job.validate(0, limit)?;
    Ok(job)
}

fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(0, |b| b.len())
}

fn count_enqueued(state: &AppState, p: &Principal, queues: &[&str]) {
    let mut per: BTreeMap<&str, u64> = BTreeMap::new();
    for q in queues {
        *per.entry(q).or_default() += 1;
    }
    for (q, n) in per {
        state.metrics.add(JobCounter::Enqueued, &p.tenant, q, n);
    }
}

pub async fn enqueue_one(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(spec): JsonBody<JobSpec>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    p.require(Scope::Produce)?;
    let queue = spec.queue.clone();
    let job = to_new_job(&state, &p, spec)?;
    let ids = super::write_enqueue(&state, vec![job]).await?;
    count_enqueued(&state, &p, &[&queue]);
    let id = ids
        .first()
        .copied()
        .ok_or_else(|| ApiError::internal("enqueue returned no id"))?;
    Ok((StatusCode::CREATED, Json(json!({ "job_id": id }))))
}

pub async fn enqueue_batch(
    State(state): State<AppState>,
    Authed(p): Authed,
    JsonBody(batch): JsonBody<Batch>,
) -> ApiResult<(StatusCode, Json<Value>)> {
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
    // Validate everything before writing anything: never a partial batch.
    let mut jobs = Vec::with_capacity(batch.jobs.len());
    for (i, spec) in batch.jobs.into_iter().enumerate() {
        jobs.push(to_new_job(&state, &p, spec).map_err(|e| e.within(&format!("jobs[{i}]")))?);
    }
    let ids = super::write_enqueue(&state, jobs).await?;
    let names: Vec<&str> = queues.iter().map(String::as_str).collect();
    count_enqueued(&state, &p, &names);
    Ok((StatusCode::CREATED, Json(json!({ "job_ids": ids }))))
}

/// Parses a job id path segment.
pub(super) fn job_id(raw: &str) -> ApiResult<i64> {
    raw.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::bad_request("id", "job id must be a positive integer"))
}

// Lookups, cancel, retry and the DLQ wait on engine operations (get_job, list_jobs, cancel,
// retry, dead-letter listing/retry/purge). They authenticate, check scope and input, then
// answer 501 rather than pretend.

pub async fn get(Authed(p): Authed, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    job_id(&id)?;
    Err(ApiError::not_implemented(
        "GET /v1/jobs/{id} (engine get_job)",
    ))
}

pub async fn list(Authed(p): Authed) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    Err(ApiError::not_implemented("GET /v1/jobs (engine list_jobs)"))
}

pub async fn cancel(Authed(p): Authed, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    p.require(Scope::Produce)?;
    job_id(&id)?;
    Err(ApiError::not_implemented("job cancel (engine cancel)"))
}

pub async fn retry(Authed(p): Authed, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    p.require(Scope::Produce)?;
    job_id(&id)?;
    Err(ApiError::not_implemented("job retry (engine retry)"))
}

pub async fn dead_list(Authed(p): Authed) -> ApiResult<Json<Value>> {
    p.require(Scope::Read)?;
    Err(ApiError::not_implemented("DLQ listing (engine list_dead)"))
}

pub async fn dead_retry(Authed(p): Authed) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    Err(ApiError::not_implemented("DLQ retry (engine retry_dead)"))
}

pub async fn dead_purge(Authed(p): Authed) -> ApiResult<Json<Value>> {
    p.require(Scope::Admin)?;
    Err(ApiError::not_implemented("DLQ purge (engine purge_dead)"))
}
