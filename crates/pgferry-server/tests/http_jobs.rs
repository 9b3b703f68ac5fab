//! Job lookups and controls over HTTP: get, cancel, retry, DLQ, pause/resume, heartbeat,
//! snooze, unique keys, scheduling — and that none of them reaches another tenant's jobs.

mod http_common;

use http_common::{error_of, TestServer};
use pgferry_server::ServerConfig;
use serde_json::{json, Value};

async fn enqueue(srv: &TestServer, key: &str, body: Value) -> (u16, Value) {
    let (s, b, _) = srv.call("POST", "/v1/jobs", Some(key), Some(body)).await;
    (s, b)
}

async fn complete(srv: &TestServer, key: &str, result: Value) -> Value {
    let (s, b, _) = srv
        .call(
            "POST",
            "/v1/workers/complete",
            Some(key),
            Some(json!({"results": [result]})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    b
}

async fn job(srv: &TestServer, key: &str, id: &Value) -> Value {
    let (s, b, _) = srv
        .call("GET", &format!("/v1/jobs/{id}"), Some(key), None)
        .await;
    assert_eq!(s, 200, "{b}");
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_jobs_are_listed_retried_and_purged_per_tenant() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let a = srv.key("tenant-a", &["admin"]).await;
    let b = srv.key("tenant-b", &["admin"]).await;
    // One dead job per tenant, same queue name.
    let mut ids = Vec::new();
    for key in [&a, &b] {
        let (s, e) = enqueue(
            &srv,
            key,
            json!({"queue": "q", "kind": "k", "args": {"who": key[..8]}}),
        )
        .await;
        assert_eq!(s, 201, "{e}");
        let claimed = srv.claim_n(key, "q", 1).await;
        complete(&srv, key, json!({"token": claimed[0]["token"], "error": {"message": "fatal", "retryable": false}})).await;
        ids.push(e["job_id"].clone());
    }
    let (ida, idb) = (&ids[0], &ids[1]);
    assert_eq!(job(&srv, &a, ida).await["state"], "dead");

    // A sees only its own dead job; B's id is 404 for every id-based route.
    let (s, page, _) = srv
        .call("GET", "/v1/dead?queue=q&limit=10", Some(&a), None)
        .await;
    assert_eq!(s, 200, "{page}");
    let listed: Vec<&Value> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| &j["id"])
        .collect();
    assert_eq!(listed, [ida]);
    assert_eq!(page["jobs"][0]["attempts"][0]["error"], "fatal");
    assert_eq!(page["has_more"], false);
    let (_, all, _) = srv.call("GET", "/v1/dead", Some(&a), None).await;
    assert_eq!(all["jobs"].as_array().unwrap().len(), 1, "{all}");
    for (m, path) in [("GET", ""), ("POST", "/cancel"), ("POST", "/retry")] {
        let (s, e, _) = srv
            .call(m, &format!("/v1/jobs/{idb}{path}"), Some(&a), None)
            .await;
        assert_eq!(
            (s, error_of(&e).0.as_str()),
            (404, "not_found"),
            "{m} {path}"
        );
    }
    // Naming B's id in a filter does not reach it either.
    let (_, n, _) = srv
        .call(
            "POST",
            "/v1/dead/purge",
            Some(&a),
            Some(json!({"ids": [idb]})),
        )
        .await;
    assert_eq!(n["count"], 0);
    assert_eq!(job(&srv, &b, idb).await["state"], "dead");

    // A retries its job by id: same id, runs again as attempt 2.
    let (s, r, _) = srv
        .call("POST", &format!("/v1/jobs/{ida}/retry"), Some(&a), None)
        .await;
    assert_eq!(s, 200, "{r}");
    let again = srv.claim_n(&a, "q", 1).await;
    assert_eq!((&again[0]["id"], &again[0]["attempt"]), (ida, &json!(2)));
    // B retries through the DLQ filter, then A's job dies again and is purged.
    let (_, n, _) = srv
        .call(
            "POST",
            "/v1/dead/retry",
            Some(&b),
            Some(json!({"queue": "q"})),
        )
        .await;
    assert_eq!(n["count"], 1);
    complete(&srv, &a, json!({"token": again[0]["token"], "error": {"message": "fatal again", "retryable": false}})).await;
    let (_, n, _) = srv
        .call(
            "POST",
            "/v1/dead/purge",
            Some(&a),
            Some(json!({"error_contains": "again"})),
        )
        .await;
    assert_eq!(n["count"], 1);
    let (_, empty, _) = srv.call("GET", "/v1/dead", Some(&a), None).await;
    assert_eq!(empty["jobs"], json!([]));
    // B's job is back in its queue, untouched by A's purge.
    let bjobs = srv.claim_n(&b, "q", 1).await;
    assert_eq!(&bjobs[0]["id"], idb);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_heartbeat_snooze_and_states() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let k = srv.key("acme", &["produce", "consume", "read"]).await;

    // Cancel a scheduled job: it never runs.
    let (s, later) = enqueue(
        &srv,
        &k,
        json!({"queue": "w", "kind": "k", "delay_ms": 3_600_000}),
    )
    .await;
    assert_eq!(s, 201, "{later}");
    assert_eq!(job(&srv, &k, &later["job_id"]).await["state"], "scheduled");
    let (s, c, _) = srv
        .call(
            "POST",
            &format!("/v1/jobs/{}/cancel", later["job_id"]),
            Some(&k),
            None,
        )
        .await;
    assert_eq!(s, 200, "{c}");
    assert_eq!(c["state"], "cancelled");

    // A running job: heartbeat holds it; a cancel reaches the worker through the heartbeat.
    let (_, run) = enqueue(&srv, &k, json!({"queue": "w", "kind": "k", "args": [1]})).await;
    let claimed = srv.claim_n(&k, "w", 1).await;
    assert_eq!(claimed[0]["id"], run["job_id"]);
    assert_eq!(job(&srv, &k, &run["job_id"]).await["state"], "running");
    let token = claimed[0]["token"].clone();
    let beat = |lease: u64| json!({"tokens": [token.clone()], "lease_ms": lease});
    let (s, hb, _) = srv
        .call(
            "POST",
            "/v1/workers/heartbeat",
            Some(&k),
            Some(beat(30_000)),
        )
        .await;
    assert_eq!(s, 200, "{hb}");
    assert_eq!(
        (&hb["results"][0]["held"], &hb["results"][0]["cancelled"]),
        (&json!(true), &json!(false))
    );
    let (s, _, _) = srv
        .call(
            "POST",
            &format!("/v1/jobs/{}/cancel", run["job_id"]),
            Some(&k),
            None,
        )
        .await;
    assert_eq!(s, 200);
    let (_, hb, _) = srv
        .call(
            "POST",
            "/v1/workers/heartbeat",
            Some(&k),
            Some(beat(30_000)),
        )
        .await;
    assert_eq!(hb["results"][0]["cancelled"], true, "{hb}");
    complete(&srv, &k, json!({"token": token, "cancelled": true})).await;
    assert_eq!(job(&srv, &k, &run["job_id"]).await["state"], "cancelled");
    let (_, hb, _) = srv
        .call(
            "POST",
            "/v1/workers/heartbeat",
            Some(&k),
            Some(beat(30_000)),
        )
        .await;
    assert_eq!(
        hb["results"][0]["held"], false,
        "a finished attempt is no longer held: {hb}"
    );

    // Snooze: runs again later without using up an attempt.
    let (_, sn) = enqueue(
        &srv,
        &k,
        json!({"queue": "w", "kind": "k", "max_attempts": 1}),
    )
    .await;
    let claimed = srv.claim_n(&k, "w", 1).await;
    complete(
        &srv,
        &k,
        json!({"token": claimed[0]["token"], "snooze_ms": 0}),
    )
    .await;
    let again = srv.claim_n(&k, "w", 1).await;
    assert_eq!(again[0]["id"], sn["job_id"]);
    complete(&srv, &k, json!({"token": again[0]["token"], "result": 42})).await;
    let info = job(&srv, &k, &sn["job_id"]).await;
    assert_eq!(info["state"], "completed", "{info}");
    let outcomes: Vec<&Value> = info["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["outcome"])
        .collect();
    assert_eq!(outcomes.last(), Some(&&json!("completed")), "{info}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_keys_answer_duplicates_and_paused_queues_hand_out_nothing() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let k = srv.key("acme", &["admin"]).await;
    let other = srv.key("other", &["admin"]).await;
    let spec = json!({"queue": "u", "kind": "k", "unique_key": "order-7"});
    let (s, first) = enqueue(&srv, &k, spec.clone()).await;
    assert_eq!((s, &first["duplicate"]), (201, &json!(false)), "{first}");
    let (s, dup) = enqueue(&srv, &k, spec.clone()).await;
    assert_eq!(
        (s, &dup["duplicate"], &dup["job_id"]),
        (200, &json!(true), &first["job_id"])
    );
    // Another tenant's identical key is its own.
    let (s, theirs) = enqueue(&srv, &other, spec.clone()).await;
    assert_eq!((s, &theirs["duplicate"]), (201, &json!(false)), "{theirs}");
    let (s, b, _) = srv
        .call(
            "POST",
            "/v1/jobs/batch",
            Some(&k),
            Some(json!({"jobs": [spec, {"queue": "u", "kind": "k"}]})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    assert_eq!(b["duplicates"], json!([true, false]));
    assert_eq!(b["job_ids"][0], first["job_id"]);

    // Paused: claims get nothing; resumed: the jobs come out.
    let (s, q, _) = srv.call("POST", "/v1/queues/u/pause", Some(&k), None).await;
    assert_eq!((s, &q["paused"]), (200, &json!(true)), "{q}");
    let (_, none, _) = srv
        .call(
            "POST",
            "/v1/workers/claim",
            Some(&k),
            Some(json!({"queue": "u", "max": 10, "wait_ms": 300})),
        )
        .await;
    assert_eq!(none["jobs"], json!([]), "{none}");
    let (s, q, _) = srv
        .call("POST", "/v1/queues/u/resume", Some(&k), None)
        .await;
    assert_eq!((s, &q["paused"]), (200, &json!(false)));
    assert_eq!(srv.claim_n(&k, "u", 2).await.len(), 2);
    // Pausing another tenant's queue name only names one's own (absent here: 404).
    let (s, e, _) = srv
        .call("POST", "/v1/queues/nosuch/pause", Some(&k), None)
        .await;
    assert_eq!((s, error_of(&e).0.as_str()), (404, "not_found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traceparent_header_travels_into_the_jobs_meta() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let k = srv.key("acme", &["produce", "consume"]).await;
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (s, b, _) = srv
        .send(
            srv.raw("POST", "/v1/jobs/batch")
                .bearer_auth(&k)
                .header("traceparent", tp)
                .json(&json!({"jobs": [
                    {"queue": "t", "kind": "k", "args": 1},
                    {"queue": "t", "kind": "k", "args": 2, "meta": {"traceparent": "own"}},
                ]})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    // A malformed header is ignored, not an error.
    let (s, _, _) = srv
        .send(
            srv.raw("POST", "/v1/jobs")
                .bearer_auth(&k)
                .header("traceparent", "garbage")
                .json(&json!({"queue": "t", "kind": "k", "args": 3})),
        )
        .await;
    assert_eq!(s, 201);
    let jobs = srv.claim_n(&k, "t", 3).await;
    let meta_of = |n: i64| jobs.iter().find(|j| j["args"] == n).unwrap()["meta"].clone();
    assert_eq!(meta_of(1), json!({"traceparent": tp}));
    assert_eq!(meta_of(2), json!({"traceparent": "own"}));
    assert_eq!(meta_of(3), json!({}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_listed_per_tenant_queue_with_filters_and_pages() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let a = srv.key("tenant-a", &["produce", "consume", "read"]).await;
    let b = srv.key("tenant-b", &["produce", "read"]).await;
    let mut mine = Vec::new();
    for i in 0..5 {
        let (_, e) = enqueue(
            &srv,
            &a,
            json!({"queue": "l", "kind": if i < 3 { "x" } else { "y" }, "args": i}),
        )
        .await;
        mine.push(e["job_id"].clone());
    }
    enqueue(&srv, &b, json!({"queue": "l", "kind": "x"})).await;
    // Finish one so states differ.
    let claimed = srv.claim_n(&a, "l", 1).await;
    complete(&srv, &a, json!({"token": claimed[0]["token"]})).await;

    // Pages of two, newest first, until has_more is false: exactly A's five jobs.
    let mut seen = Vec::new();
    let mut cursor = String::new();
    for _ in 0..10 {
        let (s, page, _) = srv
            .call(
                "GET",
                &format!("/v1/jobs?queue=l&limit=2{cursor}"),
                Some(&a),
                None,
            )
            .await;
        assert_eq!(s, 200, "{page}");
        seen.extend(
            page["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["id"].clone()),
        );
        if page["has_more"] != true {
            break;
        }
        cursor = format!("&cursor={}", page["next_cursor"].as_str().unwrap());
    }
    let mut expected = mine.clone();
    expected.reverse();
    assert_eq!(seen, expected);

    let ids = |body: &Value| -> Vec<Value> {
        body["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].clone())
            .collect()
    };
    let (_, ys, _) = srv
        .call("GET", "/v1/jobs?queue=l&kind=y", Some(&a), None)
        .await;
    assert_eq!(ids(&ys), [mine[4].clone(), mine[3].clone()]);
    let (_, done, _) = srv
        .call("GET", "/v1/jobs?queue=l&state=completed", Some(&a), None)
        .await;
    assert_eq!(ids(&done), [claimed[0]["id"].clone()]);
    // B's listing of its own "l" holds only its job.
    let (_, theirs, _) = srv.call("GET", "/v1/jobs?queue=l", Some(&b), None).await;
    assert_eq!(theirs["jobs"].as_array().unwrap().len(), 1, "{theirs}");
    assert!(!mine.contains(&theirs["jobs"][0]["id"]));
}

/// Queue answers carry counts from the engine's counters (flushed here instead of waiting
/// for the next second), for one queue and in the list; another tenant's jobs never count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_answers_carry_counts_from_the_counters() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let k = srv.key("acme", &["admin"]).await;
    let other = srv.key("other", &["admin"]).await;
    for i in 0..3 {
        let (s, b) = enqueue(
            &srv,
            &k,
            json!({"queue": "cq", "kind": "k", "args": {"i": i}}),
        )
        .await;
        assert_eq!(s, 201, "{b}");
    }
    let (s, b) = enqueue(
        &srv,
        &k,
        json!({"queue": "cq", "kind": "k", "delay_ms": 3_600_000}),
    )
    .await;
    assert_eq!(s, 201, "{b}");
    let (s, b) = enqueue(&srv, &other, json!({"queue": "cq", "kind": "k"})).await;
    assert_eq!(s, 201, "{b}");
    let jobs = srv.claim_n(&k, "cq", 2).await;
    assert_eq!(jobs.len(), 2);
    complete(&srv, &k, json!({"token": jobs[0]["token"]})).await;
    srv.state.engine.flush_counters().await.unwrap();
    let want = json!({
        "pending": 1, "running": 1, "scheduled": 1, "dead": 0,
        "enqueued": 4, "completed": 1, "failed": 0, "cancelled": 0
    });
    let (s, q, _) = srv.call("GET", "/v1/queues/cq", Some(&k), None).await;
    assert_eq!(s, 200, "{q}");
    assert_eq!(q["counts"], want, "{q}");
    let (s, list, _) = srv.call("GET", "/v1/queues", Some(&k), None).await;
    assert_eq!(s, 200, "{list}");
    assert_eq!(list["queues"][0]["counts"], want, "{list}");
    let (_, theirs, _) = srv.call("GET", "/v1/queues/cq", Some(&other), None).await;
    assert_eq!(theirs["counts"]["pending"], 1, "{theirs}");
    assert_eq!(theirs["counts"]["enqueued"], 1, "{theirs}");
}

/// POST /v1/queues/{name}/cancel cancels the matching pending, scheduled and running jobs of
/// the caller's queue only, is refused for bad filters and unknown queues, and is audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_cancel_by_filter() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let k = srv.key("acme", &["admin"]).await;
    let other = srv.key("other", &["admin"]).await;
    let (_, run) = enqueue(&srv, &k, json!({"queue": "bc", "kind": "a"})).await;
    let claimed = srv.claim_n(&k, "bc", 1).await;
    assert_eq!(claimed[0]["id"], run["job_id"]);
    let (_, pend) = enqueue(&srv, &k, json!({"queue": "bc", "kind": "a"})).await;
    let (_, keep) = enqueue(&srv, &k, json!({"queue": "bc", "kind": "b"})).await;
    let (_, sched) = enqueue(
        &srv,
        &k,
        json!({"queue": "bc", "kind": "a", "delay_ms": 3_600_000}),
    )
    .await;
    let (_, theirs) = enqueue(&srv, &other, json!({"queue": "bc", "kind": "a"})).await;

    for (body, field) in [
        (json!({"states": ["completed"]}), "states[0]"),
        (json!({"limit": 0}), "limit"),
        (json!({"kind": "no spaces"}), "kind"),
        (
            json!({"states": ["pending", "pending", "running", "scheduled"]}),
            "states",
        ),
    ] {
        let (s, b, _) = srv
            .call("POST", "/v1/queues/bc/cancel", Some(&k), Some(body))
            .await;
        assert_eq!((s, error_of(&b).1.as_deref()), (400, Some(field)), "{b}");
    }
    let (s, _, _) = srv
        .call(
            "POST",
            "/v1/queues/nosuch/cancel",
            Some(&k),
            Some(json!({})),
        )
        .await;
    assert_eq!(s, 404);

    let (s, b, _) = srv
        .call(
            "POST",
            "/v1/queues/bc/cancel",
            Some(&k),
            Some(json!({"kind": "a"})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b,
        json!({"cancelled": {"scheduled": 1, "pending": 1, "running": 1}, "has_more": false})
    );
    for id in [&pend["job_id"], &sched["job_id"]] {
        assert_eq!(job(&srv, &k, id).await["state"], "cancelled");
    }
    let r = job(&srv, &k, &run["job_id"]).await;
    assert_eq!(
        (&r["state"], &r["cancel_requested"]),
        (&json!("running"), &json!(true))
    );
    assert_eq!(job(&srv, &k, &keep["job_id"]).await["state"], "pending");
    assert_eq!(
        job(&srv, &other, &theirs["job_id"]).await["state"],
        "pending"
    );
    let c = srv.db.connect().await;
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM pgferry.audit_log WHERE action = 'queue.cancel'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}
