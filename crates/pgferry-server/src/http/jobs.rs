//! Jobs: enqueue (single and batch), lookups, cancel/retry, and the dead-letter queue.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pgferry_core::listing::MAX_LIST_PAGE;
use pgferry_core::{Acked, EnqueueRequest, IdempotencyKey, JobFilter, JobInfo, JobState, NewJob};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::error::{ApiError, ApiResult};
use super::extract::{no_nul, no_nul_json, Authed, JsonBody, Objects};
use crate::auth::namespace::tenant_scope;
use crate::auth::{user_queue, Principal, Scope};
use crate::service::admin;
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

/// 9999-12-31T23:59:59.999Z: timestamps past it are refused (Postgres and SystemTime bounds).
const MAX_UNIX_MS: u64 = 253_402_300_799_999;

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

pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
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

fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(0, |b| b.len())
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

pub(crate) fn job_json(p: &Principal, j: &JobInfo) -> Value {
    serde_json::to_value(JobView::new(p, j)).unwrap_or(Value::Null)
}

/// A job as the API shows it, serialized straight from the engine's [`JobInfo`]: a page of
/// 50 jobs is written to the response without a `Value` tree per job (nor a copy of each
/// job's args and meta), which was the largest share of a listing's time in this process
/// (issue 22's profile). Fields are declared in name order: the same bytes as the `Value`
/// form (serde_json's maps keep their keys sorted).
#[derive(Serialize)]
pub(crate) struct JobView<'a> {
    args: &'a Value,
    attempts: Vec<AttemptView<'a>>,
    cancel_requested: bool,
    enqueued_at_unix_ms: Option<u64>,
    id: i64,
    kind: &'a str,
    max_attempts: i32,
    meta: MetaView<'a>,
    priority: i16,
    queue: &'a str,
    result: &'a Option<Value>,
    run_at_unix_ms: Option<u64>,
    state: &'static str,
    unique_key: &'a Option<String>,
}

/// A job's meta: `{}` when it has none.
struct MetaView<'a>(Option<&'a Value>);

impl Serialize for MetaView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(v) => v.serialize(s),
            None => s.serialize_map(Some(0))?.end(),
        }
    }
}

#[derive(Serialize)]
struct AttemptView<'a> {
    attempt: i32,
    claimed_at_unix_ms: Option<u64>,
    duration_ms: Option<i32>,
    error: &'a Option<String>,
    finished_at_unix_ms: Option<u64>,
    outcome: &'static str,
    worker: &'a Option<String>,
}

impl<'a> JobView<'a> {
    pub(crate) fn new(p: &Principal, j: &'a JobInfo) -> Self {
        JobView {
            args: &j.args,
            attempts: j
                .attempts
                .iter()
                .map(|a| AttemptView {
                    attempt: a.attempt,
                    claimed_at_unix_ms: a.claimed_at.map(unix_ms),
                    duration_ms: a.duration_ms,
                    error: &a.error,
                    finished_at_unix_ms: a.finished_at.map(unix_ms),
                    outcome: a.outcome,
                    worker: &a.worker,
                })
                .collect(),
            cancel_requested: j.cancel_requested,
            enqueued_at_unix_ms: j.enqueued_at.map(unix_ms),
            id: j.id,
            kind: &j.kind,
            max_attempts: j.max_attempts,
            meta: MetaView(j.meta.as_ref()),
            priority: j.priority,
            queue: user_queue(p.tenant_id, &j.queue).unwrap_or_default(),
            result: &j.result,
            run_at_unix_ms: j.run_at.map(unix_ms),
            state: j.state.as_str(),
            unique_key: &j.unique_key,
        }
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

/// A queue's jobs, newest first, filtered by state, kind and age; keyset pages (a page may
/// come back short with `has_more` when the engine's scan budget ran out).
pub async fn list(
    State(state): State<AppState>,
    Authed(p): Authed,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Response> {
    p.require(Scope::Read)?;
    let Query(pairs) = query.map_err(|e| ApiError::bad_request("query", e.body_text()))?;
    let (mut queue, mut cursor, mut limit) = (None, None, 50u32);
    let mut filter = JobFilter::default();
    for (k, v) in pairs {
        match k.as_str() {
            "queue" => queue = Some(v),
            "state" => {
                filter.state = Some(parse_state(&v).ok_or_else(|| {
                    ApiError::bad_request(
                        "state",
                        "one of pending, scheduled, running, completed, dead, cancelled",
                    )
                })?)
            }
            "kind" => {
                pgferry_core::job::validate_kind(&v)?;
                filter.kind = Some(v);
            }
            "since_unix_ms" => {
                let ms: u64 = v
                    .parse()
                    .ok()
                    .filter(|ms| *ms <= MAX_UNIX_MS)
                    .ok_or_else(|| {
                        ApiError::bad_request("since_unix_ms", "Unix milliseconds up to year 9999")
                    })?;
                filter.since = Some(UNIX_EPOCH + Duration::from_millis(ms));
            }
            "cursor" if v.len() > 512 => {
                return Err(ApiError::bad_request("cursor", "at most 512 characters"))
            }
            "cursor" => cursor = Some(v),
            "limit" => {
                limit = v
                    .parse()
                    .ok()
                    .filter(|l| (1..=MAX_LIST_PAGE).contains(l))
                    .ok_or_else(|| ApiError::bad_request("limit", "must be 1 to 100"))?
            }
            _ => return Err(ApiError::bad_request(k, "unknown query parameter")),
        }
    }
    let queue = queue.ok_or_else(|| ApiError::bad_request("queue", "required"))?;
    let engine_queue = p.queue(&queue)?;
    let page = state
        .engine
        .list_jobs(&engine_queue, &filter, cursor.as_deref(), limit)
        .await?;
    let out = ListPage {
        has_more: page.has_more,
        jobs: page.jobs.iter().map(|j| JobView::new(&p, j)).collect(),
        next_cursor: page.next.as_deref(),
    };
    let body = serde_json::to_vec(&out)
        .map_err(|e| ApiError::internal(format!("job list not serializable: {e}")))?;
    Ok((
        [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        body,
    )
        .into_response())
}

/// A page of `GET /v1/jobs`, written without building a `Value` of it (fields in name
/// order, as the `Value` form had them).
#[derive(Serialize)]
struct ListPage<'a> {
    has_more: bool,
    jobs: Vec<JobView<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<&'a str>,
}

fn parse_state(s: &str) -> Option<JobState> {
    [
        JobState::Pending,
        JobState::Scheduled,
        JobState::Running,
        JobState::Completed,
        JobState::Dead,
        JobState::Cancelled,
    ]
    .into_iter()
    .find(|st| st.as_str() == s)
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use pgferry_core::{AttemptInfo, JobInfo, JobState};
    use serde_json::json;

    use super::{job_json, unix_ms, JobView};
    use crate::auth::{Principal, Scopes};

    /// The form `job_json` had as a `json!` tree, field for field.
    fn as_tree(p: &Principal, j: &JobInfo) -> serde_json::Value {
        let attempts: Vec<serde_json::Value> = j
            .attempts
            .iter()
            .map(|a| {
                json!({
                    "attempt": a.attempt,
                    "outcome": a.outcome,
                    "error": a.error,
                    "duration_ms": a.duration_ms,
                    "claimed_at_unix_ms": a.claimed_at.map(unix_ms),
                    "worker": a.worker,
                    "finished_at_unix_ms": a.finished_at.map(unix_ms),
                })
            })
            .collect();
        json!({
            "id": j.id,
            "queue": crate::auth::user_queue(p.tenant_id, &j.queue).unwrap_or_default(),
            "kind": j.kind,
            "state": j.state.as_str(),
            "args": j.args,
            "meta": j.meta.clone().unwrap_or_else(|| json!({})),
            "priority": j.priority,
            "max_attempts": j.max_attempts,
            "enqueued_at_unix_ms": j.enqueued_at.map(unix_ms),
            "run_at_unix_ms": j.run_at.map(unix_ms),
            "cancel_requested": j.cancel_requested,
            "attempts": attempts,
            "result": j.result,
            "unique_key": j.unique_key,
        })
    }

    #[test]
    fn the_view_writes_the_bytes_the_value_tree_wrote() {
        let p = Principal {
            tenant_id: 7,
            tenant: "acme".into(),
            key_id: 1,
            scopes: Scopes::all(),
        };
        let at = |ms: u64| Some(UNIX_EPOCH + Duration::from_millis(ms));
        let full = JobInfo {
            id: 42,
            queue: "t7.http".into(),
            kind: "http".into(),
            state: JobState::Completed,
            args: json!({"url": "http://x/", "z": [1, 2.5, null], "a": {"b": "c"}}),
            meta: Some(json!({"traceparent": "00-x", "k": "v"})),
            priority: 2,
            max_attempts: 5,
            enqueued_at: at(1_700_000_000_123),
            run_at: at(1_700_000_001_000),
            attempts: vec![
                AttemptInfo {
                    attempt: 1,
                    outcome: "failed",
                    error: Some("boom \"quoted\"".into()),
                    duration_ms: Some(12),
                    claimed_at: at(1_700_000_002_000),
                    worker: Some("w1".into()),
                    finished_at: at(1_700_000_002_012),
                },
                AttemptInfo {
                    attempt: 2,
                    outcome: "completed",
                    error: None,
                    duration_ms: None,
                    claimed_at: None,
                    worker: None,
                    finished_at: None,
                },
            ],
            cancel_requested: true,
            result: Some(json!({"ok": true})),
            unique_key: Some("u-1".into()),
        };
        let bare = JobInfo {
            queue: "t8.other".into(),
            state: JobState::Scheduled,
            meta: None,
            enqueued_at: None,
            run_at: None,
            attempts: vec![],
            cancel_requested: false,
            result: None,
            unique_key: None,
            ..full.clone()
        };
        for j in [&full, &bare] {
            let tree = serde_json::to_vec(&as_tree(&p, j)).unwrap();
            let view = serde_json::to_vec(&JobView::new(&p, j)).unwrap();
            assert_eq!(
                String::from_utf8(view).unwrap(),
                String::from_utf8(tree).unwrap()
            );
            assert_eq!(job_json(&p, j), as_tree(&p, j));
        }
    }
}
