//! Monitors and inbound webhooks over HTTP on a real server, with the HTTP job service
//! delivering to a loopback target that records what it receives: notification targets,
//! pings without an API key, signature verification, dedup, fan-out, replay, and tenant
//! isolation.

mod http_common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::http::HeaderMap;
use hmac::{Hmac, KeyInit, Mac};
use http_common::{error_of, TestServer};
use pgferry_http_jobs::{Allow, ExecutorConfig, Range};
use pgferry_server::http::HttpConfig;
use pgferry_server::ServerConfig;
use serde_json::{json, Value};
use sha2_11::Sha256;

/// What the loopback target received: (path, headers, body).
type Seen = Arc<Mutex<Vec<(String, HeaderMap, String)>>>;

async fn target() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let app = axum::Router::new().fallback(
        move |uri: axum::http::Uri, headers: HeaderMap, body: Bytes| {
            let s = s.clone();
            async move {
                let body = String::from_utf8_lossy(&body).to_string();
                s.lock()
                    .unwrap()
                    .push((uri.path().to_string(), headers, body));
                "ok"
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, seen)
}

async fn received(seen: &Seen, path: &str, n: usize) -> Vec<(HeaderMap, String)> {
    for _ in 0..300 {
        let got: Vec<_> = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.0 == path)
            .map(|r| (r.1.clone(), r.2.clone()))
            .collect();
        if got.len() >= n {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "{path}: fewer than {n} deliveries: {:?}",
        seen.lock().unwrap()
    );
}

/// A server whose tenants may reach loopback, with the HTTP job service running.
async fn server() -> (TestServer, tokio::sync::watch::Sender<bool>) {
    let allow = Allow::of(&[Range::Loopback]);
    let srv = TestServer::start(ServerConfig {
        http: HttpConfig {
            http_jobs_allow: allow.clone(),
            ..HttpConfig::default()
        },
        ..ServerConfig::default()
    })
    .await;
    let (stop, rx) = tokio::sync::watch::channel(false);
    // Wired as `pgferry serve` wires it: destination transitions notify the tenant.
    tokio::spawn(pgferry_http_jobs::service::run_with_sink(
        srv.state.engine.clone(),
        ExecutorConfig {
            allow,
            ..Default::default()
        },
        pgferry_http_jobs::worker::WorkerConfig::default(),
        pgferry_monitors::http_transitions::NotifyTransitions::new(srv.state.engine.clone()),
        rx,
    ));
    (srv, stop)
}

fn sign(secret: &str, body: &str) -> String {
    let mut m = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    m.update(body.as_bytes());
    hex::encode(m.finalize().into_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_alerts_reach_the_tenants_target_and_nobody_elses() {
    let (srv, _stop) = server().await;
    let (hook, seen) = target().await;
    let a = srv.key("tenant-a", &["admin"]).await;
    let b = srv.key("tenant-b", &["admin"]).await;
    // The crate's idea of a tenant's http queue is the server's.
    let c = srv.db.connect().await;
    let tid = pgferry_server::auth::admin::tenant_id(&c, "tenant-a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        pgferry_monitors::http_queue(tid),
        pgferry_server::auth::engine_queue(tid, "http").unwrap()
    );

    let (s, t, _) = srv
        .call(
            "POST",
            "/v1/notification-targets",
            Some(&a),
            Some(json!({"name": "ops", "url": format!("{hook}/alerts"), "events": ["monitor.*"]})),
        )
        .await;
    assert_eq!(s, 201, "{t}");
    // A filter that matches nothing of a monitor's.
    let (s, _, _) = srv
        .call(
            "POST",
            "/v1/notification-targets",
            Some(&a),
            Some(json!({"name": "sched", "url": format!("{hook}/sched"), "events": ["schedule.failed"]})),
        )
        .await;
    assert_eq!(s, 201);
    let (s, m, _) = srv
        .call(
            "POST",
            "/v1/monitors",
            Some(&a),
            Some(json!({"name": "nightly", "period_ms": 60000, "grace_ms": 1000})),
        )
        .await;
    assert_eq!(s, 201, "{m}");
    assert_eq!(m["state"], "new");
    let ping = m["ping_path"].as_str().unwrap().to_string();

    // Pings need no key; an unknown or malformed token is a plain 404.
    let (s, p, _) = srv.call("POST", &ping, None, None).await;
    assert_eq!((s, &p["state"]), (200, &json!("up")), "{p}");
    let unknown = format!("/ping/{}", "0".repeat(64));
    let (s1, e1, _) = srv.call("GET", &unknown, None, None).await;
    let (s2, e2, _) = srv.call("GET", "/ping/nope/fail", None, None).await;
    assert_eq!((s1, s2), (404, 404));
    assert_eq!(e1, e2);

    // Late (the duty at a later "now"), then recovered by a ping.
    let mut client = srv.db.connect().await;
    let r = pgferry_monitors::run_once(
        &srv.state.engine,
        &mut client,
        SystemTime::now() + Duration::from_secs(62),
        &pgferry_monitors::DutyConfig::default(),
    )
    .await
    .unwrap();
    assert_eq!(r.late, 1);
    let (_, got, _) = srv
        .call("GET", "/v1/monitors/nightly", Some(&a), None)
        .await;
    assert_eq!(got["state"], "late");
    let (s, _, _) = srv.call("GET", &format!("{ping}/start"), None, None).await;
    assert_eq!(s, 200);
    srv.call("POST", &ping, None, None).await;
    let sent = received(&seen, "/alerts", 2).await;
    let kinds: Vec<String> = sent
        .iter()
        .map(|(h, body)| {
            assert_eq!(h["content-type"], "application/json");
            let v: Value = serde_json::from_str(body).unwrap();
            assert_eq!(v["subject"], "nightly");
            v["kind"].as_str().unwrap().to_string()
        })
        .collect();
    // Delivered concurrently by the HTTP worker: order not guaranteed.
    let mut kinds = kinds;
    kinds.sort();
    assert_eq!(kinds, ["monitor.late", "monitor.recovered"]);
    let (_, alerts, _) = srv
        .call(
            "GET",
            "/v1/alerts?type=monitor&subject=nightly",
            Some(&a),
            None,
        )
        .await;
    assert_eq!(alerts["alerts"][0]["kind"], "recovered", "{alerts}");
    assert_eq!(alerts["alerts"][1]["kind"], "late");
    let (_, pings, _) = srv
        .call("GET", "/v1/monitors/nightly/pings", Some(&a), None)
        .await;
    let pk: Vec<&str> = pings["pings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(pk, ["success", "start", "success"]);

    // Tenant B: 404 for A's monitor and target, nothing listed, no alerts.
    for path in ["/v1/monitors/nightly", "/v1/notification-targets/ops"] {
        let (s, e, _) = srv.call("GET", path, Some(&b), None).await;
        assert_eq!((s, error_of(&e).0.as_str()), (404, "not_found"), "{path}");
    }
    let (_, l, _) = srv.call("GET", "/v1/monitors", Some(&b), None).await;
    assert_eq!(l["monitors"], json!([]));
    let (_, l, _) = srv
        .call(
            "GET",
            "/v1/alerts?type=monitor&subject=nightly",
            Some(&b),
            None,
        )
        .await;
    assert_eq!(l["alerts"], json!([]));
    let (s, _, _) = srv
        .call("POST", "/v1/monitors/nightly/pause", Some(&b), None)
        .await;
    assert_eq!(s, 404);

    // Bad input names the field; a private address is refused by the SSRF guard.
    for (body, field) in [
        (json!({"name": "x", "period_ms": 10}), "period_ms"),
        (json!({"name": "x", "cron": "61 * * * *"}), "cron"),
        (
            json!({"name": "x", "period_ms": 60000, "failure_threshold": 0}),
            "failure_threshold",
        ),
        (json!({"name": "Bad Name", "period_ms": 60000}), "name"),
        // Optional fields are not nullable.
        (
            json!({"name": "x", "period_ms": 60000, "cron": null}),
            "cron",
        ),
    ] {
        let (s, e, _) = srv.call("POST", "/v1/monitors", Some(&a), Some(body)).await;
        assert_eq!((s, error_of(&e).1.as_deref()), (400, Some(field)), "{e}");
    }
    let (s, e, _) = srv
        .call(
            "POST",
            "/v1/notification-targets",
            Some(&b),
            Some(json!({"name": "meta", "url": "http://169.254.169.254/latest"})),
        )
        .await;
    assert_eq!((s, error_of(&e).1.as_deref()), (400, Some("url")), "{e}");
    // The audit log has the changes.
    let n: i64 = c
        .query_one(
            "SELECT count(*) AS n FROM pgferry.audit_log WHERE action LIKE 'monitor.%' OR action LIKE 'notification_target.%'",
            &[],
        )
        .await
        .unwrap()
        .get("n");
    assert_eq!(n, 3);
    // Only the monitor filter's target got anything.
    assert!(seen.lock().unwrap().iter().all(|r| r.0 == "/alerts"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbound_webhooks_verify_dedup_fan_out_and_replay() {
    let (srv, _stop) = server().await;
    let (hook, seen) = target().await;
    let a = srv.key("tenant-a", &["admin"]).await;
    let b = srv.key("tenant-b", &["admin"]).await;
    let (s, ep, _) = srv
        .call(
            "POST",
            "/v1/webhook-endpoints",
            Some(&a),
            Some(json!({
                "slug": "stripe-prod",
                "signature": {"header": "X-Hub-Signature-256", "secret": "whsec"},
                "event_id_header": "X-Event-Id",
                "targets": [format!("{hook}/one"), format!("{hook}/two")],
            })),
        )
        .await;
    assert_eq!(s, 201, "{ep}");
    assert!(ep["signature"].get("secret").is_none(), "{ep}");
    let a_path = ep["path"].as_str().unwrap().to_string();
    // Slugs are per tenant and the public address is the server's: tenant B's create of
    // A's slug is answered as a create of an unused slug is (no 409, nothing of A's), and
    // gets its own address.
    let fresh = json!({"slug": "never-used", "targets": [format!("{hook}/x")]});
    let (s_fresh, fresh, _) = srv
        .call("POST", "/v1/webhook-endpoints", Some(&b), Some(fresh))
        .await;
    let (s, theirs, _) = srv
        .call(
            "POST",
            "/v1/webhook-endpoints",
            Some(&b),
            Some(json!({"slug": "stripe-prod", "targets": [format!("{hook}/x")]})),
        )
        .await;
    assert_eq!((s, s_fresh), (201, 201), "{theirs}");
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&theirs), keys(&fresh));
    assert_eq!(theirs["targets"], json!([format!("{hook}/x")]));
    assert!(theirs["signature"].is_null() && theirs["event_id_header"].is_null());
    let b_path = theirs["path"].as_str().unwrap();
    assert_ne!(b_path, a_path);
    assert!(
        a_path.starts_with("/in/stripe-prod-") && a_path.len() == "/in/stripe-prod-".len() + 32
    );
    // The slug alone is not an address.
    let (s, _, _) = srv
        .send(srv.raw("POST", "/in/stripe-prod").body("{}"))
        .await;
    assert_eq!(s, 404);
    // B's endpoint is B's: deleting it leaves A's.
    let (s, _, _) = srv
        .call(
            "DELETE",
            "/v1/webhook-endpoints/stripe-prod",
            Some(&b),
            None,
        )
        .await;
    assert_eq!(s, 204);

    let body = r#"{"type":"invoice.paid","id":"evt_1"}"#;
    let post = |sig: Option<String>, id: &str, body: &'static str| {
        let mut req = srv
            .raw("POST", &a_path)
            .header("content-type", "application/json")
            .header("x-event-id", id)
            .body(body);
        if let Some(sig) = sig {
            req = req.header("x-hub-signature-256", sig);
        }
        srv.send(req)
    };
    // Missing and wrong signatures: 401, nothing stored.
    let (s, e, _) = post(None, "evt_1", body).await;
    assert_eq!((s, error_of(&e).0.as_str()), (401, "bad_signature"), "{e}");
    let (s, _, _) = post(
        Some(format!("sha256={}", sign("other", body))),
        "evt_1",
        body,
    )
    .await;
    assert_eq!(s, 401);
    // Good: stored and fanned out to both targets.
    let good = Some(format!("sha256={}", sign("whsec", body)));
    let (s, r, _) = post(good.clone(), "evt_1", body).await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(
        (&r["duplicate"], &r["deliveries"]),
        (&json!(false), &json!(2))
    );
    // The same provider id again: one event, duplicate.
    let (s, dup, _) = post(good.clone(), "evt_1", body).await;
    assert_eq!(s, 200);
    assert_eq!(
        (&dup["duplicate"], &dup["event_id"]),
        (&json!(true), &r["event_id"])
    );
    let one = received(&seen, "/one", 1).await;
    received(&seen, "/two", 1).await;
    assert_eq!(one[0].1, body);
    assert_eq!(one[0].0["content-type"], "application/json");
    assert_eq!(one[0].0["x-event-id"], "evt_1");
    // A second event, then the listing in pages.
    let body2 = r#"{"id":"evt_2"}"#;
    let (s, r2, _) = post(Some(sign("whsec", body2)), "evt_2", body2).await;
    assert_eq!(s, 200, "{r2}");
    let (_, page, _) = srv
        .call(
            "GET",
            "/v1/webhook-endpoints/stripe-prod/events?limit=1",
            Some(&a),
            None,
        )
        .await;
    assert_eq!(page["events"][0]["id"], r["event_id"], "{page}");
    assert_eq!(page["events"][0]["body"], body);
    assert_eq!(page["events"][0]["headers"]["x-event-id"], "evt_1");
    let next = page["next"].as_i64().unwrap();
    let (_, page2, _) = srv
        .call(
            "GET",
            &format!("/v1/webhook-endpoints/stripe-prod/events?limit=1&after={next}"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(page2["events"][0]["id"], r2["event_id"]);
    // Replay one, then all since before the first.
    let (s, rp, _) = srv
        .call(
            "POST",
            &format!(
                "/v1/webhook-endpoints/stripe-prod/events/{}/replay",
                r["event_id"]
            ),
            Some(&a),
            None,
        )
        .await;
    assert_eq!((s, &rp["deliveries"]), (200, &json!(2)), "{rp}");
    received(&seen, "/one", 2).await;
    let since =
        pgferry_schedules::schedule::format_time(SystemTime::now() - Duration::from_secs(3600));
    let (s, all, _) = srv
        .call(
            "POST",
            "/v1/webhook-endpoints/stripe-prod/replay",
            Some(&a),
            Some(json!({"since": since})),
        )
        .await;
    assert_eq!(s, 200, "{all}");
    assert_eq!((&all["events"], &all["deliveries"]), (&json!(2), &json!(4)));
    // evt_1, evt_2, evt_1 replayed, then both replayed (in any order: delivered
    // concurrently).
    let ones = received(&seen, "/one", 5).await;
    let mut bodies: Vec<&str> = ones.iter().map(|o| o.1.as_str()).collect();
    bodies.sort();
    let mut want = [body, body, body, body2, body2];
    want.sort();
    assert_eq!(bodies, want);

    // Tenant B sees none of it; unknown slugs are 404 without a key too.
    let (s, _, _) = srv
        .call(
            "GET",
            "/v1/webhook-endpoints/stripe-prod/events",
            Some(&b),
            None,
        )
        .await;
    assert_eq!(s, 404);
    let (s, _, _) = srv
        .call(
            "POST",
            "/v1/webhook-endpoints/stripe-prod/replay",
            Some(&b),
            Some(json!({"since": since})),
        )
        .await;
    assert_eq!(s, 404);
    let (s, _, _) = srv.send(srv.raw("POST", "/in/nope").body("{}")).await;
    assert_eq!(s, 404);
    // Too large: 413.
    let big = "x".repeat(pgferry_monitors::webhooks::MAX_EVENT_BYTES + 1);
    let (s, _, _) = srv.send(srv.raw("POST", &a_path).body(big)).await;
    assert_eq!(s, 413);
    let metrics = srv
        .http
        .get(format!("{}/metrics", srv.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("pgferry_webhook_inbound_total{outcome=\"duplicate\"}"),
        "{metrics}"
    );
}

/// An HTTP destination that starts failing, then recovers: each change reaches the tenant's
/// notification target as an `http_job.failed` / `http_job.recovered` event (the HTTP-job
/// worker's transitions, wired to `notify` as `serve` does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_failing_and_recovering_notifies_the_tenant() {
    let (srv, _stop) = server().await;
    let (hook, seen) = target().await;
    let k = srv.key("tenant-flaky", &["admin"]).await;
    // The destination answers with whatever status is set.
    let status = Arc::new(std::sync::atomic::AtomicU16::new(200));
    let st = status.clone();
    let app = axum::Router::new().fallback(move || {
        let st = st.clone();
        async move {
            axum::http::StatusCode::from_u16(st.load(std::sync::atomic::Ordering::SeqCst)).unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dest = format!("http://{}/charge", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let (s, t, _) = srv
        .call(
            "POST",
            "/v1/notification-targets",
            Some(&k),
            Some(json!({"name": "ops", "url": format!("{hook}/alerts"), "events": ["http_job.*"]})),
        )
        .await;
    assert_eq!(s, 201, "{t}");
    for (code, want) in [(200, "completed"), (500, "dead"), (200, "completed")] {
        status.store(code, std::sync::atomic::Ordering::SeqCst);
        let (s, b, _) = srv
            .call(
                "POST",
                "/v1/jobs",
                Some(&k),
                Some(json!({"queue": "http", "kind": "http", "max_attempts": 1,
                            "args": {"url": dest, "group": "payments"}})),
            )
            .await;
        assert_eq!(s, 201, "{b}");
        let id = b["job_id"].as_i64().unwrap();
        let mut state = Value::Null;
        for _ in 0..600 {
            let (_, j, _) = srv
                .call("GET", &format!("/v1/jobs/{id}"), Some(&k), None)
                .await;
            state = j["state"].clone();
            if state == want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(state, want, "job {id} to {dest} answering {code}");
    }
    let got = received(&seen, "/alerts", 2).await;
    let events: Vec<(String, String)> = got
        .iter()
        .map(|(_, body)| {
            let e: Value = serde_json::from_str(body).unwrap();
            (
                e["kind"].as_str().unwrap().to_string(),
                e["subject"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            ("http_job.failed".to_string(), "payments".to_string()),
            ("http_job.recovered".to_string(), "payments".to_string())
        ]
    );
}
