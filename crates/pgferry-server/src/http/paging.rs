//! Query parameters of list endpoints: the query's pairs, page sizes, and the `after` /
//! `limit` of a page ordered by name (schedules, monitors, notification targets, webhook
//! endpoints). Each error is a 400 naming the parameter.

use axum::extract::rejection::QueryRejection;
use axum::extract::Query;

use super::error::{ApiError, ApiResult};
use super::extract::no_nul;

/// Largest page of a list endpoint.
pub(crate) const MAX_PAGE: i64 = 1000;

/// The query's pairs; a malformed query is a 400.
pub(crate) fn pairs(
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Vec<(String, String)>> {
    let Query(pairs) = query.map_err(|e| ApiError::bad_request("query", e.body_text()))?;
    Ok(pairs)
}

/// A page size (or count) of 1 to [`MAX_PAGE`].
pub(crate) fn page(field: &str, v: &str) -> ApiResult<i64> {
    v.parse::<i64>()
        .ok()
        .filter(|n| (1..=MAX_PAGE).contains(n))
        .ok_or_else(|| ApiError::bad_request(field, format!("must be 1 to {MAX_PAGE}")))
}

/// `after` of a name-ordered page.
pub(crate) fn after_name(v: String) -> ApiResult<String> {
    no_nul("after", &v)?;
    if v.len() > 128 {
        return Err(ApiError::bad_request("after", "at most 128 characters"));
    }
    Ok(v)
}

/// `?after=<name>&limit=<1..1000>` (default 100) and nothing else.
pub(crate) fn name_page(
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<(String, i64)> {
    let (mut after, mut limit) = (String::new(), 100i64);
    for (k, v) in pairs(query)? {
        match k.as_str() {
            "after" => after = after_name(v)?,
            "limit" => limit = page("limit", &v)?,
            other => return Err(ApiError::bad_request(other, "unknown parameter")),
        }
    }
    Ok((after, limit))
}
