//! The Ash service over a real loopback socket: admin scope only (the data is database-wide),
//! readers answer from real samples with pgferry's queue attribution, bad input is
//! INVALID_ARGUMENT naming the field.

mod common;

use std::time::Duration;

use pb::ash_client::AshClient;
use pgferry_client::proto::v1 as pb;
use tonic::{Code, Request};

fn authed<T>(key: &str, msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ash_readers_need_admin_and_report_real_waits_by_queue() {
    let db = pgferry_testkit::test_db().await;
    let (a_id, admin) = common::tenant_key(&db, "a").await;
    let mut control = db.connect().await;
    let (_, read_key) = pgferry_server::auth::admin::create_key(
        &mut control,
        "a",
        pgferry_server::auth::Scopes::from_names(["read", "produce", "consume"]).unwrap(),
        None,
    )
    .await
    .unwrap();
    let reader = read_key.expose();
    let server = common::Server::start(&db, common::loopback(), Default::default()).await;
    let mut c = AshClient::connect(server.url.clone()).await.unwrap();

    // A pooled pgferry connection serving tenant a's `reports` queue sleeps, one serving
    // another tenant's `secret` queue is idle in its transaction; sampled twice.
    let pool = pgferry_core::db::pool(&db.config, "api", 2);
    let sleeper = pool.get().await.unwrap();
    let own_queue = format!("t{a_id}.reports");
    let sleeping = tokio::spawn(async move {
        let _serving = pgferry_core::serving::serve(&sleeper, "completer", &own_queue, "render");
        let _ = sleeper.query("SELECT pg_sleep(60)", &[]).await;
    });
    let idle_other = pool.get().await.unwrap();
    let other_queue = format!("t{}.secret", a_id + 1);
    let _serving_other =
        pgferry_core::serving::serve(&idle_other, "enqueuer", &other_queue, "classified");
    idle_other.batch_execute("BEGIN; SELECT 1").await.unwrap();
    for _ in 0..400 {
        let n: i64 = control
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if n == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut sampler = pgferry_ash::Sampler::connect(
        &db.config,
        pgferry_ash::SamplerConfig {
            databases: Some(vec![db.name.clone()]),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    sampler.run_once().await.unwrap();
    sampler.run_once().await.unwrap();

    // Every RPC: no key UNAUTHENTICATED, a key without admin PERMISSION_DENIED.
    macro_rules! gated {
        ($method:ident, $msg:expr) => {{
            let e = c.$method(Request::new($msg)).await.unwrap_err();
            assert_eq!(e.code(), Code::Unauthenticated, "{}", stringify!($method));
            let e = c.$method(authed(&reader, $msg)).await.unwrap_err();
            assert_eq!(e.code(), Code::PermissionDenied, "{}", stringify!($method));
            c.$method(authed(&admin, $msg)).await.unwrap().into_inner()
        }};
    }
    let by_queue = gated!(
        aas,
        pb::AshAasRequest {
            window: None,
            by: "queue".into(),
        }
    );
    assert_eq!(by_queue.by, "queue");
    // Tenant a's queue by the name a uses; the other tenant's as one anonymous slice.
    let reports = by_queue
        .slices
        .iter()
        .find(|s| s.key == "reports")
        .unwrap_or_else(|| panic!("{by_queue:?}"));
    assert_eq!((reports.seconds, reports.aas), (2.0, Some(1.0)));
    let others = by_queue
        .slices
        .iter()
        .find(|s| s.key == "(other tenants)")
        .unwrap_or_else(|| panic!("{by_queue:?}"));
    assert_eq!((others.seconds, others.aas), (2.0, Some(1.0)));
    assert!(
        !format!("{by_queue:?}").contains("secret"),
        "another tenant's queue: {by_queue:?}"
    );
    let waits = gated!(
        top_waits,
        pb::AshTopRequest {
            window: None,
            limit: None
        }
    );
    let sleep = waits
        .waits
        .iter()
        .find(|w| w.wait_event == "PgSleep")
        .unwrap_or_else(|| panic!("{waits:?}"));
    assert_eq!(
        (sleep.wait_type.as_str(), sleep.aas),
        ("Timeout", Some(1.0))
    );
    let queries = gated!(
        top_queries,
        pb::AshTopRequest {
            window: None,
            limit: Some(5)
        }
    );
    assert!(queries
        .queries
        .iter()
        .any(|q| q.top_wait.as_deref() == Some("Timeout:PgSleep")));
    let split = gated!(cpu_vs_waiting, pb::AshWindow::default());
    assert_eq!(split.covered_seconds, 2.0);
    assert!(split.waiting.unwrap() >= 1.0, "{split:?}");
    let tl = gated!(
        timeline,
        pb::AshTimelineRequest {
            window: None,
            bucket_s: Some(3600)
        }
    );
    assert_eq!(tl.bucket_s, 3600);
    assert!(tl
        .points
        .iter()
        .any(|p| p.wait_type.as_deref() == Some("Timeout") && p.aas > 0.0));
    let at = gated!(at, pb::AshAtRequest { time_ms: None });
    let row = at
        .activity
        .iter()
        .find(|a| a.wait_event == "PgSleep")
        .unwrap_or_else(|| panic!("{at:?}"));
    assert_eq!(row.pgferry_role.as_deref(), Some("completer"));
    assert_eq!(row.queue.as_deref(), Some("reports"));
    assert_eq!(row.job_kind.as_deref(), Some("render"));
    let other = at
        .activity
        .iter()
        .find(|a| a.pgferry_role.as_deref() == Some("enqueuer") && a.wait_type == "IdleTx")
        .unwrap_or_else(|| panic!("{at:?}"));
    assert_eq!(other.queue.as_deref(), Some("(other tenants)"));
    assert_eq!(other.job_kind, None);
    assert!(
        !format!("{at:?}").contains("secret") && !format!("{at:?}").contains("classified"),
        "another tenant's names: {at:?}"
    );

    // Bad input: INVALID_ARGUMENT naming the field.
    let window = |since, until| {
        Some(pb::AshWindow {
            since_ms: Some(since),
            until_ms: Some(until),
        })
    };
    let bad: Vec<(tonic::Status, &str)> = vec![
        (
            c.aas(authed(
                &admin,
                pb::AshAasRequest {
                    window: None,
                    by: "colour".into(),
                },
            ))
            .await
            .unwrap_err(),
            "(by)",
        ),
        (
            c.top_waits(authed(
                &admin,
                pb::AshTopRequest {
                    window: window(2000, 1000),
                    limit: None,
                },
            ))
            .await
            .unwrap_err(),
            "(window.until_ms)",
        ),
        (
            c.top_waits(authed(
                &admin,
                pb::AshTopRequest {
                    window: window(-5, 1000),
                    limit: None,
                },
            ))
            .await
            .unwrap_err(),
            "(window.since_ms)",
        ),
        (
            c.top_queries(authed(
                &admin,
                pb::AshTopRequest {
                    window: None,
                    limit: Some(0),
                },
            ))
            .await
            .unwrap_err(),
            "(limit)",
        ),
        (
            c.timeline(authed(
                &admin,
                pb::AshTimelineRequest {
                    window: None,
                    bucket_s: Some(0),
                },
            ))
            .await
            .unwrap_err(),
            "(bucket_s)",
        ),
        (
            c.timeline(authed(
                &admin,
                pb::AshTimelineRequest {
                    window: window(0, 86_400_000),
                    bucket_s: Some(1),
                },
            ))
            .await
            .unwrap_err(),
            "(bucket_s)",
        ),
        (
            c.at(authed(&admin, pb::AshAtRequest { time_ms: Some(-1) }))
                .await
                .unwrap_err(),
            "(time_ms)",
        ),
    ];
    for (e, field) in bad {
        assert_eq!(e.code(), Code::InvalidArgument, "{field}: {e:?}");
        assert!(e.message().ends_with(field), "{field}: {}", e.message());
    }

    control
        .execute(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap();
    let _ = sleeping.await;
    server.stop().await;
}
