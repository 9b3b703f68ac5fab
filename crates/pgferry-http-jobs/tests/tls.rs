//! https destinations: the executor speaks TLS (rustls), verifies the certificate against
//! its roots, and still connects only to the address the guard checked.

mod common;

use common::tls_target;
use pgferry_http_jobs::ssrf::Range;
use pgferry_http_jobs::{Allow, Attempt, Executor, ExecutorConfig, HttpRequest};

fn get(url: String) -> HttpRequest {
    serde_json::from_value(serde_json::json!({ "url": url })).unwrap()
}

#[tokio::test]
async fn https_destinations_work_with_a_trusted_certificate() {
    let (port, pem) = tls_target().await;
    let url = format!("https://localhost:{port}/hook");
    let trusting = Executor::new(ExecutorConfig {
        allow: Allow::of(&[Range::Loopback]),
        root_certs_pem: vec![pem.clone().into_bytes()],
        ..Default::default()
    })
    .unwrap();
    match trusting.run(&get(url.clone())).await {
        Attempt::Succeeded(r) => assert_eq!((r.status, r.body.as_str()), (200, "tls-ok")),
        other => panic!("{other:?}"),
    }

    // Without the certificate among the roots: a failed attempt (retryable), not a refusal.
    let untrusting = Executor::new(ExecutorConfig {
        allow: Allow::of(&[Range::Loopback]),
        ..Default::default()
    })
    .unwrap();
    match untrusting.run(&get(url.clone())).await {
        Attempt::Failed { refused, error, .. } => {
            assert!(!refused, "{error}");
            assert!(error.to_lowercase().contains("certificate"), "{error}");
        }
        other => panic!("{other:?}"),
    }

    // The guard still decides where https goes: loopback not allowed, refused (with the
    // certificate trusted, so the refusal cannot come from certificate checks).
    let guarded = Executor::new(ExecutorConfig {
        root_certs_pem: vec![pem.into_bytes()],
        ..Default::default()
    })
    .unwrap();
    match guarded.run(&get(url)).await {
        Attempt::Failed { refused, error, .. } => {
            assert!(refused && error.contains("loopback"), "{error}")
        }
        other => panic!("{other:?}"),
    }
}
