//! `/healthz`: the process is up. `/readyz`: the database answers and its schema is the one
//! this build expects — load balancers should only route to ready servers.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let client = match state.engine.pool().get().await {
        Ok(c) => c,
        Err(e) => return not_ready("database_unreachable", e.to_string()),
    };
    match crate::migrate::is_current(&client).await {
        Ok(true) => (StatusCode::OK, Json(json!({ "status": "ready" }))),
        Ok(false) => not_ready(
            "schema_not_current",
            "migrations are pending or modified; run `pgferry migrate up`".into(),
        ),
        Err(e) => not_ready("database_error", e.to_string()),
    }
}

fn not_ready(code: &str, message: String) -> (StatusCode, Json<Value>) {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({ "status": "not_ready", "error": { "code": code, "message": message } })),
    )
}
