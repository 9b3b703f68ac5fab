//! The workflow pages in a real headless Chromium against a real server: instances are
//! started through the API and run by a real in-process workflow worker on the engine.
//! An operator filters the list, opens an instance parked on a signal, sees its step
//! timeline and its children, sends the signal and watches it finish; retries a failed
//! instance from its failed step; a read-only key is offered no action and is refused a
//! forged one; another tenant's instance and children are not found.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use fantoccini::Client;
use pgferry_core::workflow::Workflows;
use pgferry_core::workflow::{Child, ClaimedStep, Join, Machine, Outcome, Worker, WorkerConfig};
use serde_json::{json, Value};
use tokio::sync::watch;

/// Clicks `css`, again when a live update replaced it between finding and clicking.
async fn click(c: &Client, css: &str) {
    for _ in 0..50 {
        if wait_for(c, css).await.click().await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("could not click {css:?}");
}

/// `order`: spawns a `pack` child per item, then waits for `paid` and ends with its
/// payload. `flaky`: fails its first run (process-wide), succeeds after a retry.
fn machines(flaky_failed: Arc<AtomicBool>) -> Vec<Machine> {
    let order = Machine::new("order")
        .with_inbox()
        .step("start", |s: ClaimedStep| async move {
            let items = s.input["items"].as_array().cloned().unwrap_or_default();
            let kids = items.into_iter().map(|i| Child::new("pack", i)).collect();
            Outcome::spawn(kids, "packed", Join::All)
        })
        .step("packed", |_s: ClaimedStep| async move {
            Outcome::await_signals(&["paid"], "ship", Some(Duration::from_secs(3600)))
        })
        .step("ship", |s: ClaimedStep| async move {
            let paid = s.inbox.unwrap_or_default();
            Outcome::done(json!({ "paid": paid.first().map(|p| p.payload.clone()) }))
        });
    let pack =
        Machine::new("pack").step(
            "start",
            |s: ClaimedStep| async move { Outcome::done(s.input) },
        );
    let flaky = Machine::new("flaky").step("start", move |_s: ClaimedStep| {
        let failed = flaky_failed.clone();
        async move {
            if failed.swap(true, Ordering::SeqCst) {
                Outcome::done(json!({ "second": "time lucky" }))
            } else {
                Outcome::fail("upstream 503: inventory service unavailable")
            }
        }
    });
    vec![order, pack, flaky]
}

async fn start(s: &TestServer, key: &str, kind: &str, input: Value, ckey: &str) -> i64 {
    let (st, b) = s
        .api(
            "POST",
            "/v1/workflows",
            key,
            Some(json!({ "kind": kind, "queue": "shop", "input": input, "correlation_key": ckey })),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    b["id"].as_i64().unwrap()
}

async fn instance(s: &TestServer, key: &str, id: i64) -> Value {
    let (st, b) = s
        .api("GET", &format!("/v1/workflows/{id}"), key, None)
        .await;
    assert_eq!(st, 200, "{b}");
    b
}

/// Waits until the instance's status (read through the API) is `want`.
async fn wait_status(s: &TestServer, key: &str, id: i64, want: &str) -> Value {
    for _ in 0..200 {
        let i = instance(s, key, id).await;
        if i["status"] == want {
            return i;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "instance {id} never reached {want}: {}",
        instance(s, key, id).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_opens_a_workflow_signals_it_and_retries_a_failed_one() {
    let s = TestServer::start().await;
    let admin = s.key("acme", &["admin"]).await;
    let read = s.key("acme", &["read"]).await;
    let other = s.key("globex", &["admin"]).await;

    // A real worker on acme's `shop` queue (the engine's name for it).
    let tenant = {
        let c = s.db.connect().await;
        pgferry_server::auth::admin::tenant_id(&c, "acme")
            .await
            .unwrap()
            .unwrap()
    };
    let queue = pgferry_server::auth::engine_queue(tenant, "shop").unwrap();
    let mut config = WorkerConfig::new(queue);
    config.name = "shop-worker-1".into();
    let mut worker = Worker::new(Workflows::of(&s.state.engine), config);
    for m in machines(Arc::new(AtomicBool::new(false))) {
        worker = worker.machine(m);
    }
    let (stop, stop_rx) = watch::channel(false);
    let running = tokio::spawn(worker.run(stop_rx));

    let order = start(
        &s,
        &admin,
        "order",
        json!({ "items": ["a", "b"] }),
        "order-42",
    )
    .await;
    let flaky = start(&s, &admin, "flaky", json!({}), "restock-7").await;
    wait_status(&s, &admin, order, "awaiting").await;
    wait_status(&s, &admin, flaky, "failed").await;
    let other_order = {
        let (st, b) = s
            .api(
                "POST",
                "/v1/workflows",
                &other,
                Some(json!({ "kind": "order", "queue": "ledger", "input": {} })),
            )
            .await;
        assert_eq!(st, 201, "{b}");
        b["id"].as_i64().unwrap()
    };

    let (_driver, c) = browser().await;
    sign_in(&c, &s.base, &admin).await;

    // The page opens on the tenant's workflow queue (found by the server), and offers
    // only the tenant's queues.
    go(&c, &s.base, "workflows").await;
    wait_text(&c, "#workflows-table tbody", |t| t.contains("order-42")).await;
    let offered = c
        .execute(
            "return [...document.querySelectorAll('#wf-queue-names option')].map(o => o.value)",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(offered, json!(["shop"]), "not globex's `ledger`");

    // The list: parents and children of the queue; filtered to what awaits a signal.
    go(&c, &s.base, "workflows?queue=shop").await;
    wait_text(&c, "#workflows-table tbody", |t| {
        t.contains("order-42") && t.contains("restock-7") && t.matches("pack").count() == 2
    })
    .await;
    screenshot(&c, "workflows").await;

    // Start one from the page: input that is not JSON is refused before the API is asked.
    wait_for(&c, "#st-kind")
        .await
        .send_keys("flaky")
        .await
        .unwrap();
    wait_for(&c, "#st-key")
        .await
        .send_keys("restock-8")
        .await
        .unwrap();
    let input = wait_for(&c, "#st-input").await;
    input.clear().await.unwrap();
    input.send_keys("{sku: 1").await.unwrap();
    click(&c, "#start-form button[type=submit]").await;
    wait_text(&c, "#start-error", |t| {
        t.starts_with("input: not valid JSON")
    })
    .await;
    input.clear().await.unwrap();
    input.send_keys(r#"{"sku": 1}"#).await.unwrap();
    click(&c, "#start-form button[type=submit]").await;
    let started: i64 = wait_text(&c, "#started-link", |t| !t.is_empty())
        .await
        .parse()
        .unwrap();
    let i = wait_status(&s, &admin, started, "done").await;
    assert_eq!(
        (
            i["kind"].clone(),
            i["input"].clone(),
            i["correlation_key"].clone()
        ),
        (json!("flaky"), json!({ "sku": 1 }), json!("restock-8"))
    );
    go(&c, &s.base, "workflows?queue=shop").await;
    let status = wait_for(&c, "#wff-status").await;
    status.select_by_value("awaiting").await.unwrap();
    click(&c, "form[role=search] button[type=submit]").await;
    wait_text(&c, "#workflows-table tbody", |t| {
        t.contains("order-42") && !t.contains("restock-7") && !t.contains("pack")
    })
    .await;
    assert_eq!(count(&c, "#workflows-table tbody tr").await, 1);

    // The instance: parked on `paid`, its history as a timeline, its two children.
    click(
        &c,
        &format!("#workflows-table a[href='#/workflow/{order}']"),
    )
    .await;
    wait_text(&c, "#wf-status", |t| t == "awaiting").await;
    wait_text(&c, "#wf-facts", |t| {
        t.contains("paid") && t.contains("order-42")
    })
    .await;
    let label = wait_for(&c, "#wf-timeline")
        .await
        .attr("aria-label")
        .await
        .unwrap()
        .unwrap_or_default();
    assert!(
        label.contains("start → spawn") && label.contains("packed → await"),
        "timeline: {label}"
    );
    wait_text(&c, "#wf-history", |t| t.contains("shop-worker-1")).await;
    wait_text(&c, "#wf-children", |t| t.matches("pack").count() == 2).await;
    assert_eq!(count(&c, "#wf-children li.node").await, 2);

    // A payload that is not JSON is refused in the page; then the signal is sent.
    wait_for(&c, "#sig-name")
        .await
        .send_keys("paid")
        .await
        .unwrap();
    let payload = wait_for(&c, "#sig-payload").await;
    payload.clear().await.unwrap();
    payload.send_keys("{amount: 30").await.unwrap();
    click(&c, "#signal-form button[type=submit]").await;
    wait_text(&c, "#signal-error", |t| {
        t.starts_with("payload: not valid JSON")
    })
    .await;
    assert_eq!(instance(&s, &admin, order).await["inbox_pending"], json!(0));
    payload.clear().await.unwrap();
    payload.send_keys(r#"{"amount": 30}"#).await.unwrap();
    screenshot(&c, "workflow").await;
    click(&c, "#signal-form button[type=submit]").await;
    // The worker runs `ship`; the open page shows the end without a reload.
    wait_text(&c, "#wf-status", |t| t == "done").await;
    wait_text(&c, "#wf-history", |t| t.contains("ship")).await;
    let done = instance(&s, &admin, order).await;
    assert_eq!(
        done["result"],
        json!({ "paid": { "amount": 30 } }),
        "{done}"
    );

    // A failed instance runs again from its failed step.
    go(&c, &s.base, &format!("workflow/{flaky}")).await;
    wait_text(&c, "#wf-status", |t| t == "failed").await;
    wait_text(&c, "#wf-facts", |t| t.contains("upstream 503")).await;
    click(&c, "#wf-retry").await;
    wait_text(&c, "#wf-status", |t| t == "done").await;
    assert_eq!(
        instance(&s, &admin, flaky).await["result"],
        json!({ "second": "time lucky" })
    );

    // Cancel (two clicks: the second confirms) an instance parked on a signal.
    let parked = start(&s, &admin, "order", json!({ "items": [] }), "order-43").await;
    wait_status(&s, &admin, parked, "awaiting").await;
    go(&c, &s.base, &format!("workflow/{parked}")).await;
    wait_text(&c, "#wf-status", |t| t == "awaiting").await;
    click(&c, "#wf-cancel").await;
    wait_text(&c, "#wf-cancel", |t| t.starts_with("Confirm")).await;
    click(&c, "#wf-cancel").await;
    wait_text(&c, "#wf-status", |t| t == "cancelled").await;
    assert_eq!(
        instance(&s, &admin, parked).await["status"],
        json!("cancelled")
    );

    // Another tenant's instance: not found, through the API and the children route.
    let r = page_fetch(
        &c,
        "GET",
        &format!("/ui/api/v1/workflows/{other_order}"),
        false,
        Value::Null,
    )
    .await;
    assert_eq!(r["status"], json!(404), "{r}");
    let r = page_fetch(
        &c,
        "GET",
        &format!("/ui/api/workflows/{other_order}/children"),
        false,
        Value::Null,
    )
    .await;
    assert_eq!(r["status"], json!(404), "{r}");
    let r = page_fetch(
        &c,
        "GET",
        "/ui/api/workflows/0/children",
        false,
        Value::Null,
    )
    .await;
    assert_eq!(
        (r["status"].clone(), r["body"]["error"]["field"].clone()),
        (json!(400), json!("id")),
        "{r}"
    );
    close(c).await;

    // A read-only key: no signal form, no cancel or retry; a forged signal is refused.
    let second = start(&s, &admin, "order", json!({ "items": [] }), "order-44").await;
    wait_status(&s, &admin, second, "awaiting").await;
    let (_driver2, c) = browser().await;
    sign_in(&c, &s.base, &read).await;
    go(&c, &s.base, &format!("workflow/{second}")).await;
    wait_text(&c, "#wf-status", |t| t == "awaiting").await;
    assert!(!wait_for(&c, "#signal-form")
        .await
        .is_displayed()
        .await
        .unwrap());
    assert_eq!(count(&c, "#wf-cancel, #wf-retry").await, 0);
    let r = page_fetch(
        &c,
        "POST",
        &format!("/ui/api/v1/workflows/{second}/signal"),
        true,
        json!({ "name": "paid", "payload": {} }),
    )
    .await;
    assert_eq!(r["status"], json!(403), "{r}");
    assert_eq!(
        instance(&s, &admin, second).await["inbox_pending"],
        json!(0)
    );
    close(c).await;

    let _ = stop.send(true);
    running.await.unwrap().unwrap();
}
