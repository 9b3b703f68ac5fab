//! pgferry's web dashboard (docs/dashboard.md): the `/ui` routes that `pgferry serve` and
//! `pgferry dev` mount, with every asset embedded in the binary.
//!
//! The dashboard is a thin layer in front of the JSON API, not a second API: a signed-in
//! browser's requests to `/ui/api/v1/...` are handed, in process, to the same `/v1` router
//! that answers API clients, carrying the session's API key. Tenant isolation, scope checks,
//! validation and error bodies are therefore the API's own, by construction. What the API
//! does not offer (the caller's identity, its tenant's keys and audit log) comes from the
//! server through [`Backend`], which the server implements with its auth code.
//!
//! This crate depends on nothing of the server, so the server can depend on it and mount
//! [`router`]. New pages (workflows, schedules, ASH) need a page module under
//! `assets/js/pages/`, an entry in `assets/js/nav.js`, and their `/v1` routes: the proxy
//! forwards every `/v1` path.

mod assets;
mod backend;
mod events;
mod handlers;
mod proxy;
mod security;
mod session;
mod webhook_handlers;

use std::sync::Arc;
use std::time::Duration;

use axum::routing::{any, get, post};
use axum::Router;

pub use backend::{Backend, BackendError, BoxFut, Identity, JobSearch};

/// Settings of the dashboard.
#[derive(Debug, Clone)]
pub struct DashboardConfig {
    /// A session ends after this long without a request.
    pub idle_timeout: Duration,
    /// A session ends this long after sign-in, used or not.
    pub max_age: Duration,
    /// Most sessions held at once (oldest dropped beyond): bounds memory under sign-in floods.
    pub max_sessions: usize,
    /// How often the live stream re-reads queue counters.
    pub tick: Duration,
}

impl Default for DashboardConfig {
    fn default() -> Self {
        DashboardConfig {
            idle_timeout: Duration::from_secs(8 * 3600),
            max_age: Duration::from_secs(24 * 3600),
            max_sessions: 10_000,
            tick: Duration::from_secs(1),
        }
    }
}

/// Everything the dashboard's handlers share.
pub(crate) struct Dashboard {
    pub(crate) config: DashboardConfig,
    pub(crate) backend: Arc<dyn Backend>,
    /// The server's `/v1` router with its state: the dashboard's data path.
    pub(crate) api: Router,
    pub(crate) sessions: session::Sessions,
}

pub(crate) type Shared = Arc<Dashboard>;

/// The routes under `/ui` (mount with `Router::nest("/ui", ...)`). `api` is the server's
/// `/v1` router with its state applied.
pub fn router<S>(backend: Arc<dyn Backend>, api: Router, config: DashboardConfig) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let shared: Shared = Arc::new(Dashboard {
        sessions: session::Sessions::new(&config),
        config,
        backend,
        api,
    });
    Router::new()
        .route("/", get(assets::index))
        .route("/assets/{*path}", get(assets::asset))
        .route(
            "/api/session",
            get(handlers::session_get)
                .post(handlers::sign_in)
                .delete(handlers::sign_out),
        )
        .route("/api/events", get(events::stream))
        .route(
            "/api/keys",
            get(handlers::keys_list).post(handlers::key_create),
        )
        .route("/api/keys/{prefix}/revoke", post(handlers::key_revoke))
        .route("/api/audit", get(handlers::audit_list))
        .route(
            "/api/bulk",
            get(handlers::bulk_list).post(handlers::bulk_start),
        )
        .route("/api/bulk/{id}", get(handlers::bulk_get))
        .route("/api/bulk/{id}/cancel", post(handlers::bulk_cancel))
        .route("/api/workflow-queues", get(handlers::workflow_queues))
        .route("/api/jobs/search", get(handlers::jobs_search))
        .route("/api/queues/{name}/activity", get(handlers::queue_activity))
        .route(
            "/api/workflows/{id}/children",
            get(handlers::workflow_children),
        )
        .route("/api/webhooks/{slug}/events", get(webhook_handlers::events))
        .route(
            "/api/webhooks/{slug}/events/{id}",
            get(webhook_handlers::event),
        )
        .route("/api/v1/{*path}", any(proxy::forward))
        .fallback(handlers::not_found)
        .layer(axum::middleware::from_fn(security::headers))
        .with_state(shared)
}

/// `/` → `/ui` (the server mounts this next to [`router`]).
pub async fn redirect_to_ui() -> axum::response::Redirect {
    axum::response::Redirect::temporary("/ui")
}
