//! A real pgferry server in-process on loopback, on a fresh test kit database, with a
//! leader (ticks, rescue) running — what `pgferry serve` runs, minus the CLI.

#![allow(dead_code)] // each test binary uses a different subset

use std::sync::Arc;
use std::time::Duration;

use pgferry_core::{db, Engine, EngineConfig, Leader, LeaderConfig};
use pgferry_server::auth::{admin, Scopes};
use pgferry_server::{AppState, ServerConfig};
use reqwest::header::HeaderMap;
use serde_json::Value;
use tokio::sync::{oneshot, watch};

/// The server's leader timings, with rescue passes every 200 ms so that tests of lapsed
/// leases are quick (the other duties as in production).
fn leader_config() -> LeaderConfig {
    LeaderConfig {
        rescue_interval: Duration::from_millis(200),
        claim_settle: Duration::from_millis(500),
        ..LeaderConfig::default()
    }
}

pub struct TestServer {
    pub base: String,
    pub db: pgferry_testkit::TestDb,
    pub state: AppState,
    pub http: reqwest::Client,
    stop_http: Option<oneshot::Sender<()>>,
    stop_leader: watch::Sender<bool>,
}

impl TestServer {
    pub async fn start(config: ServerConfig) -> TestServer {
        let db = pgferry_testkit::test_db().await;
        let mut client = db.connect().await;
        pgferry_server::migrate::up(&mut client)
            .await
            .expect("migrate");
        let engine = Engine::new(db::pool(&db.config, "api", 8), EngineConfig::default());
        let (stop_leader, stop_rx) = watch::channel(false);
        let leader = Leader::new(engine.clone(), db.config.clone(), leader_config());
        let rescues = leader.subscribe_rescues();
        tokio::spawn(leader.run(stop_rx));
        let state = AppState::new(Arc::clone(&engine), config)
            .await
            .expect("app state");
        tokio::spawn(pgferry_server::metrics::feed_rescues(
            state.clone(),
            rescues,
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop_http, rx) = oneshot::channel::<()>();
        let served = state.clone();
        tokio::spawn(async move {
            pgferry_server::serve_http(listener, served, async {
                let _ = rx.await;
            })
            .await
            .expect("serve");
        });
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        TestServer {
            base,
            db,
            state,
            http,
            stop_http: Some(stop_http),
            stop_leader,
        }
    }

    /// A new key of `tenant` (created when missing) with `scopes`.
    pub async fn key(&self, tenant: &str, scopes: &[&str]) -> String {
        let mut c = self.db.connect().await;
        if admin::tenant_id(&c, tenant).await.unwrap().is_none() {
            admin::create_tenant(&mut c, tenant).await.unwrap();
        }
        let scopes = Scopes::from_names(scopes.iter().copied()).unwrap();
        let (_, key) = admin::create_key(&mut c, tenant, scopes, None)
            .await
            .unwrap();
        key.expose()
    }

    pub async fn revoke(&self, key: &str) {
        let mut c = self.db.connect().await;
        admin::revoke_key(&mut c, key).await.unwrap();
    }

    /// One request; body JSON when given. Returns status, JSON body (Null if none) and headers.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value, HeaderMap) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        self.send(req).await
    }

    /// Sends a prepared request (raw bodies, odd headers).
    pub async fn send(&self, req: reqwest::RequestBuilder) -> (u16, Value, HeaderMap) {
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.expect("body");
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"))
        };
        (status, body, headers)
    }

    pub fn raw(&self, method: &str, path: &str) -> reqwest::RequestBuilder {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        self.http.request(method, format!("{}{path}", self.base))
    }

    /// Claims from `queue` until `n` jobs arrived in total (bounded by long-polls).
    pub async fn claim_n(&self, key: &str, queue: &str, n: usize) -> Vec<Value> {
        let mut got = Vec::new();
        for _ in 0..50 {
            if got.len() >= n {
                break;
            }
            let (s, b, _) = self
                .call(
                    "POST",
                    "/v1/workers/claim",
                    Some(key),
                    Some(serde_json::json!({ "queue": queue, "max": n - got.len(), "wait_ms": 2000 })),
                )
                .await;
            assert_eq!(s, 200, "{b}");
            got.extend(b["jobs"].as_array().unwrap().iter().cloned());
        }
        got
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop_http.take() {
            let _ = tx.send(());
        }
        let _ = self.stop_leader.send(true);
    }
}

/// Asserts the JSON error shape and returns (code, field).
pub fn error_of(body: &Value) -> (String, Option<String>) {
    let e = &body["error"];
    let code = e["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no error.code: {body}"));
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    (code.to_string(), e["field"].as_str().map(str::to_string))
}
