//! "Everything matching the filter" as a durable bulk operation, in a real headless
//! Chromium against a real server: 1,200 dead jobs retried by error text in batches with
//! progress; an operation a crashed server left behind (its lease ran out) is taken over
//! and finished; a read-only key cannot start one; another tenant cannot read one.

mod common;

use std::time::Duration;

use common::*;
use fantoccini::Client;
use pgferry_core::NewJob;
use serde_json::{json, Value};

const SMTP: &str = "smtp timeout: connection reset by mx1";
const TEMPLATE: &str = "template missing: welcome_v2";

async fn click(c: &Client, css: &str) {
    for _ in 0..50 {
        if wait_for(c, css).await.click().await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("could not click {css:?}");
}

/// `n` jobs of `queue` (engine name) that die with `error`.
async fn dead_jobs(s: &TestServer, queue: &str, n: usize, error: &str) {
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| {
            let mut j = NewJob::new(queue, "welcome", json!({ "n": i }));
            j.max_attempts = Some(1);
            j
        })
        .collect();
    for chunk in jobs.chunks(500) {
        s.state.engine.enqueue(chunk).await.unwrap();
    }
    let mut left = n;
    while left > 0 {
        let claimed = s.state.engine.claim(queue, left, "seeder").await.unwrap();
        if claimed.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let outcomes: Vec<_> = claimed.iter().map(|c| c.fail(error.to_string())).collect();
        s.state.engine.complete(&outcomes).await.unwrap();
        left -= claimed.len();
    }
}

async fn dead_count(s: &TestServer, key: &str, error: &str) -> usize {
    let mut total = 0;
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!(
            "/v1/dead?queue=emails&limit=1000&error_contains={}",
            error.replace(' ', "%20")
        );
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (st, b) = s.api("GET", &path, key, None).await;
        assert_eq!(st, 200, "{b}");
        total += b["jobs"].as_array().unwrap().len();
        match b["next_cursor"].as_str() {
            Some(c) if b["has_more"] == json!(true) => cursor = Some(c.to_string()),
            _ => return total,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_retry_runs_on_the_server_with_progress_and_survives_its_server() {
    let s = TestServer::start().await;
    let admin = s.key("acme", &["admin"]).await;
    let read = s.key("acme", &["read"]).await;
    let other = s.key("globex", &["admin"]).await;
    let tenant = {
        let c = s.db.connect().await;
        pgferry_server::auth::admin::tenant_id(&c, "acme")
            .await
            .unwrap()
            .unwrap()
    };
    let emails = pgferry_server::auth::engine_queue(tenant, "emails").unwrap();
    dead_jobs(&s, &emails, 1200, SMTP).await;
    dead_jobs(&s, &emails, 5, TEMPLATE).await;
    for i in 0..3 {
        s.enqueue(&admin, "reports", "monthly", json!({ "month": i }))
            .await;
    }
    assert_eq!(dead_count(&s, &admin, SMTP).await, 1200);

    let (_driver, c) = browser().await;
    sign_in(&c, &s.base, &admin).await;
    go(&c, &s.base, "jobs?queue=emails&error=smtp%20timeout").await;
    wait_text(&c, "#jobs-table tbody", |t| t.contains(SMTP)).await;
    click(&c, "#all-matching").await;
    // 1,200 jobs in batches of 500: three batches, then done.
    wait_text(&c, "#bulk-progress", |t| {
        t.contains("done, 1200 retried in 3 batches")
    })
    .await;
    wait_text(&c, "#bulk-ops tbody", |t| {
        t.contains("done") && t.contains("1200")
    })
    .await;
    screenshot(&c, "bulk").await;
    assert_eq!(dead_count(&s, &admin, SMTP).await, 0);
    assert_eq!(
        dead_count(&s, &admin, TEMPLATE).await,
        5,
        "only what matched"
    );
    let (st, ops) = s
        .api("GET", "/v1/dead?queue=emails&limit=10", &admin, None)
        .await;
    assert_eq!(st, 200, "{ops}");

    // An operation whose server died mid-way (lease ran out): another server's runner
    // takes it over and finishes it; the page shows it end.
    let op: i64 = {
        let c = s.db.connect().await;
        c.query_one(
            "INSERT INTO pgferry.dashboard_ops (tenant_id, key_id, action, filter, owner, lease_until)
             SELECT tenant_id, 0, 'jobs.cancel', $2::jsonb, 'crashed-server', now() - interval '1 second'
               FROM pgferry.tenants WHERE tenant_id = $1 RETURNING op_id",
            &[&tenant, &json!({ "queue": "reports", "kind": null, "states": ["pending", "scheduled", "running"] })],
        )
        .await
        .unwrap()
        .get(0)
    };
    wait_text(&c, &format!("#bulk-ops tr[data-op='{op}']"), |t| {
        t.contains("done") && t.contains("jobs.cancel")
    })
    .await;
    let (st, b) = s
        .api(
            "GET",
            "/v1/jobs?queue=reports&state=cancelled",
            &admin,
            None,
        )
        .await;
    assert_eq!(
        (st, b["jobs"].as_array().map(Vec::len)),
        (200, Some(3)),
        "{b}"
    );
    let r = page_fetch(&c, "GET", &format!("/ui/api/bulk/{op}"), false, Value::Null).await;
    assert_eq!(
        (
            r["status"].clone(),
            r["body"]["done"].clone(),
            r["body"]["status"].clone()
        ),
        (json!(200), json!(3), json!("done")),
        "{r}"
    );
    // Purge by error text over every queue of the tenant (no queue named): one batch.
    let r = page_fetch(
        &c,
        "POST",
        "/ui/api/bulk",
        true,
        json!({ "action": "dead.purge", "error_contains": "template missing" }),
    )
    .await;
    assert_eq!(r["status"], json!(202), "{r}");
    let purge = r["body"]["op_id"].as_i64().unwrap();
    let mut purged = Value::Null;
    for _ in 0..100 {
        purged = page_fetch(
            &c,
            "GET",
            &format!("/ui/api/bulk/{purge}"),
            false,
            Value::Null,
        )
        .await["body"]
            .clone();
        if purged["status"] != json!("running") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        (purged["status"].clone(), purged["done"].clone()),
        (json!("done"), json!(5)),
        "{purged}"
    );
    assert_eq!(dead_count(&s, &admin, TEMPLATE).await, 0);
    // A filter the engine would refuse is refused up front, naming the field.
    let r = page_fetch(
        &c,
        "POST",
        "/ui/api/bulk",
        true,
        json!({ "action": "jobs.cancel", "queue": "reports", "states": ["dead"] }),
    )
    .await;
    assert_eq!(
        (r["status"].clone(), r["body"]["error"]["field"].clone()),
        (json!(400), json!("states")),
        "{r}"
    );
    close(c).await;

    // Another tenant cannot read it; a read-only key cannot start or stop one.
    let (_d2, c) = browser().await;
    sign_in(&c, &s.base, &other).await;
    let r = page_fetch(&c, "GET", &format!("/ui/api/bulk/{op}"), false, Value::Null).await;
    assert_eq!(r["status"], json!(404), "{r}");
    let r = page_fetch(&c, "GET", "/ui/api/bulk", false, Value::Null).await;
    assert_eq!(r["body"]["ops"], json!([]), "{r}");
    close(c).await;
    let (_d3, c) = browser().await;
    sign_in(&c, &s.base, &read).await;
    let r = page_fetch(
        &c,
        "POST",
        "/ui/api/bulk",
        true,
        json!({ "action": "dead.retry", "queue": "emails" }),
    )
    .await;
    assert_eq!(r["status"], json!(403), "{r}");
    let r = page_fetch(
        &c,
        "POST",
        &format!("/ui/api/bulk/{op}/cancel"),
        true,
        json!({}),
    )
    .await;
    assert_eq!(r["status"], json!(403), "{r}");
    close(c).await;
}
