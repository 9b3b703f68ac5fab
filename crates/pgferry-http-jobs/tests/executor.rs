//! The executor against a real target HTTP server on loopback (allowed explicitly: the
//! default guard refuses loopback).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use pgferry_http_jobs::ssrf::Range;
use pgferry_http_jobs::{Allow, Attempt, Executor, ExecutorConfig, HttpRequest};

#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    signed: Mutex<Vec<(String, String)>>,
}

/// The target: a few behaviours, and a count of accepted connections.
async fn target() -> (String, Arc<Seen>) {
    use axum::serve::ListenerExt;
    let seen = Arc::new(Seen::default());
    let s2 = seen.clone();
    let app = Router::new()
        .route("/ok", get(|| async { "hello from target" }))
        .route("/big", get(|| async { "x".repeat(100_000) }))
        .route(
            "/busy",
            get(|| async {
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", "3")],
                    "slow down",
                )
            }),
        )
        .route(
            "/to-metadata",
            get(|| async {
                (
                    StatusCode::FOUND,
                    [("location", "http://169.254.169.254/latest/meta-data/")],
                )
            }),
        )
        .route(
            "/to-ok",
            get(|| async { (StatusCode::FOUND, [("location", "/ok")]) }),
        )
        .route(
            "/signed",
            post(move |headers: HeaderMap, body: String| {
                let seen = s2.clone();
                async move {
                    let sig = headers
                        .get("pgferry-signature")
                        .map(|v| v.to_str().unwrap().to_string())
                        .unwrap_or_default();
                    seen.signed.lock().unwrap().push((sig, body));
                    StatusCode::NO_CONTENT
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counter = seen.clone();
    let listener = listener.tap_io(move |_| {
        counter.connections.fetch_add(1, Ordering::SeqCst);
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

fn loopback() -> ExecutorConfig {
    ExecutorConfig {
        allow: Allow::of(&[Range::Loopback]),
        ..Default::default()
    }
}

fn req(url: String) -> HttpRequest {
    HttpRequest {
        method: "GET".into(),
        url,
        headers: BTreeMap::new(),
        body: None,
        timeout_ms: 5_000,
        expect_status: vec![],
        expect_body: None,
        callback_url: None,
        group: None,
    }
}

#[tokio::test]
async fn success_expectations_and_a_bounded_body() {
    let (base, seen) = target().await;
    let ex = Executor::new(ExecutorConfig {
        max_body: 1000,
        ..loopback()
    })
    .unwrap();
    let mut r = req(format!("{base}/ok"));
    r.expect_body = Some("from target".into());
    let Attempt::Succeeded(resp) = ex.run(&r).await else {
        panic!("expected success")
    };
    assert_eq!(
        (resp.status, resp.body.as_str()),
        (200, "hello from target")
    );
    assert!(resp.headers.iter().any(|(k, _)| k == "content-type"));

    r.expect_body = Some("something else".into());
    assert!(matches!(
        ex.run(&r).await,
        Attempt::Failed { refused: false, .. }
    ));
    r.expect_body = None;
    r.expect_status = vec![201];
    let Attempt::Failed {
        error, response, ..
    } = ex.run(&r).await
    else {
        panic!("201 expected, 200 came")
    };
    assert!(error.contains("200"), "{error}");
    assert_eq!(response.unwrap().status, 200);

    let Attempt::Succeeded(big) = ex.run(&req(format!("{base}/big"))).await else {
        panic!()
    };
    assert_eq!((big.body.len(), big.truncated), (1000, true));

    // Redirects are followed within allowed ranges.
    let Attempt::Succeeded(via) = ex.run(&req(format!("{base}/to-ok"))).await else {
        panic!()
    };
    assert_eq!(via.body, "hello from target");

    // Keep-alive: many sequential requests, few connections (the truncated body's
    // connection is not reused).
    let before = seen.connections.load(Ordering::SeqCst);
    for _ in 0..20 {
        assert!(matches!(
            ex.run(&req(format!("{base}/ok"))).await,
            Attempt::Succeeded(_)
        ));
    }
    let opened = seen.connections.load(Ordering::SeqCst) - before;
    assert!(opened <= 1, "{opened} connections for 20 requests");
}

#[tokio::test]
async fn retry_after_is_read_on_429() {
    let (base, _) = target().await;
    let ex = Executor::new(loopback()).unwrap();
    let Attempt::Failed {
        retry_after,
        response,
        ..
    } = ex.run(&req(format!("{base}/busy"))).await
    else {
        panic!()
    };
    assert_eq!(retry_after, Some(Duration::from_secs(3)));
    assert_eq!(response.unwrap().body, "slow down");
}

#[tokio::test]
async fn the_guard_refuses_loopback_by_address_and_by_name_and_redirects_into_metadata() {
    let (base, seen) = target().await;
    let strict = Executor::new(ExecutorConfig::default()).unwrap();
    let port = base.rsplit(':').next().unwrap();
    for url in [
        format!("{base}/ok"),
        format!("http://localhost:{port}/ok"),
        format!("http://2130706433:{port}/ok"),
        format!("http://[::ffff:127.0.0.1]:{port}/ok"),
    ] {
        match strict.run(&req(url.clone())).await {
            Attempt::Failed {
                refused: true,
                error,
                ..
            } => {
                assert!(error.contains("loopback"), "{url}: {error}")
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    assert_eq!(
        seen.connections.load(Ordering::SeqCst),
        0,
        "nothing reached the target"
    );

    let ex = Executor::new(loopback()).unwrap();
    match ex.run(&req(format!("{base}/to-metadata"))).await {
        Attempt::Failed { error, .. } => assert!(error.contains("link_local"), "{error}"),
        other => panic!("{other:?}"),
    }
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

#[tokio::test]
async fn signatures_verify_with_either_active_secret() {
    let (base, seen) = target().await;
    let ex = Executor::new(ExecutorConfig {
        secrets: vec![b"new-secret".to_vec(), b"old-secret".to_vec()],
        ..loopback()
    })
    .unwrap();
    let mut r = req(format!("{base}/signed"));
    r.method = "POST".into();
    r.body = Some(r#"{"order": 42}"#.into());
    assert!(matches!(ex.run(&r).await, Attempt::Succeeded(_)));
    let (header, body) = seen.signed.lock().unwrap()[0].clone();
    assert_eq!(body, r#"{"order": 42}"#);
    let parts: Vec<&str> = header.split(',').collect();
    let t = parts[0].strip_prefix("t=").expect("timestamp first");
    let sigs: Vec<&str> = parts[1..]
        .iter()
        .map(|p| p.strip_prefix("v1=").unwrap())
        .collect();
    let message = format!("{t}.{body}");
    assert_eq!(
        sigs,
        [
            python_hmac("new-secret", &message),
            python_hmac("old-secret", &message)
        ]
    );
    // And our receiver-side check agrees, and refuses a tampered body or a stale time.
    let now: i64 = t.parse().unwrap();
    use pgferry_http_jobs::sign::verify;
    assert!(verify(&header, b"old-secret", body.as_bytes(), now, 300));
    assert!(!verify(
        &header,
        b"old-secret",
        b"{\"order\": 43}",
        now,
        300
    ));
    assert!(!verify(&header, b"other", body.as_bytes(), now, 300));
    assert!(!verify(
        &header,
        b"new-secret",
        body.as_bytes(),
        now + 301,
        300
    ));
}
