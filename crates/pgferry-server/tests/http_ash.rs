//! `/v1/ash/*`: admin scope only (database-wide data), readers answer from real samples,
//! bad input is a 400 naming the parameter.

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
    // A pooled pgferry connection serving tenant 3's `mail` queue, idle in its transaction.
    let pool = pgferry_core::db::pool(&srv.db.config, "api", 1);
    let idle = pool.get().await.unwrap();
    let _serving = pgferry_core::serving::serve(&idle, "enqueuer", "t3.mail", "send");
    idle.batch_execute("BEGIN; SELECT 1").await.unwrap();
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
    for (by, key) in [("queue", "t3.mail"), ("tenant", "3"), ("job_kind", "send")] {
        let (s, body, _) = srv
            .call("GET", &format!("/v1/ash/aas?by={by}"), Some(&admin), None)
            .await;
        assert_eq!(s, 200, "{body}");
        assert!(
            body["slices"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["key"] == key && s["aas"] == 1.0),
            "{by}: {body}"
        );
    }
    let (_, at, _) = srv.call("GET", "/v1/ash/at", Some(&admin), None).await;
    assert!(
        at["activity"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["wait_type"] == "IdleTx"
                && a["pgferry_role"] == "enqueuer"
                && a["queue"] == "t3.mail"),
        "{at}"
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
