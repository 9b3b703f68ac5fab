//! The SchedulerAdmin service over a real loopback socket: schedules, monitors, notification
//! targets, alerts, inbound webhook endpoints and HTTP-job settings; bad input as typed
//! statuses naming the field; tenant B neither sees nor touches tenant A's objects; the
//! audit log records the calls as `via: grpc`.

mod common;

use pb::scheduler_admin_client::SchedulerAdminClient;
use pgferry_client::proto::v1 as pb;
use pgferry_http_jobs::{Allow, Range};
use pgferry_server::http::HttpConfig;
use pgferry_server::ServerConfig;
use serde_json::{json, Value};
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

type Client = SchedulerAdminClient<Channel>;

fn authed<T>(key: &str, msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    r
}

fn doc(r: Result<tonic::Response<pb::JsonDocument>, Status>) -> Value {
    let json = r.expect("call succeeds").into_inner().json;
    if json.is_empty() {
        return Value::Null;
    }
    serde_json::from_str(&json).expect("a JSON answer")
}

fn body(v: Value) -> pb::JsonBody {
    pb::JsonBody {
        json: v.to_string(),
    }
}

fn name(n: &str) -> pb::ObjectName {
    pb::ObjectName { name: n.into() }
}

/// The call failed with `code` and a message naming `field` (`code: message (field)`).
fn fails<T: std::fmt::Debug>(r: Result<T, Status>, code: Code, field: &str) {
    let s = r.expect_err("call fails");
    assert_eq!(s.code(), code, "{s:?}");
    assert!(s.message().ends_with(&format!("({field})")), "{s:?}");
}

async fn start() -> (
    pgferry_testkit::TestDb,
    common::Server,
    Client,
    String,
    String,
) {
    let db = pgferry_testkit::test_db().await;
    let (_, a) = common::tenant_key(&db, "a").await;
    let (_, b) = common::tenant_key(&db, "b").await;
    // Notification targets and webhook fan-out URLs on loopback are allowed, as in tests of
    // the HTTP API.
    let config = ServerConfig {
        http: HttpConfig {
            http_jobs_allow: Allow::of(&[Range::Loopback]),
            ..HttpConfig::default()
        },
        ..ServerConfig::default()
    };
    let server =
        common::Server::start_with(&db, common::loopback(), Default::default(), config).await;
    let c = SchedulerAdminClient::connect(server.url.clone())
        .await
        .unwrap();
    (db, server, c, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_over_grpc_with_tenant_isolation_and_typed_errors() {
    let (db, _server, mut c, a, b) = start().await;
    let spec = json!({
        "name": "nightly",
        "cron": "0 3 * * *",
        "timezone": "Europe/Berlin",
        "target": {"type": "job", "queue": "reports", "kind": "build"},
    });
    let s = doc(c.create_schedule(authed(&a, body(spec.clone()))).await);
    assert_eq!(s["name"], "nightly");
    assert_eq!(s["target"]["queue"], "reports");
    // The same name again: ALREADY_EXISTS naming the field.
    fails(
        c.create_schedule(authed(&a, body(spec.clone()))).await,
        Code::AlreadyExists,
        "name",
    );
    // Tenant B may use the same name: its own namespace.
    doc(c.create_schedule(authed(&b, body(spec))).await);

    let got = doc(c.get_schedule(authed(&a, name("nightly"))).await);
    assert_eq!(got["cron"], "0 3 * * *");
    let list = doc(c
        .list_schedules(authed(
            &a,
            pb::NamePage {
                after: String::new(),
                limit: 10,
            },
        ))
        .await);
    assert_eq!(list["schedules"].as_array().unwrap().len(), 1);
    let paused = doc(c.pause_schedule(authed(&a, name("nightly"))).await);
    assert_eq!(paused["paused"], true);
    let resumed = doc(c.resume_schedule(authed(&a, name("nightly"))).await);
    assert_eq!(resumed["paused"], false);
    let preview = doc(c
        .preview_schedule(authed(
            &a,
            pb::PreviewScheduleRequest {
                name: "nightly".into(),
                n: 3,
            },
        ))
        .await);
    assert_eq!(preview["fires"].as_array().unwrap().len(), 3);
    let backfill = pb::ObjectBody {
        name: "nightly".into(),
        json: json!({"from": "2026-01-01T00:00:00Z", "to": "2026-01-03T00:00:00Z"}).to_string(),
    };
    let fired = doc(c.backfill_schedule(authed(&a, backfill.clone())).await);
    assert_eq!(fired["fired"].as_array().unwrap().len(), 2);
    let fires = doc(c
        .list_schedule_fires(authed(
            &a,
            pb::ListScheduleFiresRequest {
                name: "nightly".into(),
                before: String::new(),
                limit: 10,
            },
        ))
        .await);
    assert_eq!(fires["fires"].as_array().unwrap().len(), 2);

    // Bad input: typed status naming the field in the user's terms.
    let bad_cron = json!({"name": "x", "cron": "not a cron", "target": {"type": "job", "queue": "q", "kind": "k"}});
    fails(
        c.create_schedule(authed(&a, body(bad_cron))).await,
        Code::InvalidArgument,
        "cron",
    );
    let bad_target = json!({"name": "x", "cron": "@hourly", "target": {"type": "nope", "queue": "q", "kind": "k"}});
    fails(
        c.create_schedule(authed(&a, body(bad_target))).await,
        Code::InvalidArgument,
        "target.type",
    );
    fails(
        c.create_schedule(authed(
            &a,
            pb::JsonBody {
                json: "{not json".into(),
            },
        ))
        .await,
        Code::InvalidArgument,
        "body",
    );
    fails(
        c.preview_schedule(authed(
            &a,
            pb::PreviewScheduleRequest {
                name: "nightly".into(),
                n: 5000,
            },
        ))
        .await,
        Code::InvalidArgument,
        "n",
    );
    let bad_range = pb::ObjectBody {
        name: "nightly".into(),
        json: json!({"from": "yesterday", "to": "2026-01-03T00:00:00Z"}).to_string(),
    };
    fails(
        c.backfill_schedule(authed(&a, bad_range)).await,
        Code::InvalidArgument,
        "from",
    );
    // A name with a slash stays one path segment: not found, not another route.
    let s = c
        .get_schedule(authed(&a, name("nightly/pause")))
        .await
        .unwrap_err();
    assert!(
        matches!(s.code(), Code::NotFound | Code::InvalidArgument),
        "{s:?}"
    );
    // No key / a read-only caller cannot write.
    let s = c
        .get_schedule(Request::new(name("nightly")))
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::Unauthenticated, "{s:?}");

    // Tenant B's "nightly" is its own: A's pause did not touch it, B's delete leaves A's.
    let bs = doc(c.get_schedule(authed(&b, name("nightly"))).await);
    assert_eq!(bs["timezone"], "Europe/Berlin");
    let b_fires = doc(c
        .list_schedule_fires(authed(
            &b,
            pb::ListScheduleFiresRequest {
                name: "nightly".into(),
                before: String::new(),
                limit: 10,
            },
        ))
        .await);
    assert_eq!(
        b_fires["fires"].as_array().unwrap().len(),
        0,
        "B sees none of A's fires"
    );
    doc(c.delete_schedule(authed(&b, name("nightly"))).await);
    doc(c.get_schedule(authed(&a, name("nightly"))).await);
    let s = c
        .get_schedule(authed(&b, name("nightly")))
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::NotFound, "{s:?}");

    // Deleting A's answers an empty document (HTTP 204).
    assert_eq!(
        doc(c.delete_schedule(authed(&a, name("nightly"))).await),
        Value::Null
    );
    let s = c
        .pause_schedule(authed(&a, name("nightly")))
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::NotFound);

    // The audit log says which transport each change came through.
    audited_via_grpc(
        &db,
        "schedule.%",
        &[
            "schedule.create",
            "schedule.pause",
            "schedule.resume",
            "schedule.backfill",
            "schedule.delete",
        ],
    )
    .await;
}

/// Every audit entry whose action is LIKE `pattern` says `via: grpc`, and `actions` are
/// among them.
async fn audited_via_grpc(db: &pgferry_testkit::TestDb, pattern: &str, actions: &[&str]) {
    let client = db.connect().await;
    let rows = client
        .query(
            "SELECT action, detail->>'via' AS via FROM pgferry.audit_log \
             WHERE action LIKE $1 ORDER BY audit_id",
            &[&pattern],
        )
        .await
        .unwrap();
    let seen: Vec<(String, String)> = rows
        .iter()
        .map(|r| (r.get("action"), r.get("via")))
        .collect();
    assert!(seen.iter().all(|(_, via)| via == "grpc"), "{seen:?}");
    for action in actions {
        assert!(
            seen.iter().any(|(a, _)| a == action),
            "{action} in {seen:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitors_targets_and_alerts_over_grpc_are_the_tenants_own() {
    let (db, _server, mut c, a, b) = start().await;
    let m = doc(c
        .create_monitor(authed(
            &a,
            body(json!({"name": "backup", "period_ms": 60000})),
        ))
        .await);
    assert_eq!(m["name"], "backup");
    assert!(m["ping_path"].as_str().unwrap().starts_with("/ping/"));
    fails(
        c.create_monitor(authed(&a, body(json!({"name": "x", "period_ms": -5}))))
            .await,
        Code::InvalidArgument,
        "period_ms",
    );
    fails(
        c.create_monitor(authed(
            &a,
            body(json!({"name": "x", "period_ms": 60000, "bogus": 1})),
        ))
        .await,
        Code::InvalidArgument,
        "bogus",
    );
    assert_eq!(
        doc(c.pause_monitor(authed(&a, name("backup"))).await)["state"],
        "paused"
    );
    assert_ne!(
        doc(c.resume_monitor(authed(&a, name("backup"))).await)["state"],
        "paused"
    );
    let pings = doc(c
        .list_monitor_pings(authed(
            &a,
            pb::ListPingsRequest {
                name: "backup".into(),
                limit: 5,
            },
        ))
        .await);
    assert!(pings["pings"].is_array(), "{pings}");
    let alerts = doc(c
        .list_alerts(authed(
            &a,
            pb::ListAlertsRequest {
                r#type: "monitor".into(),
                subject: "backup".into(),
                before: 0,
                limit: 5,
            },
        ))
        .await);
    assert!(alerts["alerts"].is_array(), "{alerts}");
    fails(
        c.list_alerts(authed(
            &a,
            pb::ListAlertsRequest {
                r#type: "job".into(),
                ..Default::default()
            },
        ))
        .await,
        Code::InvalidArgument,
        "type",
    );
    // B: not found, not listed, cannot pause or delete A's monitor.
    for r in [
        c.get_monitor(authed(&b, name("backup"))).await,
        c.pause_monitor(authed(&b, name("backup"))).await,
        c.delete_monitor(authed(&b, name("backup"))).await,
    ] {
        assert_eq!(r.unwrap_err().code(), Code::NotFound);
    }
    let listed = doc(c.list_monitors(authed(&b, pb::NamePage::default())).await);
    assert_eq!(listed["monitors"], json!([]));
    assert_eq!(
        doc(c.get_monitor(authed(&a, name("backup"))).await)["name"],
        "backup"
    );

    // Notification targets.
    let t = doc(c
        .create_notification_target(authed(
            &a,
            body(
                json!({"name": "ops", "url": "http://127.0.0.1:9/alerts", "events": ["monitor.*"]}),
            ),
        ))
        .await);
    assert_eq!(t["name"], "ops");
    fails(
        c.create_notification_target(authed(&a, body(json!({"name": "bad", "url": "ftp://x"}))))
            .await,
        Code::InvalidArgument,
        "url",
    );
    let patch = pb::ObjectBody {
        name: "ops".into(),
        json: json!({"enabled": false}).to_string(),
    };
    assert_eq!(
        doc(c
            .update_notification_target(authed(&a, patch.clone()))
            .await)["enabled"],
        false
    );
    assert_eq!(
        c.update_notification_target(authed(&b, patch))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    let listed = doc(c
        .list_notification_targets(authed(&b, pb::NamePage::default()))
        .await);
    assert_eq!(listed["targets"], json!([]));
    let listed = doc(c
        .list_notification_targets(authed(&a, pb::NamePage::default()))
        .await);
    assert_eq!(listed["targets"].as_array().unwrap().len(), 1);
    assert_eq!(
        c.delete_notification_target(authed(&b, name("ops")))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    doc(c.delete_notification_target(authed(&a, name("ops"))).await);
    doc(c.delete_monitor(authed(&a, name("backup"))).await);
    assert_eq!(
        c.get_monitor(authed(&a, name("backup")))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    audited_via_grpc(
        &db,
        "monitor.%",
        &["monitor.create", "monitor.pause", "monitor.delete"],
    )
    .await;
    audited_via_grpc(
        &db,
        "notification_target.%",
        &[
            "notification_target.create",
            "notification_target.update",
            "notification_target.delete",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_endpoints_and_http_job_settings_over_grpc() {
    let (db, server, mut c, a, b) = start().await;
    let e = doc(c
        .create_webhook_endpoint(authed(
            &a,
            body(json!({"slug": "github", "targets": ["http://127.0.0.1:9/hook"]})),
        ))
        .await);
    assert_eq!(e["slug"], "github");
    fails(
        c.create_webhook_endpoint(authed(&a, body(json!({"slug": "x", "targets": []}))))
            .await,
        Code::InvalidArgument,
        "targets",
    );
    // An event through the public path, then listed and replayed over gRPC.
    let path = e["path"].as_str().unwrap();
    let r = reqwest::Client::new()
        .post(format!("{}{path}", server.http_url))
        .body(r#"{"hello": 1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let events = doc(c
        .list_webhook_events(authed(
            &a,
            pb::ListWebhookEventsRequest {
                slug: "github".into(),
                after: 0,
                limit: 10,
            },
        ))
        .await);
    let list = events["events"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{events}");
    let id = list[0]["id"].as_i64().unwrap();
    let replayed = doc(c
        .replay_webhook_event(authed(
            &a,
            pb::ReplayWebhookEventRequest {
                slug: "github".into(),
                id,
            },
        ))
        .await);
    assert_eq!(replayed["deliveries"], 1);
    let since = pb::ObjectBody {
        name: "github".into(),
        json: json!({"since": "2000-01-01T00:00:00Z"}).to_string(),
    };
    assert_eq!(
        doc(c.replay_webhook_events(authed(&a, since.clone())).await)["events"],
        1
    );
    fails(
        c.replay_webhook_events(authed(
            &a,
            pb::ObjectBody {
                name: "github".into(),
                json: "{}".into(),
            },
        ))
        .await,
        Code::InvalidArgument,
        "since",
    );
    // B sees none of it and cannot replay A's events.
    assert_eq!(
        c.get_webhook_endpoint(authed(&b, name("github")))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    assert_eq!(
        c.list_webhook_events(authed(
            &b,
            pb::ListWebhookEventsRequest {
                slug: "github".into(),
                after: 0,
                limit: 10
            }
        ))
        .await
        .unwrap_err()
        .code(),
        Code::NotFound
    );
    assert_eq!(
        c.replay_webhook_event(authed(
            &b,
            pb::ReplayWebhookEventRequest {
                slug: "github".into(),
                id
            }
        ))
        .await
        .unwrap_err()
        .code(),
        Code::NotFound
    );
    assert_eq!(
        c.replay_webhook_events(authed(&b, since))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    assert_eq!(
        doc(c
            .list_webhook_endpoints(authed(&b, pb::NamePage::default()))
            .await)["endpoints"],
        json!([])
    );
    assert_eq!(
        doc(c
            .list_webhook_endpoints(authed(&a, pb::NamePage::default()))
            .await)["endpoints"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // HTTP-job settings: signing secrets, allow list, destination rates, transitions.
    let s1 = doc(c
        .create_signing_secret(authed(&a, pb::NoArguments {}))
        .await);
    assert!(s1["secret"].as_str().is_some_and(|s| !s.is_empty()));
    let s2 = doc(c
        .rotate_signing_secret(authed(&a, pb::NoArguments {}))
        .await);
    assert_ne!(s1["id"], s2["id"]);
    let mine = doc(c.list_signing_secrets(authed(&a, pb::NoArguments {})).await);
    assert_eq!(mine["secrets"].as_array().unwrap().len(), 2);
    assert!(
        mine["secrets"][0].get("secret").is_none(),
        "a listing never shows a secret"
    );
    assert_eq!(
        doc(c.list_signing_secrets(authed(&b, pb::NoArguments {})).await)["secrets"],
        json!([])
    );
    let id = s1["id"].as_i64().unwrap();
    assert_eq!(
        c.delete_signing_secret(authed(&b, pb::SecretId { id }))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    fails(
        c.delete_signing_secret(authed(&a, pb::SecretId { id: 0 }))
            .await,
        Code::InvalidArgument,
        "id",
    );
    doc(c
        .delete_signing_secret(authed(&a, pb::SecretId { id }))
        .await);

    let allow = doc(c
        .put_http_allow_list(authed(&a, body(json!({"ranges": ["private"]}))))
        .await);
    assert_eq!(allow["ranges"], json!(["private"]));
    fails(
        c.put_http_allow_list(authed(&a, body(json!({"ranges": ["everything"]}))))
            .await,
        Code::InvalidArgument,
        "ranges",
    );
    assert_eq!(
        doc(c.get_http_allow_list(authed(&b, pb::NoArguments {})).await)["ranges"],
        json!([])
    );
    doc(c
        .delete_http_allow_list(authed(&a, pb::NoArguments {}))
        .await);
    assert_eq!(
        doc(c.get_http_allow_list(authed(&a, pb::NoArguments {})).await)["ranges"],
        json!([])
    );

    doc(c
        .put_http_rate(authed(
            &a,
            body(json!({"destination": "api.example.com", "per_sec": 5.0})),
        ))
        .await);
    fails(
        c.put_http_rate(authed(
            &a,
            body(json!({"destination": "api.example.com", "per_sec": -1.0})),
        ))
        .await,
        Code::InvalidArgument,
        "per_sec",
    );
    assert_eq!(
        doc(c.list_http_rates(authed(&a, pb::NoArguments {})).await)["rates"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        doc(c.list_http_rates(authed(&b, pb::NoArguments {})).await)["rates"],
        json!([])
    );
    doc(c
        .delete_http_rate(authed(
            &a,
            pb::Destination {
                destination: "api.example.com".into(),
            },
        ))
        .await);
    assert_eq!(
        doc(c.list_http_rates(authed(&a, pb::NoArguments {})).await)["rates"],
        json!([])
    );
    let t = doc(c
        .list_http_transitions(authed(
            &a,
            pb::ListTransitionsRequest {
                before: 0,
                limit: 10,
            },
        ))
        .await);
    assert!(t["transitions"].is_array(), "{t}");
    fails(
        c.list_http_transitions(authed(
            &a,
            pb::ListTransitionsRequest {
                before: -3,
                limit: 10,
            },
        ))
        .await,
        Code::InvalidArgument,
        "before",
    );
    audited_via_grpc(
        &db,
        "webhook_endpoint.%",
        &["webhook_endpoint.create", "webhook_endpoint.replay"],
    )
    .await;
    audited_via_grpc(
        &db,
        "http_jobs.%",
        &[
            "http_jobs.secret.create",
            "http_jobs.secret.rotate",
            "http_jobs.rate.delete",
        ],
    )
    .await;
}
