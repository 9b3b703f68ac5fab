//! The schedules page in a real headless Chromium against a real server: schedules created
//! and backfilled through the API; the operator sees next fires and recorded fires with
//! their jobs, pauses and resumes one; a read-only key is offered no action and is refused
//! a forged one; another tenant sees none of them.

mod common;

use std::time::Duration;

use common::*;
use fantoccini::Client;
use serde_json::{json, Value};

async fn click(c: &Client, css: &str) {
    for _ in 0..50 {
        if wait_for(c, css).await.click().await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("could not click {css:?}");
}

async fn schedule(s: &TestServer, key: &str, name: &str) -> (u16, Value) {
    s.api("GET", &format!("/v1/schedules/{name}"), key, None)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_sees_fires_and_pauses_a_schedule() {
    let s = TestServer::start().await;
    let admin = s.key("acme", &["admin"]).await;
    let read = s.key("acme", &["read"]).await;
    let other = s.key("globex", &["admin"]).await;

    let (st, b) = s
        .api(
            "POST",
            "/v1/schedules",
            &admin,
            Some(json!({
                "name": "hourly-digest",
                "cron": "0 * * * *",
                "timezone": "Europe/Berlin",
                "target": { "type": "job", "queue": "digests", "kind": "build", "args": {} }
            })),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let (st, b) = s
        .api(
            "POST",
            "/v1/schedules",
            &admin,
            Some(json!({
                "name": "cleanup",
                "interval_ms": 600000,
                "target": { "type": "job", "queue": "maintenance", "kind": "vacuum" }
            })),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    // Three past fire times run now (a backfill), each making a job.
    let (st, fired) = s
        .api(
            "POST",
            "/v1/schedules/hourly-digest/backfill",
            &admin,
            Some(json!({ "from": "2026-01-05T10:00:00Z", "to": "2026-01-05T12:00:00Z" })),
        )
        .await;
    assert_eq!(st, 200, "{fired}");
    let fired = fired["fired"].as_array().unwrap().clone();
    assert_eq!(fired.len(), 3, "{fired:?}");
    let (st, b) = s
        .api(
            "POST",
            "/v1/schedules",
            &other,
            Some(json!({
                "name": "globex-payroll",
                "cron": "0 9 * * MON",
                "target": { "type": "job", "queue": "payroll", "kind": "pay" }
            })),
        )
        .await;
    assert_eq!(st, 201, "{b}");

    let (_driver, c) = browser().await;
    sign_in(&c, &s.base, &admin).await;
    go(&c, &s.base, "schedules").await;
    let rows = wait_text(&c, "#schedules-table tbody", |t| {
        t.contains("hourly-digest") && t.contains("cleanup")
    })
    .await;
    assert!(
        rows.contains("Europe/Berlin") && rows.contains("every 600000 ms"),
        "{rows}"
    );
    assert!(!rows.contains("globex"), "{rows}");

    // One schedule: its next fires and the three backfilled fires with their jobs.
    click(&c, "#schedules-table a[href='#/schedules/hourly-digest']").await;
    wait_text(&c, "#schedule-preview", |t| t.lines().count() == 5).await;
    let fires = wait_text(&c, "#schedule-fires tbody", |t| {
        t.matches("backfilled").count() == 3
    })
    .await;
    assert!(fires.contains("2026-01-05 11:00:00"), "{fires}");
    for f in &fired {
        let job = f["job_id"].as_i64().unwrap();
        wait_for(&c, &format!("#schedule-fires a[href='#/job/{job}']")).await;
    }
    screenshot(&c, "schedules").await;

    // Pause, then resume.
    click(
        &c,
        "tr[data-schedule=hourly-digest] button[data-action=pause]",
    )
    .await;
    wait_text(&c, "tr[data-schedule=hourly-digest]", |t| {
        t.contains("paused")
    })
    .await;
    assert_eq!(
        schedule(&s, &admin, "hourly-digest").await.1["paused"],
        json!(true)
    );
    wait_text(&c, "#schedule-detail", |t| {
        t.contains("Paused: a resumed schedule")
    })
    .await;
    click(
        &c,
        "tr[data-schedule=hourly-digest] button[data-action=resume]",
    )
    .await;
    wait_text(&c, "tr[data-schedule=hourly-digest]", |t| {
        t.contains("active")
    })
    .await;
    assert_eq!(
        schedule(&s, &admin, "hourly-digest").await.1["paused"],
        json!(false)
    );
    // Another tenant's schedule is not found through the dashboard either.
    let r = page_fetch(
        &c,
        "GET",
        "/ui/api/v1/schedules/globex-payroll",
        false,
        Value::Null,
    )
    .await;
    assert_eq!(r["status"], json!(404), "{r}");
    close(c).await;

    // Read-only: no pause buttons; a forged pause is refused and changes nothing.
    let (_driver2, c) = browser().await;
    sign_in(&c, &s.base, &read).await;
    go(&c, &s.base, "schedules").await;
    wait_text(&c, "#schedules-table tbody", |t| {
        t.contains("hourly-digest")
    })
    .await;
    assert_eq!(count(&c, "#schedules-table button").await, 0);
    let r = page_fetch(
        &c,
        "POST",
        "/ui/api/v1/schedules/cleanup/pause",
        true,
        json!({}),
    )
    .await;
    assert_eq!(r["status"], json!(403), "{r}");
    assert_eq!(
        schedule(&s, &admin, "cleanup").await.1["paused"],
        json!(false)
    );
    close(c).await;
}
