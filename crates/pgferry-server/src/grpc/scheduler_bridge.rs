//! Runs one `/v1` HTTP operation in this process for a gRPC call (ADR 0021): the caller,
//! already authenticated and rate limited by gRPC, rides in the request's extensions
//! ([`InProcessCaller`]); the handler's audit entries say `via: grpc`; its answer becomes
//! the reply's JSON, its error body a typed status naming the field.

// tonic's handlers return `Status` by value.
#![allow(clippy::result_large_err)]

use axum::body::Body;
use axum::http::{Method, StatusCode};
use tonic::{Code, Status};
use tower::ServiceExt;

use crate::auth::{InProcessCaller, Principal};
use crate::proto::v1 as pb;
use crate::service::admin::Via;
use crate::service::transport;

/// Largest answer read back from a handler (list pages are bounded far below).
const MAX_ANSWER: usize = 64 << 20;

/// One operation: method, path (segments already encoded), query pairs, JSON body.
pub(super) struct Call {
    pub method: Method,
    pub path: String,
    pub query: Vec<(&'static str, String)>,
    pub body: Option<String>,
}

impl Call {
    pub fn new(method: Method, path: String) -> Call {
        Call {
            method,
            path,
            query: Vec::new(),
            body: None,
        }
    }

    /// Adds `key=value` when `value` is set (a zero / empty proto field is "not given").
    pub fn param(mut self, key: &'static str, value: impl ToString, given: bool) -> Call {
        if given {
            self.query.push((key, value.to_string()));
        }
        self
    }

    pub fn body(mut self, json: String) -> Call {
        self.body = Some(json);
        self
    }

    fn uri(&self) -> String {
        if self.query.is_empty() {
            return self.path.clone();
        }
        let q: Vec<String> = self
            .query
            .iter()
            .map(|(k, v)| format!("{k}={}", segment(v)))
            .collect();
        format!("{}?{}", self.path, q.join("&"))
    }
}

/// Percent-encodes a path segment or query value (names are validated by the handler; the
/// encoding only keeps a `/` or `?` in one from changing the route).
pub(super) fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Runs `call` through `router` as `p`; the answer body (empty for 204) or the status.
pub(super) async fn run(
    router: &axum::Router,
    p: Principal,
    call: Call,
) -> Result<pb::JsonDocument, Status> {
    let mut req = axum::http::Request::builder()
        .method(call.method.clone())
        .uri(call.uri())
        .header("content-type", "application/json")
        .body(match call.body {
            // An empty body field is "no body": the handler says which field is missing.
            Some(b) if !b.is_empty() => Body::from(b),
            Some(_) => Body::from("{}"),
            None => Body::empty(),
        })
        .map_err(|e| Status::invalid_argument(format!("invalid_argument: {e} (name)")))?;
    req.extensions_mut().insert(InProcessCaller(p));
    let resp = transport::within(Via::Grpc, router.clone().oneshot(req))
        .await
        .map_err(|e| Status::internal(format!("internal: {e}")))?;
    let status = resp.status();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bytes = axum::body::to_bytes(resp.into_body(), MAX_ANSWER)
        .await
        .map_err(|e| Status::internal(format!("internal: {e}")))?;
    if status.is_success() {
        return Ok(pb::JsonDocument {
            json: String::from_utf8_lossy(&bytes).into_owned(),
        });
    }
    let mut s = error_status(status, &bytes);
    if let Some(secs) = retry_after.and_then(|v| v.parse::<u64>().ok()) {
        s.metadata_mut()
            .insert("retry-after", tonic::metadata::MetadataValue::from(secs));
    }
    Err(s)
}

/// The HTTP error body (`{"error": {code, message, field}}`) as a status:
/// `code: message (field)`, with the gRPC code of the HTTP status.
fn error_status(status: StatusCode, body: &[u8]) -> Status {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let e = &v["error"];
    let code = e["code"].as_str().unwrap_or("internal");
    let message = e["message"].as_str().unwrap_or("error");
    let msg = match e["field"].as_str() {
        Some(f) => format!("{code}: {message} ({f})"),
        None => format!("{code}: {message}"),
    };
    Status::new(grpc_code(status), msg)
}

fn grpc_code(status: StatusCode) -> Code {
    match status.as_u16() {
        400 | 405 | 415 | 422 => Code::InvalidArgument,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::NotFound,
        409 => Code::AlreadyExists,
        412 => Code::FailedPrecondition,
        413 | 429 => Code::ResourceExhausted,
        501 => Code::Unimplemented,
        503 => Code::Unavailable,
        _ => Code::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_error_body_becomes_a_status_naming_the_field() {
        let s = error_status(
            StatusCode::BAD_REQUEST,
            br#"{"error":{"code":"invalid_argument","message":"bad cron","field":"cron"}}"#,
        );
        assert_eq!(s.code(), Code::InvalidArgument);
        assert_eq!(s.message(), "invalid_argument: bad cron (cron)");
        assert_eq!(grpc_code(StatusCode::CONFLICT), Code::AlreadyExists);
    }

    #[test]
    fn path_segments_and_query_values_are_encoded() {
        let c = Call::new(Method::GET, format!("/v1/schedules/{}", segment("a/b?c")))
            .param("after", "x y", true)
            .param("limit", 0, false);
        assert_eq!(c.uri(), "/v1/schedules/a%2Fb%3Fc?after=x%20y");
    }
}
