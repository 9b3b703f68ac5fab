//! Rate limits of the unauthenticated addresses on a real server: `/ping/{token}` (with
//! `/start` and `/fail`, one bucket per token) and `/in/{address}` (one per endpoint) answer
//! 429 with `Retry-After` and the JSON error body once their bucket is empty, while another
//! token or address is unaffected.

mod http_common;

use http_common::{error_of, TestServer};
use pgferry_http_jobs::{Allow, Range};
use pgferry_server::http::HttpConfig;
use pgferry_server::ServerConfig;
use serde_json::json;

/// A bucket of 3 that refills once in ~17 minutes: the 4th request within the test is over.
async fn server() -> TestServer {
    TestServer::start(ServerConfig {
        http: HttpConfig {
            http_jobs_allow: Allow::of(&[Range::Loopback]),
            public_rate_per_sec: 0.001,
            public_rate_burst: 3.0,
            ..HttpConfig::default()
        },
        ..ServerConfig::default()
    })
    .await
}

fn assert_limited(s: u16, body: &serde_json::Value, headers: &reqwest::header::HeaderMap) {
    assert_eq!(s, 429, "{body}");
    assert_eq!(error_of(body).0, "rate_limited", "{body}");
    let secs: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(secs >= 1, "{secs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_are_limited_per_token() {
    let srv = server().await;
    let a = srv.key("tenant-a", &["admin"]).await;
    let mut paths = Vec::new();
    for name in ["one", "two"] {
        let (s, m, _) = srv
            .call(
                "POST",
                "/v1/monitors",
                Some(&a),
                Some(json!({"name": name, "period_ms": 60000})),
            )
            .await;
        assert_eq!(s, 201, "{m}");
        paths.push(m["ping_path"].as_str().unwrap().to_string());
    }
    let one = &paths[0];
    // /start, /fail and the ping itself share the token's bucket.
    for suffix in ["/start", "/fail", ""] {
        let (s, b, _) = srv.send(srv.raw("POST", &format!("{one}{suffix}"))).await;
        assert_eq!(s, 200, "{suffix}: {b}");
    }
    let (s, b, h) = srv.send(srv.raw("GET", one)).await;
    assert_limited(s, &b, &h);
    let (s, b, h) = srv.send(srv.raw("POST", &format!("{one}/start"))).await;
    assert_limited(s, &b, &h);
    // The refused pings were not recorded: three pings on the monitor.
    let (_, pings, _) = srv
        .call("GET", "/v1/monitors/one/pings", Some(&a), None)
        .await;
    assert_eq!(pings["pings"].as_array().unwrap().len(), 3, "{pings}");
    // Another token has its own bucket; unknown tokens are limited alike (no oracle).
    let (s, b, _) = srv.send(srv.raw("POST", &paths[1])).await;
    assert_eq!(s, 200, "{b}");
    for _ in 0..3 {
        let (s, _, _) = srv.send(srv.raw("POST", "/ping/not-a-token")).await;
        assert_eq!(s, 404);
    }
    let (s, b, h) = srv.send(srv.raw("POST", "/ping/not-a-token")).await;
    assert_limited(s, &b, &h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbound_webhooks_are_limited_per_address() {
    let srv = server().await;
    let a = srv.key("tenant-a", &["admin"]).await;
    let mut paths = Vec::new();
    for slug in ["one", "two"] {
        let (s, e, _) = srv
            .call(
                "POST",
                "/v1/webhook-endpoints",
                Some(&a),
                Some(json!({"slug": slug, "targets": ["http://127.0.0.1:9/hook"]})),
            )
            .await;
        assert_eq!(s, 201, "{e}");
        paths.push(e["path"].as_str().unwrap().to_string());
    }
    for i in 0..3 {
        let (s, b, _) = srv
            .send(srv.raw("POST", &paths[0]).body(format!("{{\"n\": {i}}}")))
            .await;
        assert_eq!(s, 200, "{b}");
    }
    let (s, b, h) = srv.send(srv.raw("POST", &paths[0]).body("{}")).await;
    assert_limited(s, &b, &h);
    let (s, b, _) = srv.send(srv.raw("POST", &paths[1]).body("{}")).await;
    assert_eq!(s, 200, "{b}");
    // Only the three accepted events were stored.
    let (_, events, _) = srv
        .call("GET", "/v1/webhook-endpoints/one/events", Some(&a), None)
        .await;
    assert_eq!(events["events"].as_array().unwrap().len(), 3, "{events}");
    let metrics = srv
        .http
        .get(format!("{}/metrics", srv.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("pgferry_webhook_inbound_total{outcome=\"rate_limited\"} 1"),
        "{metrics}"
    );
}
