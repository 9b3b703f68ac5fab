//! The dashboard's own endpoints: sign-in/out, who am I, and the tenant's keys and audit
//! log (through [`crate::Backend`]). Everything else is the `/v1` API via the proxy.

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::backend::BackendError;
use crate::session::{cross_site, secure_origin_required, set_cookie, SignedIn};
use crate::Shared;

fn session_json(signed: &SignedIn) -> Value {
    json!({ "identity": signed.identity, "csrf_token": signed.csrf })
}

pub async fn session_get(signed: SignedIn) -> Json<Value> {
    Json(session_json(&signed))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    api_key: String,
}

/// Opens a session for a key with at least the `read` scope. JSON only: a cross-site form
/// cannot send it without a CORS preflight, which this server never grants.
pub async fn sign_in(State(d): State<Shared>, headers: HeaderMap, body: String) -> Response {
    match open(&d, &headers, &body).await {
        Ok(res) => res,
        Err(e) => e.into_response(),
    }
}

async fn open(d: &Shared, headers: &HeaderMap, body: &str) -> Result<Response, BackendError> {
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !json_body || cross_site(headers) {
        return Err(BackendError::forbidden(
            "sign in from the dashboard's own page (JSON, same origin)",
        ));
    }
    let req: SignIn = serde_json::from_str(body)
        .map_err(|e| BackendError::bad_request("api_key", e.to_string()))?;
    let key = req.api_key.trim().to_string();
    if key.is_empty() {
        return Err(BackendError::bad_request("api_key", "enter an API key"));
    }
    let identity = d.backend.identify(&key).await.map_err(|e| {
        if e.status == StatusCode::UNAUTHORIZED {
            BackendError::unauthenticated("unknown, revoked or malformed API key").field("api_key")
        } else {
            e
        }
    })?;
    if !identity.allows("read") {
        return Err(
            BackendError::forbidden("this key lacks the `read` scope the dashboard needs")
                .field("api_key"),
        );
    }
    let (id, csrf) = d.sessions.open(key);
    let secure = secure_origin_required(headers);
    let cookie = set_cookie(Some(&id), secure, d.config.max_age);
    let body = json!({ "identity": identity, "csrf_token": csrf, "secure_cookie": secure });
    Ok(([(header::SET_COOKIE, cookie)], Json(body)).into_response())
}

pub async fn sign_out(State(d): State<Shared>, headers: HeaderMap, signed: SignedIn) -> Response {
    d.sessions.close(&signed.session_id);
    let cookie = set_cookie(None, secure_origin_required(&headers), d.config.max_age);
    ([(header::SET_COOKIE, cookie)], StatusCode::NO_CONTENT).into_response()
}

fn admin_only(signed: &SignedIn) -> Result<(), BackendError> {
    if signed.identity.allows("admin") {
        Ok(())
    } else {
        Err(BackendError::forbidden(
            "this API key lacks the `admin` scope",
        ))
    }
}

fn answer(r: Result<Value, BackendError>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn keys_list(State(d): State<Shared>, signed: SignedIn) -> Response {
    if let Err(e) = admin_only(&signed) {
        return e.into_response();
    }
    answer(d.backend.list_keys(&signed.identity).await)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    scopes: Vec<String>,
    #[serde(default)]
    label: Option<String>,
}

pub async fn key_create(State(d): State<Shared>, signed: SignedIn, body: String) -> Response {
    if let Err(e) = admin_only(&signed) {
        return e.into_response();
    }
    let req: NewKey = match serde_json::from_str(&body) {
        Ok(r) => r,
        Err(e) => return BackendError::bad_request("body", e.to_string()).into_response(),
    };
    if req.label.as_ref().is_some_and(|l| l.len() > 200) {
        return BackendError::bad_request("label", "at most 200 characters").into_response();
    }
    let label = req.label.filter(|l| !l.trim().is_empty());
    answer(
        d.backend
            .create_key(&signed.identity, req.scopes, label)
            .await,
    )
}

pub async fn key_revoke(
    State(d): State<Shared>,
    signed: SignedIn,
    Path(prefix): Path<String>,
) -> Response {
    if let Err(e) = admin_only(&signed) {
        return e.into_response();
    }
    answer(d.backend.revoke_key(&signed.identity, &prefix).await)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    #[serde(default)]
    before: Option<i64>,
    #[serde(default)]
    limit: Option<u32>,
}

pub async fn audit_list(
    State(d): State<Shared>,
    signed: SignedIn,
    q: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    if let Err(e) = admin_only(&signed) {
        return e.into_response();
    }
    let Ok(Query(q)) = q else {
        return BackendError::bad_request("query", "before and limit are integers").into_response();
    };
    let limit = q.limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return BackendError::bad_request("limit", "must be 1 to 200").into_response();
    }
    answer(d.backend.audit_log(&signed.identity, q.before, limit).await)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChildrenQuery {
    #[serde(default)]
    limit: Option<u32>,
}

/// The tenant's workflow queues (read): the workflows page's queue choices.
/// A queue's latency and workers (read): the queues page.
pub async fn queue_activity(
    State(d): State<Shared>,
    signed: SignedIn,
    Path(queue): Path<String>,
) -> Response {
    answer(d.backend.queue_activity(&signed.identity, &queue).await)
}

/// The jobs page's search (read): `/v1/jobs` filters plus args/meta and error substrings.
pub async fn jobs_search(
    State(d): State<Shared>,
    signed: SignedIn,
    q: Result<Query<crate::JobSearch>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = q else {
        return BackendError::bad_request(
            "query",
            "queue is required; since_unix_ms and limit are integers; no other parameters",
        )
        .into_response();
    };
    if !signed.identity.allows("read") {
        return BackendError::forbidden("this API key lacks the `read` scope").into_response();
    }
    answer(d.backend.search_jobs(&signed.identity, q).await)
}

pub async fn workflow_queues(State(d): State<Shared>, signed: SignedIn) -> Response {
    answer(d.backend.workflow_queues(&signed.identity).await)
}

/// A workflow instance's children (read): the graph on the instance page.
pub async fn workflow_children(
    State(d): State<Shared>,
    signed: SignedIn,
    Path(id): Path<String>,
    q: Result<Query<ChildrenQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Some(id) = id.parse::<i64>().ok().filter(|i| *i > 0) else {
        return BackendError::bad_request("id", "a workflow instance id is a positive integer")
            .into_response();
    };
    let Ok(Query(q)) = q else {
        return BackendError::bad_request("limit", "an integer").into_response();
    };
    let limit = q.limit.unwrap_or(200);
    if !(1..=1000).contains(&limit) {
        return BackendError::bad_request("limit", "must be 1 to 1000").into_response();
    }
    if !signed.identity.allows("read") {
        return BackendError::forbidden("this API key lacks the `read` scope").into_response();
    }
    answer(
        d.backend
            .workflow_children(&signed.identity, id, limit)
            .await,
    )
}

fn op_id(raw: &str) -> Result<i64, BackendError> {
    raw.parse::<i64>()
        .ok()
        .filter(|i| *i > 0)
        .ok_or_else(|| BackendError::bad_request("op_id", "an operation id is a positive integer"))
}

/// Starts a bulk operation on everything matching a filter (admin) or on a selection of
/// jobs (`ids`: produce, as each job's own retry or cancel; the backend checks the scope).
pub async fn bulk_start(State(d): State<Shared>, signed: SignedIn, body: String) -> Response {
    let body: Value = match serde_json::from_str(&body) {
        Ok(v) => v,
        Err(e) => return BackendError::bad_request("body", e.to_string()).into_response(),
    };
    let selection = body.get("ids").is_some();
    if !selection {
        if let Err(e) = admin_only(&signed) {
            return e.into_response();
        }
    } else if !signed.identity.allows("produce") {
        return BackendError::forbidden("this API key lacks the `produce` scope").into_response();
    }
    match d.backend.start_bulk(&signed.identity, body).await {
        Ok(v) => (StatusCode::ACCEPTED, Json(v)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The tenant's newest bulk operations (read).
pub async fn bulk_list(State(d): State<Shared>, signed: SignedIn) -> Response {
    answer(d.backend.get_bulk(&signed.identity, None).await)
}

/// One bulk operation and its progress (read).
pub async fn bulk_get(
    State(d): State<Shared>,
    signed: SignedIn,
    Path(id): Path<String>,
) -> Response {
    match op_id(&id) {
        Ok(id) => answer(d.backend.get_bulk(&signed.identity, Some(id)).await),
        Err(e) => e.into_response(),
    }
}

/// Stops a running bulk operation after its current batch (admin).
pub async fn bulk_cancel(
    State(d): State<Shared>,
    signed: SignedIn,
    Path(id): Path<String>,
) -> Response {
    if let Err(e) = admin_only(&signed) {
        return e.into_response();
    }
    match op_id(&id) {
        Ok(id) => answer(d.backend.cancel_bulk(&signed.identity, id).await),
        Err(e) => e.into_response(),
    }
}

/// `/ui/` (with the slash, which the nested `/` route does not match) is the index too.
pub async fn not_found(uri: axum::http::Uri) -> Response {
    if uri.path() == "/" || uri.path().is_empty() {
        return crate::assets::index().await;
    }
    BackendError::not_found("page").into_response()
}
