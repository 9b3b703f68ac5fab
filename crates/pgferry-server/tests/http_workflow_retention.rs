//! A queue's retention of ended workflow instances over HTTP: read (scope read) and set or
//! clear (scope admin, audited), per tenant through the queue namespace, with 4xx errors
//! naming the field; the engine's setting is the one the leader's retention duty applies.

mod http_common;

use http_common::{error_of, TestServer};
use pgferry_core::workflow::Workflows;
use pgferry_server::ServerConfig;
use serde_json::{json, Value};

const PATH: &str = "/v1/queues/shop/workflow-retention";

async fn call(
    srv: &TestServer,
    method: &str,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let (s, b, _) = srv.call(method, path, Some(key), body).await;
    (s, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_retention_per_queue_over_http() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let admin = srv.key("tenant-a", &["admin", "read"]).await;
    let reader = srv.key("tenant-a", &["read", "produce"]).await;
    let other = srv.key("tenant-b", &["admin", "read"]).await;

    // Unset: the server's default.
    let (s, got) = call(&srv, "GET", PATH, &reader, None).await;
    assert_eq!(s, 200, "{got}");
    assert_eq!(got, json!({"queue": "shop", "retention_ms": null}));

    let day = json!({"retention_ms": 86_400_000});
    let (s, set) = call(&srv, "PUT", PATH, &admin, Some(day.clone())).await;
    assert_eq!(s, 200, "{set}");
    assert_eq!(set, json!({"queue": "shop", "retention_ms": 86_400_000}));
    let (s, got) = call(&srv, "GET", PATH, &reader, None).await;
    assert_eq!((s, &got["retention_ms"]), (200, &json!(86_400_000)));

    // What the leader's duty reads: the tenant's engine queue has it, the bare name not.
    let wf = Workflows::of(&srv.state.engine);
    let c = srv.db.connect().await;
    let tenant_a: i64 = c
        .query_one(
            "SELECT tenant_id FROM pgferry.tenants WHERE name = 'tenant-a'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        wf.retention(&format!("t{tenant_a}.shop")).await.unwrap(),
        Some(std::time::Duration::from_secs(86_400))
    );
    assert_eq!(wf.retention("shop").await.unwrap(), None);

    // Another tenant's "shop" is its own queue: unset, and setting it leaves tenant-a's.
    let (s, got) = call(&srv, "GET", PATH, &other, None).await;
    assert_eq!((s, &got["retention_ms"]), (200, &Value::Null));
    let (s, _) = call(&srv, "PUT", PATH, &other, Some(json!({"retention_ms": 0}))).await;
    assert_eq!(s, 200);
    let (_, got) = call(&srv, "GET", PATH, &reader, None).await;
    assert_eq!(got["retention_ms"], json!(86_400_000));

    // Setting needs scope admin.
    let (s, e) = call(&srv, "PUT", PATH, &reader, Some(day.clone())).await;
    assert_eq!((s, error_of(&e).0.as_str()), (403, "forbidden"), "{e}");

    // Bad input: 400 naming the field, nothing written.
    for (body, field) in [
        (json!({}), "retention_ms"),
        (json!({"retention_ms": -1}), "retention_ms"),
        (json!({"retention_ms": "1d"}), "retention_ms"),
        (json!({"retention_ms": 315_360_000_001_u64}), "retention_ms"),
        (json!({"retention_ms": 1, "extra": 1}), "extra"),
    ] {
        let (s, e) = call(&srv, "PUT", PATH, &admin, Some(body.clone())).await;
        assert_eq!(s, 400, "{body}: {e}");
        assert_eq!(error_of(&e).1.as_deref(), Some(field), "{body}: {e}");
    }
    let (s, e) = call(
        &srv,
        "PUT",
        "/v1/queues/Not%20a%20queue/workflow-retention",
        &admin,
        Some(day),
    )
    .await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(error_of(&e).1.as_deref(), Some("queue"), "{e}");
    let (_, got) = call(&srv, "GET", PATH, &reader, None).await;
    assert_eq!(got["retention_ms"], json!(86_400_000));

    // Null goes back to the default.
    let (s, set) = call(
        &srv,
        "PUT",
        PATH,
        &admin,
        Some(json!({"retention_ms": null})),
    )
    .await;
    assert_eq!((s, &set["retention_ms"]), (200, &Value::Null), "{set}");
    assert_eq!(
        wf.retention(&format!("t{tenant_a}.shop")).await.unwrap(),
        None
    );

    // Each change is audited with the caller's tenant and key.
    let rows = c
        .query(
            "SELECT tenant_id, target, detail->'retention_ms' FROM pgferry.audit_log
              WHERE action = 'workflow.retention' ORDER BY audit_id",
            &[],
        )
        .await
        .unwrap();
    let audit: Vec<(Option<i64>, String, Value)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(audit.len(), 3, "{audit:?}");
    assert_eq!(
        (audit[0].0, audit[0].1.as_str(), &audit[0].2),
        (Some(tenant_a), "shop", &json!(86_400_000))
    );
    assert_ne!(audit[1].0, Some(tenant_a));
    assert_eq!((audit[2].0, &audit[2].2), (Some(tenant_a), &Value::Null));
}
