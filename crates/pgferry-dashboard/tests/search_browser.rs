//! The jobs page's text search in a real headless Chromium against a real server: a job
//! found by a substring of its args and of its meta (any case) with a read-only key, the
//! page saying that a request examines a bounded window and offering "Search older";
//! a dead job found by its error text; bad combinations refused naming the field; another
//! tenant's search never sees these jobs.

mod common;

use common::*;
use fantoccini::{Client, Locator};
use serde_json::{json, Value};

async fn click(c: &Client, css: &str) {
    c.find(Locator::Css(css))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_found_by_args_meta_and_error_text() {
    let s = TestServer::start().await;
    let admin = s.key("acme", &["admin"]).await;
    let read = s.key("acme", &["read"]).await;
    let globex = s.key("globex", &["admin"]).await;
    for i in 0..30 {
        let meta = if i % 10 == 3 {
            json!({ "region": "North-Pole" })
        } else {
            json!({ "region": "south" })
        };
        let (st, b) = s
            .api(
                "POST",
                "/v1/jobs",
                &admin,
                Some(json!({ "queue": "orders", "kind": "ship",
                              "args": { "customer": format!("cust-{i:03}"), "total": i },
                              "meta": meta })),
            )
            .await;
        assert_eq!(st, 201, "{b}");
    }
    // Globex has a queue of the same name holding a matching job: never shown to acme.
    s.enqueue(&globex, "orders", "ship", json!({ "customer": "cust-017" }))
        .await;
    // Two dead jobs with different errors.
    s.enqueue(&admin, "billing", "charge", json!({ "card": 1 }))
        .await;
    s.enqueue(&admin, "billing", "charge", json!({ "card": 2 }))
        .await;
    s.work(&admin, "billing", 2, |args| {
        Some(if args["card"] == json!(1) {
            "card declined: insufficient funds".to_string()
        } else {
            "gateway timeout".to_string()
        })
    })
    .await;

    let (_driver, c) = browser().await;
    sign_in(&c, &s.base, &read).await;

    // One job by a substring of its args.
    go(&c, &s.base, "jobs?queue=orders").await;
    let text = wait_for(&c, "#f-text").await;
    text.send_keys("cust-017").await.unwrap();
    click(&c, "form[role=search] button[type=submit]").await;
    wait_text(&c, "#jobs-table tbody", |t| t.contains("ship")).await;
    assert_eq!(count(&c, "#jobs-table tbody tr").await, 1);
    let note = wait_text(&c, "section.card p.muted", |t| !t.is_empty()).await;
    assert!(note.contains("examines"), "{note}");
    let older = wait_text(&c, "#older", |t| !t.is_empty()).await;
    assert_eq!(older, "Search older");
    screenshot(&c, "jobs-search").await;

    // By meta, in another case: the three jobs in North-Pole.
    go(&c, &s.base, "jobs?queue=orders&text=north-pole").await;
    wait_text(&c, "#jobs-table tbody", |t| t.contains("ship")).await;
    assert_eq!(count(&c, "#jobs-table tbody tr").await, 3);

    // A dead job by its error text, and nothing for text no job has.
    go(&c, &s.base, "jobs?queue=billing&error=DECLINED").await;
    wait_text(&c, "#jobs-table tbody", |t| {
        t.contains("insufficient funds")
    })
    .await;
    assert_eq!(count(&c, "#jobs-table tbody tr").await, 1);
    go(&c, &s.base, "jobs?queue=orders&text=no-such-customer").await;
    wait_text(&c, "#no-match", |t| t == "No jobs match.").await;

    // Refused with the field named: error text without the dead state, an unknown state.
    let r = page_fetch(
        &c,
        "GET",
        "/ui/api/jobs/search?queue=orders&error_contains=x",
        false,
        Value::Null,
    )
    .await;
    assert_eq!(r["status"], json!(400), "{r}");
    assert_eq!(r["body"]["error"]["field"], json!("error_contains"), "{r}");
    let r = page_fetch(
        &c,
        "GET",
        "/ui/api/jobs/search?queue=orders&state=lost&contains=x",
        false,
        Value::Null,
    )
    .await;
    assert_eq!(r["body"]["error"]["field"], json!("state"), "{r}");
    let long = "x".repeat(201);
    let r = page_fetch(
        &c,
        "GET",
        &format!("/ui/api/jobs/search?queue=orders&contains={long}"),
        false,
        Value::Null,
    )
    .await;
    assert_eq!(r["body"]["error"]["field"], json!("contains"), "{r}");

    // Globex's search over "orders" is its own queue: its one job, none of acme's.
    c.delete_all_cookies().await.unwrap();
    sign_in(&c, &s.base, &globex).await;
    let r = page_fetch(
        &c,
        "GET",
        "/ui/api/jobs/search?queue=orders&contains=cust-",
        false,
        Value::Null,
    )
    .await;
    assert_eq!(r["status"], json!(200), "{r}");
    let jobs = r["body"]["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{r}");
    assert_eq!(jobs[0]["args"]["customer"], json!("cust-017"), "{r}");
    let r = page_fetch(
        &c,
        "GET",
        "/ui/api/jobs/search?queue=billing&state=dead&error_contains=declined",
        false,
        Value::Null,
    )
    .await;
    assert_eq!(r["body"]["jobs"], json!([]), "{r}");
    close(c).await;
}
