//! `/v1/openapi.json`: the hand-written document (openapi.json next to this file) with the
//! limits of this server filled in. Tests check it against [`super::routes`] both ways and
//! `make test-fuzz` validates it and fuzzes the API from it.

use axum::extract::State;
use axum::Json;
use serde_json::Value;

use super::HttpConfig;
use crate::AppState;

const DOCUMENT: &str = include_str!("openapi.json");
/// Parts of the API kept in their own documents (fewer merge conflicts in one large file),
/// merged into [`DOCUMENT`]: tags, paths, components.
const PARTS: &[&str] = &[
    include_str!("openapi_schedules.json"),
    include_str!("openapi_monitors.json"),
    include_str!("openapi_http_jobs.json"),
];

/// The document for a server with `config`.
pub fn document(config: &HttpConfig) -> Value {
    let mut doc: Value = serde_json::from_str(DOCUMENT).expect("openapi.json is valid JSON");
    for part in PARTS {
        merge(
            &mut doc,
            serde_json::from_str(part).expect("openapi parts are valid JSON"),
        );
    }
    let schemas = &mut doc["components"]["schemas"];
    let batch = config.max_batch as u64;
    schemas["EnqueueBatchRequest"]["properties"]["jobs"]["maxItems"] = batch.into();
    schemas["CompleteRequest"]["properties"]["results"]["maxItems"] = batch.into();
    schemas["HeartbeatRequest"]["properties"]["tokens"]["maxItems"] = batch.into();
    let claim = &mut schemas["ClaimRequest"]["properties"];
    claim["max"]["maximum"] = (config.max_claim as u64).into();
    claim["wait_ms"]["maximum"] = (config.max_claim_wait.as_millis() as u64).into();
    doc
}

/// Adds a part's tags, paths and components to `doc`.
fn merge(doc: &mut Value, part: Value) {
    if let (Some(tags), Some(more)) = (doc["tags"].as_array_mut(), part["tags"].as_array()) {
        tags.extend(more.iter().cloned());
    }
    if let (Some(paths), Some(more)) = (doc["paths"].as_object_mut(), part["paths"].as_object()) {
        paths.extend(more.clone());
    }
    if let Some(kinds) = part["components"].as_object() {
        for (kind, items) in kinds {
            if let (Some(into), Some(items)) = (
                doc["components"][kind.as_str()].as_object_mut(),
                items.as_object(),
            ) {
                into.extend(items.clone());
            }
        }
    }
}

pub async fn handler(State(state): State<AppState>) -> Json<Value> {
    Json(state.http.openapi.clone())
}

/// (METHOD, path) of every operation in a document, sorted.
pub fn operations(doc: &Value) -> Vec<(String, String)> {
    let mut ops = Vec::new();
    if let Some(paths) = doc["paths"].as_object() {
        for (path, item) in paths {
            for method in item.as_object().into_iter().flat_map(|m| m.keys()) {
                ops.push((method.to_uppercase(), path.clone()));
            }
        }
    }
    ops.sort();
    ops
}
