//! A real pgferry server (what `pgferry serve` runs: engine, leader, HTTP with the
//! dashboard mounted) on a fresh test-kit database, seeded through the public API, and a
//! real headless Chromium driven over WebDriver (Debian's `chromium` + `chromium-driver`,
//! installed by scripts/setup.sh).

#![allow(dead_code)] // each test binary uses a different subset

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use pgferry_core::{db, Engine, EngineConfig, Leader, LeaderConfig};
use pgferry_server::auth::{admin, Scopes};
use pgferry_server::{AppState, ServerConfig};
use serde_json::{json, Value};
use tokio::sync::{oneshot, watch};

pub struct TestServer {
    pub base: String,
    pub db: pgferry_testkit::TestDb,
    pub state: AppState,
    pub http: reqwest::Client,
    stop_http: Option<oneshot::Sender<()>>,
    stop_leader: watch::Sender<bool>,
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(ServerConfig::default()).await
    }

    /// A server with `config` (for example, HTTP jobs allowed to loopback).
    pub async fn start_with(config: ServerConfig) -> TestServer {
        let db = pgferry_testkit::test_db().await;
        let mut client = db.connect().await;
        pgferry_server::migrate::up(&mut client)
            .await
            .expect("migrate");
        let engine = Engine::new(db::pool(&db.config, "api", 8), EngineConfig::default());
        let (stop_leader, stop_rx) = watch::channel(false);
        let leader = Leader::new(
            engine.clone(),
            db.config.clone(),
            LeaderConfig {
                rescue_interval: Duration::from_millis(200),
                ..LeaderConfig::default()
            },
        );
        tokio::spawn(leader.run(stop_rx));
        let state = AppState::new(Arc::clone(&engine), config)
            .await
            .expect("app state");
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

    /// One `/v1` call as `key`; (status, JSON body).
    pub async fn api(
        &self,
        method: &str,
        path: &str,
        key: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(key);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = req.send().await.expect("request");
        let status = res.status().as_u16();
        let text = res.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn enqueue(&self, key: &str, queue: &str, kind: &str, args: Value) -> i64 {
        let (s, b) = self
            .api(
                "POST",
                "/v1/jobs",
                key,
                Some(json!({ "queue": queue, "kind": kind, "args": args, "max_attempts": 1 })),
            )
            .await;
        assert_eq!(s, 201, "{b}");
        b["job_id"].as_i64().unwrap()
    }

    /// Claims `n` jobs of `queue` (long-polls: a job becomes claimable at the next tick)
    /// and finishes each: failed (dead, since seeded jobs have one attempt) with
    /// `error(args)` when it returns Some, else completed.
    pub async fn work(
        &self,
        key: &str,
        queue: &str,
        n: usize,
        error: impl Fn(&Value) -> Option<String>,
    ) {
        let mut done = 0;
        for _ in 0..50 {
            if done >= n {
                return;
            }
            let (s, b) = self
                .api(
                    "POST",
                    "/v1/workers/claim",
                    key,
                    Some(json!({ "queue": queue, "max": n - done, "wait_ms": 2000, "worker": "test-worker" })),
                )
                .await;
            assert_eq!(s, 200, "{b}");
            let jobs = b["jobs"].as_array().unwrap().clone();
            if jobs.is_empty() {
                continue;
            }
            let results: Vec<Value> = jobs
                .iter()
                .map(|j| match error(&j["args"]) {
                    Some(msg) => json!({ "token": j["token"], "error": { "message": msg, "retryable": false } }),
                    None => json!({ "token": j["token"], "result": { "ok": true } }),
                })
                .collect();
            let (s, b) = self
                .api(
                    "POST",
                    "/v1/workers/complete",
                    key,
                    Some(json!({ "results": results })),
                )
                .await;
            assert_eq!(s, 200, "{b}");
            done += jobs.len();
        }
        panic!("only {done} of {n} jobs of {queue} could be claimed");
    }

    /// A worker completing every job of `queue` until the server stops (the "live" side of
    /// the tests: a retried job completes while the browser watches).
    pub fn spawn_worker(&self, key: &str, queue: &str) -> tokio::task::JoinHandle<()> {
        let (http, base, key, queue) = (
            self.http.clone(),
            self.base.clone(),
            key.to_string(),
            queue.to_string(),
        );
        tokio::spawn(async move {
            loop {
                let Ok(res) = http
                    .post(format!("{base}/v1/workers/claim"))
                    .bearer_auth(&key)
                    .json(&json!({ "queue": queue, "max": 100, "wait_ms": 1000, "worker": "live-worker" }))
                    .send()
                    .await
                else {
                    return;
                };
                let Ok(b) = res.json::<Value>().await else {
                    return;
                };
                let Some(jobs) = b["jobs"].as_array() else {
                    return;
                };
                if jobs.is_empty() {
                    continue;
                }
                let results: Vec<Value> = jobs
                    .iter()
                    .map(|j| json!({ "token": j["token"], "result": { "ok": true } }))
                    .collect();
                let _ = http
                    .post(format!("{base}/v1/workers/complete"))
                    .bearer_auth(&key)
                    .json(&json!({ "results": results }))
                    .send()
                    .await;
            }
        })
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

/// chromedriver on a free port in its own process group, which the browser it starts
/// joins: dropping the driver (also while a failed test unwinds, before the WebDriver
/// session could be closed) kills the whole group, so no Chromium outlives its test.
pub struct Driver {
    child: Child,
    pub url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The group id is chromedriver's pid (process_group(0) below).
        let group = self.child.id() as libc::pid_t;
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A headless Chromium session (1280×800). Panics, naming the fix, when Chromium or
/// chromedriver is missing: these tests are part of `make test`, never skipped.
/// The server's HTTP-job service (what `pgferry serve` runs beside the API) with `allow`,
/// running until [`HttpJobs::stop`].
pub struct HttpJobs {
    stop: watch::Sender<bool>,
    service: tokio::task::JoinHandle<()>,
}

impl HttpJobs {
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.service.await;
    }
}

impl TestServer {
    pub fn start_http_jobs(&self, allow: pgferry_http_jobs::Allow) -> HttpJobs {
        let (stop, stop_rx) = watch::channel(false);
        let service = tokio::spawn(pgferry_http_jobs::service::run(
            self.state.engine.clone(),
            pgferry_http_jobs::ExecutorConfig {
                allow,
                ..Default::default()
            },
            pgferry_http_jobs::worker::WorkerConfig::default(),
            stop_rx,
        ));
        HttpJobs { stop, service }
    }
}

pub async fn browser() -> (Driver, Client) {
    let port = free_port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("chromedriver not found ({e}): run scripts/setup.sh (apt: chromium chromium-driver)")
        });
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,800", "--force-device-scale-factor=1",
                     "--no-first-run", "--disable-extensions", "--disable-crash-reporter",
                     "--disable-breakpad"],
        }),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector)
            .capabilities(caps.clone())
            .connect(&driver.url)
            .await
        {
            Ok(c) => return (driver, c),
            // chromedriver is still starting.
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("could not start headless Chromium through chromedriver: {e}"),
        }
    }
}

/// Waits (up to 20 s) until the text of the first element matching `css` satisfies `ok`.
pub async fn wait_text(c: &Client, css: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = String::from("<no element>");
    while Instant::now() < deadline {
        if let Ok(el) = c.find(Locator::Css(css)).await {
            if let Ok(t) = el.text().await {
                if ok(&t) {
                    return t;
                }
                last = t;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {css:?}; last text: {last:?}")
}

/// Waits (up to 20 s) for an element matching `css`.
pub async fn wait_for(c: &Client, css: &str) -> fantoccini::elements::Element {
    c.wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no element {css:?}: {e}"))
}

/// Clicks `button` inside the first row of `rows` whose text contains `text`, again when
/// a live update replaced the row between finding and clicking it.
pub async fn click_in_row(c: &Client, rows: &str, text: &str, button: &str) {
    for _ in 0..50 {
        let Ok(found) = c.find_all(Locator::Css(rows)).await else {
            continue;
        };
        for row in found {
            let Ok(t) = row.text().await else { break };
            if t.contains(text) {
                if let Ok(b) = row.find(Locator::Css(button)).await {
                    if b.click().await.is_ok() {
                        return;
                    }
                }
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no clickable {button:?} in a row of {rows:?} containing {text:?}");
}

/// How many elements match `css` now.
pub async fn count(c: &Client, css: &str) -> usize {
    c.find_all(Locator::Css(css)).await.unwrap().len()
}

pub async fn sign_in(c: &Client, base: &str, key: &str) {
    c.goto(&format!("{base}/ui")).await.unwrap();
    let input = wait_for(c, "#api-key").await;
    input.send_keys(key).await.unwrap();
    c.find(Locator::Css("#signin-form button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for(c, "#nav a[data-page=overview]").await;
}

/// Ends the WebDriver session. Best effort: every assertion has run, and the driver
/// process is killed when dropped anyway.
pub async fn close(c: Client) {
    let _ = c.close().await;
}

pub async fn go(c: &Client, base: &str, hash: &str) {
    c.goto(&format!("{base}/ui#/{hash}")).await.unwrap();
}

/// Saves a screenshot of the window as `<name>.png` under $PGFERRY_SCREENSHOTS (the
/// committed docs/screenshots with `make screenshots`) or else the test's target dir.
pub async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let dir = std::env::var_os("PGFERRY_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("screenshots"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

/// Runs `fetch` in the page (same origin, the session cookie attached) and returns
/// `{status, body}`: a request the UI does not offer, forged by hand.
pub async fn page_fetch(c: &Client, method: &str, path: &str, csrf: bool, body: Value) -> Value {
    let script = r#"
        const [method, path, withCsrf, body, done] = arguments;
        (async () => {
          const s = await (await fetch('/ui/api/session')).json();
          const headers = { 'content-type': 'application/json' };
          if (withCsrf) headers['x-csrf-token'] = s.csrf_token;
          const r = await fetch(path, { method, headers, body: method === 'GET' ? undefined : JSON.stringify(body) });
          let b = null; try { b = await r.json(); } catch (e) {}
          done({ status: r.status, body: b });
        })();
    "#;
    c.execute_async(script, vec![json!(method), json!(path), json!(csrf), body])
        .await
        .expect("script")
}
