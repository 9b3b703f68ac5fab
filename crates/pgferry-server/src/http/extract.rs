//! Request extractors: the authenticated caller (Bearer key, then the key's rate limit) and
//! JSON bodies whose errors name the offending field.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use serde::de::DeserializeOwned;

use super::error::ApiError;
use crate::auth::{AuthError, InProcessCaller, Principal};
use crate::AppState;

/// The caller, authenticated and within its rate limit.
pub struct Authed(pub Principal);

impl FromRequestParts<AppState> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if let Some(InProcessCaller(p)) = parts.extensions.get::<InProcessCaller>() {
            return Ok(Authed(p.clone()));
        }
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .ok_or(AuthError::Missing)?;
        let value = header.to_str().map_err(|_| AuthError::Malformed)?;
        let key = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
            .ok_or(AuthError::Malformed)?
            .trim();
        let principal = state.auth.authenticate(key).await?;
        // The request's log lines name the tenant from here on (issue 27).
        tracing::Span::current().record("tenant", principal.tenant.as_str());
        state.http.limiter.check(principal.key_id)?;
        Ok(Authed(principal))
    }
}

/// A JSON body. Malformed JSON, a wrong type or an unknown field is a 400 naming the field
/// (`jobs[2].priority`); a body over the limit is a 413.
pub struct JsonBody<T>(pub T);

/// Where a request type has JSON objects. serde accepts a struct written as an array
/// (`[null, null]`), which the API must refuse; these paths are checked first. A path is
/// dot-separated; `name[]` means every element of the array `name`; "" is the body.
pub trait Objects {
    const OBJECTS: &'static [&'static str] = &[""];
}

impl<T: DeserializeOwned + Objects, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(body_rejection)?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// A JSON body that may be left out: an empty body is `None` (operations whose every field
/// has a default, e.g. rotating an address at once); otherwise as [`JsonBody`].
pub struct OptionalJsonBody<T>(pub Option<T>);

impl<T: DeserializeOwned + Objects, S: Send + Sync> FromRequest<S> for OptionalJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(body_rejection)?;
        if bytes.is_empty() {
            return Ok(OptionalJsonBody(None));
        }
        parse_json(&bytes).map(|b| OptionalJsonBody(Some(b)))
    }
}

fn body_rejection(r: BytesRejection) -> ApiError {
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "request body is over the size limit",
        )
    } else {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_body", r.body_text())
    }
}

pub fn parse_json<T: DeserializeOwned + Objects>(bytes: &[u8]) -> Result<T, ApiError> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        // Syntax errors: name the field being parsed when serde knows it.
        let de = &mut serde_json::Deserializer::from_slice(bytes);
        match serde_path_to_error::deserialize::<_, serde_json::Value>(de) {
            Err(pe) => serde_error(pe),
            Ok(_) => ApiError::new(StatusCode::BAD_REQUEST, "malformed_json", e.to_string())
                .field("body"),
        }
    })?;
    for spec in T::OBJECTS {
        check_objects(&value, spec)?;
    }
    serde_path_to_error::deserialize(value).map_err(serde_error)
}

/// Fails unless every value at `spec` (see [`Objects`]) is an object (absent or null ones
/// are left to the type).
fn check_objects(root: &serde_json::Value, spec: &str) -> Result<(), ApiError> {
    let mut found: Vec<(String, &serde_json::Value)> = vec![(String::new(), root)];
    for part in spec.split('.').filter(|p| !p.is_empty()) {
        let (name, each) = match part.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (part, false),
        };
        let mut next = Vec::new();
        for (path, v) in found {
            let Some(child) = v.get(name).filter(|c| !c.is_null()) else {
                continue;
            };
            let path = if path.is_empty() {
                name.to_string()
            } else {
                format!("{path}.{name}")
            };
            match (each, child.as_array()) {
                (true, Some(items)) => next.extend(
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, it)| (format!("{path}[{i}]"), it)),
                ),
                // Not an array where one is expected: the type reports it.
                (true, None) => {}
                (false, _) => next.push((path, child)),
            }
        }
        found = next;
    }
    match found.into_iter().find(|(_, v)| !v.is_object()) {
        None => Ok(()),
        Some((path, _)) => Err(ApiError::bad_request(
            if path.is_empty() {
                "body".to_string()
            } else {
                path
            },
            "must be a JSON object",
        )),
    }
}

fn serde_error(e: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    let msg = inner.to_string();
    // serde reports missing/unknown fields at the parent; name the field itself.
    let named = ["missing field `", "unknown field `"]
        .iter()
        .find_map(|p| msg.strip_prefix(p))
        .and_then(|rest| rest.split('`').next());
    // The path ends at the unknown field itself but at the parent of a missing one;
    // a syntax error has no path ("?").
    let field = match (path.as_str(), named) {
        ("." | "?", Some(f)) => f.to_string(),
        (p, Some(f)) if p == f || p.ends_with(&format!(".{f}")) => p.to_string(),
        (p, Some(f)) => format!("{p}.{f}"),
        ("." | "?", None) => "body".to_string(),
        (p, None) => p.to_string(),
    };
    let code = if inner.is_syntax() || inner.is_eof() {
        "malformed_json"
    } else {
        "invalid_argument"
    };
    ApiError::new(StatusCode::BAD_REQUEST, code, msg).field(field)
}

/// Per-key token buckets: `rate` requests per second sustained, `burst` at once.
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<i64, (f64, Instant)>>,
}

impl RateLimiter {
    pub fn new(rate: f64, burst: f64) -> RateLimiter {
        RateLimiter {
            rate: rate.max(f64::MIN_POSITIVE),
            burst: burst.max(1.0),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token for `key_id`, or says how many whole seconds until one is available.
    pub fn check(&self, key_id: i64) -> Result<(), ApiError> {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().expect("rate buckets");
        let (tokens, at) = buckets.entry(key_id).or_insert((self.burst, now));
        let refilled =
            (*tokens + now.duration_since(*at).as_secs_f64() * self.rate).min(self.burst);
        *at = now;
        if refilled >= 1.0 {
            *tokens = refilled - 1.0;
            Ok(())
        } else {
            *tokens = refilled;
            let wait = ((1.0 - refilled) / self.rate).ceil();
            Err(ApiError::too_many(wait.clamp(1.0, 86_400.0) as u64))
        }
    }
}

/// True when a string anywhere in `v` (keys included) holds U+0000, which Postgres text
/// and jsonb cannot store: such input is refused with a 400 before it reaches the database.
pub fn has_nul(v: &serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(a) => a.iter().any(has_nul),
        Value::Object(m) => m.iter().any(|(k, x)| k.contains('\0') || has_nul(x)),
        _ => false,
    }
}

/// 400 naming `field` when `s` holds U+0000.
pub fn no_nul(field: impl Into<String>, s: &str) -> Result<(), ApiError> {
    if s.contains('\0') {
        return Err(ApiError::bad_request(field, "may not contain U+0000"));
    }
    Ok(())
}

/// 400 naming `field` when a string in `v` holds U+0000.
pub fn no_nul_json(field: impl Into<String>, v: &serde_json::Value) -> Result<(), ApiError> {
    if has_nul(v) {
        return Err(ApiError::bad_request(
            field,
            "strings may not contain U+0000",
        ));
    }
    Ok(())
}
