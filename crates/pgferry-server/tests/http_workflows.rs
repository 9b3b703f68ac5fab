//! Workflows over HTTP: start (with correlation dedup), get, list, signal by id and by key,
//! cancel, retry; typed 4xx errors naming the field; and no tenant reaching another's
//! instances, queues or concurrency keys.

mod http_common;

use http_common::{error_of, TestServer};
use pgferry_core::workflow::{Outcome, Workflows};
use pgferry_server::ServerConfig;
use serde_json::{json, Value};

async fn call(
    srv: &TestServer,
    method: &str,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let (s, b, _) = srv.call(method, path, Some(key), body).await;
    (s, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflows_over_http_per_tenant() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let a = srv.key("tenant-a", &["produce", "read"]).await;
    let b = srv.key("tenant-b", &["produce", "read"]).await;
    let reader = srv.key("tenant-a", &["read"]).await;
    let start = json!({"kind": "order", "queue": "shop", "input": {"n": 1},
                       "correlation_key": "o-1", "concurrency_key": "acct-1"});
    let (s, first) = call(&srv, "POST", "/v1/workflows", &a, Some(start.clone())).await;
    assert_eq!((s, &first["duplicate"]), (201, &json!(false)), "{first}");
    let (s, dup) = call(&srv, "POST", "/v1/workflows", &a, Some(start.clone())).await;
    assert_eq!(
        (s, &dup["id"], &dup["duplicate"]),
        (200, &first["id"], &json!(true))
    );
    // Another tenant's queue "shop" and key "acct-1" are its own.
    let (s, other) = call(&srv, "POST", "/v1/workflows", &b, Some(start.clone())).await;
    assert_eq!((s, &other["duplicate"]), (201, &json!(false)), "{other}");
    let id = first["id"].as_i64().unwrap();

    // The engine's view: tenant-prefixed queue and keys; both got a slot (keys not shared).
    let wf = Workflows::of(&srv.state.engine);
    let engine_queue = wf.get(id).await.unwrap().queue;
    assert!(engine_queue.ends_with(".shop") && engine_queue.starts_with('t'));
    let steps = wf
        .claim(&engine_queue, 10, "w", std::time::Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(steps.len(), 1);
    let other_queue = wf.get(other["id"].as_i64().unwrap()).await.unwrap().queue;
    assert_eq!(
        wf.claim(&other_queue, 10, "w", std::time::Duration::from_secs(30))
            .await
            .unwrap()
            .len(),
        1
    );

    // Signal by key before the await: kept in the inbox.
    let sig = json!({"queue": "shop", "correlation_key": "o-1", "name": "paid", "payload": {"amount": 5}});
    let (s, sent) = call(&srv, "POST", "/v1/workflows/signal", &a, Some(sig.clone())).await;
    assert_eq!(
        (s, &sent["delivered"], &sent["instance_id"]),
        (200, &json!(false), &first["id"]),
        "{sent}"
    );
    wf.finish(&[(
        steps[0].reference(),
        Outcome::await_signals(&["paid", "shipped"], "ship", None),
    )])
    .await
    .unwrap();
    let (s, got) = call(&srv, "GET", &format!("/v1/workflows/{id}"), &reader, None).await;
    assert_eq!(s, 200, "{got}");
    assert_eq!(
        (got["queue"].as_str(), got["status"].as_str()),
        (Some("shop"), Some("runnable"))
    );
    assert_eq!(
        got["concurrency_key"],
        json!("acct-1"),
        "the tenant prefix is not shown"
    );
    assert_eq!(got["history"][0]["outcome"], json!("await"));
    // By id, to the awaiting instance: delivered.
    let steps = wf
        .claim(&engine_queue, 10, "w", std::time::Duration::from_secs(30))
        .await
        .unwrap();
    wf.finish(&[(
        steps[0].reference(),
        Outcome::await_signals(&["shipped"], "end", None),
    )])
    .await
    .unwrap();
    let (s, sent) = call(
        &srv,
        "POST",
        &format!("/v1/workflows/{id}/signal"),
        &a,
        Some(json!({"name": "shipped"})),
    )
    .await;
    assert_eq!((s, &sent["delivered"]), (200, &json!(true)), "{sent}");

    // Tenant b sees none of it: 404 for get, signal, cancel, retry; its list is its own.
    for (m, path, body) in [
        ("GET", format!("/v1/workflows/{id}"), None),
        (
            "POST",
            format!("/v1/workflows/{id}/signal"),
            Some(json!({"name": "x"})),
        ),
        ("POST", format!("/v1/workflows/{id}/cancel"), None),
        ("POST", format!("/v1/workflows/{id}/retry"), None),
    ] {
        let (s, e) = call(&srv, m, &path, &b, body).await;
        assert_eq!(s, 404, "{m} {path}: {e}");
    }
    let (s, page) = call(&srv, "GET", "/v1/workflows?queue=shop", &b, None).await;
    assert_eq!(s, 200);
    let ids: Vec<_> = page["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].clone())
        .collect();
    assert_eq!(ids, [other["id"].clone()]);
    let (s, page) = call(&srv, "GET", "/v1/workflows?queue=shop&limit=1", &a, None).await;
    assert_eq!((s, page["has_more"].as_bool()), (200, Some(false)));

    // Scopes, bad input and state conflicts are typed errors.
    let (s, _) = call(&srv, "POST", "/v1/workflows", &reader, Some(start.clone())).await;
    assert_eq!(s, 403);
    for (body, field) in [
        (json!({"kind": "k", "queue": "Bad Queue"}), "queue"),
        (json!({"kind": "k!", "queue": "q"}), "kind"),
        (
            json!({"kind": "k", "queue": "q", "priority": 10}),
            "priority",
        ),
        (
            json!({"kind": "k", "queue": "q", "max_attempts": 0}),
            "max_attempts",
        ),
        (
            json!({"kind": "k", "queue": "q", "input": "\u{0}"}),
            "input",
        ),
        (
            json!({"kind": "k", "queue": "q", "surprise": 1}),
            "surprise",
        ),
    ] {
        let (s, e) = call(&srv, "POST", "/v1/workflows", &a, Some(body.clone())).await;
        assert_eq!(
            (s, error_of(&e).1.as_deref()),
            (400, Some(field)),
            "{body}: {e}"
        );
    }
    let (s, e) = call(
        &srv,
        "GET",
        "/v1/workflows?queue=shop&status=sideways",
        &a,
        None,
    )
    .await;
    assert_eq!((s, error_of(&e).1.as_deref()), (400, Some("status")), "{e}");
    let (s, e) = call(&srv, "GET", "/v1/workflows/abc", &a, None).await;
    assert_eq!((s, error_of(&e).1.as_deref()), (400, Some("id")), "{e}");
    let (s, e) = call(&srv, "POST", &format!("/v1/workflows/{id}/retry"), &a, None).await;
    assert_eq!(s, 409, "not failed: {e}");
    let (s, c) = call(
        &srv,
        "POST",
        &format!("/v1/workflows/{id}/cancel?reason=done%20here"),
        &a,
        None,
    )
    .await;
    assert_eq!(
        (s, c["instance"]["status"].as_str()),
        (200, Some("cancelled")),
        "{c}"
    );
    let (s, e) = call(
        &srv,
        "POST",
        &format!("/v1/workflows/{id}/signal"),
        &a,
        Some(json!({"name": "late"})),
    )
    .await;
    assert_eq!(s, 409, "signal to an ended instance: {e}");
    let (s, e) = call(&srv, "POST", "/v1/workflows/signal", &a, Some(sig)).await;
    assert_eq!(s, 404, "no active instance with that key any more: {e}");
}

/// The concurrency strategies are chosen per start over HTTP: with one slot taken,
/// `cancel_newest` ends the new instance at once, `cancel_in_progress` cancels the one
/// holding the slot and takes it, `queue` waits; unknown names and a strategy without a
/// key are 400s naming `concurrency_strategy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_strategies_are_chosen_over_http() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let a = srv.key("tenant-a", &["produce", "read"]).await;
    let start = |strategy: Option<&str>| {
        let mut b = json!({"kind": "k", "queue": "q", "concurrency_key": "acct"});
        if let Some(s) = strategy {
            b["concurrency_strategy"] = json!(s);
        }
        b
    };
    let status = |id: &Value| {
        let path = format!("/v1/workflows/{}", id.as_i64().unwrap());
        let (srv, a) = (&srv, a.clone());
        async move {
            let (s, got) = call(srv, "GET", &path, &a, None).await;
            assert_eq!(s, 200, "{got}");
            got["status"].as_str().unwrap().to_string()
        }
    };
    let (s, first) = call(&srv, "POST", "/v1/workflows", &a, Some(start(None))).await;
    assert_eq!(s, 201, "{first}");
    assert_eq!(status(&first["id"]).await, "runnable");

    let (s, newest) = call(
        &srv,
        "POST",
        "/v1/workflows",
        &a,
        Some(start(Some("cancel_newest"))),
    )
    .await;
    assert_eq!(s, 201, "{newest}");
    assert_eq!(status(&newest["id"]).await, "cancelled");
    assert_eq!(
        status(&first["id"]).await,
        "runnable",
        "the running one goes on"
    );

    let (s, taker) = call(
        &srv,
        "POST",
        "/v1/workflows",
        &a,
        Some(start(Some("cancel_in_progress"))),
    )
    .await;
    assert_eq!(s, 201, "{taker}");
    assert_eq!(status(&first["id"]).await, "cancelled");
    assert_eq!(
        status(&taker["id"]).await,
        "runnable",
        "it took the freed slot"
    );

    let (s, waiter) = call(
        &srv,
        "POST",
        "/v1/workflows",
        &a,
        Some(start(Some("queue"))),
    )
    .await;
    assert_eq!(s, 201, "{waiter}");
    assert_eq!(status(&waiter["id"]).await, "queued");
    assert_eq!(status(&taker["id"]).await, "runnable");

    for body in [
        start(Some("newest_wins")),
        json!({"kind": "k", "queue": "q", "concurrency_strategy": "cancel_newest"}),
    ] {
        let (s, e) = call(&srv, "POST", "/v1/workflows", &a, Some(body.clone())).await;
        assert_eq!(
            (s, error_of(&e).1.as_deref()),
            (400, Some("concurrency_strategy")),
            "{body}: {e}"
        );
    }
}

/// `round_robin` over HTTP: a key with a backlog of 6 (limit 10) and a key started after
/// it with one step; a claim of 2 over HTTP takes one step of each key (with `queue` it
/// would take the backlog's two oldest), and the backlog's others wait among its waiters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_is_chosen_over_http_and_keys_take_turns() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let a = srv.key("tenant-a", &["produce", "read", "consume"]).await;
    let start = |key: &str, i: i64| {
        json!({"kind": "k", "queue": "fair", "input": i, "concurrency_key": key,
               "concurrency_limit": 10, "concurrency_strategy": "round_robin"})
    };
    let mut big = Vec::new();
    for i in 0..6 {
        let (s, b) = call(&srv, "POST", "/v1/workflows", &a, Some(start("big", i))).await;
        assert_eq!(s, 201, "{b}");
        big.push(b["id"].as_i64().unwrap());
    }
    let (s, small) = call(&srv, "POST", "/v1/workflows", &a, Some(start("small", 9))).await;
    assert_eq!(s, 201, "{small}");
    let small = small["id"].as_i64().unwrap();
    let mut statuses = Vec::new();
    for id in &big {
        let (s, got) = call(&srv, "GET", &format!("/v1/workflows/{id}"), &a, None).await;
        assert_eq!(s, 200, "{got}");
        statuses.push(got["status"].as_str().unwrap().to_string());
    }
    assert_eq!(
        statuses,
        ["runnable", "queued", "queued", "queued", "queued", "queued"]
    );
    let (s, b) = call(
        &srv,
        "POST",
        "/v1/workflow-steps/claim",
        &a,
        Some(json!({"queue": "fair", "max": 2, "lease_ms": 30000})),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let mut got: Vec<i64> = b["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_i64().unwrap())
        .collect();
    got.sort();
    assert_eq!(got, [big[0], small]);

    // An unknown name lists the strategies.
    let mut bad = start("big", 0);
    bad["concurrency_strategy"] = json!("fair_share");
    let (s, e) = call(&srv, "POST", "/v1/workflows", &a, Some(bad)).await;
    assert_eq!(
        (s, error_of(&e).1.as_deref()),
        (400, Some("concurrency_strategy")),
        "{e}"
    );
    assert!(e.to_string().contains("round_robin"), "{e}");
}
