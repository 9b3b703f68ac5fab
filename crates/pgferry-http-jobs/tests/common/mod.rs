//! Shared by the tests: the https target (tls, ca_bundle), and a migrated engine, a
//! loopback target, the ticker loop and the HTTP-job service (worker, pipeline, rescued).
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use pgferry_core::{migrate, Engine, EngineConfig, JobState};
use pgferry_http_jobs::ssrf::Range;
use pgferry_http_jobs::worker::WorkerConfig;
use pgferry_http_jobs::{Allow, ExecutorConfig};
use pgferry_testkit::TestDb;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A loopback HTTPS server with a self-signed certificate for `localhost`; answers every
/// request `200 tls-ok`. Returns its port and the certificate (PEM).
pub async fn tls_target() -> (u16, String) {
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

/// A fresh database with the engine's and the HTTP jobs' schemas, and an engine on it.
pub async fn migrated() -> (TestDb, Arc<Engine>) {
    let db = pgferry_testkit::test_db().await;
    let mut client = db.connect().await;
    migrate::up_components(
        &mut client,
        &[migrate::ENGINE, pgferry_http_jobs::migrate::COMPONENT],
    )
    .await
    .unwrap();
    let engine = Engine::new(db.pool(8), EngineConfig::default());
    (db, engine)
}

/// Serves `app` on a loopback port; returns its base URL.
pub async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

/// The leader's ticker as a test-sized loop (every 20 ms) until `stop`: claims see what
/// ticks published.
pub fn ticker(db: &TestDb, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    let db = db.clone();
    tokio::spawn(async move {
        let c = db.connect().await;
        loop {
            pgferry_core::leader::ticker::tick(&c).await.unwrap();
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    })
}

/// The HTTP-job service with loopback allowed, until `stop`.
pub fn service(
    engine: &Arc<Engine>,
    config: WorkerConfig,
    stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(pgferry_http_jobs::service::run(
        engine.clone(),
        ExecutorConfig {
            allow: Allow::of(&[Range::Loopback]),
            ..Default::default()
        },
        config,
        stop,
    ))
}

/// Waits (at most a minute) until every job of `ids` is completed.
pub async fn until_completed(engine: &Engine, ids: &[i64]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut done = 0;
        for id in ids {
            if engine.get_job(*id).await.unwrap().state == JobState::Completed {
                done += 1;
            }
        }
        if done == ids.len() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{done} of {} completed",
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
