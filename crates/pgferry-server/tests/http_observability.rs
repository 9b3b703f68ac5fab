//! Metrics and audit over HTTP: attempts rescued after their lease lapsed are counted per
//! tenant and user queue (the leader's rescuer reports them); snoozes count as neither
//! success nor failure; every admin action is written to the audit log, reads are not.

mod http_common;

use std::time::Duration;

use http_common::TestServer;
use pgferry_server::ServerConfig;
use serde_json::json;

async fn metrics(srv: &TestServer) -> String {
    srv.http
        .get(format!("{}/metrics", srv.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescued_attempts_are_counted_per_tenant_queue() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let key = srv.key("acme", &["admin"]).await;
    let k = Some(key.as_str());
    let (s, b, _) = srv
        .call(
            "PATCH",
            "/v1/queues/slow",
            k,
            Some(json!({"lease_ms": 200})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    for (queue, n) in [("slow", 0), ("slow", 1), ("nap", 2)] {
        let (s, b, _) = srv
            .call(
                "POST",
                "/v1/jobs",
                k,
                Some(json!({"queue": queue, "kind": "k", "args": n})),
            )
            .await;
        assert_eq!(s, 201, "{b}");
    }
    // Two claimed and left to lapse; one (default lease) snoozed: neither completed nor
    // failed.
    assert_eq!(srv.claim_n(&key, "slow", 2).await.len(), 2);
    let nap = srv.claim_n(&key, "nap", 1).await;
    let (s, b, _) = srv
        .call(
            "POST",
            "/v1/workers/complete",
            k,
            Some(json!({"results": [{"token": nap[0]["token"], "snooze_ms": 60000}]})),
        )
        .await;
    assert_eq!((s, &b["results"][0]["stale"]), (200, &json!(false)), "{b}");

    let series = "pgferry_jobs_rescued_total{tenant=\"acme\",queue=\"slow\"}";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = metrics(&srv).await;
        if sample(&text, series) == Some(2.0) || tokio::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(sample(&text, series), Some(2.0), "{text}");
    for quiet in ["completed", "failed"] {
        let s = format!("pgferry_jobs_{quiet}_total{{tenant=\"acme\",queue=\"nap\"}}");
        assert_eq!(
            sample(&text, &s),
            None,
            "a snooze counted as {quiet}:\n{text}"
        );
    }
    // The rescued jobs went back to the queue: attempt 2 of each.
    let again = srv.claim_n(&key, "slow", 2).await;
    assert!(again.iter().all(|j| j["attempt"] == 2), "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_action_is_audited() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let key = srv.key("acme", &["admin"]).await;
    let k = Some(key.as_str());
    for (m, path, body) in [
        ("PATCH", "/v1/queues/q", Some(json!({"max_attempts": 2}))),
        ("POST", "/v1/queues/q/pause", None),
        ("POST", "/v1/queues/q/resume", None),
        ("POST", "/v1/dead/retry", Some(json!({"queue": "q"}))),
        ("POST", "/v1/dead/purge", Some(json!({"queue": "q"}))),
        // Reads and job operations are not audited.
        ("GET", "/v1/queues", None),
        ("GET", "/v1/dead?queue=q", None),
    ] {
        let (s, b, _) = srv.call(m, path, k, body).await;
        assert_eq!(s, 200, "{m} {path}: {b}");
    }
    let c = srv.db.connect().await;
    let rows = c
        .query(
            "SELECT a.action, a.tenant_id = t.tenant_id, a.key_id IS NOT NULL \
             FROM pgferry.audit_log a, pgferry.tenants t \
             WHERE t.name = 'acme' AND a.actor = 'api' ORDER BY a.audit_id",
            &[],
        )
        .await
        .unwrap();
    let got: Vec<(String, bool, bool)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let want: Vec<(String, bool, bool)> = [
        "queue.update",
        "queue.pause",
        "queue.resume",
        "dead.retry",
        "dead.purge",
    ]
    .iter()
    .map(|a| (a.to_string(), true, true))
    .collect();
    assert_eq!(got, want);
}
