//! The queues page's latency and workers, and the job page's trace id, in a real headless
//! Chromium against a real server: a worker that claimed over HTTP is listed under its
//! name with the jobs it was handed; the oldest waiting job's age and the median start
//! wait show; another tenant cannot read a queue's activity; a job enqueued under a W3C
//! trace context shows its trace id.

mod common;

use common::*;
use serde_json::{json, Value};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_latency_and_workers_show() {
    let s = TestServer::start().await;
    let admin = s.key("acme", &["admin"]).await;
    let globex = s.key("globex", &["admin"]).await;
    for i in 0..6 {
        s.enqueue(&admin, "mail", "send", json!({ "n": i })).await;
    }
    // Four handed out to "test-worker" (completed), two left waiting.
    s.work(&admin, "mail", 4, |_| None).await;
    let (st, b) = s
        .api(
            "POST",
            "/v1/jobs",
            &admin,
            Some(json!({ "queue": "mail", "kind": "traced", "args": {},
                          "meta": { "traceparent": format!("00-{TRACE}-00f067aa0ba902b7-01") } })),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let traced = b["job_id"].as_i64().unwrap();

    let (_driver, c) = browser().await;
    sign_in(&c, &s.base, &admin).await;
    go(&c, &s.base, "queues").await;
    let row = wait_text(&c, "#activity-table tr[data-queue='mail']", |t| {
        t.contains("test-worker: 4 jobs")
    })
    .await;
    assert!(row.contains("last claim"), "{row}");
    // Three jobs wait (two seeded, the traced one): the oldest has an age.
    wait_text(
        &c,
        "#activity-table tr[data-queue='mail'] td[data-col='oldest']",
        |t| t.ends_with(" ms") || t.ends_with(" s"),
    )
    .await;
    screenshot(&c, "queues-activity").await;
    let r = page_fetch(
        &c,
        "GET",
        "/ui/api/queues/mail/activity",
        false,
        Value::Null,
    )
    .await;
    assert_eq!(r["status"], json!(200), "{r}");
    let a = &r["body"];
    assert_eq!(a["start_wait_sample"], json!(4), "{a}");
    assert!(a["start_wait_p50_ms"].is_u64(), "{a}");
    assert!(a["oldest_pending_ms"].is_u64(), "{a}");
    assert_eq!(a["workers"][0]["worker"], json!("test-worker"), "{a}");
    assert_eq!(a["workers"][0]["jobs"], json!(4), "{a}");
    let r = page_fetch(
        &c,
        "GET",
        "/ui/api/queues/nosuch/activity",
        false,
        Value::Null,
    )
    .await;
    assert_eq!(r["status"], json!(404), "{r}");

    // The job page: the trace id of the context the job was enqueued under.
    go(&c, &s.base, &format!("job/{traced}")).await;
    wait_text(&c, "#job-trace", |t| t == TRACE).await;
    close(c).await;

    // Another tenant names the same queue in its own namespace: nothing there.
    let (_d2, c) = browser().await;
    sign_in(&c, &s.base, &globex).await;
    let r = page_fetch(
        &c,
        "GET",
        "/ui/api/queues/mail/activity",
        false,
        Value::Null,
    )
    .await;
    assert_eq!(r["status"], json!(404), "{r}");
    close(c).await;
}
