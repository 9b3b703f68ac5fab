//! pgferry-server: the network front of the engine. This crate owns HTTP (and, later, gRPC);
//! it holds no state of its own — everything durable is in Postgres.

pub mod ash_scope;
pub mod auth;
pub mod coalesce;
pub mod dashboard;
pub mod grpc;
mod health;
pub mod http;
pub mod listen;
pub mod metrics;
pub mod migrate;
pub mod proto;
pub mod service;
pub mod single_flight;
pub mod trace;
pub mod wfsteps;

pub use listen::listen;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use pgferry_core::Engine;
use tokio::net::TcpListener;

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    pub engine: Arc<Engine>,
    /// API keys -> principals (HTTP and gRPC).
    pub auth: Arc<auth::Auth>,
    pub metrics: Arc<metrics::Metrics>,
    pub http: Arc<http::HttpState>,
    /// Group commit for enqueues and completions from every stream and HTTP request.
    pub coalescers: Arc<coalesce::Coalescers>,
    /// Claim order of the receipts this server hands out (gRPC dispatchers and the HTTP
    /// claim register them; the completion writers read them).
    pub receipts: Arc<coalesce::ReceiptBook>,
}

/// Settings of the network front.
#[derive(Debug, Clone, Default)]
pub struct ServerConfig {
    pub auth: auth::AuthConfig,
    pub http: http::HttpConfig,
    pub coalesce: coalesce::CoalesceConfig,
}

impl AppState {
    /// Builds the state. Touches no database (a server starts before its schema is
    /// migrated; /readyz says when it is); async and fallible for what may need either.
    pub async fn new(engine: Arc<Engine>, config: ServerConfig) -> pgferry_core::Result<AppState> {
        let metrics = Arc::new(metrics::Metrics::default());
        let receipts = Arc::new(coalesce::ReceiptBook::default());
        Ok(AppState {
            auth: Arc::new(auth::Auth::new(engine.pool().clone(), config.auth)),
            http: Arc::new(http::HttpState::new(config.http)),
            coalescers: coalesce::Coalescers::new(
                engine.clone(),
                config.coalesce,
                receipts.clone(),
            ),
            receipts,
            metrics,
            engine,
        })
    }
}

/// All routes. A handler that panics answers 500 with the JSON error shape (and the panic
/// is logged) instead of dropping the connection.
pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(health::routes())
        .route("/metrics", axum::routing::get(metrics::handler))
        .merge(http::router(&state.http.config))
        // The web dashboard (docs/dashboard.md), answered through the /v1 router above.
        .nest("/ui", dashboard_router(&state))
        .route("/", axum::routing::get(pgferry_dashboard::redirect_to_ui))
        .layer(http::error::panic_guard())
        // Outermost: the request span covers the panic guard's log line too. Each response
        // is logged at DEBUG, 5xx answers at ERROR.
        .layer(
            tower_http::trace::TraceLayer::new_for_http()
                .make_span_with(trace::http_span as fn(&axum::http::Request<_>) -> _)
                .on_request(()),
        )
        .with_state(state)
}

/// The dashboard's `/ui` routes over this server's `/v1` router.
fn dashboard_router(state: &AppState) -> Router<AppState> {
    let api = http::router(&state.http.config).with_state(state.clone());
    let backend = std::sync::Arc::new(dashboard::DashboardBackend::new(state.clone()));
    pgferry_dashboard::router(backend, api, pgferry_dashboard::DashboardConfig::default())
}

/// Accepted connections with TCP_NODELAY, like the gRPC listener's: no Nagle delay on
/// small responses (claims, acks) while an earlier segment waits for its ack.
fn nodelay(
    listener: TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set on an accepted socket");
        }
    })
}

/// Serves HTTP on `listener` until `shutdown` resolves, then finishes in-flight requests.
pub async fn serve_http(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(nodelay(listener), router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use axum::serve::Listener;

    #[tokio::test]
    async fn accepted_http_sockets_have_nodelay() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut listener = super::nodelay(listener);
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await;
        assert!(accepted.nodelay().unwrap());
    }
}
