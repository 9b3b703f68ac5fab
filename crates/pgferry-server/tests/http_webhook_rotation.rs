//! Rotating an inbound webhook endpoint's address over HTTP on a real server
//! (docs/monitors.md, "Rotating an address"): the old address is refused at once or after
//! its grace, events to either address land on the one endpoint, a later rotation caps an
//! earlier grace, another tenant's rotation is a 404 like a missing endpoint's, bad input
//! is a 400 naming `grace_ms`, and the rotation is audited without the addresses. GET and
//! the list show the old addresses still accepted (`previous_paths`), and only those.

mod http_common;

use std::time::Duration;

use http_common::{error_of, TestServer};
use pgferry_http_jobs::{Allow, Range};
use pgferry_server::http::HttpConfig;
use pgferry_server::ServerConfig;
use serde_json::{json, Value};

/// Fan-out URLs on loopback are allowed; nothing needs to deliver them (the tests look at
/// what was stored, not at deliveries).
async fn server() -> TestServer {
    TestServer::start(ServerConfig {
        http: HttpConfig {
            http_jobs_allow: Allow::of(&[Range::Loopback]),
            ..HttpConfig::default()
        },
        ..ServerConfig::default()
    })
    .await
}

async fn create(srv: &TestServer, key: &str, slug: &str) -> Value {
    let (s, ep, _) = srv
        .call(
            "POST",
            "/v1/webhook-endpoints",
            Some(key),
            Some(json!({"slug": slug, "event_id_header": "x-event-id", "targets": ["http://127.0.0.1:9/hook"]})),
        )
        .await;
    assert_eq!(s, 201, "{ep}");
    ep
}

/// POSTs an event with provider id `id` to `path`; returns the status.
async fn post_event(srv: &TestServer, path: &str, id: &str) -> u16 {
    let req = srv
        .raw("POST", path)
        .header("x-event-id", id)
        .header("content-type", "application/json")
        .body(format!(r#"{{"id": "{id}"}}"#));
    srv.send(req).await.0
}

async fn rotate(srv: &TestServer, key: &str, slug: &str, body: Option<Value>) -> (u16, Value) {
    let path = format!("/v1/webhook-endpoints/{slug}/rotate-address");
    let (s, b, _) = srv.call("POST", &path, Some(key), body).await;
    (s, b)
}

/// The provider ids of the endpoint's stored events, oldest first.
async fn event_ids(srv: &TestServer, key: &str, slug: &str) -> Vec<String> {
    let path = format!("/v1/webhook-endpoints/{slug}/events?limit=1000");
    let (s, b, _) = srv.call("GET", &path, Some(key), None).await;
    assert_eq!(s, 200, "{b}");
    b["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["provider_event_id"].as_str().unwrap().to_string())
        .collect()
}

fn path_of(v: &Value) -> String {
    v["path"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_grace_the_old_address_is_refused_at_once() {
    let srv = server().await;
    let a = srv.key("tenant-a", &["admin"]).await;
    let ep = create(&srv, &a, "github").await;
    let old = path_of(&ep);
    assert_eq!(post_event(&srv, &old, "before").await, 200);

    // No body at all: rotate at once.
    let (s, r) = rotate(&srv, &a, "github", None).await;
    assert_eq!(s, 200, "{r}");
    let new = path_of(&r);
    assert_ne!(new, old);
    assert!(
        new.starts_with("/in/github-") && new.len() == "/in/github-".len() + 32,
        "{new}"
    );
    assert_eq!(r["previous_path"], old.as_str());
    assert!(r["previous_path_accepted_until"].is_null(), "{r}");
    // Everything but the address is the endpoint as it was.
    for field in [
        "slug",
        "signature",
        "event_id_header",
        "targets",
        "created_at",
    ] {
        assert_eq!(r[field], ep[field], "{field}");
    }

    assert_eq!(post_event(&srv, &old, "after-old").await, 404);
    assert_eq!(post_event(&srv, &new, "after-new").await, 200);
    let (_, got, _) = srv
        .call("GET", "/v1/webhook-endpoints/github", Some(&a), None)
        .await;
    assert_eq!(path_of(&got), new);
    // The history stays on the endpoint; the refused event was not stored.
    assert_eq!(event_ids(&srv, &a, "github").await, ["before", "after-new"]);

    // `{}` is the same as no body.
    let (s, r2) = rotate(&srv, &a, "github", Some(json!({}))).await;
    assert_eq!(s, 200, "{r2}");
    assert_eq!(r2["previous_path"], new.as_str());
    assert_eq!(post_event(&srv, &new, "x").await, 404);
    assert_eq!(post_event(&srv, &path_of(&r2), "y").await, 200);

    // Audited with the grace, never with an address (they are the secret).
    let c = srv.db.connect().await;
    let rows = c
        .query(
            "SELECT target, detail FROM pgferry.audit_log \
             WHERE action = 'webhook_endpoint.rotate_address' ORDER BY audit_id",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    for row in &rows {
        let target: String = row.get("target");
        let detail: Value = row.get("detail");
        assert_eq!(target, "github");
        assert_eq!(detail, json!({"grace_ms": 0, "via": "http"}));
    }
}

/// Polls until `path` is refused (404); fails if it is still accepted after ~20 s.
async fn refused_eventually(srv: &TestServer, path: &str) {
    for i in 0..200 {
        match post_event(srv, path, &format!("poll-{i}")).await {
            404 => return,
            200 => tokio::time::sleep(Duration::from_millis(100)).await,
            s => panic!("{path}: {s}"),
        }
    }
    panic!("{path} still accepted after its grace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_grace_both_addresses_are_accepted_until_it_passes() {
    let srv = server().await;
    let a = srv.key("tenant-a", &["admin"]).await;
    let p0 = path_of(&create(&srv, &a, "stripe").await);

    // A grace no test run outlasts: both addresses accepted, both events on the endpoint.
    let (s, r1) = rotate(&srv, &a, "stripe", Some(json!({"grace_ms": 600_000}))).await;
    assert_eq!(s, 200, "{r1}");
    assert!(r1["previous_path_accepted_until"].is_string(), "{r1}");
    let p1 = path_of(&r1);
    assert_eq!(post_event(&srv, &p0, "via-old").await, 200);
    assert_eq!(post_event(&srv, &p1, "via-new").await, 200);
    assert_eq!(event_ids(&srv, &a, "stripe").await, ["via-old", "via-new"]);
    // The same provider id through the other address is the same event (dedup is per
    // endpoint, not per address).
    let dup = srv
        .raw("POST", &p1)
        .header("x-event-id", "via-old")
        .body("{}");
    let (s, d, _) = srv.send(dup).await;
    assert_eq!((s, &d["duplicate"]), (200, &json!(true)), "{d}");

    // A second rotation with a short grace caps the first one's: both old addresses are
    // refused once it passes, the newest is accepted.
    let (s, r2) = rotate(&srv, &a, "stripe", Some(json!({"grace_ms": 300}))).await;
    assert_eq!(s, 200, "{r2}");
    let p2 = path_of(&r2);
    refused_eventually(&srv, &p1).await;
    refused_eventually(&srv, &p0).await;
    assert_eq!(post_event(&srv, &p2, "newest").await, 200);

    // Grace 0 after a long grace ends the long one at once.
    let (_, r3) = rotate(&srv, &a, "stripe", Some(json!({"grace_ms": 600_000}))).await;
    assert_eq!(post_event(&srv, &p2, "still-ok").await, 200);
    let (_, r4) = rotate(&srv, &a, "stripe", Some(json!({"grace_ms": 0}))).await;
    assert_eq!(post_event(&srv, &p2, "late").await, 404);
    assert_eq!(post_event(&srv, &path_of(&r3), "late").await, 404);
    assert_eq!(post_event(&srv, &path_of(&r4), "latest").await, 200);
    let ids = event_ids(&srv, &a, "stripe").await;
    assert_eq!(ids.first().map(String::as_str), Some("via-old"));
    assert!(ids.iter().all(|i| i != "late"), "{ids:?}");
    assert_eq!(ids.last().map(String::as_str), Some("latest"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenant_cannot_rotate_and_bad_input_names_grace_ms() {
    let srv = server().await;
    let a = srv.key("tenant-a", &["admin"]).await;
    let b = srv.key("tenant-b", &["admin"]).await;
    let reader = srv.key("tenant-a", &["read"]).await;
    let path = path_of(&create(&srv, &a, "acme").await);

    // B rotating A's slug is answered as rotating a slug nobody has.
    let (s, theirs) = rotate(&srv, &b, "acme", None).await;
    let (s_missing, missing) = rotate(&srv, &b, "nobody-has-this", None).await;
    assert_eq!((s, s_missing), (404, 404), "{theirs}");
    assert_eq!(theirs, missing);
    // A read key may not rotate.
    let (s, e) = rotate(&srv, &reader, "acme", None).await;
    assert_eq!(s, 403, "{e}");

    for bad in [
        json!({"grace_ms": -1}),
        json!({"grace_ms": 604_800_001}),
        json!({"grace_ms": "5"}),
        json!({"grace_ms": 1.5}),
        json!({"grace_ms": null}),
    ] {
        let (s, e) = rotate(&srv, &a, "acme", Some(bad.clone())).await;
        assert_eq!(
            (s, error_of(&e).1.as_deref()),
            (400, Some("grace_ms")),
            "{bad}: {e}"
        );
    }
    let (s, e) = rotate(&srv, &a, "acme", Some(json!({"grace": 5}))).await;
    assert_eq!(s, 400, "{e}");
    let malformed = srv
        .raw("POST", "/v1/webhook-endpoints/acme/rotate-address")
        .bearer_auth(&a)
        .body("{");
    assert_eq!(srv.send(malformed).await.0, 400);

    // None of these changed the address.
    let (_, got, _) = srv
        .call("GET", "/v1/webhook-endpoints/acme", Some(&a), None)
        .await;
    assert_eq!(path_of(&got), path);
    assert_eq!(post_event(&srv, &path, "still").await, 200);
    // The largest grace is accepted.
    let (s, r) = rotate(&srv, &a, "acme", Some(json!({"grace_ms": 604_800_000}))).await;
    assert_eq!(s, 200, "{r}");
}

/// The `previous_paths` of an endpoint as GET shows it, and as the list shows it (the
/// same, or the test fails), as (path, accepted_until_ms).
async fn previous(srv: &TestServer, key: &str, slug: &str) -> Vec<(String, i64)> {
    let (s, got, _) = srv
        .call(
            "GET",
            &format!("/v1/webhook-endpoints/{slug}"),
            Some(key),
            None,
        )
        .await;
    assert_eq!(s, 200, "{got}");
    let (s, page, _) = srv
        .call("GET", "/v1/webhook-endpoints?limit=100", Some(key), None)
        .await;
    assert_eq!(s, 200, "{page}");
    let listed = page["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["slug"] == slug)
        .expect("listed");
    assert_eq!(listed["previous_paths"], got["previous_paths"], "{page}");
    let mut out: Vec<(String, i64)> = got["previous_paths"]
        .as_array()
        .unwrap_or_else(|| panic!("no previous_paths array: {got}"))
        .iter()
        .map(|o| {
            (
                o["path"].as_str().unwrap().to_string(),
                o["accepted_until_ms"].as_i64().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_addresses_are_listed_while_accepted_and_only_the_tenants_own() {
    let srv = server().await;
    let a = srv.key("tenant-a", &["admin", "read"]).await;
    let b = srv.key("tenant-b", &["admin", "read"]).await;
    let p0 = path_of(&create(&srv, &a, "stripe").await);
    create(&srv, &a, "quiet").await;
    // Tenant b has its own "stripe", rotated with a long grace: never in a's answers.
    let b0 = path_of(&create(&srv, &b, "stripe").await);
    let (s, _) = rotate(&srv, &b, "stripe", Some(json!({"grace_ms": 600_000}))).await;
    assert_eq!(s, 200);

    // Never rotated: an empty array (not absent, not null).
    assert_eq!(previous(&srv, &a, "stripe").await, []);

    // With a grace: the old address, until when it is accepted.
    let before = now_ms();
    let (s, r1) = rotate(&srv, &a, "stripe", Some(json!({"grace_ms": 600_000}))).await;
    assert_eq!(s, 200, "{r1}");
    let shown = previous(&srv, &a, "stripe").await;
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0].0, p0);
    let until = shown[0].1;
    assert!(
        until >= before + 599_000 && until <= now_ms() + 600_000,
        "{until} vs {before}"
    );
    assert_eq!(previous(&srv, &a, "quiet").await, []);
    assert_eq!(previous(&srv, &b, "stripe").await.len(), 1);
    assert_eq!(previous(&srv, &b, "stripe").await[0].0, b0);

    // A rotation with a short grace: both old addresses are listed (the first one's grace
    // capped to the second's), and neither once it has passed.
    let (s, r2) = rotate(&srv, &a, "stripe", Some(json!({"grace_ms": 300}))).await;
    assert_eq!(s, 200, "{r2}");
    let p1 = path_of(&r1);
    let shown = previous(&srv, &a, "stripe").await;
    let paths: Vec<&str> = shown.iter().map(|(p, _)| p.as_str()).collect();
    let mut want = [p0.as_str(), p1.as_str()];
    want.sort();
    assert_eq!(paths, want, "{shown:?}");
    assert!(shown.iter().all(|(_, u)| *u <= now_ms() + 300), "{shown:?}");
    refused_eventually(&srv, &p1).await;
    refused_eventually(&srv, &p0).await;
    assert_eq!(previous(&srv, &a, "stripe").await, []);

    // Tenant a's list never shows b's old address, nor b's a's.
    for (key, theirs) in [(&a, &b0), (&b, &p0)] {
        let (_, page, _) = srv
            .call("GET", "/v1/webhook-endpoints?limit=100", Some(key), None)
            .await;
        assert!(!page.to_string().contains(theirs.as_str()), "{page}");
    }
}
