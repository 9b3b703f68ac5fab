//! Creating, changing and deleting the /v1 API's webhook endpoints, heartbeat monitors and
//! notification targets from the dashboard, in a real headless Chromium against a real
//! server. An endpoint made in the page enforces its signature and fans a real inbound POST
//! out, through the server's real HTTP-job service, to a target on loopback; a monitor made
//! in the page shows its ping URL and goes up when pinged; a target is made and changed.
//! The API's own validation refuses bad input (a URL the SSRF guard refuses, a bad cron, a
//! period out of range), and the page shows its error naming the field, keeping what was
//! typed. Deletes ask first and leave 404s. A read-only key is offered none of it and its
//! forged requests are 403.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::post;
use common::*;
use fantoccini::Client;
use hmac::{Hmac, KeyInit, Mac};
use pgferry_http_jobs::{Allow, Range};
use serde_json::{json, Value};

/// Clicks `css` after scrolling it to the middle of the window (the forms are long; a
/// link scrolled just under the sticky header would take the header's click).
async fn click(c: &Client, css: &str) {
    for _ in 0..50 {
        let el = wait_for(c, css).await;
        let arg = serde_json::to_value(&el).unwrap();
        let _ = c
            .execute("arguments[0].scrollIntoView({block: 'center'});", vec![arg])
            .await;
        if el.click().await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("could not click {css:?}");
}

/// Replaces what the input `css` holds with `text`, typed.
async fn fill(c: &Client, css: &str, text: &str) {
    let el = wait_for(c, css).await;
    el.clear().await.unwrap();
    el.send_keys(text).await.unwrap();
}

async fn prop(c: &Client, css: &str, name: &str) -> String {
    wait_for(c, css)
        .await
        .prop(name)
        .await
        .unwrap()
        .unwrap_or_default()
}

async fn attr(c: &Client, css: &str, name: &str) -> Option<String> {
    wait_for(c, css).await.attr(name).await.unwrap()
}

async fn choose(c: &Client, css: &str, value: &str) {
    wait_for(c, css).await.select_by_value(value).await.unwrap();
}

/// Waits until nothing matches `css`.
async fn wait_gone(c: &Client, css: &str) {
    for _ in 0..200 {
        if count(c, css).await == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{css:?} is still shown");
}

/// A loopback server that records every body POSTed to `/hook`.
async fn target(got: Arc<Mutex<Vec<String>>>) -> String {
    let app = axum::Router::new().route(
        "/hook",
        post(move |body: String| {
            let got = got.clone();
            async move {
                got.lock().unwrap().push(body);
                (StatusCode::OK, "thanks")
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

fn loopback_config() -> pgferry_server::ServerConfig {
    let mut config = pgferry_server::ServerConfig::default();
    config.http.http_jobs_allow = Allow::of(&[Range::parse("loopback").unwrap()]);
    config
}

fn sign(secret: &str, body: &str) -> String {
    let mut m = Hmac::<sha2_11::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    m.update(body.as_bytes());
    format!("sha256={}", hex::encode(m.finalize().into_bytes()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_creates_an_endpoint_that_fans_out_and_deletes_it() {
    let config = loopback_config();
    let allow = config.http.http_jobs_allow.clone();
    let s = TestServer::start_with(config).await;
    let admin = s.key("acme", &["admin"]).await;
    let http_jobs = s.start_http_jobs(allow);
    let got = Arc::new(Mutex::new(Vec::new()));
    let base = target(got.clone()).await;

    let (_driver, c) = browser().await;
    sign_in(&c, &s.base, &admin).await;
    go(&c, &s.base, "webhooks").await;
    wait_for(&c, "#endpoint-form").await;
    fill(&c, "#ep-slug", "github").await;
    choose(&c, "#ep-scheme", "hmac_sha256").await;
    fill(&c, "#ep-sig-header", "X-Hub-Signature-256").await;
    fill(&c, "#ep-secret", "s3cret").await;
    fill(&c, "#ep-dedup", "X-GitHub-Delivery").await;
    // A private address: the API's SSRF guard refuses it (only loopback is allowed here).
    fill(&c, "#ep-targets", "http://10.1.2.3/hook").await;
    click(&c, "#endpoint-form button[type=submit]").await;
    let err = wait_text(&c, "#endpoint-error", |t| !t.is_empty()).await;
    assert!(err.starts_with("targets: "), "{err}");
    screenshot(&c, "webhook-create-refused").await;
    assert_eq!(
        attr(&c, "#ep-targets", "aria-invalid").await.as_deref(),
        Some("true")
    );
    // Nothing typed is lost, and nothing was created.
    assert_eq!(prop(&c, "#ep-slug", "value").await, "github");
    assert_eq!(prop(&c, "#ep-secret", "value").await, "s3cret");
    assert_eq!(prop(&c, "#ep-scheme", "value").await, "hmac_sha256");
    assert_eq!(
        prop(&c, "#ep-targets", "value").await,
        "http://10.1.2.3/hook"
    );
    let (st, _) = s
        .api("GET", "/v1/webhook-endpoints/github", &admin, None)
        .await;
    assert_eq!(st, 404);

    fill(&c, "#ep-targets", &format!("{base}/hook")).await;
    click(&c, "#endpoint-form button[type=submit]").await;
    let created = wait_text(&c, "#endpoint-created", |t| t.contains("/in/github-")).await;
    assert_eq!(wait_text(&c, "#endpoint-error", |_| true).await, "");
    assert_eq!(
        prop(&c, "#ep-slug", "value").await,
        "",
        "the form is cleared"
    );
    let row = wait_text(&c, "#webhooks-table tr[data-endpoint='github']", |t| {
        t.contains("hmac_sha256")
    })
    .await;
    assert!(
        row.contains("hmac_sha256 (x-hub-signature-256)")
            && row.contains("x-github-delivery")
            && row.contains(&format!("{base}/hook")),
        "{row}"
    );
    let (st, ep) = s
        .api("GET", "/v1/webhook-endpoints/github", &admin, None)
        .await;
    assert_eq!(st, 200, "{ep}");
    let path = ep["path"].as_str().unwrap().to_string();
    assert!(created.contains(&path), "{created}");
    // Made in the signed-in key's tenant only.
    let other = s.key("globex", &["admin"]).await;
    let (st, _) = s
        .api("GET", "/v1/webhook-endpoints/github", &other, None)
        .await;
    assert_eq!(st, 404);
    screenshot(&c, "webhook-created").await;

    // The endpoint works: the signature set in the page is enforced, and a signed event is
    // stored and sent on to the target.
    let body = json!({"action": "opened", "number": 7}).to_string();
    let post_in = |sig: Option<String>| {
        let mut r = s
            .http
            .post(format!("{}{path}", s.base))
            .header("content-type", "application/json")
            .header("x-github-delivery", "d-1")
            .body(body.clone());
        if let Some(sig) = sig {
            r = r.header("x-hub-signature-256", sig);
        }
        r.send()
    };
    assert_eq!(post_in(None).await.unwrap().status().as_u16(), 401);
    let res = post_in(Some(sign("s3cret", &body))).await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let r: Value = res.json().await.unwrap();
    assert_eq!(r["deliveries"], json!(1), "{r}");
    for _ in 0..300 {
        if !got.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(*got.lock().unwrap(), vec![body.clone()]);

    // The same slug again: the API's conflict, shown on the slug.
    fill(&c, "#ep-slug", "github").await;
    fill(&c, "#ep-targets", &format!("{base}/hook")).await;
    click(&c, "#endpoint-form button[type=submit]").await;
    let err = wait_text(&c, "#endpoint-error", |t| !t.is_empty()).await;
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(
        attr(&c, "#ep-slug", "aria-invalid").await.as_deref(),
        Some("true")
    );

    // Delete asks first: one click arms it, nothing is deleted yet.
    let delete = "#webhooks-table tr[data-endpoint='github'] button[data-action=delete]";
    click(&c, delete).await;
    wait_text(&c, delete, |t| t == "Confirm delete github").await;
    let (st, _) = s
        .api("GET", "/v1/webhook-endpoints/github", &admin, None)
        .await;
    assert_eq!(st, 200);
    click(&c, delete).await;
    wait_gone(&c, "#webhooks-table tr[data-endpoint='github']").await;
    let (st, _) = s
        .api("GET", "/v1/webhook-endpoints/github", &admin, None)
        .await;
    assert_eq!(st, 404);
    let res = post_in(Some(sign("s3cret", &body))).await.unwrap();
    assert_eq!(res.status().as_u16(), 404, "its address is gone");
    close(c).await;
    http_jobs.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_creates_changes_and_deletes_monitors_and_targets() {
    let s = TestServer::start_with(loopback_config()).await;
    let admin = s.key("acme", &["admin"]).await;
    let (_driver, c) = browser().await;
    sign_in(&c, &s.base, &admin).await;
    go(&c, &s.base, "monitors").await;

    // A notification target: a link-local URL is refused by the API, then a loopback one
    // is taken.
    wait_for(&c, "#target-form").await;
    fill(&c, "#tg-name", "ops").await;
    fill(&c, "#tg-url", "http://169.254.169.254/alerts").await;
    fill(&c, "#tg-events", "monitor.*").await;
    click(&c, "#target-form button[type=submit]").await;
    let err = wait_text(&c, "#target-error", |t| !t.is_empty()).await;
    assert!(err.starts_with("url: "), "{err}");
    assert_eq!(
        attr(&c, "#tg-url", "aria-invalid").await.as_deref(),
        Some("true")
    );
    assert_eq!(prop(&c, "#tg-name", "value").await, "ops");
    assert_eq!(prop(&c, "#tg-events", "value").await, "monitor.*");
    fill(&c, "#tg-url", "http://127.0.0.1:9/alerts").await;
    click(&c, "#target-form button[type=submit]").await;
    let row = wait_text(&c, "#targets-table tr[data-target='ops']", |t| {
        t.contains("monitor.*")
    })
    .await;
    assert!(
        row.contains("http://127.0.0.1:9/alerts") && row.contains("yes"),
        "{row}"
    );

    // Change it: the name stays, events and enabled change.
    click(
        &c,
        "#targets-table tr[data-target='ops'] button[data-action=edit]",
    )
    .await;
    wait_text(&c, "#target-form h2", |t| {
        t.contains("Edit notification target ops")
    })
    .await;
    assert_eq!(prop(&c, "#tg-name", "readOnly").await, "true");
    fill(&c, "#tg-events", "monitor.late, monitor.recovered").await;
    click(&c, "#tg-enabled").await;
    click(&c, "#target-form button[type=submit]").await;
    wait_text(&c, "#targets-table tr[data-target='ops']", |t| {
        t.contains("monitor.late, monitor.recovered") && t.contains("no")
    })
    .await;
    let (st, t) = s
        .api("GET", "/v1/notification-targets/ops", &admin, None)
        .await;
    assert_eq!(st, 200, "{t}");
    assert_eq!(t["events"], json!(["monitor.late", "monitor.recovered"]));
    assert_eq!(t["enabled"], json!(false));
    assert_eq!(t["url"], json!("http://127.0.0.1:9/alerts"));
    // A second target, for the monitor's routing.
    fill(&c, "#tg-name", "pager").await;
    fill(&c, "#tg-url", "http://127.0.0.1:9/pager").await;
    click(&c, "#target-form button[type=submit]").await;
    wait_for(&c, "#targets-table tr[data-target='pager']").await;

    // A cron monitor: a bad cron is the API's error on the cron field, everything typed
    // (and the ticked target) kept.
    fill(&c, "#mon-name", "nightly-backup").await;
    choose(&c, "#mon-expects", "cron").await;
    fill(&c, "#mon-cron", "61 3 * * *").await;
    fill(&c, "#mon-zone", "Europe/Berlin").await;
    fill(&c, "#mon-grace", "600000").await;
    fill(&c, "#mon-threshold", "2").await;
    click(&c, "#monitor-targets input[value='pager']").await;
    click(&c, "#monitor-form button[type=submit]").await;
    let err = wait_text(&c, "#monitor-error", |t| !t.is_empty()).await;
    assert!(err.starts_with("cron: "), "{err}");
    assert_eq!(
        attr(&c, "#mon-cron", "aria-invalid").await.as_deref(),
        Some("true")
    );
    screenshot(&c, "monitor-create-refused").await;
    assert_eq!(prop(&c, "#mon-name", "value").await, "nightly-backup");
    assert_eq!(prop(&c, "#mon-zone", "value").await, "Europe/Berlin");
    assert_eq!(
        prop(&c, "#monitor-targets input[value='pager']", "checked").await,
        "true"
    );
    let (st, _) = s
        .api("GET", "/v1/monitors/nightly-backup", &admin, None)
        .await;
    assert_eq!(st, 404);
    fill(&c, "#mon-cron", "0 3 * * *").await;
    click(&c, "#monitor-form button[type=submit]").await;
    let created = wait_text(&c, "#monitor-created", |t| t.contains("/ping/")).await;
    let row = wait_text(
        &c,
        "#monitors-table tr[data-monitor='nightly-backup'][data-state='new']",
        |t| t.contains("cron"),
    )
    .await;
    assert!(
        row.contains("0 3 * * * (Europe/Berlin)")
            && row.contains("10 min")
            && row.contains("0 / 2")
            && row.contains("pager"),
        "{row}"
    );
    let (st, m) = s
        .api("GET", "/v1/monitors/nightly-backup", &admin, None)
        .await;
    assert_eq!(st, 200, "{m}");
    assert_eq!(m["targets"], json!(["pager"]));
    assert_eq!(m["failure_threshold"], json!(2));
    let ping_path = m["ping_path"].as_str().unwrap().to_string();
    assert!(
        created.contains(&format!("{}{ping_path}", s.base)),
        "{created}"
    );

    // A period monitor: a period that is not a number is refused in the page, one out of
    // range by the API, both on the period field.
    fill(&c, "#mon-name", "sync").await;
    fill(&c, "#mon-period", "1m").await;
    click(&c, "#monitor-form button[type=submit]").await;
    wait_text(&c, "#monitor-error", |t| t == "period_ms: a whole number").await;
    fill(&c, "#mon-period", "500").await;
    click(&c, "#monitor-form button[type=submit]").await;
    let err = wait_text(&c, "#monitor-error", |t| {
        t.starts_with("period_ms: must be")
    })
    .await;
    assert!(err.contains("1000"), "{err}");
    assert_eq!(
        attr(&c, "#mon-period", "aria-invalid").await.as_deref(),
        Some("true")
    );
    fill(&c, "#mon-period", "60000").await;
    click(&c, "#monitor-form button[type=submit]").await;
    wait_text(
        &c,
        "#monitors-table tr[data-monitor='sync'][data-state='new']",
        |t| t.contains("every 1 min") && t.contains("every matching target"),
    )
    .await;

    // Usable: a ping over the URL the page showed turns it up, live.
    let res = s
        .http
        .post(format!("{}{ping_path}", s.base))
        .body("backed up 3 GB")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    wait_for(
        &c,
        "#monitors-table tr[data-monitor='nightly-backup'][data-state='up']",
    )
    .await;
    click(&c, "#monitors-table a[href='#/monitors/nightly-backup']").await;
    wait_text(&c, "#monitor-pings", |t| t.contains("backed up 3 GB")).await;
    wait_text(&c, "#monitor-detail", |t| t.contains(&ping_path)).await;
    screenshot(&c, "monitor-created").await;

    // Delete the monitor (asks first) from its own page: back to the list, gone, 404, and
    // its ping URL is gone too.
    let delete = "#monitors-table tr[data-monitor='nightly-backup'] button[data-action=delete]";
    click(&c, delete).await;
    wait_text(&c, delete, |t| t == "Confirm delete nightly-backup").await;
    assert_eq!(
        s.api("GET", "/v1/monitors/nightly-backup", &admin, None)
            .await
            .0,
        200
    );
    click(&c, delete).await;
    wait_gone(&c, "#monitors-table tr[data-monitor='nightly-backup']").await;
    assert_eq!(
        s.api("GET", "/v1/monitors/nightly-backup", &admin, None)
            .await
            .0,
        404
    );
    let res = s
        .http
        .get(format!("{}{ping_path}", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 404);
    wait_for(&c, "#monitors-table tr[data-monitor='sync']").await;

    // Delete a target: asks first, then gone and 404; the other stays.
    let delete = "#targets-table tr[data-target='ops'] button[data-action=delete]";
    click(&c, delete).await;
    wait_text(&c, delete, |t| t == "Confirm delete ops").await;
    click(&c, delete).await;
    wait_gone(&c, "#targets-table tr[data-target='ops']").await;
    assert_eq!(
        s.api("GET", "/v1/notification-targets/ops", &admin, None)
            .await
            .0,
        404
    );
    wait_for(&c, "#targets-table tr[data-target='pager']").await;
    // Escape disarms an armed delete.
    let delete = "#targets-table tr[data-target='pager'] button[data-action=delete]";
    click(&c, delete).await;
    wait_text(&c, delete, |t| t.starts_with("Confirm")).await;
    wait_for(&c, delete)
        .await
        .send_keys(&fantoccini::key::Key::Escape.to_string())
        .await
        .unwrap();
    wait_text(&c, delete, |t| t == "Delete").await;
    // The forms in the dark theme.
    click(&c, "#theme").await;
    wait_for(&c, ":root[data-theme='dark']").await;
    click(&c, "#mon-name").await;
    screenshot(&c, "monitors-forms-dark").await;
    close(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_creates_and_deletes_a_schedule() {
    let s = TestServer::start().await;
    let admin = s.key("acme", &["admin"]).await;
    let (_driver, c) = browser().await;
    sign_in(&c, &s.base, &admin).await;
    go(&c, &s.base, "schedules").await;
    wait_for(&c, "#schedule-form").await;
    fill(&c, "#sc-name", "nightly-report").await;
    fill(&c, "#sc-cron", "0 25 * * *").await;
    fill(&c, "#sc-zone", "Europe/Berlin").await;
    fill(&c, "#sc-queue", "reports").await;
    fill(&c, "#sc-kind", "report").await;
    fill(&c, "#sc-args", "{\"format\": ").await;
    click(&c, "#schedule-form button[type=submit]").await;
    // Not JSON: refused in the page.
    let err = wait_text(&c, "#schedule-error", |t| !t.is_empty()).await;
    assert!(err.starts_with("target.args: not valid JSON"), "{err}");
    fill(&c, "#sc-args", "{\"format\": \"pdf\"}").await;
    click(&c, "#schedule-form button[type=submit]").await;
    // Hour 25: the API's cron error on the cron field.
    let err = wait_text(&c, "#schedule-error", |t| t.starts_with("cron: ")).await;
    assert!(!err.is_empty());
    assert_eq!(
        attr(&c, "#sc-cron", "aria-invalid").await.as_deref(),
        Some("true")
    );
    assert_eq!(prop(&c, "#sc-queue", "value").await, "reports");
    assert_eq!(prop(&c, "#sc-args", "value").await, "{\"format\": \"pdf\"}");
    assert_eq!(
        s.api("GET", "/v1/schedules/nightly-report", &admin, None)
            .await
            .0,
        404
    );
    fill(&c, "#sc-cron", "0 3 * * *").await;
    choose(&c, "#sc-overlap", "skip").await;
    click(&c, "#schedule-form button[type=submit]").await;
    wait_text(&c, "#schedule-created", |t| {
        t.contains("Created nightly-report")
    })
    .await;
    let row = wait_text(
        &c,
        "#schedules-table tr[data-schedule='nightly-report']",
        |t| t.contains("0 3 * * *"),
    )
    .await;
    assert!(
        row.contains("Europe/Berlin") && row.contains("job report → reports"),
        "{row}"
    );
    let (st, sc) = s
        .api("GET", "/v1/schedules/nightly-report", &admin, None)
        .await;
    assert_eq!(st, 200, "{sc}");
    assert_eq!(sc["target"]["args"], json!({"format": "pdf"}));
    assert_eq!(sc["overlap"], json!("skip"));
    // Usable: its page lists the next five fires, at 03:00 in Berlin.
    click(&c, "#schedule-created a").await;
    let preview = wait_text(&c, "#schedule-preview", |t| t.lines().count() == 5).await;
    assert!(
        preview
            .lines()
            .all(|l| l.contains(" 01:00:00") || l.contains(" 02:00:00")),
        "{preview}"
    );
    screenshot(&c, "schedule-created").await;

    let delete = "#schedules-table tr[data-schedule='nightly-report'] button[data-action=delete]";
    click(&c, delete).await;
    wait_text(&c, delete, |t| t == "Confirm delete nightly-report").await;
    assert_eq!(
        s.api("GET", "/v1/schedules/nightly-report", &admin, None)
            .await
            .0,
        200
    );
    click(&c, delete).await;
    wait_gone(&c, "#schedules-table tr[data-schedule='nightly-report']").await;
    assert_eq!(
        s.api("GET", "/v1/schedules/nightly-report", &admin, None)
            .await
            .0,
        404
    );
    close(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_key_gets_no_create_or_delete_and_forged_ones_are_refused() {
    let s = TestServer::start_with(loopback_config()).await;
    let admin = s.key("acme", &["admin"]).await;
    let read = s.key("acme", &["read"]).await;
    for (path, body) in [
        (
            "/v1/notification-targets",
            json!({"name": "ops", "url": "http://127.0.0.1:9/alerts"}),
        ),
        (
            "/v1/monitors",
            json!({"name": "etl", "period_ms": 60000, "targets": ["ops"]}),
        ),
        (
            "/v1/webhook-endpoints",
            json!({"slug": "github", "targets": ["http://127.0.0.1:9/hook"]}),
        ),
        (
            "/v1/schedules",
            json!({"name": "hourly", "cron": "@hourly", "target": {"type": "job", "queue": "q", "kind": "k"}}),
        ),
    ] {
        let (st, b) = s.api("POST", path, &admin, Some(body)).await;
        assert_eq!(st, 201, "{b}");
    }

    let (_driver, c) = browser().await;
    sign_in(&c, &s.base, &read).await;
    go(&c, &s.base, "webhooks").await;
    wait_for(&c, "#webhooks-table tr[data-endpoint='github']").await;
    assert_eq!(count(&c, "#endpoint-form").await, 0);
    assert_eq!(count(&c, "#webhooks-table button").await, 0);
    go(&c, &s.base, "schedules").await;
    wait_for(&c, "#schedules-table tr[data-schedule='hourly']").await;
    assert_eq!(count(&c, "#schedule-form").await, 0);
    assert_eq!(count(&c, "#schedules-table button").await, 0);
    go(&c, &s.base, "monitors").await;
    wait_for(&c, "#monitors-table tr[data-monitor='etl']").await;
    wait_for(&c, "#targets-table tr[data-target='ops']").await;
    for css in [
        "#monitor-form",
        "#target-form",
        "#monitors-table button",
        "#targets-table button",
    ] {
        assert_eq!(count(&c, css).await, 0, "{css}");
    }
    for (method, path, body) in [
        (
            "POST",
            "/ui/api/v1/webhook-endpoints",
            json!({"slug": "forged", "targets": ["http://127.0.0.1:9/x"]}),
        ),
        ("DELETE", "/ui/api/v1/webhook-endpoints/github", json!({})),
        (
            "POST",
            "/ui/api/v1/monitors",
            json!({"name": "forged", "period_ms": 60000}),
        ),
        ("DELETE", "/ui/api/v1/monitors/etl", json!({})),
        (
            "POST",
            "/ui/api/v1/notification-targets",
            json!({"name": "forged", "url": "http://127.0.0.1:9/x"}),
        ),
        (
            "PATCH",
            "/ui/api/v1/notification-targets/ops",
            json!({"enabled": false}),
        ),
        ("DELETE", "/ui/api/v1/notification-targets/ops", json!({})),
        (
            "POST",
            "/ui/api/v1/schedules",
            json!({"name": "forged", "cron": "@hourly", "target": {"type": "job", "queue": "q", "kind": "k"}}),
        ),
        ("DELETE", "/ui/api/v1/schedules/hourly", json!({})),
    ] {
        let r = page_fetch(&c, method, path, true, body).await;
        assert_eq!(r["status"], json!(403), "{method} {path}: {r}");
    }
    close(c).await;

    // An admin's session without the CSRF token is refused too.
    let (_driver2, c) = browser().await;
    sign_in(&c, &s.base, &admin).await;
    go(&c, &s.base, "monitors").await;
    wait_for(&c, "#monitor-form").await;
    let r = page_fetch(&c, "DELETE", "/ui/api/v1/monitors/etl", false, json!({})).await;
    assert_eq!(r["status"], json!(403), "{r}");
    close(c).await;

    // Everything is still there, unchanged.
    for path in [
        "/v1/webhook-endpoints/github",
        "/v1/monitors/etl",
        "/v1/notification-targets/ops",
        "/v1/schedules/hourly",
    ] {
        assert_eq!(s.api("GET", path, &admin, None).await.0, 200, "{path}");
    }
    for path in [
        "/v1/webhook-endpoints/forged",
        "/v1/monitors/forged",
        "/v1/notification-targets/forged",
        "/v1/schedules/forged",
    ] {
        assert_eq!(s.api("GET", path, &admin, None).await.0, 404, "{path}");
    }
    let (_, t) = s
        .api("GET", "/v1/notification-targets/ops", &admin, None)
        .await;
    assert_eq!(t["enabled"], json!(true), "{t}");
}
