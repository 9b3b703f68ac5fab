//! Workflow steps run by an HTTP worker: claim a batch, answer each step with one outcome
//! (next, await with the inbox, spawn with the children's results, sleep, retry, done,
//! fail), heartbeats of long steps, a cancel told in the outcome's answer and in the
//! heartbeat, a lapsed lease's late outcome answered stale, 400s naming the field, and no
//! tenant reaching another's steps.

mod http_common;

use std::time::{Duration, Instant};

use http_common::{error_of, TestServer};
use pgferry_server::ServerConfig;
use serde_json::{json, Value};

async fn call(srv: &TestServer, path: &str, key: &str, body: Value) -> (u16, Value) {
    let (s, b, _) = srv.call("POST", path, Some(key), Some(body)).await;
    (s, b)
}

async fn claim(srv: &TestServer, key: &str, queue: &str, lease_ms: u64) -> Vec<Value> {
    let (s, b) = call(
        srv,
        "/v1/workflow-steps/claim",
        key,
        json!({"queue": queue, "max": 50, "worker": "http-test", "lease_ms": lease_ms}),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    b["steps"].as_array().unwrap().clone()
}

async fn answer(srv: &TestServer, key: &str, step: &Value, mut outcome: Value) -> String {
    outcome["token"] = step["token"].clone();
    let (s, b) = call(srv, "/v1/workflow-steps/outcome", key, outcome).await;
    assert_eq!(s, 200, "{b}");
    assert_eq!((&b["id"], &b["seq"]), (&step["id"], &step["seq"]));
    b["result"].as_str().unwrap().to_string()
}

async fn instance(srv: &TestServer, key: &str, id: i64) -> Value {
    let (s, b, _) = srv
        .call("GET", &format!("/v1/workflows/{id}"), Some(key), None)
        .await;
    assert_eq!(s, 200, "{b}");
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_worker_runs_a_machine_with_a_signal_and_children() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let a = srv.key("tenant-a", &["produce", "read", "consume"]).await;
    let b = srv.key("tenant-b", &["produce", "read", "consume"]).await;
    let (s, _) = call(
        &srv,
        "/v1/workflow-steps/kinds",
        &a,
        json!({"kinds": [{"kind": "order", "inbox": true, "children": true}]}),
    )
    .await;
    assert_eq!(s, 204);
    let (s, started) = call(
        &srv,
        "/v1/workflows",
        &a,
        json!({"kind": "order", "queue": "shop", "input": {"items": [1, 2]}}),
    )
    .await;
    assert_eq!(s, 201, "{started}");
    let id = started["id"].as_i64().unwrap();
    // Tenant b's queue "shop" is its own: nothing of a's is claimable there.
    assert!(claim(&srv, &b, "shop", 60_000).await.is_empty());

    // The steps, as a worker would run them; each claim answers every step it got.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    let mut signalled = false;
    loop {
        assert!(Instant::now() < deadline, "stuck after {seen:?}");
        let st = instance(&srv, &a, id).await;
        if st["status"] == "done" {
            assert_eq!(st["result"]["paid"], json!(30));
            assert_eq!(st["result"]["packed"], json!([1, 2]));
            break;
        }
        if st["status"] == "awaiting" && !signalled {
            let (s, sent) = call(
                &srv,
                &format!("/v1/workflows/{id}/signal"),
                &a,
                json!({"name": "paid", "payload": {"amount": 30}}),
            )
            .await;
            assert_eq!((s, &sent["delivered"]), (200, &json!(true)), "{sent}");
            signalled = true;
        }
        for step in claim(&srv, &a, "shop", 60_000).await {
            assert_eq!(step["queue"], "shop");
            let name = format!(
                "{}:{}",
                step["kind"].as_str().unwrap(),
                step["step"].as_str().unwrap()
            );
            seen.push(name.clone());
            let outcome = match name.as_str() {
                "order:start" => json!({"outcome": "next", "step": "pay", "state": {"n": 1}}),
                "order:pay" => {
                    assert_eq!(step["state"], json!({"n": 1}));
                    json!({"outcome": "await", "signals": ["paid"], "step": "pack", "timeout_ms": 60000})
                }
                "order:pack" => {
                    assert_eq!(step["wake"], "signal");
                    assert_eq!(step["inbox"][0]["payload"], json!({"amount": 30}));
                    json!({"outcome": "spawn", "step": "ship", "join": "all",
                           "state": {"paid": 30},
                           "children": [{"kind": "pack", "input": 1}, {"kind": "pack", "input": 2}]})
                }
                "pack:start" => {
                    if step["attempt"] == 1 {
                        json!({"outcome": "retry", "delay_ms": 0, "reason": "once more"})
                    } else {
                        json!({"outcome": "sleep", "for_ms": 10, "step": "end"})
                    }
                }
                "pack:end" => json!({"outcome": "done", "result": step["input"]}),
                "order:ship" => {
                    assert_eq!(step["wake"], "children");
                    let mut packed: Vec<i64> = step["children"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| c["result"].as_i64().unwrap())
                        .collect();
                    packed.sort();
                    json!({"outcome": "done", "result": {"paid": step["state"]["paid"], "packed": packed}})
                }
                other => panic!("unexpected step {other}"),
            };
            // Another tenant cannot answer it with the same token.
            let mut foreign = outcome.clone();
            foreign["token"] = step["token"].clone();
            let (s, e) = call(&srv, "/v1/workflow-steps/outcome", &b, foreign).await;
            assert_eq!((s, error_of(&e).1.as_deref()), (404, Some("token")), "{e}");
            assert_eq!(answer(&srv, &a, &step, outcome).await, "applied");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for s in [
        "order:start",
        "order:pay",
        "order:pack",
        "pack:start",
        "pack:end",
        "order:ship",
    ] {
        assert!(seen.iter().any(|x| x == s), "{s} never ran: {seen:?}");
    }
    let st = instance(&srv, &a, id).await;
    let outcomes: Vec<&str> = st["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["next", "await", "spawn", "done"], "{st}");
    assert_eq!(st["history"][0]["worker"], "http-test");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_lapsed_leases_are_told_to_the_http_worker() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let a = srv.key("tenant-a", &["produce", "read", "consume"]).await;
    let b = srv.key("tenant-b", &["consume"]).await;
    let mut ids = Vec::new();
    for n in 0..2 {
        let (s, st) = call(
            &srv,
            "/v1/workflows",
            &a,
            json!({"kind": "long", "queue": "q", "input": n}),
        )
        .await;
        assert_eq!(s, 201, "{st}");
        ids.push(st["id"].as_i64().unwrap());
    }
    let steps = claim(&srv, &a, "q", 60_000).await;
    assert_eq!(steps.len(), 2);
    let tokens: Vec<Value> = steps.iter().map(|s| s["token"].clone()).collect();
    // A heartbeat keeps both; another tenant's heartbeat with them finds nothing.
    let (s, hb) = call(
        &srv,
        "/v1/workflow-steps/heartbeat",
        &a,
        json!({"tokens": tokens, "lease_ms": 60000}),
    )
    .await;
    assert_eq!(s, 200, "{hb}");
    for beat in hb["steps"].as_array().unwrap() {
        assert_eq!(
            (&beat["held"], &beat["cancelled"]),
            (&json!(true), &json!(false)),
            "{hb}"
        );
        assert!(beat["lease_until_unix_ms"].as_u64().unwrap() > 0);
    }
    let (s, e) = call(
        &srv,
        "/v1/workflow-steps/heartbeat",
        &b,
        json!({"tokens": tokens}),
    )
    .await;
    assert_eq!(
        (s, error_of(&e).1.as_deref()),
        (404, Some("tokens[0]")),
        "{e}"
    );

    // Cancel the first while its step runs: the heartbeat and the outcome say so.
    let cancelled = steps.iter().find(|s| s["id"] == json!(ids[0])).unwrap();
    let (s, c, _) = srv
        .call(
            "POST",
            &format!("/v1/workflows/{}/cancel", ids[0]),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(s, 200, "{c}");
    let (_, hb) = call(
        &srv,
        "/v1/workflow-steps/heartbeat",
        &a,
        json!({"tokens": [cancelled["token"]]}),
    )
    .await;
    assert_eq!(
        (&hb["steps"][0]["held"], &hb["steps"][0]["cancelled"]),
        (&json!(false), &json!(true)),
        "{hb}"
    );
    assert_eq!(
        answer(&srv, &a, cancelled, json!({"outcome": "done"})).await,
        "cancelled"
    );
    assert_eq!(instance(&srv, &a, ids[0]).await["status"], "cancelled");

    // The second's lease lapses (a short heartbeat lease): claimed again, attempt 2, and
    // the first claim's outcome is stale.
    let other = steps.iter().find(|s| s["id"] == json!(ids[1])).unwrap();
    let (s, _) = call(
        &srv,
        "/v1/workflow-steps/heartbeat",
        &a,
        json!({"tokens": [other["token"]], "lease_ms": 100}),
    )
    .await;
    assert_eq!(s, 200);
    let deadline = Instant::now() + Duration::from_secs(30);
    let again = loop {
        assert!(Instant::now() < deadline, "never claimed again");
        let got = claim(&srv, &a, "q", 60_000).await;
        if let Some(s) = got.into_iter().next() {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        (&again["id"], &again["attempt"]),
        (&json!(ids[1]), &json!(2))
    );
    assert_eq!(
        answer(&srv, &a, other, json!({"outcome": "done"})).await,
        "stale"
    );
    assert_eq!(
        answer(&srv, &a, &again, json!({"outcome": "fail", "reason": "no"})).await,
        "applied"
    );
    let st = instance(&srv, &a, ids[1]).await;
    assert_eq!(
        (&st["status"], &st["error"]),
        (&json!("failed"), &json!("no")),
        "{st}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_step_requests_are_400s_naming_the_field() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let a = srv.key("tenant-a", &["produce", "consume"]).await;
    let producer = srv.key("tenant-a", &["produce"]).await;
    let (s, _) = call(
        &srv,
        "/v1/workflows",
        &a,
        json!({"kind": "k", "queue": "q"}),
    )
    .await;
    assert_eq!(s, 201);
    let step = claim(&srv, &a, "q", 60_000).await.remove(0);
    let t = step["token"].clone();
    let cases = [
        (
            "/v1/workflow-steps/claim",
            json!({"queue": "q", "max": 0}),
            "max",
        ),
        (
            "/v1/workflow-steps/claim",
            json!({"queue": "q", "lease_ms": 50}),
            "lease_ms",
        ),
        (
            "/v1/workflow-steps/claim",
            json!({"queue": "Bad Queue"}),
            "queue",
        ),
        (
            "/v1/workflow-steps/claim",
            json!({"queue": "q", "worker": ""}),
            "worker",
        ),
        (
            "/v1/workflow-steps/outcome",
            json!({"token": t, "outcome": "next"}),
            "step",
        ),
        (
            "/v1/workflow-steps/outcome",
            json!({"token": t, "outcome": "bogus"}),
            "outcome",
        ),
        (
            "/v1/workflow-steps/outcome",
            json!({"token": t, "outcome": "retry", "delay_ms": 40_000_000_000u64}),
            "delay_ms",
        ),
        (
            "/v1/workflow-steps/outcome",
            json!({"token": t, "outcome": "await", "step": "x", "signals": []}),
            "signals",
        ),
        (
            "/v1/workflow-steps/outcome",
            json!({"token": t, "outcome": "sleep", "step": "x"}),
            "until_unix_ms",
        ),
        (
            "/v1/workflow-steps/outcome",
            json!({"token": t, "outcome": "spawn", "step": "x", "join": "some",
            "children": [{"kind": "c"}]}),
            "join",
        ),
        (
            "/v1/workflow-steps/outcome",
            json!({"token": t, "outcome": "spawn", "step": "x",
            "children": [{"kind": "c", "queue": "Bad Queue"}]}),
            "children[0].queue",
        ),
        (
            "/v1/workflow-steps/outcome",
            json!({"token": t, "outcome": "spawn", "step": "x",
            "children": [{"kind": "c", "priority": 10}]}),
            "children[0].priority",
        ),
        (
            "/v1/workflow-steps/outcome",
            json!({"token": t, "outcome": "done", "extra": 1}),
            "extra",
        ),
        (
            "/v1/workflow-steps/heartbeat",
            json!({"tokens": []}),
            "tokens",
        ),
        (
            "/v1/workflow-steps/kinds",
            json!({"kinds": [{"kind": "has space"}]}),
            "kinds[0].kind",
        ),
    ];
    for (path, body, field) in cases {
        let (s, e) = call(&srv, path, &a, body.clone()).await;
        assert_eq!(
            (s, error_of(&e).1.as_deref()),
            (400, Some(field)),
            "{path} {body}: {e}"
        );
    }
    let (s, e) = call(
        &srv,
        "/v1/workflow-steps/outcome",
        &a,
        json!({"token": "00ff", "outcome": "done"}),
    )
    .await;
    assert_eq!((s, error_of(&e).1.as_deref()), (404, Some("token")), "{e}");
    let (s, _) = call(
        &srv,
        "/v1/workflow-steps/claim",
        &producer,
        json!({"queue": "q"}),
    )
    .await;
    assert_eq!(s, 403);
    // Nothing above changed the step: it is still answerable.
    assert_eq!(
        answer(&srv, &a, &step, json!({"outcome": "done"})).await,
        "applied"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_whose_leases_lapse_past_max_attempts_fails_instead_of_running_again() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let a = srv.key("tenant-a", &["produce", "read", "consume"]).await;
    let (s, st) = call(
        &srv,
        "/v1/workflows",
        &a,
        json!({"kind": "stuck", "queue": "q", "max_attempts": 2}),
    )
    .await;
    assert_eq!(s, 201, "{st}");
    let id = st["id"].as_i64().unwrap();
    // Two claims whose leases lapse (the worker never answers); the third finds the step
    // past its attempts and fails the instance instead of handing it out.
    let mut claims = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            Instant::now() < deadline,
            "never failed after {claims} claims"
        );
        let got = claim(&srv, &a, "q", 100).await;
        claims += got.len();
        assert!(claims <= 2, "handed out past max_attempts: {got:?}");
        let i = instance(&srv, &a, id).await;
        if i["status"] == "failed" {
            assert!(
                i["error"].as_str().unwrap().contains("within its lease"),
                "{i}"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(claims, 2);
}

/// A claim with `wait_ms` on an empty queue waits for a step instead of answering empty at
/// once: a step that becomes due while it waits is handed out by that same request. Past
/// the limit, `wait_ms` is a 400 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_claim_gets_a_step_that_arrives_while_it_waits() {
    let srv = std::sync::Arc::new(TestServer::start(ServerConfig::default()).await);
    let a = srv.key("tenant-a", &["produce", "read", "consume"]).await;
    let body = json!({"queue": "lp", "max": 5, "wait_ms": 20000});
    let waiting = {
        let (srv, a, body) = (srv.clone(), a.clone(), body.clone());
        tokio::spawn(async move { call(&srv, "/v1/workflow-steps/claim", &a, body).await })
    };
    // The request is in its wait (nothing due yet) when the instance starts.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "answered before a step existed");
    let (s, st) = call(
        &srv,
        "/v1/workflows",
        &a,
        json!({"kind": "k", "queue": "lp"}),
    )
    .await;
    assert_eq!(s, 201, "{st}");
    let (s, b) = waiting.await.unwrap();
    assert_eq!(s, 200, "{b}");
    let steps = b["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "{b}");
    assert_eq!(steps[0]["id"], st["id"]);
    // Nothing arrives: an empty answer once the (short) wait is over.
    let (s, b) = call(
        &srv,
        "/v1/workflow-steps/claim",
        &a,
        json!({"queue": "lp", "wait_ms": 50}),
    )
    .await;
    assert_eq!((s, b["steps"].as_array().map(Vec::len)), (200, Some(0)));
    let (s, b) = call(
        &srv,
        "/v1/workflow-steps/claim",
        &a,
        json!({"queue": "lp", "wait_ms": 30001}),
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(error_of(&b).1.as_deref(), Some("wait_ms"));
}
