//! The dashboard in a real headless Chromium against a real server with seeded data:
//! what an operator does on an incident, what a read-only key cannot do, and what another
//! tenant cannot see. Screenshots of each page are saved (see common::screenshot).

mod common;

use common::*;
use fantoccini::Client;
use serde_json::{json, Value};

const CARD_ERROR: &str = "card declined: code 4711-XYZ";
const SMTP_ERROR: &str = "smtp timeout: connection reset by mx1";
const TEMPLATE_ERROR: &str = "template missing: welcome_v2";

struct Seeded {
    admin: String,
    read: String,
    /// The dead job whose error is CARD_ERROR.
    card_job: i64,
    /// Tenant B's admin key and one of its jobs.
    other_admin: String,
    other_job: i64,
}

/// Tenant `acme`: queue `emails` with completed jobs and six dead ones under three errors,
/// queue `reports` with pending jobs. Tenant `globex`: queue `payroll` with a dead job.
async fn seed(s: &TestServer) -> Seeded {
    let admin = s.key("acme", &["admin"]).await;
    let read = s.key("acme", &["read"]).await;
    for i in 0..5 {
        s.enqueue(&admin, "emails", "welcome", json!({ "n": i }))
            .await;
    }
    for i in 0..3 {
        s.enqueue(
            &admin,
            "emails",
            "welcome",
            json!({ "fail": SMTP_ERROR, "n": i }),
        )
        .await;
    }
    for i in 0..2 {
        s.enqueue(
            &admin,
            "emails",
            "digest",
            json!({ "fail": TEMPLATE_ERROR, "n": i }),
        )
        .await;
    }
    let card_job = s
        .enqueue(&admin, "emails", "receipt", json!({ "fail": CARD_ERROR }))
        .await;
    let fail = |a: &Value| a["fail"].as_str().map(str::to_string);
    s.work(&admin, "emails", 11, fail).await;
    for i in 0..3 {
        s.enqueue(&admin, "reports", "monthly", json!({ "month": i + 1 }))
            .await;
    }
    let other_admin = s.key("globex", &["admin"]).await;
    let other_job = s
        .enqueue(
            &other_admin,
            "payroll",
            "pay",
            json!({ "fail": "globex secret failure" }),
        )
        .await;
    s.work(&other_admin, "payroll", 1, fail).await;
    s.enqueue(&other_admin, "payroll", "pay", json!({ "n": 2 }))
        .await;
    Seeded {
        admin,
        read,
        card_job,
        other_admin,
        other_job,
    }
}

/// Clicks the element matching `css`, again when a live update replaced it between finding
/// and clicking.
async fn click(c: &Client, css: &str) {
    for _ in 0..50 {
        if wait_for(c, css).await.click().await.is_ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("could not click {css:?}");
}

async fn queue(s: &TestServer, key: &str, name: &str) -> Value {
    let (st, b) = s.api("GET", &format!("/v1/queues/{name}"), key, None).await;
    assert_eq!(st, 200, "{b}");
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_finds_retries_pauses_and_bulk_retries() {
    let s = TestServer::start().await;
    let seeded = seed(&s).await;
    let _worker = s.spawn_worker(&seeded.admin, "emails");
    let (_driver, c) = browser().await;
    sign_in(&c, &s.base, &seeded.admin).await;

    // Overview: live numbers (the dead count comes from the event stream).
    wait_text(&c, "#overview-stats", |t| {
        t.contains("Dead") && t.contains('6')
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    screenshot(&c, "overview").await;

    // Jobs: find the failed job by its error text.
    go(&c, &s.base, "jobs?queue=emails").await;
    let err = wait_for(&c, "#f-error").await;
    err.send_keys("4711").await.unwrap();
    click(&c, "form[role=search] button[type=submit]").await;
    wait_text(&c, "#jobs-table tbody", |t| t.contains(CARD_ERROR)).await;
    assert_eq!(
        count(&c, "#jobs-table tbody tr").await,
        1,
        "only the job whose error matches"
    );
    screenshot(&c, "jobs").await;

    // Its detail, then retry it and watch it complete without reloading.
    click(
        &c,
        &format!("#jobs-table a[href='#/job/{}']", seeded.card_job),
    )
    .await;
    wait_text(&c, "#job-state", |t| t == "dead").await;
    wait_text(&c, "#attempts", |t| {
        t.contains(CARD_ERROR) && t.contains("test-worker")
    })
    .await;
    screenshot(&c, "job").await;
    click(&c, "#job-retry").await;
    wait_text(&c, "#job-state", |t| t == "completed").await;
    // Its result (what the live worker returned) shows once it completed.
    wait_text(&c, "#job-result", |t| t.contains("\"ok\": true")).await;
    let (st, job) = s
        .api(
            "GET",
            &format!("/v1/jobs/{}", seeded.card_job),
            &seeded.admin,
            None,
        )
        .await;
    assert_eq!(
        (st, job["state"].as_str()),
        (200, Some("completed")),
        "{job}"
    );

    // Queues: pause `reports`.
    go(&c, &s.base, "queues").await;
    click(&c, "tr[data-queue=reports] button[data-action=pause]").await;
    wait_text(&c, "tr[data-queue=reports]", |t| t.contains("paused")).await;
    assert_eq!(
        queue(&s, &seeded.admin, "reports").await["paused"],
        json!(true)
    );
    screenshot(&c, "queues").await;

    // Jobs: cancel everything matching a filter (two clicks: the second confirms).
    go(&c, &s.base, "jobs?queue=reports&state=pending").await;
    wait_text(&c, "#jobs-table tbody", |t| {
        t.matches("monthly").count() == 3
    })
    .await;
    click(&c, "#all-matching").await;
    wait_text(&c, "#all-matching", |t| t.starts_with("Confirm")).await;
    click(&c, "#all-matching").await;
    wait_text(&c, "#jobs-table ~ p", |t| t == "No jobs match.").await;
    let (st, b) = s
        .api(
            "GET",
            "/v1/jobs?queue=reports&state=cancelled",
            &seeded.admin,
            None,
        )
        .await;
    assert_eq!(
        (st, b["jobs"].as_array().map(Vec::len)),
        (200, Some(3)),
        "{b}"
    );

    // Dead letters: two groups left; retry one group, then everything matching.
    go(&c, &s.base, "dead").await;
    wait_text(&c, "#dead-groups", |t| {
        t.contains(SMTP_ERROR) && t.contains(TEMPLATE_ERROR)
    })
    .await;
    screenshot(&c, "dead").await;
    // The same page in the dark theme (the README shows it), then back.
    click(&c, "#theme").await;
    wait_text(&c, "#theme", |t| t == "Light theme").await;
    screenshot(&c, "dead-dark").await;
    click(&c, "#theme").await;
    wait_text(&c, "#theme", |t| t == "Dark theme").await;
    assert_eq!(count(&c, "#dead-groups tbody tr").await, 2);
    click_in_row(
        &c,
        "#dead-groups tbody tr",
        SMTP_ERROR,
        "[data-action=retry-group]",
    )
    .await;
    wait_text(&c, "#dead-count", |t| t.starts_with("2 dead")).await;
    // Run by the server as a bulk operation, with its progress shown.
    wait_text(&c, "#bulk-progress", |t| t.contains("done, 3 retried")).await;
    click(&c, "#retry-all").await;
    wait_text(&c, "#dead-count", |t| t.starts_with("0 dead")).await;
    wait_text(&c, "#bulk-progress", |t| t.contains("done, 2 retried")).await;
    assert_eq!(
        queue(&s, &seeded.admin, "emails").await["counts"]["dead"],
        json!(0)
    );
    // "All matching" with no queue chosen spans this tenant's queues only.
    let (st, other) = s
        .api(
            "GET",
            &format!("/v1/jobs/{}", seeded.other_job),
            &seeded.other_admin,
            None,
        )
        .await;
    assert_eq!(
        (st, other["state"].as_str()),
        (200, Some("dead")),
        "{other}"
    );

    // Enqueue: bad JSON is refused in the page, good JSON makes a job.
    go(&c, &s.base, "enqueue").await;
    wait_for(&c, "#e-kind")
        .await
        .send_keys("adhoc")
        .await
        .unwrap();
    let args = wait_for(&c, "#e-args").await;
    args.clear().await.unwrap();
    args.send_keys("{\"to\": ").await.unwrap();
    click(&c, "form[aria-label='Enqueue a job'] button[type=submit]").await;
    wait_text(&c, "#enqueue-error", |t| {
        t.starts_with("args: not valid JSON")
    })
    .await;
    args.clear().await.unwrap();
    args.send_keys("{\"to\": \"ops@example.com\"}")
        .await
        .unwrap();
    click(&c, "form[aria-label='Enqueue a job'] button[type=submit]").await;
    let id = wait_text(&c, "#enqueued-link", |t| !t.is_empty()).await;
    let (st, job) = s
        .api("GET", &format!("/v1/jobs/{id}"), &seeded.admin, None)
        .await;
    assert_eq!((st, job["kind"].as_str()), (200, Some("adhoc")), "{job}");
    assert_eq!(job["args"], json!({ "to": "ops@example.com" }));
    screenshot(&c, "enqueue").await;

    // Keys: create a read key; the audit log shows it.
    go(&c, &s.base, "keys").await;
    wait_for(&c, "#keys-table").await;
    click(&c, "#create-key").await;
    let key = wait_text(&c, "#new-key", |t| t.starts_with("pgf_")).await;
    let (st, _) = s.api("GET", "/v1/queues", &key, None).await;
    assert_eq!(st, 200, "the created key works");
    wait_text(&c, "#audit-table", |t| t.contains("key.create")).await;
    screenshot(&c, "keys").await;

    // Dark theme, for the README.
    go(&c, &s.base, "overview").await;
    click(&c, "#theme").await;
    wait_text(&c, "#overview-stats", |t| t.contains("Dead")).await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    screenshot(&c, "overview-dark").await;
    close(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_key_sees_no_actions_and_forged_requests_are_refused() {
    let s = TestServer::start().await;
    let seeded = seed(&s).await;
    let (_driver, c) = browser().await;
    sign_in(&c, &s.base, &seeded.read).await;

    // The menu has no pages that only act.
    assert_eq!(count(&c, "#nav a[data-page=enqueue]").await, 0);
    assert_eq!(count(&c, "#nav a[data-page=keys]").await, 0);
    // No action buttons on queues, jobs or dead letters.
    go(&c, &s.base, "queues").await;
    wait_for(&c, "tr[data-queue=reports]").await;
    assert_eq!(count(&c, "#queues-table button").await, 0);
    go(&c, &s.base, "jobs?queue=emails&state=dead").await;
    wait_text(&c, "#jobs-table tbody", |t| t.contains(SMTP_ERROR)).await;
    assert_eq!(
        count(&c, "#bulk-retry").await + count(&c, "#jobs-table input").await,
        0
    );
    click(
        &c,
        &format!("#jobs-table a[href='#/job/{}']", seeded.card_job),
    )
    .await;
    wait_text(&c, "#job-state", |t| t == "dead").await;
    assert_eq!(count(&c, "#job-retry").await, 0);
    go(&c, &s.base, "dead").await;
    wait_for(&c, "#dead-groups").await;
    assert_eq!(
        count(&c, "#dead-groups button, #dead-table button, #retry-all").await,
        0
    );

    // Requests forged in the page, with a valid session and CSRF token: the server refuses.
    for (method, path, body) in [
        ("POST", "/ui/api/v1/queues/reports/pause", json!({})),
        ("POST", "/ui/api/v1/dead/retry", json!({})),
        (
            "POST",
            &format!("/ui/api/v1/jobs/{}/retry", seeded.card_job) as &str,
            json!({}),
        ),
        (
            "POST",
            "/ui/api/v1/jobs",
            json!({ "queue": "emails", "kind": "x" }),
        ),
        ("POST", "/ui/api/keys", json!({ "scopes": ["admin"] })),
    ] {
        let r = page_fetch(&c, method, path, true, body).await;
        assert_eq!(r["status"], json!(403), "{path}: {r}");
        assert_eq!(
            r["body"]["error"]["code"],
            json!("forbidden"),
            "{path}: {r}"
        );
    }
    let r = page_fetch(&c, "GET", "/ui/api/keys", false, Value::Null).await;
    assert_eq!(r["status"], json!(403), "{r}");
    // Without the CSRF token the request is refused before the API sees it.
    let r = page_fetch(
        &c,
        "POST",
        "/ui/api/v1/queues/reports/pause",
        false,
        json!({}),
    )
    .await;
    assert_eq!(
        (r["status"].clone(), r["body"]["error"]["field"].clone()),
        (json!(403), json!("x-csrf-token")),
        "{r}"
    );
    // Nothing changed.
    assert_eq!(
        queue(&s, &seeded.admin, "reports").await["paused"],
        json!(false)
    );
    let (_, job) = s
        .api(
            "GET",
            &format!("/v1/jobs/{}", seeded.card_job),
            &seeded.admin,
            None,
        )
        .await;
    assert_eq!(job["state"], json!("dead"));
    close(c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_a_cannot_see_tenant_b() {
    let s = TestServer::start().await;
    let seeded = seed(&s).await;
    let (_driver, c) = browser().await;
    sign_in(&c, &s.base, &seeded.admin).await;

    go(&c, &s.base, "queues").await;
    wait_for(&c, "tr[data-queue=reports]").await;
    assert_eq!(count(&c, "tr[data-queue=payroll]").await, 0);
    go(&c, &s.base, "dead?error=globex").await;
    wait_text(&c, "#dead-count", |t| t.starts_with("0 dead")).await;
    // B's job by id: "not found", exactly like an id that does not exist.
    go(&c, &s.base, &format!("job/{}", seeded.other_job)).await;
    wait_text(&c, "#page .error", |t| t.contains("job not found")).await;
    let r = page_fetch(
        &c,
        "GET",
        &format!("/ui/api/v1/jobs/{}", seeded.other_job),
        false,
        Value::Null,
    )
    .await;
    assert_eq!(r["status"], json!(404), "{r}");
    // B's queue name means A's (empty) queue of that name.
    let r = page_fetch(
        &c,
        "GET",
        "/ui/api/v1/jobs?queue=payroll",
        false,
        Value::Null,
    )
    .await;
    assert_eq!(
        (r["status"].clone(), r["body"]["jobs"].clone()),
        (json!(200), json!([])),
        "{r}"
    );
    let r = page_fetch(
        &c,
        "POST",
        "/ui/api/v1/dead/retry",
        true,
        json!({ "error_contains": "globex" }),
    )
    .await;
    assert_eq!(r["body"]["count"], json!(0), "{r}");
    // Keys and audit of A only.
    let r = page_fetch(&c, "GET", "/ui/api/keys", false, Value::Null).await;
    assert_eq!(r["body"]["tenant"], json!("acme"), "{r}");
    let other_prefix = seeded.other_admin.split('_').nth(1).unwrap().to_string();
    let r = page_fetch(
        &c,
        "POST",
        &format!("/ui/api/keys/{other_prefix}/revoke"),
        true,
        json!({}),
    )
    .await;
    assert_eq!(r["status"], json!(404), "{r}");
    let (st, _) = s.api("GET", "/v1/queues", &seeded.other_admin, None).await;
    assert_eq!(st, 200, "B's key still works");
    // B's dead job is untouched.
    let (_, job) = s
        .api(
            "GET",
            &format!("/v1/jobs/{}", seeded.other_job),
            &seeded.other_admin,
            None,
        )
        .await;
    assert_eq!(job["state"], json!("dead"));
    close(c).await;
}
