//! The jobs page's search (`GET /ui/api/jobs/search`): the `/v1/jobs` filters plus
//! substrings of args/meta and of a dead job's last error, through the engine's
//! `list_jobs_matching`. The substrings are tested on the rows each listing statement reads
//! anyway (no index answers them), so a page costs what the same listing costs and may come
//! back short or empty with `has_more`: the page then offers "search older" (its cursor).

use std::time::{Duration, UNIX_EPOCH};

use pgferry_core::{JobFilter, JobState, TextFilter};
use pgferry_dashboard::{BackendError, JobSearch};
use serde_json::{json, Value};

use crate::auth::{engine_queue, Principal};
use crate::http::jobs::job_json;
use crate::AppState;

/// Latest instant `since_unix_ms` takes (the API's bound: the end of year 9999).
const MAX_UNIX_MS: u64 = 253_402_300_799_999;

fn engine_error(e: pgferry_core::Error) -> BackendError {
    match e {
        pgferry_core::Error::InvalidArgument { field, reason } => {
            BackendError::bad_request(field, reason)
        }
        e => BackendError::unavailable(e.to_string()),
    }
}

/// One page of the caller's tenant's jobs matching `q`; `p` holds `read` (checked by the
/// caller). The queue is mapped into the tenant's namespace, so another tenant's queue
/// cannot be named.
pub(super) async fn search_jobs(
    state: &AppState,
    p: &Principal,
    q: JobSearch,
) -> Result<Value, BackendError> {
    let queue = engine_queue(p.tenant_id, &q.queue)
        .map_err(|e| BackendError::bad_request("queue", e.to_string()))?;
    let empty = |v: Option<String>| v.filter(|s| !s.is_empty());
    let mut filter = JobFilter::default();
    if let Some(s) = empty(q.state) {
        filter.state = Some(JobState::from_name(&s).ok_or_else(|| {
            BackendError::bad_request(
                "state",
                "one of pending, scheduled, running, completed, dead, cancelled",
            )
        })?);
    }
    if let Some(kind) = empty(q.kind) {
        pgferry_core::job::validate_kind(&kind).map_err(engine_error)?;
        filter.kind = Some(kind);
    }
    if let Some(ms) = q.since_unix_ms {
        if ms > MAX_UNIX_MS {
            return Err(BackendError::bad_request(
                "since_unix_ms",
                "Unix milliseconds up to year 9999",
            ));
        }
        filter.since = Some(UNIX_EPOCH + Duration::from_millis(ms));
    }
    let text = TextFilter {
        contains: empty(q.contains),
        error_contains: empty(q.error_contains),
    };
    let cursor = empty(q.cursor);
    if cursor.as_ref().is_some_and(|c| c.len() > 512) {
        return Err(BackendError::bad_request(
            "cursor",
            "at most 512 characters",
        ));
    }
    let limit = q.limit.unwrap_or(50);
    let page = state
        .engine
        .list_jobs_matching(&queue, &filter, &text, cursor.as_deref(), limit)
        .await
        .map_err(engine_error)?;
    let jobs: Vec<Value> = page.jobs.iter().map(|j| job_json(p, j)).collect();
    let mut out = json!({ "jobs": jobs, "has_more": page.has_more });
    if let Some(next) = page.next {
        out["next_cursor"] = json!(next);
    }
    Ok(out)
}
