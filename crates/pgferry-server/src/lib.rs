//! pgferry-server: the network front of the engine. This crate owns HTTP (and, later, gRPC);
//! it holds no state of its own — everything durable is in Postgres.

pub mod auth;
pub mod coalesce;
pub mod proto;
mod health;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use pgferry_core::Engine;
use tokio::net::TcpListener;

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    pub engine: Arc<Engine>,
}

/// All routes.
pub fn router(state: AppState) -> Router {
    Router::new().merge(health::routes()).with_state(state)
}

/// Serves HTTP on `listener` until `shutdown` resolves, then finishes in-flight requests.
pub async fn serve_http(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}
