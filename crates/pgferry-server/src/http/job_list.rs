//! `GET /v1/jobs`: a queue's jobs through the engine's listing, each written as
//! [`JobView`] straight into the response body.

use std::time::{Duration, UNIX_EPOCH};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use pgferry_core::listing::MAX_LIST_PAGE;
use pgferry_core::{JobFilter, JobState};
use serde::Serialize;

use super::error::{ApiError, ApiResult};
use super::extract::Authed;
use super::job_view::JobView;
use crate::auth::Scope;
use crate::AppState;

/// 9999-12-31T23:59:59.999Z: timestamps past it are refused (Postgres and SystemTime bounds).
const MAX_UNIX_MS: u64 = 253_402_300_799_999;

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
                filter.state = Some(JobState::from_name(&v).ok_or_else(|| {
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
    // Sized for the page up front (a job is ~0.5-2 KB as JSON): a 50-job page grew a
    // default buffer through ~9 reallocations and copies.
    let mut body = Vec::with_capacity(1024 * (out.jobs.len() + 1));
    serde_json::to_writer(&mut body, &out)
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
