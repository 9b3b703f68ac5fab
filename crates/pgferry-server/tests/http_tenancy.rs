//! Tenancy over HTTP: isolation between tenants, revocation, per-key rate limits.

mod http_common;

use std::time::{Duration, Instant};

use http_common::{error_of, TestServer};
use pgferry_server::ServerConfig;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_cannot_see_claim_or_complete_each_others_jobs_and_queues() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let a = srv.key("tenant-a", &["admin"]).await;
    let b = srv.key("tenant-b", &["admin"]).await;

    // Both use the queue name "shared"; B also has a queue A never touches.
    let (_, ja, _) = srv
        .call(
            "POST",
            "/v1/jobs",
            Some(&a),
            Some(json!({"queue": "shared", "kind": "k", "args": "a"})),
        )
        .await;
    let (s, jb, _) = srv
        .call(
            "POST",
            "/v1/jobs/batch",
            Some(&b),
            Some(json!({"jobs": [
                {"queue": "shared", "kind": "k", "args": "b"},
                {"queue": "b-only", "kind": "k", "args": "b"},
            ]})),
        )
        .await;
    assert_eq!(s, 201, "{jb}");

    // A's claim on "shared" returns only A's job, however many it asks for.
    let got = srv.claim_n(&a, "shared", 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["id"], ja["job_id"]);
    assert_eq!(got[0]["args"], "a");
    let (_, more, _) = srv
        .call(
            "POST",
            "/v1/workers/claim",
            Some(&a),
            Some(json!({"queue": "shared", "max": 10, "wait_ms": 500})),
        )
        .await;
    assert_eq!(more["jobs"], json!([]), "A must not receive B's job");

    // Queues: A lists only its own; B's queue is 404 for A.
    let (_, qa, _) = srv.call("GET", "/v1/queues", Some(&a), None).await;
    let names: Vec<&str> = qa["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shared"]);
    let (s, e, _) = srv.call("GET", "/v1/queues/b-only", Some(&a), None).await;
    assert_eq!((s, error_of(&e).0.as_str()), (404, "not_found"));
    let (s, _, _) = srv.call("GET", "/v1/queues/b-only", Some(&b), None).await;
    assert_eq!(s, 200);

    // A changing "shared" changes its own queue, not B's.
    let (s, _, _) = srv
        .call(
            "PATCH",
            "/v1/queues/shared",
            Some(&a),
            Some(json!({"max_attempts": 2})),
        )
        .await;
    assert_eq!(s, 200);
    let (_, qb, _) = srv.call("GET", "/v1/queues/shared", Some(&b), None).await;
    assert_eq!(qb["settings"]["max_attempts"], 25, "{qb}");

    // B claims its job; A cannot complete it with B's token (404), B can.
    let bjobs = srv.claim_n(&b, "shared", 1).await;
    assert_eq!(bjobs[0]["id"], jb["job_ids"][0]);
    let token = bjobs[0]["token"].clone();
    let (s, e, _) = srv
        .call(
            "POST",
            "/v1/workers/complete",
            Some(&a),
            Some(json!({"results": [{"token": token}]})),
        )
        .await;
    assert_eq!(
        (s, error_of(&e)),
        (404, ("not_found".into(), Some("results[0].token".into())))
    );
    let (s, e, _) = srv
        .call(
            "POST",
            "/v1/workers/heartbeat",
            Some(&a),
            Some(json!({"tokens": [token]})),
        )
        .await;
    assert_eq!((s, error_of(&e).0.as_str()), (404, "not_found"));
    let (s, done, _) = srv
        .call(
            "POST",
            "/v1/workers/complete",
            Some(&b),
            Some(json!({"results": [{"token": token}]})),
        )
        .await;
    assert_eq!(s, 200, "{done}");
    assert_eq!(
        done["results"][0]["stale"], false,
        "A's refused attempt must not have counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_key_stops_working_within_the_cache_ttl() {
    let mut config = ServerConfig::default();
    config.auth.cache_ttl = Duration::from_millis(200);
    let srv = TestServer::start(config).await;
    let key = srv.key("acme", &["read"]).await;
    let other = srv.key("acme", &["read"]).await;
    let (s, _, _) = srv.call("GET", "/v1/queues", Some(&key), None).await;
    assert_eq!(s, 200);
    srv.revoke(&key).await;
    // Bounded wait for the cache entry to expire; the assertion is on the outcome only.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        let (s, b, _) = srv.call("GET", "/v1/queues", Some(&key), None).await;
        if s != 200 || Instant::now() > deadline {
            break (s, b);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.0, 401, "{}", status.1);
    assert_eq!(error_of(&status.1).0, "unauthenticated");
    // Other keys of the tenant are unaffected.
    let (s, _, _) = srv.call("GET", "/v1/queues", Some(&other), None).await;
    assert_eq!(s, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_is_per_key_with_retry_after() {
    let mut config = ServerConfig::default();
    // 3 at once, then one per ~17 minutes: the 4th request inside this test is refused.
    config.http.rate_burst = 3.0;
    config.http.rate_per_sec = 0.001;
    let srv = TestServer::start(config).await;
    let key = srv.key("acme", &["read"]).await;
    let other = srv.key("acme", &["read"]).await;
    for _ in 0..3 {
        let (s, b, _) = srv.call("GET", "/v1/queues", Some(&key), None).await;
        assert_eq!(s, 200, "{b}");
    }
    let (s, b, h) = srv.call("GET", "/v1/queues", Some(&key), None).await;
    assert_eq!((s, error_of(&b).0.as_str()), (429, "rate_limited"));
    let retry: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry >= 1, "Retry-After {retry}");
    // Another key has its own bucket.
    let (s, _, _) = srv.call("GET", "/v1/queues", Some(&other), None).await;
    assert_eq!(s, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_used_at_is_written_at_most_every_few_minutes() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let key = srv.key("acme", &["read"]).await;
    let prefix = pgferry_server::auth::ApiKey::parse(&key).unwrap().prefix;
    let db = srv.db.connect().await;
    let last_used = || async {
        db.query_one(
            "SELECT last_used_at FROM pgferry.api_keys WHERE prefix = $1",
            &[&prefix],
        )
        .await
        .unwrap()
        .get::<_, Option<std::time::SystemTime>>(0)
    };
    assert_eq!(last_used().await, None);
    let (s, _, _) = srv.call("GET", "/v1/queues", Some(&key), None).await;
    assert_eq!(s, 200);
    let first = last_used().await.expect("set by the first use");

    // A recent value is left alone even when the cache is cold...
    srv.state.auth.clear_cache();
    let (s, _, _) = srv.call("GET", "/v1/queues", Some(&key), None).await;
    assert_eq!(s, 200);
    assert_eq!(last_used().await, Some(first));

    // ...an old one is refreshed.
    db.execute(
        "UPDATE pgferry.api_keys SET last_used_at = now() - interval '10 minutes' WHERE prefix = $1",
        &[&prefix],
    )
    .await
    .unwrap();
    srv.state.auth.clear_cache();
    let (s, _, _) = srv.call("GET", "/v1/queues", Some(&key), None).await;
    assert_eq!(s, 200);
    let refreshed = last_used().await.unwrap();
    assert!(refreshed >= first, "{refreshed:?} < {first:?}");
}
