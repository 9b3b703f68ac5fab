//! The HTTP job creation check's allow-list cache: creates of one tenant that miss it at the
//! same moment wait for a single read of the tenant's allow list (issue 22: an expired
//! entry sent every create in flight to Postgres at once, each holding a pooled connection).

mod http_common;

use http_common::TestServer;
use pgferry_server::ServerConfig;
use serde_json::json;

/// `n` creates of an HTTP job at once with `key`; their statuses.
async fn burst(srv: &TestServer, key: &str, n: usize) -> Vec<u16> {
    let calls = (0..n).map(|i| {
        let job = json!({
            "queue": "http",
            "kind": "http",
            "args": {"url": format!("http://127.0.0.1:9/x{i}")},
        });
        srv.call("POST", "/v1/jobs", Some(key), Some(job))
    });
    futures_util::future::join_all(calls)
        .await
        .into_iter()
        .map(|(status, _, _)| status)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_of_one_tenant_share_one_allow_list_read() {
    let mut config = ServerConfig::default();
    config.http.http_jobs_allow =
        pgferry_http_jobs::Allow::of(&[pgferry_http_jobs::Range::Loopback]);
    let srv = TestServer::start(config).await;
    let a = srv.key("acme", &["admin"]).await;
    let b = srv.key("globex", &["admin"]).await;
    // Keys authenticated first: the bursts below miss only the allow-list cache.
    assert_eq!(burst(&srv, &a, 1).await, vec![201]);
    assert_eq!(burst(&srv, &b, 1).await, vec![201]);
    let cache = &srv.state.http.http_jobs;
    for round in 0..3 {
        // An expired (here: dropped) cache, as every ALLOW_TTL on a busy server.
        cache.clear();
        let before = cache.lookups();
        let statuses = burst(&srv, &a, 32).await;
        assert!(statuses.iter().all(|s| *s == 201), "{statuses:?}");
        assert_eq!(
            cache.lookups() - before,
            1,
            "round {round}: 32 creates of one tenant, one allow-list read"
        );
        // Two tenants at once: one read each, neither waits for the other's answer.
        cache.clear();
        let before = cache.lookups();
        let (sa, sb) = tokio::join!(burst(&srv, &a, 16), burst(&srv, &b, 16));
        assert!(sa.iter().chain(&sb).all(|s| *s == 201), "{sa:?} {sb:?}");
        assert_eq!(cache.lookups() - before, 2, "round {round}: two tenants");
    }
}
