//! The HTTP API over a real socket: jobs round trip through HTTP workers, long-poll wake-up,
//! every error status, all-or-nothing batches, metrics.

mod http_common;

use http_common::{error_of, TestServer};
use pgferry_server::ServerConfig;
use serde_json::{json, Value};

fn small_limits() -> ServerConfig {
    let mut c = ServerConfig::default();
    c.http.max_job_bytes = 1024;
    c.http.max_body_bytes = 64 * 1024;
    c.http.max_batch = 10;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_claim_complete_round_trip_with_metrics() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let key = srv.key("acme", &["produce", "consume"]).await;
    let k = Some(key.as_str());

    let (s, b, _) = srv
        .call("POST", "/v1/jobs", k, Some(json!({"queue": "mail", "kind": "send", "args": {"n": 0}, "meta": {"traceparent": "00-abc"}})))
        .await;
    assert_eq!(s, 201, "{b}");
    let first = b["job_id"].as_i64().unwrap();
    let (s, b, _) = srv
        .call("POST", "/v1/jobs/batch", k, Some(json!({"jobs": [
            {"queue": "mail", "kind": "send", "args": {"n": 1}},
            {"queue": "mail", "kind": "send", "args": {"n": 2}, "priority": 2, "max_attempts": 1},
        ]})))
        .await;
    assert_eq!(s, 201, "{b}");
    let mut ids: Vec<i64> = b["job_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    ids.insert(0, first);

    let jobs = srv.claim_n(&key, "mail", 3).await;
    let mut claimed: Vec<i64> = jobs.iter().map(|j| j["id"].as_i64().unwrap()).collect();
    claimed.sort();
    assert_eq!(claimed, ids);
    let by_n = |n: i64| jobs.iter().find(|j| j["args"]["n"] == n).unwrap().clone();
    assert_eq!(by_n(0)["meta"]["traceparent"], "00-abc");
    assert_eq!(by_n(2)["max_attempts"], 1);

    // Success with a result, a retryable failure and a permanent one, in one request.
    let results = json!({"results": [
        {"token": by_n(0)["token"], "result": {"ok": true}},
        {"token": by_n(1)["token"], "error": {"message": "try again", "retry_delay_ms": 0}},
        {"token": by_n(2)["token"], "error": {"message": "boom"}},
    ]});
    let (s, b, _) = srv
        .call("POST", "/v1/workers/complete", k, Some(results.clone()))
        .await;
    assert_eq!(s, 200, "{b}");
    let stale: Vec<bool> = b["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["stale"].as_bool().unwrap())
        .collect();
    assert_eq!(stale, [false, false, false]);
    // The same outcomes again: first outcome won, these are stale.
    let (s, b, _) = srv
        .call("POST", "/v1/workers/complete", k, Some(results))
        .await;
    assert_eq!(s, 200, "{b}");
    assert!(
        b["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["stale"] == true),
        "{b}"
    );

    // The zero-delay retry comes back as attempt 2 of the same job.
    let again = srv.claim_n(&key, "mail", 1).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0]["id"], by_n(1)["id"]);
    assert_eq!(again[0]["attempt"], 2);

    let text = srv
        .http
        .get(format!("{}/metrics", srv.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "pgferry_jobs_enqueued_total{tenant=\"acme\",queue=\"mail\"} 3",
        "pgferry_jobs_claimed_total{tenant=\"acme\",queue=\"mail\"} 4",
        "pgferry_jobs_completed_total{tenant=\"acme\",queue=\"mail\"} 1",
        // Stale (repeated) outcomes are not counted.
        "pgferry_jobs_failed_total{tenant=\"acme\",queue=\"mail\"} 2",
        "pgferry_coalescer_requests_total{kind=\"enqueue\"} 2",
        "pgferry_enqueue_commit_seconds_count 2",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    assert!(
        text.contains("pgferry_claim_seconds_bucket{le=\"+Inf\"}"),
        "{text}"
    );
    assert!(text.contains("pgferry_pool_max 8"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_claim_wakes_up_on_enqueue() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let key = srv.key("acme", &["produce", "consume"]).await;
    let waiting = {
        let req = srv
            .raw("POST", "/v1/workers/claim")
            .bearer_auth(&key)
            .json(&json!({"queue": "later", "max": 1, "wait_ms": 30000}));
        tokio::spawn(req.send())
    };
    // Give the claim time to find the queue empty and start waiting (if it has not, the
    // test still passes for the right reason: the job is there when it looks).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (s, b, _) = srv
        .call(
            "POST",
            "/v1/jobs",
            Some(&key),
            Some(json!({"queue": "later", "kind": "k"})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    let resp = waiting.await.unwrap().expect("claim request");
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    // Without a wake-up the claim would answer an empty list after its 30 s wait.
    assert_eq!(body["jobs"][0]["id"], b["job_id"], "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_status_has_the_json_shape() {
    let srv = TestServer::start(small_limits()).await;
    let key = srv.key("acme", &["produce", "consume", "read"]).await;
    let reader = srv.key("acme", &["read"]).await;
    let k = Some(key.as_str());
    let job = |q: &str| json!({"queue": q, "kind": "k", "args": {}});

    // 400: malformed JSON, wrong type, unknown field, invalid name, bad id.
    let (s, b, _) = srv
        .send(
            srv.raw("POST", "/v1/jobs")
                .bearer_auth(&key)
                .body("{\"queue\": "),
        )
        .await;
    // Cut off inside a field: the field is named.
    assert_eq!(
        (s, error_of(&b)),
        (400, ("malformed_json".into(), Some("queue".into())))
    );
    let (s, b, _) = srv
        .send(
            srv.raw("POST", "/v1/jobs")
                .bearer_auth(&key)
                .body("not json"),
        )
        .await;
    assert_eq!(
        (s, error_of(&b)),
        (400, ("malformed_json".into(), Some("body".into())))
    );
    let (s, b, _) = srv
        .call(
            "POST",
            "/v1/jobs/batch",
            k,
            Some(json!({"jobs": [job("a"), {"queue": "a", "kind": "k", "priority": "high"}]})),
        )
        .await;
    assert_eq!(
        (s, error_of(&b).1),
        (400, Some("jobs[1].priority".into())),
        "{b}"
    );
    let (s, b, _) = srv
        .call(
            "POST",
            "/v1/jobs",
            k,
            Some(json!({"queue": "a", "kind": "k", "delay": 5})),
        )
        .await;
    assert_eq!((s, error_of(&b).1), (400, Some("delay".into())), "{b}");
    let (s, b, _) = srv
        .call("POST", "/v1/jobs", k, Some(json!({"kind": "k"})))
        .await;
    assert_eq!((s, error_of(&b).1), (400, Some("queue".into())), "{b}");
    let (s, b, _) = srv.call("POST", "/v1/jobs", k, Some(job("Bad Name"))).await;
    assert_eq!(
        (s, error_of(&b)),
        (400, ("invalid_name".into(), Some("queue".into())))
    );
    let (s, b, _) = srv
        .call("POST", "/v1/jobs", k, Some(job(&"q".repeat(49))))
        .await;
    assert_eq!((s, error_of(&b).1), (400, Some("queue".into())), "{b}");
    let (s, b, _) = srv.call("GET", "/v1/jobs/abc", k, None).await;
    assert_eq!((s, error_of(&b).1), (400, Some("id".into())), "{b}");
    let (s, b, _) = srv
        .call(
            "POST",
            "/v1/workers/claim",
            k,
            Some(json!({"queue": "a", "wait_ms": 30001})),
        )
        .await;
    assert_eq!((s, error_of(&b).1), (400, Some("wait_ms".into())), "{b}");

    // A struct written as an array (serde would take it) and a job that is not an object.
    let (s, b, _) = srv
        .call("PATCH", "/v1/queues/a", k, Some(json!([null, null])))
        .await;
    assert_eq!((s, error_of(&b).1), (400, Some("body".into())), "{b}");
    let (s, b, _) = srv
        .call(
            "POST",
            "/v1/jobs/batch",
            k,
            Some(json!({"jobs": [job("a"), ["a", "k"]]})),
        )
        .await;
    assert_eq!((s, error_of(&b).1), (400, Some("jobs[1]".into())), "{b}");
    let (s, b, _) = srv
        .call(
            "POST",
            "/v1/workers/complete",
            k,
            Some(json!({"results": [{"token": "00", "error": ["m"]}]})),
        )
        .await;
    assert_eq!(
        (s, error_of(&b).1),
        (400, Some("results[0].error".into())),
        "{b}"
    );

    // 401: missing, malformed, unknown key.
    for auth in [None, Some("Basic abc"), Some("Bearer nope"), Some("Bearer pgf_000000000000_0000000000000000000000000000000000000000000000000000000000000000")] {
        let mut req = srv.raw("GET", "/v1/queues");
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let (s, b, h) = srv.send(req).await;
        assert_eq!((s, error_of(&b).0.as_str()), (401, "unauthenticated"), "{auth:?}");
        assert_eq!(h["www-authenticate"], "Bearer");
    }

    // 403: a read-only key cannot enqueue, claim or change settings.
    for (m, path, body) in [
        ("POST", "/v1/jobs", job("a")),
        ("POST", "/v1/workers/claim", json!({"queue": "a"})),
        ("PATCH", "/v1/queues/a", json!({"max_attempts": 3})),
    ] {
        let (s, b, _) = srv.call(m, path, Some(&reader), Some(body)).await;
        assert_eq!((s, error_of(&b).0.as_str()), (403, "forbidden"), "{path}");
    }

    // 404: unknown queue, unknown route, forged attempt token.
    let (s, b, _) = srv.call("GET", "/v1/queues/nosuch", k, None).await;
    assert_eq!((s, error_of(&b).0.as_str()), (404, "not_found"));
    let (s, b, _) = srv.call("GET", "/v1/nothing/here", k, None).await;
    assert_eq!((s, error_of(&b).0.as_str()), (404, "not_found"));
    let (s, b, _) = srv
        .call(
            "POST",
            "/v1/workers/complete",
            k,
            Some(json!({"results": [{"token": "00ff"}]})),
        )
        .await;
    assert_eq!(
        (s, error_of(&b)),
        (404, ("not_found".into(), Some("results[0].token".into())))
    );

    // 413: one job over the per-job limit, a batch over the batch limit, a body over the
    // body limit.
    let big = "x".repeat(2000);
    let (s, b, _) = srv
        .call(
            "POST",
            "/v1/jobs/batch",
            k,
            Some(json!({"jobs": [job("a"), {"queue": "a", "kind": "k", "args": big}]})),
        )
        .await;
    assert_eq!(
        (s, error_of(&b)),
        (
            413,
            ("payload_too_large".into(), Some("jobs[1].args".into()))
        )
    );
    let (s, b, _) = srv
        .call(
            "POST",
            "/v1/jobs/batch",
            k,
            Some(json!({"jobs": vec![job("a"); 11]})),
        )
        .await;
    assert_eq!((s, error_of(&b).0.as_str()), (413, "batch_too_large"));
    let huge = "y".repeat(100 * 1024);
    let (s, b, _) = srv
        .call(
            "POST",
            "/v1/jobs",
            k,
            Some(json!({"queue": "a", "kind": "k", "args": huge})),
        )
        .await;
    assert_eq!((s, error_of(&b).0.as_str()), (413, "payload_too_large"));

    // 404 for unknown job ids; 409 for operations the job's state forbids.
    for (m, path) in [
        ("GET", "/v1/jobs/987654321"),
        ("POST", "/v1/jobs/987654321/cancel"),
        ("POST", "/v1/jobs/987654321/retry"),
    ] {
        let (s, b, _) = srv.call(m, path, k, None).await;
        assert_eq!(
            (s, error_of(&b).0.as_str()),
            (404, "not_found"),
            "{m} {path}"
        );
    }
    let (_, e, _) = srv.call("POST", "/v1/jobs", k, Some(job("c"))).await;
    let id = e["job_id"].as_i64().unwrap();
    let (s, b, _) = srv
        .call("POST", &format!("/v1/jobs/{id}/retry"), k, None)
        .await;
    assert_eq!(
        (s, error_of(&b).0.as_str()),
        (409, "conflict"),
        "retry of a pending job"
    );
    let claimed = srv.claim_n(&key, "c", 1).await;
    let (s, _, _) = srv
        .call(
            "POST",
            "/v1/workers/complete",
            k,
            Some(json!({"results": [{"token": claimed[0]["token"]}]})),
        )
        .await;
    assert_eq!(s, 200);
    let (s, b, _) = srv
        .call("POST", &format!("/v1/jobs/{id}/cancel"), k, None)
        .await;
    assert_eq!(
        (s, error_of(&b).0.as_str()),
        (409, "conflict"),
        "cancel of a completed job"
    );

    // Listing jobs needs a queue; unknown parameters and bad values are named.
    for (q, field) in [
        ("", "queue"),
        ("?queue=a&state=lost", "state"),
        ("?queue=a&limit=101", "limit"),
        ("?queue=a&colour=red", "colour"),
        ("?queue=a&cursor=zz", "cursor"),
    ] {
        let (s, b, _) = srv.call("GET", &format!("/v1/jobs{q}"), k, None).await;
        assert_eq!((s, error_of(&b).1), (400, Some(field.into())), "{q}: {b}");
    }

    // None of the refused enqueues wrote anything: the queue holds only what follows.
    let (s, b, _) = srv.call("POST", "/v1/jobs", k, Some(job("a"))).await;
    assert_eq!(s, 201, "{b}");
    let (_, c, _) = srv
        .call(
            "POST",
            "/v1/workers/claim",
            k,
            Some(json!({"queue": "a", "max": 100, "wait_ms": 2000})),
        )
        .await;
    let got: Vec<&Value> = c["jobs"].as_array().unwrap().iter().collect();
    assert_eq!(got.len(), 1, "{c}");
    assert_eq!(got[0]["id"], b["job_id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_settings_are_audited_and_validated() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let admin = srv.key("acme", &["admin"]).await;
    let a = Some(admin.as_str());
    let (s, b, _) = srv
        .call(
            "PATCH",
            "/v1/queues/reports",
            a,
            Some(json!({"max_attempts": 3, "lease_ms": 5000})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let subset = |b: &Value| {
        json!([
            b["settings"]["shards"],
            b["settings"]["max_attempts"],
            b["settings"]["lease_ms"]
        ])
    };
    assert_eq!(subset(&b), json!([1, 3, 5000]), "{b}");
    // Absent settings keep their values.
    let (s, b, _) = srv
        .call("PATCH", "/v1/queues/reports", a, Some(json!({"shards": 2})))
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(subset(&b), json!([2, 3, 5000]), "{b}");
    let (s, b, _) = srv
        .call(
            "PATCH",
            "/v1/queues/reports",
            a,
            Some(json!({"backoff_base_ms": 10, "aging_ms": 500})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(subset(&b), json!([2, 3, 5000]), "{b}");
    assert_eq!(
        (
            b["settings"]["backoff_base_ms"].as_i64(),
            b["settings"]["aging_ms"].as_i64()
        ),
        (Some(10), Some(500))
    );
    let (s, b, _) = srv
        .call(
            "PATCH",
            "/v1/queues/reports",
            a,
            Some(json!({"shards": 65})),
        )
        .await;
    assert_eq!((s, error_of(&b).1), (400, Some("shards".into())), "{b}");

    // durability: "sync" until set, kept when absent, a bad value changes nothing.
    let (_, b, _) = srv.call("GET", "/v1/queues/reports", a, None).await;
    assert_eq!(b["settings"]["durability"], "sync", "{b}");
    let (s, b, _) = srv
        .call(
            "PATCH",
            "/v1/queues/reports",
            a,
            Some(json!({"durability": "async"})),
        )
        .await;
    assert_eq!(
        (s, &b["settings"]["durability"]),
        (200, &json!("async")),
        "{b}"
    );
    let (s, b, _) = srv
        .call(
            "PATCH",
            "/v1/queues/reports",
            a,
            Some(json!({"aging_ms": 600})),
        )
        .await;
    assert_eq!(
        (s, &b["settings"]["durability"]),
        (200, &json!("async")),
        "{b}"
    );
    for bad in [json!("fast"), json!("ASYNC"), json!(1)] {
        let body = json!({"durability": bad, "max_attempts": 5});
        let (s, b, _) = srv.call("PATCH", "/v1/queues/reports", a, Some(body)).await;
        assert_eq!(
            (s, error_of(&b).1),
            (400, Some("durability".into())),
            "{bad}: {b}"
        );
    }
    let (s, b, _) = srv.call("GET", "/v1/queues", a, None).await;
    assert_eq!(s, 200);
    assert_eq!(b["queues"][0]["name"], "reports");
    let q = &b["queues"][0]["settings"];
    assert_eq!(
        (&q["durability"], &q["max_attempts"], &q["aging_ms"]),
        (&json!("async"), &json!(3), &json!(600)),
        "{b}"
    );

    let c = srv.db.connect().await;
    let rows = c
        .query("SELECT actor, action, target, key_id IS NOT NULL FROM pgferry.audit_log WHERE action = 'queue.update' ORDER BY audit_id", &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), 5);
    let (actor, target, with_key): (String, String, bool) =
        (rows[0].get(0), rows[0].get(2), rows[0].get(3));
    assert_eq!(
        (actor.as_str(), target.as_str(), with_key),
        ("api", "reports", true)
    );
}

/// The server's panic guard (the layer `router()` installs) answers a panicking handler
/// with a 500 in the JSON error shape, and the server keeps serving.
#[tokio::test]
async fn a_panicking_handler_answers_500_json() {
    async fn boom() -> &'static str {
        panic!("handler bug")
    }
    let app = axum::Router::new()
        .route("/boom", axum::routing::get(boom))
        .route("/fine", axum::routing::get(|| async { "ok" }))
        .layer(pgferry_server::http::error::panic_guard());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let resp = http.get(format!("{base}/boom")).send().await.unwrap();
    assert_eq!(resp.status(), 500);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(error_of(&body).0, "internal");
    let resp = http.get(format!("{base}/fine")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
}
