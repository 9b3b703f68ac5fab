//! The monitors page in a real headless Chromium against a real server: heartbeat monitors
//! pinged over their public URLs and judged by the monitors' real duty (one pass run at an
//! injected time, five minutes ahead): one up, one late, one down after a failed run, one
//! that failed and recovered, one never pinged. The operator sees each state, a monitor's
//! pings and alert history with reasons, and pauses and resumes one; another tenant's
//! monitor is never shown; a read-only key is offered no action and refused a forged one.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use fantoccini::Client;
use pgferry_http_jobs::{Allow, Range};
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

async fn create(s: &TestServer, key: &str, body: Value) -> String {
    let (st, b) = s.api("POST", "/v1/monitors", key, Some(body)).await;
    assert_eq!(st, 201, "{b}");
    b["ping_path"].as_str().unwrap().to_string()
}

/// A ping over the public URL (no API key): `suffix` "", "/start" or "/fail".
async fn ping(s: &TestServer, path: &str, suffix: &str, body: &str) {
    let res = s
        .http
        .post(format!("{}{path}{suffix}", s.base))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200, "{path}{suffix}");
}

async fn state(s: &TestServer, key: &str, name: &str) -> Value {
    s.api("GET", &format!("/v1/monitors/{name}"), key, None)
        .await
        .1["state"]
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_sees_monitor_states_alerts_and_pauses_one() {
    // Notification targets must pass the HTTP jobs' guard: loopback is allowed here.
    let mut config = pgferry_server::ServerConfig::default();
    config.http.http_jobs_allow = Allow::of(&[Range::parse("loopback").unwrap()]);
    let s = TestServer::start_with(config).await;
    let admin = s.key("acme", &["admin"]).await;
    let read = s.key("acme", &["read"]).await;
    let other = s.key("globex", &["admin"]).await;

    let (st, b) = s
        .api(
            "POST",
            "/v1/notification-targets",
            &admin,
            Some(json!({ "name": "ops", "url": "http://127.0.0.1:9/alerts", "events": ["monitor.*"] })),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let day = 86_400_000;
    let backup = create(&s, &admin, json!({ "name": "nightly-backup", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "grace_ms": 600000 })).await;
    let sync = create(
        &s,
        &admin,
        json!({ "name": "hourly-sync", "period_ms": 60000, "grace_ms": 1000, "targets": ["ops"] }),
    )
    .await;
    let etl = create(&s, &admin, json!({ "name": "etl", "period_ms": day })).await;
    let flaky = create(&s, &admin, json!({ "name": "flaky", "period_ms": day })).await;
    create(&s, &admin, json!({ "name": "fresh", "period_ms": day })).await;
    let theirs = create(
        &s,
        &other,
        json!({ "name": "globex-payroll", "period_ms": 60000, "grace_ms": 1000 }),
    )
    .await;

    ping(&s, &backup, "", "").await;
    ping(&s, &sync, "", "synced 42 rows").await;
    ping(&s, &etl, "/fail", "exit 3: disk full").await;
    ping(&s, &flaky, "/fail", "").await;
    ping(&s, &flaky, "", "").await;
    ping(&s, &theirs, "", "").await;
    // The duty's pass five minutes from now: hourly-sync (and globex's) missed their runs;
    // every other deadline is at least its grace (10 min, or a day) after its ping.
    let mut client = s.db.connect().await;
    let report = pgferry_monitors::run_once(
        &s.state.engine,
        &mut client,
        SystemTime::now() + Duration::from_secs(300),
        &pgferry_monitors::DutyConfig::default(),
    )
    .await
    .unwrap();
    assert_eq!(report.late, 2, "{report:?}");

    let (_driver, c) = browser().await;
    sign_in(&c, &s.base, &admin).await;
    go(&c, &s.base, "monitors").await;
    let rows = wait_text(&c, "#monitors-table tbody", |t| {
        t.contains("nightly-backup")
    })
    .await;
    assert!(!rows.contains("globex"), "{rows}");
    for (name, want) in [
        ("nightly-backup", "up"),
        ("hourly-sync", "late"),
        ("etl", "down"),
        ("flaky", "up"),
        ("fresh", "new"),
    ] {
        wait_for(
            &c,
            &format!("#monitors-table tr[data-monitor='{name}'][data-state='{want}']"),
        )
        .await;
    }
    let backup_row = wait_text(&c, "tr[data-monitor='nightly-backup']", |t| {
        t.contains("cron")
    })
    .await;
    assert!(
        backup_row.contains("0 3 * * * (Europe/Berlin)") && backup_row.contains("10 min"),
        "{backup_row}"
    );
    let etl_row = wait_text(&c, "tr[data-monitor='etl']", |t| t.contains("down")).await;
    assert!(
        etl_row.contains("1 / 1") && etl_row.contains("every 1 d"),
        "{etl_row}"
    );
    wait_text(&c, "#targets-table", |t| {
        t.contains("ops") && t.contains("monitor.*")
    })
    .await;

    // hourly-sync: its ping and its late alert with the reason.
    click(&c, "#monitors-table a[href='#/monitors/hourly-sync']").await;
    wait_text(&c, "#monitor-pings", |t| t.contains("synced 42 rows")).await;
    let alerts = wait_text(&c, "#monitor-alerts", |t| t.contains("late")).await;
    assert!(alerts.contains("no ping since"), "{alerts}");
    wait_text(&c, "#monitor-detail", |t| t.contains("/ping/")).await;
    screenshot(&c, "monitors").await;
    // flaky: failed, then recovered, newest first.
    go(&c, &s.base, "monitors/flaky").await;
    let alerts = wait_text(&c, "#monitor-alerts", |t| {
        t.contains("recovered") && t.contains("failed")
    })
    .await;
    assert!(
        alerts.find("recovered").unwrap() < alerts.find("failed").unwrap(),
        "{alerts}"
    );
    go(&c, &s.base, "monitors/etl").await;
    let pings = wait_text(&c, "#monitor-pings", |t| t.contains("disk full")).await;
    assert!(pings.contains("fail"), "{pings}");
    wait_text(&c, "#monitor-alerts", |t| {
        t.contains("1 consecutive failed runs")
    })
    .await;

    // Pause, then resume.
    click(
        &c,
        "tr[data-monitor='nightly-backup'] button[data-action=pause]",
    )
    .await;
    wait_for(&c, "tr[data-monitor='nightly-backup'][data-state='paused']").await;
    assert_eq!(state(&s, &admin, "nightly-backup").await, json!("paused"));
    click(
        &c,
        "tr[data-monitor='nightly-backup'] button[data-action=resume]",
    )
    .await;
    wait_for(&c, "tr[data-monitor='nightly-backup'][data-state='up']").await;
    assert_eq!(state(&s, &admin, "nightly-backup").await, json!("up"));

    // Another tenant's monitor and alerts are not found through the dashboard.
    let r = page_fetch(
        &c,
        "GET",
        "/ui/api/v1/monitors/globex-payroll",
        false,
        Value::Null,
    )
    .await;
    assert_eq!(r["status"], json!(404), "{r}");
    let r = page_fetch(
        &c,
        "GET",
        "/ui/api/v1/alerts?type=monitor&subject=globex-payroll",
        false,
        Value::Null,
    )
    .await;
    assert_eq!(r["body"]["alerts"], json!([]), "{r}");
    close(c).await;

    // Read-only: states and history shown, no buttons, no ping URL; a forged pause is
    // refused and changes nothing.
    let (_driver2, c) = browser().await;
    sign_in(&c, &s.base, &read).await;
    go(&c, &s.base, "monitors/hourly-sync").await;
    wait_text(&c, "#monitor-alerts", |t| t.contains("late")).await;
    wait_for(
        &c,
        "#monitors-table tr[data-monitor='etl'][data-state='down']",
    )
    .await;
    assert_eq!(count(&c, "#monitors-table button").await, 0);
    let detail = wait_text(&c, "#monitor-detail", |t| t.contains("Ping URL")).await;
    assert!(!detail.contains("/ping/"), "{detail}");
    let r = page_fetch(&c, "POST", "/ui/api/v1/monitors/etl/pause", true, json!({})).await;
    assert_eq!(r["status"], json!(403), "{r}");
    assert_eq!(state(&s, &admin, "etl").await, json!("down"));
    close(c).await;
}
