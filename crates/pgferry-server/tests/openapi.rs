//! The OpenAPI document matches the router both ways and is internally consistent.
//! (`make test-fuzz` additionally validates it with openapi-spec-validator and fuzzes the
//! server from it with schemathesis.)

mod http_common;

use std::collections::BTreeSet;

use http_common::TestServer;
use pgferry_server::http::{openapi, routes, HttpConfig};
use pgferry_server::ServerConfig;
use serde_json::Value;

fn route_set() -> BTreeSet<(String, String)> {
    routes()
        .into_iter()
        .map(|(m, p, _)| (m.as_str().to_string(), p.to_string()))
        .collect()
}

#[test]
fn every_route_is_documented_and_every_documented_operation_is_routed() {
    let doc = openapi::document(&HttpConfig::default());
    let documented: BTreeSet<(String, String)> = openapi::operations(&doc).into_iter().collect();
    let routed = route_set();
    let undocumented: Vec<_> = routed.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&routed).collect();
    assert!(
        undocumented.is_empty(),
        "routes missing from openapi.json: {undocumented:?}"
    );
    assert!(
        unrouted.is_empty(),
        "documented but not routed: {unrouted:?}"
    );
    assert_eq!(routed.len(), routes().len(), "a route is listed twice");
}

/// Every `$ref` in `v`, recursively.
fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                out.push(r);
            }
            m.values().for_each(|x| refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

#[test]
fn document_is_consistent() {
    let doc = openapi::document(&HttpConfig::default());
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.0"));
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    for r in all {
        let pointer = r
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("external ref {r}"));
        assert!(doc.pointer(pointer).is_some(), "dangling $ref {r}");
    }
    let mut ids = BTreeSet::new();
    for (method, path) in openapi::operations(&doc) {
        let op = &doc["paths"][&path][method.to_lowercase()];
        let id = op["operationId"]
            .as_str()
            .unwrap_or_else(|| panic!("{method} {path}: no operationId"));
        assert!(ids.insert(id.to_string()), "duplicate operationId {id}");
        assert!(
            op["responses"].as_object().is_some_and(|r| !r.is_empty()),
            "{id}: no responses"
        );
        // Path parameters named in the path are declared, and vice versa.
        let in_path: BTreeSet<&str> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .collect();
        let declared: BTreeSet<String> = op["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| match p.get("$ref").and_then(Value::as_str) {
                Some(r) => doc.pointer(&r[1..]).unwrap().clone(),
                None => p.clone(),
            })
            .filter(|p| p["in"] == "path")
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect();
        let declared: BTreeSet<&str> = declared.iter().map(String::as_str).collect();
        assert_eq!(in_path, declared, "{id}: path parameters");
    }
}

#[test]
fn document_carries_the_servers_limits() {
    let config = HttpConfig {
        max_batch: 7,
        max_claim_wait: std::time::Duration::from_millis(1234),
        ..HttpConfig::default()
    };
    let doc = openapi::document(&config);
    let s = &doc["components"]["schemas"];
    assert_eq!(
        s["EnqueueBatchRequest"]["properties"]["jobs"]["maxItems"],
        7
    );
    assert_eq!(s["ClaimRequest"]["properties"]["wait_ms"]["maximum"], 1234);
}

/// Over a socket: the served document is the one tested above, and each documented
/// operation is answered by its route (401 without a key, never 404/405).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_document_and_routes_answer() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let (s, served, _) = srv.call("GET", "/v1/openapi.json", None, None).await;
    assert_eq!(s, 200);
    assert_eq!(served, openapi::document(&HttpConfig::default()));
    for (method, path) in openapi::operations(&served) {
        if path == "/v1/openapi.json" {
            continue;
        }
        // Unauthenticated by design (ping tokens, inbound webhooks): tested in http_monitors.
        if served["paths"][&path][method.to_lowercase()]["security"] == serde_json::json!([]) {
            continue;
        }
        let concrete = path.replace("{id}", "1").replace("{name}", "q");
        let (s, b, _) = srv.call(&method, &concrete, None, None).await;
        assert_eq!(s, 401, "{method} {concrete}: {b}");
    }
}
