//! A queue's retention of ended workflow instances over gRPC (WorkflowAdmin GetRetention /
//! SetRetention) on a real loopback server: the same scopes, tenant namespace, validation
//! and audit record as HTTP's /v1/queues/{name}/workflow-retention.

mod common;

use pb::workflow_admin_client::WorkflowAdminClient;
use pgferry_client::proto::v1 as pb;
use pgferry_core::workflow::Workflows;
use tonic::{Code, Request};

fn authed<T>(key: &str, msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    r
}

fn get(queue: &str) -> pb::WorkflowRetentionRequest {
    pb::WorkflowRetentionRequest {
        queue: queue.into(),
    }
}

fn set(queue: &str, ms: Option<u64>) -> pb::WorkflowRetention {
    pb::WorkflowRetention {
        queue: queue.into(),
        retention_ms: ms,
    }
}

const DAY: u64 = 86_400_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_retention_per_queue_over_grpc() {
    let db = pgferry_testkit::test_db().await;
    let (tenant_a, admin) = common::tenant_key(&db, "a").await;
    let (_, other) = common::tenant_key(&db, "b").await;
    let mut c = db.connect().await;
    let (_, read) = pgferry_server::auth::admin::create_key(
        &mut c,
        "a",
        pgferry_server::auth::Scopes::from_names(["read"]).unwrap(),
        None,
    )
    .await
    .unwrap();
    let read = read.expose();
    let server = common::Server::start(&db, common::loopback(), Default::default()).await;
    let mut wa = WorkflowAdminClient::connect(server.url.clone())
        .await
        .unwrap();
    let wf = Workflows::of(&server.engine);

    // Unset: the server's default; set, read back (by a read-only key), in the engine
    // under the tenant's namespaced queue.
    let got = wa.get_retention(authed(&read, get("shop"))).await.unwrap();
    assert_eq!(got.into_inner(), set("shop", None));
    let done = wa
        .set_retention(authed(&admin, set("shop", Some(DAY))))
        .await
        .unwrap();
    assert_eq!(done.into_inner(), set("shop", Some(DAY)));
    let got = wa.get_retention(authed(&read, get("shop"))).await.unwrap();
    assert_eq!(got.into_inner().retention_ms, Some(DAY));
    assert_eq!(
        wf.retention(&format!("t{tenant_a}.shop")).await.unwrap(),
        Some(std::time::Duration::from_millis(DAY))
    );

    // Tenant b's "shop" is another queue: unset for b, and b's change leaves a's alone.
    let got = wa.get_retention(authed(&other, get("shop"))).await.unwrap();
    assert_eq!(got.into_inner().retention_ms, None);
    wa.set_retention(authed(&other, set("shop", Some(0))))
        .await
        .unwrap();
    let got = wa.get_retention(authed(&read, get("shop"))).await.unwrap();
    assert_eq!(got.into_inner().retention_ms, Some(DAY));

    // A read-only key may read but not set.
    let e = wa
        .set_retention(authed(&read, set("shop", Some(1))))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");

    // Bad values: INVALID_ARGUMENT naming the field, nothing written.
    for (req, field) in [
        (set("shop", Some(315_360_000_001)), "(retention_ms)"),
        (set("Not a queue", Some(DAY)), "(queue)"),
        (set("", Some(DAY)), "(queue)"),
    ] {
        let e = wa.set_retention(authed(&admin, req)).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().ends_with(field), "{}", e.message());
    }
    let e = wa
        .get_retention(authed(&read, get("Not a queue")))
        .await
        .unwrap_err();
    assert!(e.message().ends_with("(queue)"), "{}", e.message());
    let got = wa.get_retention(authed(&read, get("shop"))).await.unwrap();
    assert_eq!(got.into_inner().retention_ms, Some(DAY));

    // Unset in SetRetention goes back to the default.
    let done = wa
        .set_retention(authed(&admin, set("shop", None)))
        .await
        .unwrap();
    assert_eq!(done.into_inner().retention_ms, None);
    assert_eq!(
        wf.retention(&format!("t{tenant_a}.shop")).await.unwrap(),
        None
    );

    // Each change is audited with the caller's tenant, the user-facing queue and "grpc".
    let rows = c
        .query(
            "SELECT tenant_id, target, detail->>'retention_ms', detail->>'via'
               FROM pgferry.audit_log WHERE action = 'workflow.retention' ORDER BY audit_id",
            &[],
        )
        .await
        .unwrap();
    let audit: Vec<(Option<i64>, String, Option<String>, String)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let tenant_b = common::tenant_key_id(&db, "b").await;
    let g = |t: i64, ms: Option<&str>| {
        (
            Some(t),
            "shop".to_string(),
            ms.map(str::to_string),
            "grpc".to_string(),
        )
    };
    assert_eq!(
        audit,
        vec![
            g(tenant_a, Some("86400000")),
            g(tenant_b, Some("0")),
            g(tenant_a, None)
        ]
    );
    server.stop().await;
}
