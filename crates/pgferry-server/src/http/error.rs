//! One error shape for every HTTP answer that is not a success:
//! `{"error": {"code": "...", "message": "...", "field": "..."}}` (field only when one input
//! is to blame). Codes are stable; messages are for humans.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::auth::AuthError;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
    /// Seconds, for 429.
    pub retry_after: Option<u64>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    pub fn field(mut self, field: impl Into<String>) -> ApiError {
        self.field = Some(field.into());
        self
    }

    pub fn bad_request(field: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_argument", message).field(field)
    }

    pub fn not_found(what: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    /// For routes whose engine operation does not exist yet: say so instead of pretending.
    pub fn not_implemented(what: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "not_implemented",
            format!("{what} is not implemented by this server yet"),
        )
    }

    pub fn too_many(retry_after: u64) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!("rate limit of this API key exceeded; retry after {retry_after} s"),
        );
        e.retry_after = Some(retry_after);
        e
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// Prefixes the field with where it sits in the request (`jobs[3]`).
    pub fn within(mut self, prefix: &str) -> ApiError {
        self.field = Some(match self.field {
            Some(f) => format!("{prefix}.{f}"),
            None => prefix.to_string(),
        });
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({ "code": self.code, "message": self.message });
        if let Some(f) = &self.field {
            body["field"] = json!(f);
        }
        let mut resp = (self.status, Json(json!({ "error": body }))).into_response();
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> ApiError {
        let status = match e {
            AuthError::Missing | AuthError::Malformed | AuthError::Invalid => {
                StatusCode::UNAUTHORIZED
            }
            AuthError::Forbidden { .. } => StatusCode::FORBIDDEN,
            AuthError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        ApiError::new(status, e.code(), e.to_string())
    }
}

impl From<crate::coalesce::SubmitError> for ApiError {
    fn from(e: crate::coalesce::SubmitError) -> ApiError {
        match e.engine() {
            Some(engine) => ApiError::from_engine(engine),
            None => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.code(), e.to_string()),
        }
    }
}

impl From<pgferry_core::Error> for ApiError {
    fn from(e: pgferry_core::Error) -> ApiError {
        ApiError::from_engine(&e)
    }
}

impl ApiError {
    pub fn from_engine(e: &pgferry_core::Error) -> ApiError {
        use pgferry_core::Error as E;
        if let Some(user) = crate::auth::namespace::user_facing(e) {
            return ApiError::from_engine(&user);
        }
        let field = match e {
            E::InvalidName { field, .. } | E::InvalidArgument { field, .. } => {
                Some(field.to_string())
            }
            E::PayloadTooLarge { index, .. } => Some(format!("jobs[{index}].args")),
            E::BatchTooLarge { .. } => Some("jobs".to_string()),
            _ => None,
        };
        let status = match e.code() {
            "invalid_name" | "invalid_argument" => StatusCode::BAD_REQUEST,
            "payload_too_large" | "batch_too_large" => StatusCode::PAYLOAD_TOO_LARGE,
            "not_found" => StatusCode::NOT_FOUND,
            "conflict" => StatusCode::CONFLICT,
            "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status.is_server_error() {
            tracing::error!(error = %e, sqlstate = e.sqlstate(), "request failed");
        }
        let mut err = ApiError::new(status, e.code(), e.public_message());
        err.field = field;
        err
    }
}

/// The layer that turns a handler panic into a logged 500 with the JSON error shape
/// instead of a dropped connection.
pub fn panic_guard(
) -> tower_http::catch_panic::CatchPanicLayer<fn(Box<dyn std::any::Any + Send>) -> Response> {
    tower_http::catch_panic::CatchPanicLayer::custom(panic_response as fn(_) -> Response)
}

fn panic_response(err: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let detail = err
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| err.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    tracing::error!(panic = detail, "request handler panicked");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "internal error (logged on the server)",
    )
    .into_response()
}
