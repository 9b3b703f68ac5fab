//! The HTTP jobs page in a real headless Chromium: the server's real HTTP-job service sends
//! requests to a real HTTP endpoint on loopback (allowed for this server). One delivery is
//! refused with 503 + Retry-After and then succeeds; another gets a 404 and dies. The page
//! lists both, and the job page shows every delivery's response status and body.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::http::{header, StatusCode};
use axum::routing::{get, post};
use common::*;
use pgferry_http_jobs::{Allow, Range};
use serde_json::json;

/// `POST /hook`: 503 with Retry-After the first time, then 200. `GET /gone`: 404.
async fn endpoint() -> String {
    let calls = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new()
        .route(
            "/hook",
            post(move || {
                let calls = calls.clone();
                async move {
                    if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        (
                            StatusCode::SERVICE_UNAVAILABLE,
                            [(header::RETRY_AFTER, "1")],
                            "busy, try later",
                        )
                    } else {
                        (
                            StatusCode::OK,
                            [(header::CACHE_CONTROL, "no-store")],
                            "ok: order 42",
                        )
                    }
                }
            }),
        )
        .route(
            "/gone",
            get(|| async { (StatusCode::NOT_FOUND, "no such hook") }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_jobs_show_each_delivery_with_its_response() {
    let allow = Allow::of(&[Range::parse("loopback").unwrap()]);
    let mut config = pgferry_server::ServerConfig::default();
    config.http.http_jobs_allow = allow.clone();
    let s = TestServer::start_with(config).await;
    let admin = s.key("acme", &["admin"]).await;
    let http_jobs = s.start_http_jobs(allow);
    let target = endpoint().await;

    let (st, b) = s
        .api(
            "POST",
            "/v1/jobs",
            &admin,
            Some(json!({ "queue": "http", "kind": "http", "max_attempts": 3,
                "args": { "method": "POST", "url": format!("{target}/hook"), "body": "{\"order\": 42}",
                          "expect_body": "ok" } })),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let hook = b["job_id"].as_i64().unwrap();
    let (st, b) = s
        .api(
            "POST",
            "/v1/jobs",
            &admin,
            Some(json!({ "queue": "http", "kind": "http", "max_attempts": 1,
                "args": { "url": format!("{target}/gone") } })),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let gone = b["job_id"].as_i64().unwrap();

    let (_driver, c) = browser().await;
    sign_in(&c, &s.base, &admin).await;
    go(&c, &s.base, "http").await;
    // Both requests, their end states and last response statuses, live.
    wait_text(&c, &format!("#http-table tr[data-job='{hook}']"), |t| {
        t.contains("POST") && t.contains("/hook") && t.contains("completed") && t.contains("ok")
    })
    .await;
    wait_text(&c, &format!("#http-table tr[data-job='{gone}']"), |t| {
        t.contains("GET") && t.contains("dead") && t.contains("404")
    })
    .await;
    screenshot(&c, "http").await;

    // The first job: a 503 delivery with its body, then the 200 that completed it.
    go(&c, &s.base, &format!("job/{hook}")).await;
    wait_text(&c, "#deliveries tr[data-status='503']", |t| {
        t.contains("busy, try later")
    })
    .await;
    wait_text(&c, "#deliveries tr[data-status='200']", |t| {
        t.contains("ok: order 42") && t.contains("completed")
    })
    .await;
    screenshot(&c, "http-job").await;
    go(&c, &s.base, &format!("job/{gone}")).await;
    wait_text(&c, "#deliveries tr[data-status='404']", |t| {
        t.contains("no such hook")
    })
    .await;
    close(c).await;
    http_jobs.stop().await;
}
