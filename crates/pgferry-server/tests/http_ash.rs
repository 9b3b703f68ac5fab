//! `/v1/ash/*`: admin scope only (database-wide data), readers answer from real samples,
//! another tenant's queue and job names are never shown, bad input is a 400 naming the
//! parameter.

mod http_common;

use std::time::Duration;

use http_common::{error_of, TestServer};
use pgferry_server::ServerConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ash_readers_need_admin_and_report_real_waits() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let mut c = srv.db.connect().await;
    pgferry_ash::migrate::up(&mut c).await.unwrap();
    let reader = srv.key("tenant-a", &["read", "produce", "consume"]).await;
    let admin = srv.key("tenant-a", &["admin"]).await;

    // A pgferry backend sleeping, sampled twice.
    let sleeper = pgferry_core::db::connect(&srv.db.config, "completer")
        .await
        .unwrap();
    let sleeping = tokio::spawn(async move { sleeper.query("SELECT pg_sleep(60)", &[]).await });
    for _ in 0..400 {
        let n: i64 = c
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
    // Pooled pgferry connections idle in their transactions: one serving tenant-a's `mail`
    // queue, one serving another tenant's `secret` queue (whose names tenant-a must not see).
    let a_id = pgferry_server::auth::admin::tenant_id(&c, "tenant-a")
        .await
        .unwrap()
        .unwrap();
    let other_queue = format!("t{}.secret", a_id + 1);
    let pool = pgferry_core::db::pool(&srv.db.config, "api", 2);
    let idle = pool.get().await.unwrap();
    let _serving =
        pgferry_core::serving::serve(&idle, "enqueuer", &format!("t{a_id}.mail"), "send");
    idle.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let idle_other = pool.get().await.unwrap();
    let _serving_other =
        pgferry_core::serving::serve(&idle_other, "claimer", &other_queue, "classified");
    idle_other.batch_execute("BEGIN; SELECT 1").await.unwrap();
    let mut sampler = pgferry_ash::Sampler::connect(
        &srv.db.config,
        pgferry_ash::SamplerConfig {
            databases: Some(vec![srv.db.name.clone()]),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    sampler.run_once().await.unwrap();
    sampler.run_once().await.unwrap();

    let routes = [
        "/v1/ash/aas?by=pgferry_role",
        "/v1/ash/top_waits",
        "/v1/ash/top_queries",
        "/v1/ash/cpu_vs_waiting",
        "/v1/ash/timeline?bucket_s=60",
        "/v1/ash/at",
    ];
    for r in routes {
        let (s, body, _) = srv.call("GET", r, Some(&reader), None).await;
        assert_eq!(s, 403, "{r}: {body}");
        assert!(body.to_string().contains("admin"), "{r}: {body}");
        let (s, _, _) = srv.call("GET", r, None, None).await;
        assert_eq!(s, 401, "{r}");
        let (s, body, _) = srv.call("GET", r, Some(&admin), None).await;
        assert_eq!(s, 200, "{r}: {body}");
    }

    let (_, waits, _) = srv
        .call("GET", "/v1/ash/top_waits", Some(&admin), None)
        .await;
    let sleep = waits["waits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["wait_event"] == "PgSleep")
        .unwrap_or_else(|| panic!("{waits}"));
    assert_eq!(sleep["seconds"], 2.0);
    assert_eq!(sleep["aas"], 1.0);
    let (_, roles, _) = srv
        .call("GET", "/v1/ash/aas?by=pgferry_role", Some(&admin), None)
        .await;
    assert!(
        roles["slices"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["key"] == "completer" && s["aas"] == 1.0),
        "{roles}"
    );
    // Tenant-a's own load by its names (its queue as it names it); the other tenant's as
    // one anonymous slice.
    let own_tenant = a_id.to_string();
    for (by, own) in [
        ("queue", "mail"),
        ("tenant", own_tenant.as_str()),
        ("job_kind", "send"),
    ] {
        let (s, body, _) = srv
            .call("GET", &format!("/v1/ash/aas?by={by}"), Some(&admin), None)
            .await;
        assert_eq!(s, 200, "{body}");
        let slices = body["slices"].as_array().unwrap();
        for key in [own, "(other tenants)"] {
            assert!(
                slices.iter().any(|s| s["key"] == key && s["aas"] == 1.0),
                "{by}: {key} missing: {body}"
            );
        }
        let text = body.to_string();
        for secret in ["secret", "classified", &format!("\"{}\"", a_id + 1)] {
            assert!(
                !text.contains(secret),
                "{by}: another tenant's {secret}: {body}"
            );
        }
    }
    let (_, at, _) = srv.call("GET", "/v1/ash/at", Some(&admin), None).await;
    let activity = at["activity"].as_array().unwrap();
    assert!(
        activity.iter().any(|a| a["wait_type"] == "IdleTx"
            && a["pgferry_role"] == "enqueuer"
            && a["queue"] == "mail"
            && a["job_kind"] == "send"),
        "{at}"
    );
    assert!(
        activity.iter().any(|a| a["wait_type"] == "IdleTx"
            && a["pgferry_role"] == "claimer"
            && a["queue"] == "(other tenants)"
            && a["job_kind"].is_null()),
        "{at}"
    );
    let text = at.to_string();
    assert!(
        !text.contains("secret") && !text.contains("classified"),
        "another tenant's names: {at}"
    );
    assert!(
        at["activity"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["wait_event"] == "PgSleep" && a["pgferry_role"] == "completer"),
        "{at}"
    );

    for (path, field) in [
        ("/v1/ash/aas?by=colour", "by"),
        ("/v1/ash/top_waits?since_ms=2000&until_ms=1000", "until_ms"),
        ("/v1/ash/top_waits?since_ms=-5", "since_ms"),
        ("/v1/ash/top_waits?limit=0", "limit"),
        ("/v1/ash/top_queries?limit=x", "limit"),
        ("/v1/ash/timeline?bucket_s=0", "bucket_s"),
        (
            "/v1/ash/timeline?since_ms=0&until_ms=86400000&bucket_s=1",
            "bucket_s",
        ),
        ("/v1/ash/at?time_ms=-1", "time_ms"),
        ("/v1/ash/cpu_vs_waiting?colour=red", "colour"),
    ] {
        let (s, body, _) = srv.call("GET", path, Some(&admin), None).await;
        assert_eq!(s, 400, "{path}: {body}");
        assert_eq!(error_of(&body).1.as_deref(), Some(field), "{path}: {body}");
    }
    c.execute(
        "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()",
        &[],
    )
    .await
    .unwrap();
    let _ = sleeping.await;
}
