//! HTTP jobs are checked at creation: a job on the queue `http` must be an HTTP request the
//! SSRF guard accepts (400 naming the field otherwise); allowed ranges are server config.

mod http_common;

use http_common::{error_of, TestServer};
use pgferry_server::ServerConfig;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_jobs_are_checked_when_created() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let k = srv.key("hj", &["admin"]).await;
    for (args, field) in [
        (json!({"url": "http://127.0.0.1:9/x"}), "args.url"),
        (json!({"url": "http://2130706433/"}), "args.url"),
        (
            json!({"url": "http://[::ffff:169.254.169.254]/"}),
            "args.url",
        ),
        (json!({"url": "file:///etc/passwd"}), "args.url"),
        (
            json!({"url": "http://example.com/", "method": "GE T"}),
            "args.method",
        ),
        (
            json!({"url": "http://example.com/", "timeout_ms": 0}),
            "args.timeout_ms",
        ),
        (
            json!({"url": "http://example.com/", "expect_status": [99]}),
            "args.expect_status",
        ),
        (json!({"href": "http://example.com/"}), "args"),
    ] {
        let (s, e, _) = srv
            .call(
                "POST",
                "/v1/jobs",
                Some(&k),
                Some(json!({"queue": "http", "kind": "http", "args": args})),
            )
            .await;
        assert_eq!(
            (s, error_of(&e).1.as_deref()),
            (400, Some(field)),
            "{args}: {e}"
        );
    }
    // In a batch the job's index is named.
    let (s, e, _) = srv
        .call(
            "POST",
            "/v1/jobs/batch",
            Some(&k),
            Some(json!({"jobs": [
                {"queue": "http", "kind": "http", "args": {"url": "http://93.184.215.14/"}},
                {"queue": "http", "kind": "http", "args": {"url": "http://10.0.0.1/"}},
            ]})),
        )
        .await;
    assert_eq!(
        (s, error_of(&e).1.as_deref()),
        (400, Some("jobs[1].args.url")),
        "{e}"
    );
    // Public destinations, and other queues, are accepted.
    let (s, _, _) = srv
        .call(
            "POST",
            "/v1/jobs",
            Some(&k),
            Some(
                json!({"queue": "http", "kind": "http", "args": {"url": "http://93.184.215.14/"}}),
            ),
        )
        .await;
    assert_eq!(s, 201);
    let (s, _, _) = srv
        .call(
            "POST",
            "/v1/jobs",
            Some(&k),
            Some(json!({"queue": "other", "kind": "http", "args": {"url": "http://127.0.0.1/"}})),
        )
        .await;
    assert_eq!(s, 201);

    // A server whose HTTP jobs may reach loopback accepts it.
    let mut config = ServerConfig::default();
    config.http.http_jobs_allow =
        pgferry_http_jobs::Allow::of(&[pgferry_http_jobs::Range::Loopback]);
    let srv = TestServer::start(config).await;
    let k = srv.key("hj", &["admin"]).await;
    let (s, e, _) = srv
        .call(
            "POST",
            "/v1/jobs",
            Some(&k),
            Some(json!({"queue": "http", "kind": "http", "args": {"url": "http://127.0.0.1:9/x"}})),
        )
        .await;
    assert_eq!(s, 201, "{e}");
}
