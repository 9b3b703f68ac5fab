//! Bad enqueue input over HTTP (issue 4 "Proof"): negative delays and run times, attempts
//! out of range, bad names, unknown ids — a typed 400/404 naming the field, nothing written.

mod http_common;

use http_common::{error_of, TestServer};
use pgferry_server::ServerConfig;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_enqueues_name_the_field_and_write_nothing() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let k = srv.key("acme", &["admin"]).await;
    let job = |extra: serde_json::Value| {
        let mut j = json!({"queue": "q", "kind": "k"});
        j.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        j
    };
    for (body, field) in [
        (job(json!({"delay_ms": -5})), "delay_ms"),
        (job(json!({"run_at_unix_ms": -5})), "run_at_unix_ms"),
        (job(json!({"max_attempts": 0})), "max_attempts"),
        (job(json!({"max_attempts": -1})), "max_attempts"),
        (job(json!({"max_attempts": 1001})), "max_attempts"),
        (job(json!({"priority": 4})), "priority"),
        (json!({"queue": "Bad Queue", "kind": "k"}), "queue"),
        (json!({"queue": "q", "kind": "has space"}), "kind"),
    ] {
        let (s, b, _) = srv
            .call("POST", "/v1/jobs", Some(&k), Some(body.clone()))
            .await;
        assert_eq!(s, 400, "{body} -> {b}");
        let got = error_of(&b).1.unwrap_or_default();
        assert!(got.contains(field), "{body}: field {got:?}, want {field}");
        // In a batch, the whole batch is refused.
        let batch = json!({"jobs": [{"queue": "q", "kind": "k"}, body]});
        let (s, b, _) = srv
            .call("POST", "/v1/jobs/batch", Some(&k), Some(batch))
            .await;
        assert_eq!(s, 400, "{b}");
    }
    let c = srv.db.connect().await;
    let n: i64 = c
        .query_one(
            "SELECT (SELECT count(*) FROM pgferry.ready) + (SELECT count(*) FROM pgferry.scheduled)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "nothing written");
    for path in ["/v1/jobs/987654321", "/v1/jobs/987654321/cancel"] {
        let method = if path.ends_with("cancel") {
            "POST"
        } else {
            "GET"
        };
        let (s, b, _) = srv.call(method, path, Some(&k), None).await;
        assert_eq!(
            (s, error_of(&b).0.as_str()),
            (404, "not_found"),
            "{path}: {b}"
        );
    }
}
