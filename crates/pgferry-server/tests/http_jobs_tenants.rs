//! HTTP jobs per tenant, end to end: the API sets a tenant's signing secrets, allow list
//! and rates; the server's HTTP job service (the one `pgferry serve` runs) executes the
//! jobs against a loopback target; signatures are checked by Python's hmac; callbacks,
//! destination transitions (table and a real sink) and rates are observed at the target.

mod http_common;

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::routing::any;
use axum::Router;
use futures_util::future::BoxFuture;
use http_common::{error_of, TestServer};
use pgferry_http_jobs::transitions::{Transition, TransitionSink};
use pgferry_server::ServerConfig;
use serde_json::{json, Value};
use tokio::sync::watch;

/// One request the target received.
#[derive(Debug, Clone)]
struct Hit {
    path: String,
    signature: Option<String>,
    body: String,
    at: Instant,
}

#[derive(Clone)]
struct Target {
    hits: Arc<Mutex<Vec<Hit>>>,
    /// The status `/flaky` answers.
    flaky: Arc<AtomicU16>,
}

impl Target {
    async fn start() -> (String, Target) {
        let t = Target {
            hits: Arc::default(),
            flaky: Arc::new(AtomicU16::new(200)),
        };
        let app = Router::new().fallback(any(record)).with_state(t.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (base, t)
    }

    fn hits(&self, path: &str) -> Vec<Hit> {
        let h = self.hits.lock().unwrap();
        h.iter().filter(|h| h.path == path).cloned().collect()
    }

    /// Waits until `path` got at least `n` requests (the service runs on its own).
    async fn wait(&self, path: &str, n: usize) -> Vec<Hit> {
        for _ in 0..600 {
            let h = self.hits(path);
            if h.len() >= n {
                return h;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{path}: fewer than {n} requests: {:?}", self.hits(path));
    }
}

async fn record(
    State(t): State<Target>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let path = uri.path().to_string();
    t.hits.lock().unwrap().push(Hit {
        path: path.clone(),
        signature: headers
            .get("pgferry-signature")
            .map(|v| v.to_str().unwrap().to_string()),
        body: String::from_utf8_lossy(&body).into_owned(),
        at: Instant::now(),
    });
    let status = match path.as_str() {
        "/fail" => 500,
        "/flaky" => t.flaky.load(Ordering::SeqCst),
        _ => 200,
    };
    (StatusCode::from_u16(status).unwrap(), "fine".into())
}

/// The server's HTTP job service on the test server's database, with `sink`.
fn service(srv: &TestServer, sink: Arc<dyn TransitionSink>) -> watch::Sender<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(pgferry_http_jobs::service::run_with_sink(
        srv.state.engine.clone(),
        pgferry_http_jobs::ExecutorConfig::default(),
        pgferry_http_jobs::worker::WorkerConfig::default(),
        sink,
        rx,
    ));
    tx
}

async fn allow_loopback(srv: &TestServer, key: &str) {
    let (s, b, _) = srv
        .call(
            "PUT",
            "/v1/http-jobs/allow",
            Some(key),
            Some(json!({"ranges": ["loopback"]})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
}

async fn http_job(srv: &TestServer, key: &str, args: Value) -> i64 {
    let (s, b, _) = srv
        .call(
            "POST",
            "/v1/jobs",
            Some(key),
            Some(json!({"queue": "http", "kind": "http", "args": args, "max_attempts": 1})),
        )
        .await;
    assert_eq!(s, 201, "{args}: {b}");
    b["job_id"].as_i64().unwrap()
}

async fn wait_state(srv: &TestServer, key: &str, id: i64, state: &str) -> Value {
    for _ in 0..600 {
        let (s, b, _) = srv
            .call("GET", &format!("/v1/jobs/{id}"), Some(key), None)
            .await;
        assert_eq!(s, 200, "{b}");
        if b["state"] == state {
            return b;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("job {id} never reached {state}");
}

/// HMAC-SHA256 by Python's standard library: an implementation independent of ours.
fn python_hmac(secret: &str, message: &str) -> String {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import hmac,hashlib,sys; print(hmac.new(sys.argv[1].encode(), sys.argv[2].encode(), hashlib.sha256).hexdigest())",
            secret,
            message,
        ])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The `v1` signatures of a header, each checked against Python's HMAC of `t.body` with
/// one of `secrets` (in order).
fn assert_signed_by(hit: &Hit, secrets: &[&str]) {
    let header = hit.signature.as_deref().expect("signed");
    let parts: Vec<&str> = header.split(',').collect();
    let t = parts[0].strip_prefix("t=").expect("timestamp first");
    let sigs: Vec<String> = parts[1..]
        .iter()
        .map(|p| p.strip_prefix("v1=").unwrap().to_string())
        .collect();
    let message = format!("{t}.{}", hit.body);
    let want: Vec<String> = secrets.iter().map(|s| python_hmac(s, &message)).collect();
    assert_eq!(sigs, want, "{header}");
}

async fn audit_actions(srv: &TestServer) -> Vec<String> {
    let c = srv.db.connect().await;
    c.query(
        "SELECT action FROM pgferry.audit_log WHERE action LIKE 'http_jobs.%' ORDER BY audit_id",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get("action"))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_secrets_rotate_without_downtime() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let k = srv.key("signer", &["admin"]).await;
    let (base, target) = Target::start().await;
    let _stop = service(&srv, Arc::new(pgferry_http_jobs::NoSink));
    allow_loopback(&srv, &k).await;

    // No secret: unsigned.
    http_job(&srv, &k, json!({"url": format!("{base}/a")})).await;
    assert_eq!(target.wait("/a", 1).await[0].signature, None);

    let (s, first, _) = srv
        .call("POST", "/v1/http-jobs/secrets", Some(&k), Some(json!({})))
        .await;
    assert_eq!(s, 201, "{first}");
    let s1 = first["secret"].as_str().unwrap().to_string();
    // Listed without the secret itself.
    let (_, list, _) = srv
        .call("GET", "/v1/http-jobs/secrets", Some(&k), None)
        .await;
    assert_eq!(list["secrets"].as_array().unwrap().len(), 1);
    assert!(!list.to_string().contains(&s1), "{list}");
    assert_eq!(list["secrets"][0]["prefix"].as_str().unwrap(), &s1[..10]);

    let body = r#"{"order": 42}"#;
    http_job(
        &srv,
        &k,
        json!({"url": format!("{base}/b"), "method": "POST", "body": body}),
    )
    .await;
    let hit = &target.wait("/b", 1).await[0];
    assert_eq!(hit.body, body);
    assert_signed_by(hit, &[&s1]);

    // Rotation: both sign (newest first) until the old one is deleted.
    let (s, second, _) = srv
        .call("POST", "/v1/http-jobs/secrets/rotate", Some(&k), None)
        .await;
    assert_eq!(s, 201, "{second}");
    let s2 = second["secret"].as_str().unwrap().to_string();
    assert_ne!(s1, s2);
    http_job(
        &srv,
        &k,
        json!({"url": format!("{base}/c"), "method": "POST", "body": body}),
    )
    .await;
    assert_signed_by(&target.wait("/c", 1).await[0], &[&s2, &s1]);

    // A third active secret is refused; deleting the first leaves the second alone.
    let (s, e, _) = srv
        .call("POST", "/v1/http-jobs/secrets", Some(&k), None)
        .await;
    assert_eq!((s, error_of(&e).0.as_str()), (409, "conflict"), "{e}");
    let id1 = first["id"].as_i64().unwrap();
    let (s, _, _) = srv
        .call(
            "DELETE",
            &format!("/v1/http-jobs/secrets/{id1}"),
            Some(&k),
            None,
        )
        .await;
    assert_eq!(s, 204);
    let (s, _, _) = srv
        .call(
            "DELETE",
            &format!("/v1/http-jobs/secrets/{id1}"),
            Some(&k),
            None,
        )
        .await;
    assert_eq!(s, 404);
    http_job(
        &srv,
        &k,
        json!({"url": format!("{base}/d"), "method": "POST", "body": body}),
    )
    .await;
    assert_signed_by(&target.wait("/d", 1).await[0], &[&s2]);

    // Another tenant's requests are not signed with these secrets; its list is empty.
    let other = srv.key("unsigned", &["admin"]).await;
    let (_, list, _) = srv
        .call("GET", "/v1/http-jobs/secrets", Some(&other), None)
        .await;
    assert_eq!(list["secrets"], json!([]));
    let (s, _, _) = srv
        .call(
            "DELETE",
            &format!("/v1/http-jobs/secrets/{}", second["id"]),
            Some(&other),
            None,
        )
        .await;
    assert_eq!(s, 404);
    // Only admins see or change secrets.
    let reader = srv.key("signer", &["read"]).await;
    let (s, _, _) = srv
        .call("GET", "/v1/http-jobs/secrets", Some(&reader), None)
        .await;
    assert_eq!(s, 403);

    assert_eq!(
        audit_actions(&srv).await,
        [
            "http_jobs.allow.set",
            "http_jobs.secret.create",
            "http_jobs.secret.rotate",
            "http_jobs.secret.delete"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_allow_list_is_its_own() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let a = srv.key("allowed", &["admin"]).await;
    let b = srv.key("not-allowed", &["admin"]).await;
    let (base, target) = Target::start().await;
    let _stop = service(&srv, Arc::new(pgferry_http_jobs::NoSink));

    // Bad lists name the field.
    for (body, field) in [
        (json!({"ranges": ["everything"]}), "ranges"),
        (json!({"cidrs": ["127.0.0.1/40"]}), "cidrs"),
        (json!({"cidrs": ["10.0.0.1/8"]}), "cidrs"),
        (json!({"ranges": "loopback"}), "ranges"),
        (json!({"range": []}), "range"),
    ] {
        let (s, e, _) = srv
            .call("PUT", "/v1/http-jobs/allow", Some(&a), Some(body.clone()))
            .await;
        assert_eq!(
            (s, error_of(&e).1.as_deref()),
            (400, Some(field)),
            "{body}: {e}"
        );
    }
    // A allows loopback by CIDR; B allows nothing.
    let (s, got, _) = srv
        .call(
            "PUT",
            "/v1/http-jobs/allow",
            Some(&a),
            Some(json!({"cidrs": ["127.0.0.0/8"]})),
        )
        .await;
    assert_eq!(
        (s, &got),
        (200, &json!({"ranges": [], "cidrs": ["127.0.0.0/8"]}))
    );
    let (_, got, _) = srv.call("GET", "/v1/http-jobs/allow", Some(&b), None).await;
    assert_eq!(got, json!({"ranges": [], "cidrs": []}));

    // At creation: A's job is accepted, B's is a 400 naming the URL, as is A's callback
    // to a range neither allows.
    let ok = http_job(&srv, &a, json!({"url": format!("{base}/a")})).await;
    let (s, e, _) = srv
        .call(
            "POST",
            "/v1/jobs",
            Some(&b),
            Some(json!({"queue": "http", "kind": "http", "args": {"url": format!("{base}/b")}})),
        )
        .await;
    assert_eq!(
        (s, error_of(&e).1.as_deref()),
        (400, Some("args.url")),
        "{e}"
    );
    let (s, e, _) = srv
        .call("POST", "/v1/jobs", Some(&a), Some(json!({"queue": "http", "kind": "http", "args": {"url": format!("{base}/a"), "callback_url": "http://10.0.0.1/cb"}})))
        .await;
    assert_eq!(
        (s, error_of(&e).1.as_deref()),
        (400, Some("args.callback_url")),
        "{e}"
    );
    // Schedules are checked the same way.
    let (s, e, _) = srv
        .call("POST", "/v1/schedules", Some(&b), Some(json!({"name": "s", "cron": "@hourly", "target": {"type": "job", "queue": "http", "kind": "http", "args": {"url": format!("{base}/b")}}})))
        .await;
    assert_eq!(
        (s, error_of(&e).1.as_deref()),
        (400, Some("target.args.url")),
        "{e}"
    );
    let (s, e, _) = srv
        .call("POST", "/v1/schedules", Some(&a), Some(json!({"name": "s", "cron": "@hourly", "target": {"type": "job", "queue": "http", "kind": "http", "args": {"url": format!("{base}/a")}}})))
        .await;
    assert_eq!(s, 201, "{e}");

    // Before each attempt: a job of B's that got past creation (written straight to the
    // engine) is refused by the worker, while A's reach the target.
    let queue_b = {
        let c = srv.db.connect().await;
        let id: i64 = c
            .query_one(
                "SELECT tenant_id FROM pgferry.tenants WHERE name = 'not-allowed'",
                &[],
            )
            .await
            .unwrap()
            .get("tenant_id");
        format!("t{id}.http")
    };
    let smuggled = srv
        .state
        .engine
        .enqueue(&[pgferry_core::NewJob::new(
            queue_b,
            "http",
            json!({"url": format!("{base}/b")}),
        )])
        .await
        .unwrap()[0];
    wait_state(&srv, &a, ok, "completed").await;
    let dead = wait_state(&srv, &b, smuggled, "dead").await;
    assert!(dead.to_string().contains("loopback"), "{dead}");
    assert_eq!(target.hits("/a").len(), 1);
    assert!(target.hits("/b").is_empty(), "B reached loopback");

    // Removing A's list: A's next jobs are refused at creation too (2 s cache at most).
    let (s, _, _) = srv
        .call("DELETE", "/v1/http-jobs/allow", Some(&a), None)
        .await;
    assert_eq!(s, 204);
    let (s, _, _) = srv
        .call("DELETE", "/v1/http-jobs/allow", Some(&a), None)
        .await;
    assert_eq!(s, 404);
    let (s, e, _) = srv
        .call(
            "POST",
            "/v1/jobs",
            Some(&a),
            Some(json!({"queue": "http", "kind": "http", "args": {"url": format!("{base}/a")}})),
        )
        .await;
    assert_eq!(
        (s, error_of(&e).1.as_deref()),
        (400, Some("args.url")),
        "{e}"
    );
    assert_eq!(
        audit_actions(&srv).await,
        ["http_jobs.allow.set", "http_jobs.allow.delete"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_callbacks_carry_the_outcome_signed() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let k = srv.key("caller", &["admin"]).await;
    let (base, target) = Target::start().await;
    let _stop = service(&srv, Arc::new(pgferry_http_jobs::NoSink));
    allow_loopback(&srv, &k).await;
    let (_, secret, _) = srv
        .call("POST", "/v1/http-jobs/secrets", Some(&k), None)
        .await;
    let secret = secret["secret"].as_str().unwrap().to_string();

    let ok = http_job(
        &srv,
        &k,
        json!({"url": format!("{base}/ok"), "callback_url": format!("{base}/cb-ok")}),
    )
    .await;
    let bad = http_job(
        &srv,
        &k,
        json!({"url": format!("{base}/fail"), "callback_url": format!("{base}/cb-fail")}),
    )
    .await;
    let hit = &target.wait("/cb-ok", 1).await[0];
    assert_signed_by(hit, &[&secret]);
    let got: Value = serde_json::from_str(&hit.body).unwrap();
    assert_eq!(
        (
            &got["job_id"],
            &got["status"],
            &got["attempts"],
            &got["response_status"],
            &got["error"]
        ),
        (
            &json!(ok),
            &json!("succeeded"),
            &json!(1),
            &json!(200),
            &Value::Null
        ),
        "{got}"
    );
    let hit = &target.wait("/cb-fail", 1).await[0];
    let got: Value = serde_json::from_str(&hit.body).unwrap();
    assert_eq!(
        (&got["job_id"], &got["status"], &got["response_status"]),
        (&json!(bad), &json!("failed"), &json!(500)),
        "{got}"
    );
    assert!(got["error"].as_str().unwrap().contains("500"), "{got}");
    // The callback is a job of its own on the tenant's http queue, completed.
    let (_, page, _) = srv
        .call("GET", "/v1/jobs?queue=http&limit=10", Some(&k), None)
        .await;
    let callbacks = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| {
            j["args"]["url"]
                .as_str()
                .is_some_and(|u| u.contains("/cb-"))
        })
        .count();
    assert_eq!(callbacks, 2, "{page}");
    // Exactly one callback per job.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(target.hits("/cb-ok").len(), 1);
    assert_eq!(target.hits("/cb-fail").len(), 1);
}

/// A sink posting each transition to a URL, as a notification target would.
struct PostSink {
    url: String,
    http: reqwest::Client,
}

impl TransitionSink for PostSink {
    fn transition(&self, t: Transition) -> BoxFuture<'static, ()> {
        let req = self.http.post(self.url.clone()).json(&t);
        Box::pin(async move {
            req.send().await.expect("sink target");
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_and_recovery_are_recorded_once_each_and_sent_to_the_sink() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let k = srv.key("watcher", &["admin"]).await;
    let (base, target) = Target::start().await;
    let (sink_base, sink_target) = Target::start().await;
    let sink = PostSink {
        url: format!("{sink_base}/notify"),
        http: reqwest::Client::builder().no_proxy().build().unwrap(),
    };
    let _stop = service(&srv, Arc::new(sink));
    allow_loopback(&srv, &k).await;

    // ok, fail, fail, ok, ok against one group: one failure, one recovery.
    let mut ids = Vec::new();
    for status in [200, 500, 500, 200, 200] {
        target.flaky.store(status, Ordering::SeqCst);
        let id = http_job(
            &srv,
            &k,
            json!({"url": format!("{base}/flaky"), "group": "billing"}),
        )
        .await;
        wait_state(
            &srv,
            &k,
            id,
            if status == 200 { "completed" } else { "dead" },
        )
        .await;
        ids.push(id);
    }
    let (s, page, _) = srv
        .call("GET", "/v1/http-jobs/transitions", Some(&k), None)
        .await;
    assert_eq!(s, 200, "{page}");
    let got: Vec<(String, String, i64, Value)> = page["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["destination"].as_str().unwrap().to_string(),
                t["kind"].as_str().unwrap().to_string(),
                t["job_id"].as_i64().unwrap(),
                t["status"].clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "billing".to_string(),
                "recovery".to_string(),
                ids[3],
                json!(200)
            ),
            (
                "billing".to_string(),
                "failure".to_string(),
                ids[1],
                json!(500)
            ),
        ]
    );
    let notes = sink_target.wait("/notify", 2).await;
    let kinds: Vec<String> = notes
        .iter()
        .map(|n| {
            serde_json::from_str::<Value>(&n.body).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(kinds, ["failure", "recovery"]);
    // Another tenant sees none of them.
    let other = srv.key("bystander", &["read"]).await;
    let (_, page, _) = srv
        .call("GET", "/v1/http-jobs/transitions", Some(&other), None)
        .await;
    assert_eq!(page["transitions"], json!([]));
    let (s, e, _) = srv
        .call("GET", "/v1/http-jobs/transitions?limit=0", Some(&k), None)
        .await;
    assert_eq!((s, error_of(&e).1.as_deref()), (400, Some("limit")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_rate_is_respected() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let k = srv.key("limited", &["admin"]).await;
    let (base, target) = Target::start().await;
    allow_loopback(&srv, &k).await;
    let host = base.strip_prefix("http://").unwrap().to_string();
    for (body, field) in [
        (json!({"destination": host, "per_sec": 0}), "per_sec"),
        (
            json!({"destination": host, "per_sec": 5, "burst": 0}),
            "burst",
        ),
        (json!({"destination": "", "per_sec": 5}), "destination"),
    ] {
        let (s, e, _) = srv
            .call("PUT", "/v1/http-jobs/rates", Some(&k), Some(body.clone()))
            .await;
        assert_eq!(
            (s, error_of(&e).1.as_deref()),
            (400, Some(field)),
            "{body}: {e}"
        );
    }
    let (s, b, _) = srv
        .call(
            "PUT",
            "/v1/http-jobs/rates",
            Some(&k),
            Some(json!({"destination": host, "per_sec": 5, "burst": 2})),
        )
        .await;
    assert_eq!(s, 200, "{b}");
    let (_, list, _) = srv.call("GET", "/v1/http-jobs/rates", Some(&k), None).await;
    assert_eq!(
        list["rates"],
        json!([{"destination": host, "per_sec": 5.0, "burst": 2}])
    );

    // 22 jobs queued before the service starts: one batch claims them all at once.
    let (s, b, _) = srv
        .call(
            "POST",
            "/v1/jobs/batch",
            Some(&k),
            Some(json!({"jobs": (0..22).map(|i| json!({"queue": "http", "kind": "http", "args": {"url": format!("{base}/r{i}")}})).collect::<Vec<_>>()})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    let _stop = service(&srv, Arc::new(pgferry_http_jobs::NoSink));
    for _ in 0..600 {
        if target.hits.lock().unwrap().len() >= 22 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut at: Vec<Instant> = target.hits.lock().unwrap().iter().map(|h| h.at).collect();
    assert_eq!(at.len(), 22);
    at.sort();
    // Burst 2, then one per 200 ms: any window of one second holds at most 5 + 2.
    for (i, t) in at.iter().enumerate() {
        let in_window = at[i..]
            .iter()
            .take_while(|u| **u < *t + Duration::from_secs(1))
            .count();
        assert!(
            in_window <= 7,
            "{in_window} requests within a second from #{i}"
        );
    }
    // And 22 requests at 5/s after a burst of 2 span at least 20 intervals of 200 ms
    // (minus timer slack).
    let span = *at.last().unwrap() - at[0];
    assert!(span >= Duration::from_millis(3_800), "{span:?}");
    let (s, _, _) = srv
        .call(
            "DELETE",
            &format!("/v1/http-jobs/rates?destination={host}"),
            Some(&k),
            None,
        )
        .await;
    assert_eq!(s, 204);
    let (_, list, _) = srv.call("GET", "/v1/http-jobs/rates", Some(&k), None).await;
    assert_eq!(list["rates"], json!([]));
}
