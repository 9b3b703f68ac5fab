//! Notification targets and webhook fan-out targets are checked at creation with the list
//! their deliveries are checked with before each attempt: the server's allow list plus the
//! tenant's own (issue 22). The server here allows no private range; tenant A allows
//! loopback for itself, tenant B does not.

mod http_common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_common::{error_of, TestServer};
use pgferry_server::ServerConfig;
use serde_json::json;

/// A loopback target recording the paths it was sent.
async fn target() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s = seen.clone();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let s = s.clone();
        async move {
            s.lock().unwrap().push(uri.path().to_string());
            "ok"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_are_checked_with_the_tenants_own_allow_list() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let (stop, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(pgferry_http_jobs::service::run_with_sink(
        srv.state.engine.clone(),
        pgferry_http_jobs::ExecutorConfig::default(),
        pgferry_http_jobs::worker::WorkerConfig::default(),
        Arc::new(pgferry_http_jobs::NoSink),
        rx,
    ));
    let (hook, seen) = target().await;
    let a = srv.key("allowed", &["admin"]).await;
    let b = srv.key("not-allowed", &["admin"]).await;
    let (s, got, _) = srv
        .call(
            "PUT",
            "/v1/http-jobs/allow",
            Some(&a),
            Some(json!({"ranges": ["loopback"]})),
        )
        .await;
    assert_eq!(s, 200, "{got}");

    // Notification targets: A's loopback target is accepted, B's refused naming the URL.
    let target_body = json!({"name": "ops", "url": format!("{hook}/alerts")});
    let (s, t, _) = srv
        .call(
            "POST",
            "/v1/notification-targets",
            Some(&a),
            Some(target_body.clone()),
        )
        .await;
    assert_eq!(s, 201, "{t}");
    let (s, e, _) = srv
        .call(
            "POST",
            "/v1/notification-targets",
            Some(&b),
            Some(target_body),
        )
        .await;
    assert_eq!((s, error_of(&e).1.as_deref()), (400, Some("url")), "{e}");
    // An update is checked the same way: a range neither allows is refused for A too.
    let (s, e, _) = srv
        .call(
            "PATCH",
            "/v1/notification-targets/ops",
            Some(&a),
            Some(json!({"url": "http://10.0.0.1/alerts"})),
        )
        .await;
    assert_eq!((s, error_of(&e).1.as_deref()), (400, Some("url")), "{e}");

    // Webhook endpoints' fan-out targets: A's is accepted and delivered to, B's refused.
    let endpoint = json!({"slug": "gh", "targets": [format!("{hook}/fan")]});
    let (s, ep, _) = srv
        .call(
            "POST",
            "/v1/webhook-endpoints",
            Some(&a),
            Some(endpoint.clone()),
        )
        .await;
    assert_eq!(s, 201, "{ep}");
    let (s, e, _) = srv
        .call("POST", "/v1/webhook-endpoints", Some(&b), Some(endpoint))
        .await;
    assert_eq!(
        (s, error_of(&e).1.as_deref()),
        (400, Some("targets")),
        "{e}"
    );
    let path = ep["path"].as_str().expect("an address").to_string();
    let (s, r, _) = srv
        .send(
            srv.raw("POST", &path)
                .header("content-type", "application/json")
                .body(r#"{"id":"evt_1"}"#),
        )
        .await;
    assert_eq!((s, &r["deliveries"]), (200, &json!(1)), "{r}");
    let mut delivered = false;
    for _ in 0..300 {
        if seen.lock().unwrap().iter().any(|p| p == "/fan") {
            delivered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        delivered,
        "A's fan-out reached its loopback target (the worker checks A's list too)"
    );
    let _ = stop.send(true);
}
