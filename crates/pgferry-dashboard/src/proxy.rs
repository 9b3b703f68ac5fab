//! `/ui/api/v1/<path>` → the server's `/v1/<path>`, in process, as the session's API key.
//!
//! Nothing is re-implemented here: the `/v1` handlers authenticate the key, check its
//! scope, keep to its tenant and validate input exactly as for any API client, and their
//! answers (errors included) reach the browser unchanged. The session layer adds only
//! what a browser needs: the cookie, and a CSRF token on every state-changing request.

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use tower::ServiceExt;

use crate::backend::BackendError;
use crate::session::SignedIn;
use crate::Shared;

/// Request headers passed on (everything else, cookies included, stays here).
const PASSED: [header::HeaderName; 2] = [header::CONTENT_TYPE, header::ACCEPT];

pub async fn forward(
    State(d): State<Shared>,
    signed: SignedIn,
    Path(path): Path<String>,
    req: Request,
) -> Response {
    match call(&d, &signed.api_key, &path, req).await {
        Ok(res) => res,
        Err(e) => e.into_response(),
    }
}

/// Sends one request to the `/v1` router with `api_key`.
pub async fn call(
    d: &Shared,
    api_key: &str,
    path: &str,
    req: Request,
) -> Result<Response, BackendError> {
    let (parts, body) = req.into_parts();
    let uri = match parts.uri.query() {
        Some(q) => format!("/v1/{path}?{q}"),
        None => format!("/v1/{path}"),
    };
    let mut builder = Request::builder().method(parts.method).uri(uri);
    for name in PASSED {
        if let Some(v) = parts.headers.get(&name) {
            builder = builder.header(name, v);
        }
    }
    let bearer = HeaderValue::from_str(&format!("Bearer {api_key}"))
        .map_err(|_| BackendError::unauthenticated("malformed API key"))?;
    let inner = builder
        .header(header::AUTHORIZATION, bearer)
        .body(body)
        .map_err(|e| BackendError::bad_request("path", e.to_string()))?;
    let res = d
        .api
        .clone()
        .oneshot(inner)
        .await
        .unwrap_or_else(|e| match e {});
    Ok(res)
}

/// A GET of `/v1/<path_and_query>` as `api_key`, parsed as JSON (the live stream's reads).
pub async fn get_json(
    d: &Shared,
    api_key: &str,
    path_and_query: &str,
) -> Result<serde_json::Value, BackendError> {
    let (path, query) = path_and_query
        .split_once('?')
        .map_or((path_and_query, None), |(p, q)| (p, Some(q)));
    let uri = match query {
        Some(q) => format!("/ui/api/v1/{path}?{q}"),
        None => format!("/ui/api/v1/{path}"),
    };
    let req = Request::builder()
        .uri(uri)
        .body(Body::empty())
        .expect("static request");
    let res = call(d, api_key, path, req).await?;
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), 16 << 20)
        .await
        .map_err(|e| BackendError::unavailable(e.to_string()))?;
    if !status.is_success() {
        return Err(BackendError::new(
            status,
            "upstream",
            String::from_utf8_lossy(&bytes).into_owned(),
        ));
    }
    serde_json::from_slice(&bytes).map_err(|e| BackendError::unavailable(e.to_string()))
}
