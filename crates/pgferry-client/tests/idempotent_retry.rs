//! Retry-safe producers (issue 17): an enqueue whose acknowledgement is lost (the server
//! committed, the client saw the connection drop) is retried with its idempotency key and
//! answered from it — the jobs exist once. The ambiguous failure is real: a proxy on
//! loopback forwards the request to the server and drops the connection before the answer.
//! Over HTTP the same with the `Idempotency-Key` header.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pgferry_client::{Error, JobSpec, Producer, RetryPolicy};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy to `upstream`. While `armed`, the next request a client sends is forwarded,
/// then nothing more comes back: after a pause (the server commits meanwhile) both sides
/// are closed. Disarms itself after one cut.
struct CuttingProxy {
    addr: SocketAddr,
    armed: Arc<AtomicBool>,
}

impl CuttingProxy {
    async fn start(upstream: SocketAddr) -> CuttingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let armed = Arc::new(AtomicBool::new(false));
        let a = armed.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(upstream).await.unwrap();
                tokio::spawn(pipe(client, server, a.clone()));
            }
        });
        CuttingProxy { addr, armed }
    }
}

async fn pipe(client: TcpStream, server: TcpStream, armed: Arc<AtomicBool>) {
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let cut = Arc::new(AtomicBool::new(false));
    let c = cut.clone();
    let back = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match sr.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if c.load(Ordering::SeqCst) {
                return; // the answer is swallowed
            }
            if cw.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match cr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // The request is hundreds of bytes; HTTP/2 housekeeping (window updates, pings,
        // settings acks) a few dozen: those pass.
        let cutting = n >= 200 && armed.swap(false, Ordering::SeqCst);
        if cutting {
            cut.store(true, Ordering::SeqCst);
        }
        if sw.write_all(&buf[..n]).await.is_err() {
            break;
        }
        if cutting {
            // Let the server read and commit the request, then drop both connections.
            tokio::time::sleep(Duration::from_millis(500)).await;
            break;
        }
    }
    back.abort();
}

fn jobs(n: usize) -> Vec<JobSpec> {
    (0..n)
        .map(|i| JobSpec::new("orders", "ship", &json!({ "i": i })))
        .collect()
}

async fn jobs_in_log(db: &pgferry_testkit::TestDb) -> i64 {
    let c = db.connect().await;
    c.query_one("SELECT count(*) FROM pgferry.ready", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_lost_acknowledgement_is_retried_without_duplicates() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = common::tenant_key(&db, "acme").await;
    let server = common::Server::start(&db, common::loopback(), Default::default()).await;
    let proxy = CuttingProxy::start(server.addr).await;
    let url = format!("http://{}", proxy.addr);

    // Without retries the failure is what a producer meets: the stream broke, and yet the
    // batch was committed (a "ghost commit").
    let bare = Producer::connect(&url, &key)
        .await
        .unwrap()
        .with_retry(RetryPolicy::none());
    proxy.armed.store(true, Ordering::SeqCst);
    let e = bare.enqueue_batch(jobs(10)).await.unwrap_err();
    assert!(matches!(e, Error::Disconnected), "{e}");
    assert_eq!(
        jobs_in_log(&db).await,
        10,
        "the lost answer's batch committed"
    );

    // With retries (the default) the same failure is invisible and writes nothing twice.
    let producer = Producer::connect(&url, &key).await.unwrap();
    proxy.armed.store(true, Ordering::SeqCst);
    let ack = producer
        .enqueue_batch_keyed("batch-42", jobs(25))
        .await
        .unwrap();
    assert!(ack.replayed, "the retry was answered from the key");
    assert_eq!(ack.ids.len(), 25);
    assert_eq!(jobs_in_log(&db).await, 35, "25 more, not 50");
    assert!(!proxy.armed.load(Ordering::SeqCst), "the proxy did cut");

    // The same key again (another process, say): the same ids, nothing written.
    let again = producer
        .enqueue_batch_keyed("batch-42", jobs(25))
        .await
        .unwrap();
    assert_eq!((again.ids, again.replayed), (ack.ids.clone(), true));
    // Reused for other jobs: a typed error naming the field.
    let e = producer
        .enqueue_batch_keyed("batch-42", jobs(3))
        .await
        .unwrap_err();
    match e {
        Error::Api { code, field, .. } => {
            assert_eq!(
                (code.as_str(), field.as_str()),
                ("invalid_argument", "idempotency_key")
            )
        }
        other => panic!("{other}"),
    }
    // Plain enqueue keeps working through the proxy (keys of its own, no replays).
    let id = producer
        .enqueue(JobSpec::new("orders", "ship", &json!({})))
        .await
        .unwrap();
    assert!(id > 0);
    assert_eq!(jobs_in_log(&db).await, 36);
    server.stop().await;
}

#[tokio::test]
async fn http_idempotency_key_replays_and_is_scoped_to_the_tenant() {
    let db = pgferry_testkit::test_db().await;
    let (_, key_a) = common::tenant_key(&db, "a").await;
    let (_, key_b) = common::tenant_key(&db, "b").await;
    let server = common::Server::start(&db, common::loopback(), Default::default()).await;
    let http = reqwest::Client::new();
    let post = |key: &str, idem: &str, body: Value| {
        http.post(format!("{}/v1/jobs/batch", server.http_url))
            .bearer_auth(key)
            .header("Idempotency-Key", idem)
            .json(&body)
            .send()
    };
    let body = json!({ "jobs": [ {"queue": "q", "kind": "k", "args": {"n": 1}},
                                 {"queue": "q", "kind": "k", "args": {"n": 2}} ] });
    let first = post(&key_a, "pay-1", body.clone()).await.unwrap();
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["replayed"], false);
    let again = post(&key_a, "pay-1", body.clone()).await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(
        (&again["job_ids"], &again["replayed"]),
        (&first["job_ids"], &json!(true))
    );
    // Another tenant's identical key is another request.
    let other = post(&key_b, "pay-1", body.clone()).await.unwrap();
    assert_eq!(other.status(), 201);
    // Single enqueue honours the header too.
    let one = json!({"queue": "q", "kind": "k", "args": {}});
    let s1 = http
        .post(format!("{}/v1/jobs", server.http_url))
        .bearer_auth(&key_a)
        .header("Idempotency-Key", "single-1")
        .json(&one)
        .send()
        .await
        .unwrap();
    assert_eq!(s1.status(), 201);
    let s2 = http
        .post(format!("{}/v1/jobs", server.http_url))
        .bearer_auth(&key_a)
        .header("Idempotency-Key", "single-1")
        .json(&one)
        .send()
        .await
        .unwrap();
    assert_eq!(s2.status(), 200);
    let (s1, s2): (Value, Value) = (s1.json().await.unwrap(), s2.json().await.unwrap());
    assert_eq!(s1["job_id"], s2["job_id"]);
    // Bad keys and reuse for other jobs: 4xx naming the header, nothing written.
    let bad = post(&key_a, "has space", body.clone()).await.unwrap();
    assert_eq!(bad.status(), 400);
    let bad: Value = bad.json().await.unwrap();
    assert_eq!(bad["error"]["field"], "Idempotency-Key", "{bad}");
    let reused = post(
        &key_a,
        "pay-1",
        json!({"jobs": [{"queue": "q", "kind": "k"}]}),
    )
    .await
    .unwrap();
    assert_eq!(reused.status(), 400);
    let reused: Value = reused.json().await.unwrap();
    assert_eq!(reused["error"]["field"], "idempotency_key", "{reused}");
    assert_eq!(jobs_in_log(&db).await, 2 + 2 + 1);
    server.stop().await;
}
