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

/// The API ids of a queue's jobs in `state`, newest first.
async fn ids_in(s: &TestServer, key: &str, queue: &str, state: &str) -> Vec<i64> {
    let (st, b) = s
        .api(
            "GET",
            &format!("/v1/jobs?queue={queue}&state={state}&limit=100"),
            key,
            None,
        )
        .await;
    assert_eq!(st, 200, "{b}");
    b["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selection_is_one_durable_operation() {
    let s = TestServer::start().await;
    let producer = s.key("acme", &["read", "produce"]).await;
    let read = s.key("acme", &["read"]).await;
    let globex = s.key("globex", &["admin"]).await;
    let tenant = {
        let c = s.db.connect().await;
        pgferry_server::auth::admin::tenant_id(&c, "acme")
            .await
            .unwrap()
            .unwrap()
    };
    let emails = pgferry_server::auth::engine_queue(tenant, "emails").unwrap();
    dead_jobs(&s, &emails, 5, SMTP).await;
    for i in 0..3 {
        s.enqueue(&producer, "reports", "monthly", json!({ "month": i }))
            .await;
    }
    let foreign = s
        .enqueue(&globex, "reports", "monthly", json!({ "theirs": true }))
        .await;
    let dead = ids_in(&s, &producer, "emails", "dead").await;
    assert_eq!(dead.len(), 5);

    // Three of five dead jobs checked, "Retry selected": one request, one operation.
    let (_driver, c) = browser().await;
    sign_in(&c, &s.base, &producer).await;
    go(&c, &s.base, "jobs?queue=emails&state=dead").await;
    wait_text(&c, "#jobs-table tbody", |t| t.contains(SMTP)).await;
    for id in &dead[..3] {
        click(&c, &format!("input[aria-label='Select job {id}']")).await;
    }
    wait_text(&c, "#selection-count", |t| t == "3 selected").await;
    click(&c, "#bulk-retry").await;
    wait_text(&c, "#bulk-progress", |t| {
        t.contains("done, 3 retried in 1 batches")
    })
    .await;
    let still: Vec<i64> = ids_in(&s, &producer, "emails", "dead").await;
    assert_eq!(
        still,
        dead[3..].to_vec(),
        "only the checked jobs left the DLQ"
    );
    let ops: Vec<(String, Value, i64)> = {
        let c = s.db.connect().await;
        c.query(
            "SELECT action, filter, done FROM pgferry.dashboard_ops WHERE tenant_id = $1",
            &[&tenant],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
    };
    assert_eq!(ops.len(), 1, "one operation: {ops:?}");
    assert_eq!(ops[0].0, "dead.retry");
    assert_eq!(ops[0].1["ids"], json!(dead[..3]));
    assert_eq!(ops[0].2, 3);

    // Two of three waiting jobs, "Cancel selected".
    go(&c, &s.base, "jobs?queue=reports&state=pending").await;
    let pending = ids_in(&s, &producer, "reports", "pending").await;
    assert_eq!(pending.len(), 3);
    wait_text(&c, "#jobs-table tbody", |t| t.contains("monthly")).await;
    for id in &pending[..2] {
        click(&c, &format!("input[aria-label='Select job {id}']")).await;
    }
    wait_text(&c, "#selection-count", |t| t == "2 selected").await;
    click(&c, "#bulk-cancel").await;
    wait_text(&c, "#bulk-progress", |t| {
        t.contains("done, 2 cancelled in 1 batches")
    })
    .await;
    screenshot(&c, "bulk-selection").await;
    assert_eq!(
        ids_in(&s, &producer, "reports", "pending").await,
        pending[2..].to_vec()
    );

    // A selection a crashed server left (lease ran out) is taken over and finished; a job
    // of another tenant slipped into it is not touched.
    let op: i64 = {
        let c = s.db.connect().await;
        c.query_one(
            "INSERT INTO pgferry.dashboard_ops (tenant_id, key_id, action, filter, owner, lease_until)
             VALUES ($1, 0, 'jobs.cancel', $2::jsonb, 'crashed-server', now() - interval '1 second')
             RETURNING op_id",
            &[&tenant, &json!({ "queue": null, "ids": [pending[2], foreign] })],
        )
        .await
        .unwrap()
        .get(0)
    };
    let mut got = Value::Null;
    for _ in 0..150 {
        got = page_fetch(&c, "GET", &format!("/ui/api/bulk/{op}"), false, Value::Null).await
            ["body"]
            .clone();
        if got["status"] != json!("running") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        (got["status"].clone(), got["done"].clone()),
        (json!("done"), json!(1)),
        "{got}"
    );
    assert!(ids_in(&s, &producer, "reports", "pending").await.is_empty());
    assert_eq!(
        ids_in(&s, &globex, "reports", "pending").await,
        vec![foreign],
        "another tenant's job stays"
    );

    // Bad selections are refused naming the field.
    for bad in [
        json!({ "action": "dead.retry", "ids": [] }),
        json!({ "action": "dead.retry", "ids": [-3] }),
        json!({ "action": "dead.retry", "ids": (1..=1001).collect::<Vec<i64>>() }),
        json!({ "action": "dead.retry", "ids": "1,2" }),
    ] {
        let r = page_fetch(&c, "POST", "/ui/api/bulk", true, bad.clone()).await;
        assert_eq!(
            (r["status"].clone(), r["body"]["error"]["field"].clone()),
            (json!(400), json!("ids")),
            "{bad}: {r}"
        );
    }
    let r = page_fetch(
        &c,
        "POST",
        "/ui/api/bulk",
        true,
        json!({ "action": "jobs.cancel", "ids": [1], "states": ["pending"] }),
    )
    .await;
    assert_eq!(r["body"]["error"]["field"], json!("states"), "{r}");
    // A producer may act on a selection, not on everything matching (admin).
    let r = page_fetch(
        &c,
        "POST",
        "/ui/api/bulk",
        true,
        json!({ "action": "dead.retry", "queue": "emails" }),
    )
    .await;
    assert_eq!(r["status"], json!(403), "{r}");
    close(c).await;

    // A read-only key cannot start one.
    let (_d2, c) = browser().await;
    sign_in(&c, &s.base, &read).await;
    let r = page_fetch(
        &c,
        "POST",
        "/ui/api/bulk",
        true,
        json!({ "action": "dead.retry", "ids": [dead[3]] }),
    )
    .await;
    assert_eq!(r["status"], json!(403), "{r}");
    close(c).await;
    assert_eq!(ids_in(&s, &producer, "emails", "dead").await.len(), 2);
}
