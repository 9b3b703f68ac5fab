//! A monitor's `targets` (alert routing) and `realert_ms` (repeated alerts) through the HTTP
//! API: echoed back, validated with the field named, named targets checked to exist within
//! the caller's tenant. (Routing and repeats themselves: pgferry-monitors tests/routing.rs.)

mod http_common;

use http_common::{error_of, TestServer};
use pgferry_http_jobs::{Allow, Range};
use pgferry_server::http::HttpConfig;
use pgferry_server::ServerConfig;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitor_targets_and_realert_are_checked_and_kept() {
    let srv = TestServer::start(ServerConfig {
        http: HttpConfig {
            http_jobs_allow: Allow::of(&[Range::Loopback]),
            ..HttpConfig::default()
        },
        ..ServerConfig::default()
    })
    .await;
    let a = srv.key("tenant-a", &["admin"]).await;
    let b = srv.key("tenant-b", &["admin"]).await;
    let (s, _, _) = srv
        .call(
            "POST",
            "/v1/notification-targets",
            Some(&b),
            Some(json!({"name": "pager", "url": "http://127.0.0.1:9/pager"})),
        )
        .await;
    assert_eq!(s, 201);
    let monitor = |extra: serde_json::Value| {
        let mut body = json!({"name": "nightly", "period_ms": 60000});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    // B's target is not A's: refused as unknown, naming the field.
    for (extra, field) in [
        (json!({"targets": ["pager"]}), "targets"),
        (json!({"targets": []}), "targets"),
        (json!({"targets": null}), "targets"),
        (json!({"targets": ["pager", "pager"]}), "targets"),
        (json!({"realert_ms": 1000}), "realert_ms"),
        (json!({"realert_ms": null}), "realert_ms"),
    ] {
        let (s, e, _) = srv
            .call(
                "POST",
                "/v1/monitors",
                Some(&a),
                Some(monitor(extra.clone())),
            )
            .await;
        assert_eq!(
            (s, error_of(&e).1.as_deref()),
            (400, Some(field)),
            "{extra}: {e}"
        );
    }
    let (s, _, _) = srv
        .call(
            "POST",
            "/v1/notification-targets",
            Some(&a),
            Some(json!({"name": "pager", "url": "http://127.0.0.1:9/pager"})),
        )
        .await;
    assert_eq!(s, 201);
    let (s, m, _) = srv
        .call(
            "POST",
            "/v1/monitors",
            Some(&a),
            Some(monitor(
                json!({"targets": ["pager"], "realert_ms": 3_600_000}),
            )),
        )
        .await;
    assert_eq!(s, 201, "{m}");
    assert_eq!(
        (m["targets"].clone(), m["realert_ms"].clone()),
        (json!(["pager"]), json!(3_600_000))
    );
    let (_, other, _) = srv
        .call(
            "POST",
            "/v1/monitors",
            Some(&a),
            Some(json!({"name": "plain", "period_ms": 60000})),
        )
        .await;
    assert!(
        other["targets"].is_null() && other["realert_ms"].is_null(),
        "{other}"
    );
}
