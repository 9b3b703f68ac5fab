//! `SchedulerAdmin.RotateWebhookEndpointAddress` over a real loopback socket: it rotates
//! like the HTTP operation (the old address refused at once, or after a grace), another
//! tenant gets NOT_FOUND, a bad grace is INVALID_ARGUMENT naming `grace_ms`, and the audit
//! entry says `via: grpc`. (HTTP: `cargo test -p pgferry-server --test http_webhook_rotation`.)

mod common;

use pb::scheduler_admin_client::SchedulerAdminClient;
use pgferry_client::proto::v1 as pb;
use pgferry_http_jobs::{Allow, Range};
use pgferry_server::http::HttpConfig;
use pgferry_server::ServerConfig;
use serde_json::{json, Value};
use tonic::{Code, Request};

fn authed<T>(key: &str, msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    r
}

fn rotation(slug: &str, json: &str) -> pb::ObjectBody {
    pb::ObjectBody {
        name: slug.into(),
        json: json.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotate_webhook_endpoint_address_over_grpc() {
    let db = pgferry_testkit::test_db().await;
    let (_, a) = common::tenant_key(&db, "a").await;
    let (_, b) = common::tenant_key(&db, "b").await;
    let config = ServerConfig {
        http: HttpConfig {
            http_jobs_allow: Allow::of(&[Range::Loopback]),
            ..HttpConfig::default()
        },
        ..ServerConfig::default()
    };
    let server =
        common::Server::start_with(&db, common::loopback(), Default::default(), config).await;
    let mut c = SchedulerAdminClient::connect(server.url.clone())
        .await
        .unwrap();
    let created = c
        .create_webhook_endpoint(authed(
            &a,
            pb::JsonBody {
                json: json!({"slug": "github", "targets": ["http://127.0.0.1:9/hook"]}).to_string(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let created: Value = serde_json::from_str(&created.json).unwrap();
    let old = created["path"].as_str().unwrap().to_string();
    let http = reqwest::Client::new();
    let post = |path: String| {
        let req = http
            .post(format!("{}{path}", server.http_url))
            .body("{}")
            .send();
        async move { req.await.unwrap().status().as_u16() }
    };

    // An empty json field is no body: rotate at once.
    let r = c
        .rotate_webhook_endpoint_address(authed(&a, rotation("github", "")))
        .await
        .expect("rotates")
        .into_inner();
    let r: Value = serde_json::from_str(&r.json).unwrap();
    let new = r["path"].as_str().unwrap().to_string();
    assert_ne!(new, old);
    assert_eq!(r["previous_path"], old.as_str());
    assert_eq!(post(old.clone()).await, 404);
    assert_eq!(post(new.clone()).await, 200);

    // With a grace the address it had stays accepted.
    let r = c
        .rotate_webhook_endpoint_address(authed(&a, rotation("github", r#"{"grace_ms": 600000}"#)))
        .await
        .expect("rotates")
        .into_inner();
    let r: Value = serde_json::from_str(&r.json).unwrap();
    assert!(r["previous_path_accepted_until"].is_string(), "{r}");
    assert_eq!(post(new.clone()).await, 200);
    assert_eq!(post(r["path"].as_str().unwrap().to_string()).await, 200);

    // Tenant B: the same answer as for a slug nobody has.
    let theirs = c
        .rotate_webhook_endpoint_address(authed(&b, rotation("github", "")))
        .await
        .expect_err("not B's");
    let missing = c
        .rotate_webhook_endpoint_address(authed(&b, rotation("nobody", "")))
        .await
        .expect_err("missing");
    assert_eq!(theirs.code(), Code::NotFound, "{theirs:?}");
    assert_eq!(
        (theirs.code(), theirs.message()),
        (missing.code(), missing.message())
    );

    let bad = c
        .rotate_webhook_endpoint_address(authed(&a, rotation("github", r#"{"grace_ms": -5}"#)))
        .await
        .expect_err("bad grace");
    assert_eq!(bad.code(), Code::InvalidArgument, "{bad:?}");
    assert!(bad.message().ends_with("(grace_ms)"), "{bad:?}");

    let rows = db
        .connect()
        .await
        .query(
            "SELECT detail FROM pgferry.audit_log \
             WHERE action = 'webhook_endpoint.rotate_address' ORDER BY audit_id",
            &[],
        )
        .await
        .unwrap();
    let details: Vec<Value> = rows.iter().map(|r| r.get("detail")).collect();
    assert_eq!(
        details,
        [
            json!({"grace_ms": 0, "via": "grpc"}),
            json!({"grace_ms": 600000, "via": "grpc"})
        ]
    );
}
