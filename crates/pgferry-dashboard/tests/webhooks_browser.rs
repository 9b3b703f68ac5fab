//! The webhooks page in a real headless Chromium against a real server: inbound events
//! posted to `/in/{address}` are stored and fanned out by the server's real HTTP-job
//! service to two targets on loopback (one answers 503 once, then 200). The operator sees
//! the endpoints, the events newest first, one event's headers and body and its
//! deliveries with every attempt's response status; replays one event and every event
//! since a time. Another tenant's endpoint of the same slug and its event are never shown;
//! a read-only key is offered no replay and is refused a forged one. An address rotated
//! away with a grace is shown on the endpoint's page until when it is accepted.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{header, StatusCode};
use axum::routing::post;
use common::*;
use fantoccini::{Client, Locator};
use pgferry_http_jobs::{Allow, Range};
use serde_json::{json, Value};

/// Bodies each target received.
#[derive(Default)]
struct Received {
    a: Mutex<Vec<String>>,
    b: Mutex<Vec<String>>,
}

/// `POST /a`: 503 with Retry-After the first time the "opened" event arrives, then 200.
/// `POST /b`: 200. (Keyed by event, not by call: the two events' deliveries to a race, and
/// the test expects the 503 on "opened"'s; a CI run had "closed" reach a first.)
async fn targets(got: Arc<Received>) -> String {
    let calls = Arc::new(AtomicUsize::new(0));
    let (ga, gb) = (got.clone(), got);
    let app = axum::Router::new()
        .route(
            "/a",
            post(move |body: String| {
                let (calls, got) = (calls.clone(), ga.clone());
                async move {
                    if body.contains("\"opened\"") && calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        return (
                            StatusCode::SERVICE_UNAVAILABLE,
                            [(header::RETRY_AFTER, "1")],
                            "target a is busy",
                        );
                    }
                    got.a.lock().unwrap().push(body);
                    (
                        StatusCode::OK,
                        [(header::CACHE_CONTROL, "no-store")],
                        "a: thanks",
                    )
                }
            }),
        )
        .route(
            "/b",
            post(move |body: String| {
                let got = gb.clone();
                async move {
                    got.b.lock().unwrap().push(body);
                    (StatusCode::ACCEPTED, "b: queued")
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

async fn click(c: &Client, css: &str) {
    for _ in 0..50 {
        if wait_for(c, css).await.click().await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("could not click {css:?}");
}

/// Posts an inbound event (no API key: the address is the secret); its id.
async fn deliver(s: &TestServer, path: &str, delivery: &str, body: Value) -> i64 {
    let res = s
        .http
        .post(format!("{}{path}", s.base))
        .header("content-type", "application/json")
        .header("x-github-delivery", delivery)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let b: Value = res.json().await.unwrap();
    assert_eq!(b["duplicate"], json!(false), "{b}");
    b["event_id"].as_i64().unwrap()
}

/// Waits until `n` bodies reached target `b`.
async fn wait_b(got: &Received, n: usize) {
    for _ in 0..300 {
        if got.b.lock().unwrap().len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "target b got {} bodies, expected {n}",
        got.b.lock().unwrap().len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_sees_events_and_deliveries_and_replays_them() {
    let allow = Allow::of(&[Range::parse("loopback").unwrap()]);
    let mut config = pgferry_server::ServerConfig::default();
    config.http.http_jobs_allow = allow.clone();
    let s = TestServer::start_with(config).await;
    let admin = s.key("acme", &["admin"]).await;
    let read = s.key("acme", &["read"]).await;
    let other = s.key("globex", &["admin"]).await;
    let http_jobs = s.start_http_jobs(allow);
    let got = Arc::new(Received::default());
    let target = targets(got.clone()).await;

    let (st, ep) = s
        .api(
            "POST",
            "/v1/webhook-endpoints",
            &admin,
            Some(json!({
                "slug": "github",
                "event_id_header": "X-GitHub-Delivery",
                "targets": [format!("{target}/a"), format!("{target}/b")]
            })),
        )
        .await;
    assert_eq!(st, 201, "{ep}");
    let path = ep["path"].as_str().unwrap().to_string();
    let (st, b) = s
        .api(
            "POST",
            "/v1/webhook-endpoints",
            &admin,
            Some(json!({
                "slug": "stripe",
                "signature": {"scheme": "stripe", "header": "Stripe-Signature", "secret": "whsec_test"},
                "targets": [format!("{target}/b")]
            })),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    // Another tenant, the same slug, its own address and event.
    let (st, theirs) = s
        .api(
            "POST",
            "/v1/webhook-endpoints",
            &other,
            Some(json!({ "slug": "github", "targets": [format!("{target}/b")] })),
        )
        .await;
    assert_eq!(st, 201, "{theirs}");
    let their_path = theirs["path"].as_str().unwrap().to_string();
    let theirs_event = deliver(&s, &their_path, "g-1", json!({"secret": "globex-payroll"})).await;

    let opened = deliver(&s, &path, "d-1", json!({"action": "opened", "number": 7})).await;
    let closed = deliver(&s, &path, "d-2", json!({"action": "closed", "number": 8})).await;
    // globex's event to b, and acme's two events to b (a retries its first).
    wait_b(&got, 3).await;

    let (_driver, c) = browser().await;
    sign_in(&c, &s.base, &admin).await;
    go(&c, &s.base, "webhooks").await;
    let rows = wait_text(&c, "#webhooks-table tbody", |t| {
        t.contains("github") && t.contains("stripe")
    })
    .await;
    assert!(rows.contains(&path), "{rows}");
    assert!(
        rows.contains("stripe (stripe-signature)") && rows.contains("x-github-delivery"),
        "{rows}"
    );
    assert!(!rows.contains(&their_path), "{rows}");

    // The endpoint: its events newest first, never the other tenant's.
    click(&c, "#webhooks-table a[href='#/webhooks/github']").await;
    let events = wait_text(&c, "#events-table tbody", |t| {
        t.contains("opened") && t.contains("closed")
    })
    .await;
    assert!(
        events.find("closed").unwrap() < events.find("opened").unwrap(),
        "newest first: {events}"
    );
    assert!(
        events.contains("d-1") && events.contains("application/json"),
        "{events}"
    );
    assert!(!events.contains("globex-payroll"), "{events}");
    assert_eq!(
        count(
            &c,
            &format!("#events-table tr[data-event='{theirs_event}']")
        )
        .await,
        0
    );

    // One event: its headers and body, and its two deliveries with their attempts: a's
    // 503 then 200 (the service retries after Retry-After), b's 202.
    click(
        &c,
        &format!("#events-table a[href='#/webhooks/github?event={opened}']"),
    )
    .await;
    wait_text(&c, "#event-body", |t| t.contains("\"opened\"")).await;
    let headers = wait_text(&c, "#event-headers", |t| t.contains("x-github-delivery")).await;
    assert!(headers.contains("d-1"), "{headers}");
    let deliveries = wait_text(&c, "#deliveries-table tbody", |t| {
        t.matches("completed").count() >= 3
    })
    .await;
    assert_eq!(
        count(&c, "#deliveries-table tbody tr").await,
        2,
        "{deliveries}"
    );
    assert!(
        deliveries.contains(&format!("{target}/a")) && deliveries.contains(&format!("{target}/b")),
        "{deliveries}"
    );
    let a_row = row_text(&c, "#deliveries-table tbody tr", "/a").await;
    // The 503's outcome is the HTTP jobs' to name (a failed attempt, retried).
    assert!(
        a_row
            .lines()
            .any(|l| l.starts_with("#1 ") && l.ends_with(" 503")),
        "{a_row}"
    );
    assert!(a_row.contains("#2 completed 200"), "{a_row}");
    let b_row = row_text(&c, "#deliveries-table tbody tr", "/b").await;
    assert!(b_row.contains("#1 completed 202"), "{b_row}");
    screenshot(&c, "webhooks").await;

    // Replay this event: two more deliveries, marked as replays, sent to both targets.
    click(&c, "#event-replay").await;
    wait_text(&c, "#deliveries-table tbody", |t| {
        t.matches("(replay)").count() == 2 && t.matches("completed").count() >= 4
    })
    .await;
    assert_eq!(count(&c, "#deliveries-table tbody tr").await, 4);
    wait_b(&got, 4).await;
    assert!(got.b.lock().unwrap()[3].contains("opened"));

    // Replay every event since before both: two events, four deliveries.
    go(&c, &s.base, "webhooks/github").await;
    let since = wait_for(&c, "#replay-since-at").await;
    since.clear().await.unwrap();
    since.send_keys("yesterday").await.unwrap();
    click(&c, "#replay-since button[type=submit]").await;
    wait_text(&c, "#replay-since-result", |t| t.starts_with("since:")).await;
    since.clear().await.unwrap();
    since.send_keys("2020-01-01T00:00:00Z").await.unwrap();
    click(&c, "#replay-since button[type=submit]").await;
    wait_text(&c, "#replay-since-result", |t| {
        t.contains("Replayed 2 events: 4 deliveries")
    })
    .await;
    wait_b(&got, 6).await;
    // Replays store no new events.
    let (_, stored) = s
        .api("GET", "/v1/webhook-endpoints/github/events", &admin, None)
        .await;
    assert_eq!(stored["events"].as_array().unwrap().len(), 2, "{stored}");

    // Another tenant's event is not found through this tenant's slug, nor theirs listed.
    let r = page_fetch(
        &c,
        "GET",
        &format!("/ui/api/webhooks/github/events/{theirs_event}"),
        false,
        Value::Null,
    )
    .await;
    assert_eq!(r["status"], json!(404), "{r}");
    let r = page_fetch(
        &c,
        "GET",
        "/ui/api/webhooks/github/events",
        false,
        Value::Null,
    )
    .await;
    let ids: Vec<i64> = r["body"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![closed, opened], "{r}");
    let r = page_fetch(
        &c,
        "GET",
        "/ui/api/webhooks/nope/events",
        false,
        Value::Null,
    )
    .await;
    assert_eq!(r["status"], json!(404), "{r}");

    // A rotated-away address still in its grace is shown on the endpoint's page, with until
    // when it is accepted; an endpoint never rotated shows none.
    let stripe_old = b["path"].as_str().unwrap();
    let (st, r) = s
        .api(
            "POST",
            "/v1/webhook-endpoints/stripe/rotate-address",
            &admin,
            Some(json!({"grace_ms": 600_000})),
        )
        .await;
    assert_eq!(st, 200, "{r}");
    go(&c, &s.base, "webhooks/stripe").await;
    let facts = wait_text(&c, "#endpoint-facts", |t| t.contains("Previous address")).await;
    assert!(
        facts.contains(&format!("POST {stripe_old} — accepted until 20")),
        "{facts}"
    );
    assert!(facts.contains(r["path"].as_str().unwrap()), "{facts}");
    go(&c, &s.base, "webhooks/github").await;
    let facts = wait_text(&c, "#endpoint-facts", |t| t.contains(&path)).await;
    assert!(!facts.contains("Previous address"), "{facts}");
    close(c).await;

    // Read-only: everything shown, no replay offered; a forged replay is refused and
    // sends nothing.
    let (_driver2, c) = browser().await;
    sign_in(&c, &s.base, &read).await;
    go(&c, &s.base, &format!("webhooks/github?event={closed}")).await;
    wait_text(&c, "#deliveries-table tbody", |t| t.contains("completed")).await;
    assert_eq!(count(&c, "#event-replay").await, 0);
    // No stray "null" where the admin's button would be (Node.append writes null as text).
    let main = wait_for(&c, "#main").await.text().await.unwrap();
    assert!(!main.lines().any(|l| l.trim() == "null"), "{main}");
    go(&c, &s.base, "webhooks/github").await;
    wait_text(&c, "#events-table tbody", |t| t.contains("closed")).await;
    assert_eq!(count(&c, "#events-table button").await, 0);
    assert_eq!(count(&c, "#replay-since").await, 0);
    let r = page_fetch(
        &c,
        "POST",
        &format!("/ui/api/v1/webhook-endpoints/github/events/{closed}/replay"),
        true,
        json!({}),
    )
    .await;
    assert_eq!(r["status"], json!(403), "{r}");
    let r = page_fetch(
        &c,
        "POST",
        "/ui/api/v1/webhook-endpoints/github/replay",
        true,
        json!({"since": "2020-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(r["status"], json!(403), "{r}");
    close(c).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        got.b.lock().unwrap().len(),
        6,
        "a refused replay sent nothing"
    );
    http_jobs.stop().await;
}

/// The text of the first row of `rows` containing `needle`.
async fn row_text(c: &Client, rows: &str, needle: &str) -> String {
    for row in c.find_all(Locator::Css(rows)).await.unwrap() {
        let t = row.text().await.unwrap();
        if t.contains(needle) {
            return t;
        }
    }
    panic!("no row of {rows:?} contains {needle:?}");
}
