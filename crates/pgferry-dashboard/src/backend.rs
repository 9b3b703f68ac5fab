//! What the dashboard needs from the server beyond the `/v1` API: who a key is, and its
//! tenant's keys and audit log. The server implements this with its own auth code
//! (`pgferry-server/src/dashboard`), so keys are parsed, hashed and checked in one place.

use std::future::Future;
use std::pin::Pin;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::{json, Value};

pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The signed-in key: what the UI shows and which actions it offers. The server decides
/// again on every action; this only hides what would be refused.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Identity {
    pub tenant: String,
    pub tenant_id: i64,
    pub key_id: i64,
    /// The key's public prefix (never its secret).
    pub key_prefix: String,
    /// Scope names: produce, consume, read, admin.
    pub scopes: Vec<String>,
}

impl Identity {
    /// Admin implies every scope, as in the API.
    pub fn allows(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope || s == "admin")
    }
}

/// An answer in the API's error shape: `{"error": {"code", "message", "field"?}}`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct BackendError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
}

impl BackendError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        BackendError {
            status,
            code,
            message: message.into(),
            field: None,
        }
    }

    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthenticated", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn bad_request(field: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_argument", message).field(field)
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }
}

impl IntoResponse for BackendError {
    fn into_response(self) -> Response {
        let mut err = json!({ "code": self.code, "message": self.message });
        if let Some(f) = self.field {
            err["field"] = Value::String(f);
        }
        (self.status, Json(json!({ "error": err }))).into_response()
    }
}

/// A job search of the jobs page: the `/v1/jobs` filters plus substrings of args/meta and
/// of a dead job's last error, which the API does not take (`GET /ui/api/jobs/search`).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSearch {
    pub queue: String,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub since_unix_ms: Option<u64>,
    /// Substring of the job's args or meta (JSON text), any case.
    #[serde(default)]
    pub contains: Option<String>,
    /// Substring of a dead job's last error, any case (state dead).
    #[serde(default)]
    pub error_contains: Option<String>,
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    pub limit: Option<u32>,
}

/// The server side of the dashboard. Every method gets the caller's [`Identity`] as the
/// server resolved it for this request, and must refuse what its scopes do not allow and
/// never touch another tenant.
pub trait Backend: Send + Sync + 'static {
    /// Resolves a presented API key (cached by the server like any API request; a revoked
    /// key fails within the server's auth cache TTL, which ends its sessions).
    fn identify<'a>(&'a self, api_key: &'a str) -> BoxFut<'a, Result<Identity, BackendError>>;

    /// The caller's tenant's keys (admin): `{"keys": [...]}`, never secrets.
    fn list_keys<'a>(&'a self, who: &'a Identity) -> BoxFut<'a, Result<Value, BackendError>>;

    /// A new key of the caller's tenant (admin): `{"key": "<shown once>", "prefix", ...}`.
    fn create_key<'a>(
        &'a self,
        who: &'a Identity,
        scopes: Vec<String>,
        label: Option<String>,
    ) -> BoxFut<'a, Result<Value, BackendError>>;

    /// Revokes a key of the caller's tenant (admin); another tenant's prefix is not found.
    fn revoke_key<'a>(
        &'a self,
        who: &'a Identity,
        prefix: &'a str,
    ) -> BoxFut<'a, Result<Value, BackendError>>;

    /// The caller's tenant's audit log, newest first, below `before` (admin):
    /// `{"entries": [...], "next_before": id?}`.
    fn audit_log<'a>(
        &'a self,
        who: &'a Identity,
        before: Option<i64>,
        limit: u32,
    ) -> BoxFut<'a, Result<Value, BackendError>>;

    /// The children of the caller's tenant's workflow instance `id` (read), oldest first,
    /// at most `limit`: `{"children": [{id, kind, queue, step, status, ...}], "has_more"}`.
    /// The `/v1` API lists instances by queue only; a parent's children come from the
    /// engine's parent index. Another tenant's instance is "not found".
    fn workflow_children<'a>(
        &'a self,
        who: &'a Identity,
        id: i64,
        limit: u32,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        let _ = (who, id, limit);
        Box::pin(async {
            Err(BackendError::unavailable(
                "workflow children are not served",
            ))
        })
    }

    /// Starts a bulk operation of the caller's tenant on everything matching a filter
    /// (admin) or on a selection of jobs (`ids`, produce), run by the server as a durable
    /// operation: `{"op_id"}`. Body: `{"action": "dead.retry" | "dead.purge" | "jobs.cancel",
    /// "queue"?, "kind"?, "error_contains"?, "states"?}` or `{"action", "queue"?, "ids"}`.
    fn start_bulk<'a>(
        &'a self,
        who: &'a Identity,
        body: Value,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        let _ = (who, body);
        Box::pin(async { Err(BackendError::unavailable("bulk operations are not served")) })
    }

    /// One bulk operation of the caller's tenant (read) with its progress, or with
    /// `op_id` None the newest 20: `{"ops": [...]}`.
    fn get_bulk<'a>(
        &'a self,
        who: &'a Identity,
        op_id: Option<i64>,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        let _ = (who, op_id);
        Box::pin(async { Err(BackendError::unavailable("bulk operations are not served")) })
    }

    /// Stops a running bulk operation of the caller's tenant after its current batch (admin).
    fn cancel_bulk<'a>(
        &'a self,
        who: &'a Identity,
        op_id: i64,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        let _ = (who, op_id);
        Box::pin(async { Err(BackendError::unavailable("bulk operations are not served")) })
    }

    /// One of the caller's tenant's queues, as the engine sees it now (read): how long the
    /// next job has waited, the median wait from enqueue to claim of the latest claims, and
    /// the workers claiming from it: `{"queue", "oldest_pending_ms"?, "start_wait_p50_ms"?,
    /// "start_wait_sample", "workers": [{worker, jobs, last_claim_unix_ms,
    /// lease_until_unix_ms}]}`. A queue never used is "not found".
    fn queue_activity<'a>(
        &'a self,
        who: &'a Identity,
        queue: &'a str,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        let _ = (who, queue);
        Box::pin(async { Err(BackendError::unavailable("queue activity is not served")) })
    }

    /// The caller's tenant's jobs matching `q` (read), in the `/v1/jobs` answer's shape
    /// (`{"jobs", "has_more", "next_cursor"?}`). Substring filters are tested on the rows
    /// the engine's listing reads anyway, so a page is as bounded as any listing's and may
    /// come back short (even empty) with `has_more`: the page offers "search older".
    fn search_jobs<'a>(
        &'a self,
        who: &'a Identity,
        q: JobSearch,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        let _ = (who, q);
        Box::pin(async { Err(BackendError::unavailable("job search is not served")) })
    }

    /// The caller's tenant's webhook endpoint `slug`'s stored events, newest first, below
    /// event id `before` (read): `{"events": [{id, received_at_unix_ms, provider_event_id,
    /// headers, body_preview, body_chars}], "next_before"?}`. The `/v1` API pages them
    /// oldest first (replay order); an operator looks for the latest. Another tenant's
    /// endpoint is "not found".
    fn webhook_events<'a>(
        &'a self,
        who: &'a Identity,
        slug: &'a str,
        before: Option<i64>,
        limit: u32,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        let _ = (who, slug, before, limit);
        Box::pin(async { Err(BackendError::unavailable("webhook events are not served")) })
    }

    /// One stored event of the caller's tenant's endpoint `slug` (read), whole, with the
    /// HTTP jobs it was fanned out to (first delivery and replays, newest first, in the
    /// `/v1/jobs` job shape): `{"event": {...}, "deliveries": [...], "has_more",
    /// "next_cursor"?}`. Bounded like the jobs search: `cursor` looks further back.
    fn webhook_event<'a>(
        &'a self,
        who: &'a Identity,
        slug: &'a str,
        id: i64,
        cursor: Option<String>,
    ) -> BoxFut<'a, Result<Value, BackendError>> {
        let _ = (who, slug, id, cursor);
        Box::pin(async { Err(BackendError::unavailable("webhook events are not served")) })
    }

    /// The caller's tenant's queues that hold workflow instances (read): `{"queues": [...]}`.
    fn workflow_queues<'a>(&'a self, who: &'a Identity) -> BoxFut<'a, Result<Value, BackendError>> {
        let _ = who;
        Box::pin(async { Err(BackendError::unavailable("workflow queues are not served")) })
    }
}
