//! The HTTP/JSON API under `/v1` (documented by `/v1/openapi.json`).
//!
//! Every route authenticates with `Authorization: Bearer <key>`, checks the key's scope,
//! and only ever names queues through the tenant namespace (`auth::namespace`), so a tenant
//! can neither see nor touch another tenant's queues and jobs (404, as for unknown ids).
//! The router is built from [`routes`], the same table the OpenAPI test checks against.

mod ash;
mod dead;
pub mod error;
pub mod extract;
pub mod http_jobs;
mod job_list;
mod job_view;
pub(crate) mod jobs;
mod monitors;
pub mod openapi;
mod paging;
pub mod public_limit;
mod queues;
pub(crate) mod results;
mod schedules;
mod webhooks;
mod workers;
mod workflow_steps;
mod workflows;

use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::Method;
use axum::routing::MethodRouter;
use axum::Router;
use pgferry_core::{Completed, Outcome};

use crate::AppState;
use error::ApiResult;
use extract::RateLimiter;

/// Limits of the HTTP API.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Largest args + meta of one job, in bytes of JSON (413 above).
    pub max_job_bytes: usize,
    /// Largest request body (413 above). Bounds a batch's memory before it is parsed.
    pub max_body_bytes: usize,
    /// Largest enqueue or completion batch.
    pub max_batch: usize,
    /// Largest claim.
    pub max_claim: usize,
    /// Longest claim long-poll.
    pub max_claim_wait: Duration,
    /// Sustained requests per second per API key.
    pub rate_per_sec: f64,
    /// Requests per API key allowed at once above the sustained rate.
    pub rate_burst: f64,
    /// Ranges HTTP jobs may reach besides the public internet (checked at creation).
    pub http_jobs_allow: pgferry_http_jobs::Allow,
    /// Sustained requests per second per unauthenticated address (a monitor's ping token,
    /// a webhook endpoint's address); see `public_limit`.
    pub public_rate_per_sec: f64,
    /// Requests per unauthenticated address allowed at once above the sustained rate.
    pub public_rate_burst: f64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            max_job_bytes: 1 << 20,
            max_body_bytes: 32 << 20,
            max_batch: 1000,
            max_claim: 1000,
            max_claim_wait: Duration::from_secs(30),
            rate_per_sec: 1000.0,
            rate_burst: 2000.0,
            http_jobs_allow: pgferry_http_jobs::Allow::none(),
            // A heartbeat pings a few times a run; a provider's redelivery storm bursts.
            public_rate_per_sec: 10.0,
            public_rate_burst: 60.0,
        }
    }
}

/// State only the HTTP API uses.
pub struct HttpState {
    pub config: HttpConfig,
    /// Loaded from the database on first use: a server must start (and answer /readyz)
    /// before the schema is migrated.
    tokens: tokio::sync::OnceCell<crate::auth::token::TokenKey>,
    /// Per-key token buckets, shared with the gRPC front (one budget per key).
    pub limiter: std::sync::Arc<RateLimiter>,
    /// Per-address token buckets of `/ping/...` and `/in/...` (no API key there).
    pub public_limiter: public_limit::PublicLimiter,
    /// The OpenAPI document with this server's limits.
    pub openapi: serde_json::Value,
    /// Tenants' HTTP job allow lists as creation checks last read them.
    pub http_jobs: http_jobs::AllowCache,
}

impl HttpState {
    pub fn new(config: HttpConfig) -> HttpState {
        HttpState {
            limiter: std::sync::Arc::new(RateLimiter::new(config.rate_per_sec, config.rate_burst)),
            public_limiter: public_limit::PublicLimiter::new(
                config.public_rate_per_sec,
                config.public_rate_burst,
            ),
            openapi: openapi::document(&config),
            config,
            tokens: tokio::sync::OnceCell::new(),
            http_jobs: Default::default(),
        }
    }
}

/// The key that signs attempt tokens (shared by every server of the database), loaded on
/// first use so that nothing needs the schema before a request does.
pub async fn token_key(state: &AppState) -> ApiResult<&crate::auth::token::TokenKey> {
    state
        .http
        .tokens
        .get_or_try_init(|| async {
            let client = state.engine.pool().get().await?;
            let key = crate::auth::token::TokenKey::load_or_create(&client).await?;
            Ok::<_, pgferry_core::Error>(key)
        })
        .await
        .map_err(error::ApiError::from)
}

/// Every `/v1` route: method, path (OpenAPI syntax), handler.
pub fn routes() -> Vec<(Method, &'static str, MethodRouter<AppState>)> {
    use axum::routing::{delete, get, patch, post, put};
    vec![
        (Method::GET, "/v1/openapi.json", get(openapi::handler)),
        (Method::POST, "/v1/jobs", post(jobs::enqueue_one)),
        (Method::GET, "/v1/jobs", get(jobs::list)),
        (Method::POST, "/v1/jobs/batch", post(jobs::enqueue_batch)),
        (Method::GET, "/v1/jobs/{id}", get(jobs::get)),
        (Method::GET, "/v1/jobs/{id}/result", get(results::get)),
        (Method::POST, "/v1/jobs/{id}/cancel", post(jobs::cancel)),
        (Method::POST, "/v1/jobs/{id}/retry", post(jobs::retry)),
        (Method::GET, "/v1/queues", get(queues::list)),
        (Method::GET, "/v1/queues/{name}", get(queues::get)),
        (Method::PATCH, "/v1/queues/{name}", patch(queues::update)),
        (Method::POST, "/v1/queues/{name}/pause", post(queues::pause)),
        (
            Method::POST,
            "/v1/queues/{name}/resume",
            post(queues::resume),
        ),
        (
            Method::POST,
            "/v1/queues/{name}/cancel",
            post(queues::cancel_jobs),
        ),
        (Method::GET, "/v1/dead", get(dead::list)),
        (Method::POST, "/v1/dead/retry", post(dead::retry)),
        (Method::POST, "/v1/dead/purge", post(dead::purge)),
        (Method::POST, "/v1/workers/claim", post(workers::claim)),
        (
            Method::POST,
            "/v1/workers/complete",
            post(workers::complete),
        ),
        (
            Method::POST,
            "/v1/workers/heartbeat",
            post(workers::heartbeat),
        ),
        (
            Method::GET,
            "/v1/queues/{name}/workflow-retention",
            get(workflows::get_retention),
        ),
        (
            Method::PUT,
            "/v1/queues/{name}/workflow-retention",
            put(workflows::put_retention),
        ),
        (Method::POST, "/v1/workflows", post(workflows::start)),
        (Method::GET, "/v1/workflows", get(workflows::list)),
        (Method::GET, "/v1/workflows/{id}", get(workflows::get)),
        (
            Method::POST,
            "/v1/workflows/signal",
            post(workflows::signal_by_key),
        ),
        (
            Method::POST,
            "/v1/workflows/{id}/signal",
            post(workflows::signal),
        ),
        (
            Method::POST,
            "/v1/workflows/{id}/cancel",
            post(workflows::cancel),
        ),
        (
            Method::POST,
            "/v1/workflows/{id}/retry",
            post(workflows::retry),
        ),
        (
            Method::POST,
            "/v1/workflow-steps/claim",
            post(workflow_steps::claim),
        ),
        (
            Method::POST,
            "/v1/workflow-steps/outcome",
            post(workflow_steps::outcome),
        ),
        (
            Method::POST,
            "/v1/workflow-steps/heartbeat",
            post(workflow_steps::heartbeat),
        ),
        (
            Method::POST,
            "/v1/workflow-steps/kinds",
            post(workflow_steps::kinds),
        ),
        (Method::GET, "/v1/ash/aas", get(ash::aas)),
        (Method::GET, "/v1/ash/top_waits", get(ash::top_waits)),
        (Method::GET, "/v1/ash/top_queries", get(ash::top_queries)),
        (
            Method::GET,
            "/v1/ash/cpu_vs_waiting",
            get(ash::cpu_vs_waiting),
        ),
        (Method::GET, "/v1/ash/timeline", get(ash::timeline)),
        (Method::GET, "/v1/ash/at", get(ash::at)),
        (Method::POST, "/v1/schedules", post(schedules::create)),
        (Method::GET, "/v1/schedules", get(schedules::list)),
        (Method::GET, "/v1/schedules/{name}", get(schedules::get)),
        (
            Method::DELETE,
            "/v1/schedules/{name}",
            axum::routing::delete(schedules::delete),
        ),
        (
            Method::POST,
            "/v1/schedules/{name}/pause",
            post(schedules::pause),
        ),
        (
            Method::POST,
            "/v1/schedules/{name}/resume",
            post(schedules::resume),
        ),
        (
            Method::GET,
            "/v1/schedules/{name}/preview",
            get(schedules::preview),
        ),
        (
            Method::GET,
            "/v1/schedules/{name}/fires",
            get(schedules::fires),
        ),
        (
            Method::POST,
            "/v1/schedules/{name}/backfill",
            post(schedules::backfill),
        ),
        // Monitors, notification targets, alerts, inbound webhooks (docs/monitors.md).
        (Method::POST, "/v1/monitors", post(monitors::create)),
        (Method::GET, "/v1/monitors", get(monitors::list)),
        (Method::GET, "/v1/monitors/{name}", get(monitors::get)),
        (
            Method::DELETE,
            "/v1/monitors/{name}",
            axum::routing::delete(monitors::delete),
        ),
        (
            Method::POST,
            "/v1/monitors/{name}/pause",
            post(monitors::pause),
        ),
        (
            Method::POST,
            "/v1/monitors/{name}/resume",
            post(monitors::resume),
        ),
        (
            Method::GET,
            "/v1/monitors/{name}/pings",
            get(monitors::pings),
        ),
        (Method::GET, "/v1/alerts", get(monitors::alerts)),
        (
            Method::POST,
            "/v1/notification-targets",
            post(monitors::create_target),
        ),
        (
            Method::GET,
            "/v1/notification-targets",
            get(monitors::list_targets),
        ),
        (
            Method::GET,
            "/v1/notification-targets/{name}",
            get(monitors::get_target),
        ),
        (
            Method::PATCH,
            "/v1/notification-targets/{name}",
            patch(monitors::update_target),
        ),
        (
            Method::DELETE,
            "/v1/notification-targets/{name}",
            axum::routing::delete(monitors::delete_target),
        ),
        (
            Method::POST,
            "/v1/webhook-endpoints",
            post(webhooks::create),
        ),
        (Method::GET, "/v1/webhook-endpoints", get(webhooks::list)),
        (
            Method::GET,
            "/v1/webhook-endpoints/{slug}",
            get(webhooks::get),
        ),
        (
            Method::DELETE,
            "/v1/webhook-endpoints/{slug}",
            axum::routing::delete(webhooks::delete),
        ),
        (
            Method::GET,
            "/v1/webhook-endpoints/{slug}/events",
            get(webhooks::events),
        ),
        (
            Method::POST,
            "/v1/webhook-endpoints/{slug}/events/{id}/replay",
            post(webhooks::replay_one),
        ),
        (
            Method::POST,
            "/v1/webhook-endpoints/{slug}/replay",
            post(webhooks::replay_since),
        ),
        (
            Method::POST,
            "/v1/webhook-endpoints/{slug}/rotate-address",
            post(webhooks::rotate_address),
        ),
        // Unauthenticated: the token or slug is the address (docs/monitors.md).
        (Method::GET, "/ping/{token}", get(monitors::ping)),
        (Method::POST, "/ping/{token}", post(monitors::ping)),
        (
            Method::GET,
            "/ping/{token}/start",
            get(monitors::ping_start),
        ),
        (
            Method::POST,
            "/ping/{token}/start",
            post(monitors::ping_start),
        ),
        (Method::GET, "/ping/{token}/fail", get(monitors::ping_fail)),
        (
            Method::POST,
            "/ping/{token}/fail",
            post(monitors::ping_fail),
        ),
        (Method::POST, "/in/{address}", post(webhooks::receive)),
        (
            Method::POST,
            "/v1/http-jobs/secrets",
            post(http_jobs::create_secret),
        ),
        (
            Method::GET,
            "/v1/http-jobs/secrets",
            get(http_jobs::list_secrets),
        ),
        (
            Method::POST,
            "/v1/http-jobs/secrets/rotate",
            post(http_jobs::rotate_secret),
        ),
        (
            Method::DELETE,
            "/v1/http-jobs/secrets/{id}",
            delete(http_jobs::delete_secret),
        ),
        (
            Method::GET,
            "/v1/http-jobs/allow",
            get(http_jobs::get_allow),
        ),
        (
            Method::PUT,
            "/v1/http-jobs/allow",
            put(http_jobs::put_allow),
        ),
        (
            Method::DELETE,
            "/v1/http-jobs/allow",
            delete(http_jobs::delete_allow),
        ),
        (
            Method::GET,
            "/v1/http-jobs/rates",
            get(http_jobs::list_rates),
        ),
        (Method::PUT, "/v1/http-jobs/rates", put(http_jobs::put_rate)),
        (
            Method::DELETE,
            "/v1/http-jobs/rates",
            delete(http_jobs::delete_rate),
        ),
        (
            Method::GET,
            "/v1/http-jobs/transitions",
            get(http_jobs::list_transitions),
        ),
    ]
}

/// The `/v1` router with its body limit.
pub fn router(config: &HttpConfig) -> Router<AppState> {
    let mut r = Router::new();
    for (_, path, handler) in routes() {
        // Same path, different methods: axum merges them.
        r = r.route(path, handler);
    }
    r.fallback(|| async { error::ApiError::not_found("route") })
        .method_not_allowed_fallback(|| async {
            error::ApiError::new(
                axum::http::StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this route does not take that method",
            )
        })
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
}

// The two writes of the API go through the server's group-commit coalescers (shared with
// the gRPC streams): concurrent requests become one statement per flush.

/// Records outcomes; answers in input order.
pub(crate) async fn write_complete(
    state: &AppState,
    outcomes: Vec<Outcome>,
) -> ApiResult<Vec<Completed>> {
    Ok(crate::service::record(&state.coalescers, &state.metrics, outcomes).await?)
}
