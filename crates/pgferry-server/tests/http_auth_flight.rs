//! The auth cache's lookups: requests that miss the cache for one key at the same moment
//! wait for a single lookup (issue 22: a busy key's expiry sent every request in flight to
//! Postgres at once, each holding a pooled connection).

mod http_common;

use http_common::TestServer;
use pgferry_server::ServerConfig;

/// `n` requests at once with `key`; their statuses.
async fn burst(srv: &TestServer, key: &str, n: usize) -> Vec<u16> {
    let calls = (0..n).map(|_| srv.call("GET", "/v1/queues", Some(key), None));
    futures_util::future::join_all(calls)
        .await
        .into_iter()
        .map(|(status, _, _)| status)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_misses_of_one_key_share_one_lookup() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let good = srv.key("acme", &["admin"]).await;
    let bad = format!("{}0", &good[..good.len() - 1]);
    let bad = if bad == good {
        format!("{}1", &good[..good.len() - 1])
    } else {
        bad
    };
    for round in 0..3 {
        // An expired (here: dropped) cache, as every `cache_ttl` on a busy server.
        srv.state.auth.clear_cache();
        let before = srv.state.auth.lookups();
        let statuses = burst(&srv, &good, 32).await;
        assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
        assert_eq!(
            srv.state.auth.lookups() - before,
            1,
            "round {round}: 32 requests, one lookup"
        );
        // A wrong secret of the same prefix: refused alike, from one lookup too.
        let before = srv.state.auth.lookups();
        let statuses = burst(&srv, &bad, 32).await;
        assert!(statuses.iter().all(|s| *s == 401), "{statuses:?}");
        assert_eq!(srv.state.auth.lookups() - before, 1, "round {round}");
    }
    // Revocation still takes effect once the cached answer is gone.
    srv.revoke(&good).await;
    srv.state.auth.clear_cache();
    let statuses = burst(&srv, &good, 8).await;
    assert!(statuses.iter().all(|s| *s == 401), "{statuses:?}");
}
