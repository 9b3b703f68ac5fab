//! `pgferry serve` with the HTTP-job and public-address flags, end to end: one server started
//! with `--http-jobs-allow loopback`, `--http-jobs-ca-bundle` (a self-signed certificate),
//! `--http-jobs-default-rate 2 --http-jobs-default-burst 1` and
//! `--public-rate-limit 0.01 --public-rate-burst 2`, and each flag's effect observed:
//! HTTPS jobs to a loopback TLS target that only the bundle makes trusted complete; the
//! target sees them no closer together than the default rate allows; a monitor's ping URL
//! answers 429 with `Retry-After` after its burst.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{http, pgferry, run, Proc};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A loopback HTTPS server with a self-signed certificate for `localhost` that answers every
/// request 200 and records when each arrived. Returns its port and the certificate (PEM).
async fn tls_target(arrivals: Arc<Mutex<Vec<Instant>>>) -> (u16, String) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let pem = cert.cert.pem();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert.der().clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, arrivals) = (acceptor.clone(), arrivals.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                arrivals.lock().unwrap().push(Instant::now());
                let _ = tls
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\ntls-ok",
                    )
                    .await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, pem)
}

fn cli(url: &str, args: &[&str]) -> Value {
    let mut c = pgferry();
    c.args(args).env("PGFERRY_DATABASE_URL", url);
    let p = run(c);
    assert!(p.status().success(), "{}", p.diag());
    serde_json::from_str(p.stdout().trim()).unwrap_or_else(|e| panic!("{e}\n{}", p.diag()))
}

async fn call(
    client: &reqwest::Client,
    base: &str,
    key: Option<&str>,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut r = client.request(method, format!("{base}{path}"));
    if let Some(k) = key {
        r = r.bearer_auth(k);
    }
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = r.send().await.unwrap();
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    let text = resp.text().await.unwrap();
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_flags_for_http_jobs_and_public_addresses_take_effect() {
    const JOBS: usize = 5;
    let db = pgferry_testkit::test_db().await;
    let url = db.url();
    cli(&url, &["migrate", "up"]);
    cli(&url, &["tenant", "create", "flags"]);
    let key = cli(
        &url,
        &[
            "key",
            "create",
            "--tenant",
            "flags",
            "--scopes",
            "admin,produce,read",
        ],
    )["key"]
        .as_str()
        .unwrap()
        .to_owned();

    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let (port, pem) = tls_target(arrivals.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("roots.pem");
    std::fs::write(&bundle, pem).unwrap();
    let mut cmd = pgferry();
    cmd.args(["serve", "--database-url", &url])
        .args(["--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"])
        .args(["--http-jobs-allow", "loopback"])
        .arg("--http-jobs-ca-bundle")
        .arg(&bundle)
        .args([
            "--http-jobs-default-rate",
            "2",
            "--http-jobs-default-burst",
            "1",
        ])
        .args(["--public-rate-limit", "0.01", "--public-rate-burst", "2"]);
    let mut server = Proc::spawn(cmd);
    let base = server.wait_listening();
    let client = http();

    // --http-jobs-ca-bundle: the target's certificate is trusted only through the bundle.
    // --http-jobs-default-rate 2, burst 1: the destination gets at most one request per
    // 500 ms, however many jobs are due at once.
    let mut ids = Vec::new();
    for i in 0..JOBS {
        let (s, _, v) = call(
            &client,
            &base,
            Some(&key),
            reqwest::Method::POST,
            "/v1/jobs",
            Some(json!({"queue": "http", "kind": "http", "max_attempts": 1,
                        "args": {"url": format!("https://localhost:{port}/{i}")}})),
        )
        .await;
        assert!((200..300).contains(&s), "{s} {v}");
        ids.push(v["job_id"].as_i64().unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    for id in &ids {
        loop {
            let (_, _, j) = call(
                &client,
                &base,
                Some(&key),
                reqwest::Method::GET,
                &format!("/v1/jobs/{id}"),
                None,
            )
            .await;
            match j["state"].as_str() {
                Some("completed") => {
                    assert_eq!(j["result"]["status"], 200, "{j}");
                    assert_eq!(j["result"]["body"], "tls-ok", "{j}");
                    break;
                }
                Some("dead") => panic!("job {id} died (was the bundle trusted?): {j}"),
                _ => {}
            }
            assert!(Instant::now() < deadline, "job {id} not completed: {j}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let times = arrivals.lock().unwrap().clone();
    assert_eq!(times.len(), JOBS, "each job sent once");
    // The limiter spaces turns 500 ms apart: 5 requests span at least 2 s at the sender.
    // Arrivals are taken after each TLS handshake, so one may shift; a 500 ms margin
    // covers it (without the flag all 5 go at once).
    let span = *times.iter().max().unwrap() - *times.iter().min().unwrap();
    assert!(
        span >= Duration::from_millis(1500),
        "{JOBS} requests within {span:?} at a default rate of 2/s"
    );

    // --public-rate-limit 0.01 --public-rate-burst 2: a ping URL takes two pings, then 429.
    let (s, _, m) = call(
        &client,
        &base,
        Some(&key),
        reqwest::Method::POST,
        "/v1/monitors",
        Some(json!({"name": "nightly", "period_ms": 60000})),
    )
    .await;
    assert_eq!(s, 201, "{m}");
    let ping = m["ping_path"].as_str().unwrap().to_owned();
    let mut answers = Vec::new();
    for _ in 0..3 {
        let (s, h, v) = call(&client, &base, None, reqwest::Method::POST, &ping, None).await;
        answers.push((
            s,
            h.get("retry-after").is_some(),
            v["error"]["code"].clone(),
        ));
    }
    assert_eq!(
        answers,
        [
            (200, false, Value::Null),
            (200, false, Value::Null),
            (429, true, json!("rate_limited"))
        ]
    );
    server.signal(libc::SIGTERM);
    let status = server.wait(common::STOP_TIMEOUT);
    assert!(status.success(), "{}", server.diag());
}
