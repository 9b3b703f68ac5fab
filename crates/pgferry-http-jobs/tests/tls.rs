//! https destinations: the executor speaks TLS (rustls), verifies the certificate against
//! its roots, and still connects only to the address the guard checked.

use std::sync::Arc;

use pgferry_http_jobs::ssrf::Range;
use pgferry_http_jobs::{Allow, Attempt, Executor, ExecutorConfig, HttpRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A loopback HTTPS server with a self-signed certificate for `localhost`; answers every
/// request `200 tls-ok`. Returns its port and the certificate (PEM).
async fn tls_target() -> (u16, String) {
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
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A failed handshake (an untrusting client) just ends this connection.
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
