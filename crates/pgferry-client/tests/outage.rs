//! A database outage under a running server: HTTP answers 503 with the JSON error shape,
//! gRPC answers UNAVAILABLE (Admin calls and stream acks), nothing hangs or panics; when
//! the database is back the same server, streams and keys work again.
//!
//! Runs its own Postgres (the testkit's cluster is shared by the other tests).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use pgferry_client::proto::v1 as pb;
use pgferry_pgcluster::{Cluster, ClusterOptions};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Code, Request};

/// Bounds every request: an answer after it would be a hang.
const PATIENCE: Duration = Duration::from_secs(30);

async fn start_cluster(opts: ClusterOptions) -> Cluster {
    tokio::task::spawn_blocking(move || Cluster::start(opts))
        .await
        .unwrap()
        .expect("postgres")
}

/// A private cluster (stopped and started again by the tests), a server on it and a key.
struct Setup {
    _dir: tempfile::TempDir,
    opts: ClusterOptions,
    cluster: Cluster,
    port: u16,
    server: common::Server,
    key: String,
    /// An HTTP client for the server's API.
    http: reqwest::Client,
}

async fn setup() -> Setup {
    let dir = tempfile::Builder::new()
        .prefix("pgferry-outage-")
        .tempdir_in("/tmp")
        .unwrap();
    // Postgres runs as its own user when the tests run as root: it must traverse this.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let opts = ClusterOptions {
        fsync: false,
        ..ClusterOptions::new(dir.path().join("pg"))
    };
    let cluster = start_cluster(opts.clone()).await;
    let port = cluster.port();
    let pg: tokio_postgres::Config = cluster.conn_string("postgres").parse().unwrap();
    let server = common::Server::start_on(
        &pg,
        common::loopback(),
        Default::default(),
        Default::default(),
    )
    .await;
    let key = {
        let mut c = pgferry_core::db::connect(&pg, "test").await.unwrap();
        pgferry_server::auth::admin::create_tenant(&mut c, "acme")
            .await
            .unwrap();
        let scopes = pgferry_server::auth::Scopes::all();
        let (_, key) = pgferry_server::auth::admin::create_key(&mut c, "acme", scopes, None)
            .await
            .unwrap();
        key.expose()
    };
    Setup {
        _dir: dir,
        opts,
        cluster,
        port,
        server,
        key,
        http: reqwest::Client::builder()
            .no_proxy()
            .timeout(PATIENCE)
            .build()
            .unwrap(),
    }
}

fn authed<T>(key: &str, msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    r
}

fn spec() -> pb::JobSpec {
    pb::JobSpec {
        queue: "q".into(),
        kind: "k".into(),
        ..Default::default()
    }
}

/// Enqueues one job on an open Producer stream and returns its ack.
async fn stream_enqueue(
    tx: &mpsc::UnboundedSender<pb::ProducerRequest>,
    acks: &mut tonic::Streaming<pb::ProducerResponse>,
) -> pb::EnqueueAck {
    tx.send(pb::ProducerRequest {
        msg: Some(pb::producer_request::Msg::Enqueue(pb::Enqueue {
            seq: 1,
            job: Some(spec()),
            ..Default::default()
        })),
    })
    .unwrap();
    match tokio::time::timeout(PATIENCE, acks.next())
        .await
        .expect("an answer in time")
    {
        Some(Ok(pb::ProducerResponse {
            msg: Some(pb::producer_response::Msg::Ack(a)),
        })) => a,
        other => panic!("expected an ack, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_answers_unavailable_and_the_server_recovers() {
    let Setup {
        _dir,
        opts,
        cluster,
        port,
        server,
        key,
        http,
    } = setup().await;
    let enqueue = || {
        http.post(format!("{}/v1/jobs", server.http_url))
            .bearer_auth(&key)
            .json(&json!({"queue": "q", "kind": "k"}))
            .send()
    };
    let resp = enqueue().await.unwrap();
    assert_eq!(resp.status(), 201);
    let id = resp.json::<Value>().await.unwrap()["job_id"]
        .as_i64()
        .unwrap();
    let resp = http
        .patch(format!("{}/v1/queues/q", server.http_url))
        .bearer_auth(&key)
        .json(&json!({"lease_ms": 3000}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    let mut admin = pb::admin_client::AdminClient::connect(server.url.clone())
        .await
        .unwrap();
    admin
        .get_job(authed(&key, pb::GetJobRequest { id }))
        .await
        .unwrap();
    // A producer stream opened while the database is up.
    let mut producer = pb::producer_client::ProducerClient::connect(server.url.clone())
        .await
        .unwrap();
    let (ptx, prx) = mpsc::unbounded_channel();
    ptx.send(pb::ProducerRequest {
        msg: Some(pb::producer_request::Msg::Hello(pb::Hello {
            api_key: key.clone(),
            client_name: "t".into(),
        })),
    })
    .unwrap();
    let mut acks = producer
        .stream(UnboundedReceiverStream::new(prx))
        .await
        .unwrap()
        .into_inner();
    // The first answer is the hello_ack; then the enqueue's ack.
    match tokio::time::timeout(PATIENCE, acks.next()).await.unwrap() {
        Some(Ok(pb::ProducerResponse {
            msg: Some(pb::producer_response::Msg::HelloAck(_)),
        })) => {}
        other => panic!("expected hello_ack, got {other:?}"),
    }
    let a = stream_enqueue(&ptx, &mut acks).await;
    assert!(a.error.is_none(), "{a:?}");

    // The database goes away.
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .unwrap()
        .expect("stop postgres");

    let resp = enqueue().await.expect("an answer, not a hang");
    assert_eq!(resp.status(), 503);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");
    let resp = http
        .get(format!("{}/v1/jobs/{id}", server.http_url))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"]["code"],
        "unavailable"
    );
    let resp = http
        .get(format!("{}/readyz", server.http_url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    let e = admin
        .get_job(authed(&key, pb::GetJobRequest { id }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    // A worker connecting now is not told a lease the server could not read (it would
    // pace its heartbeats by the default, 20× the queue's 3 s): it is refused, and retries.
    let mut workers = pb::worker_client::WorkerClient::connect(server.url.clone())
        .await
        .unwrap();
    let (wtx, wrx) = mpsc::unbounded_channel();
    wtx.send(pb::WorkerRequest {
        msg: Some(pb::worker_request::Msg::Hello(pb::WorkerHello {
            api_key: key.clone(),
            worker_id: "w".into(),
            queues: vec!["q".into()],
            ..Default::default()
        })),
    })
    .unwrap();
    let answer = match workers.stream(UnboundedReceiverStream::new(wrx)).await {
        Ok(stream) => tokio::time::timeout(PATIENCE, stream.into_inner().next())
            .await
            .expect("an answer, not a hang"),
        Err(st) => Some(Err(st)),
    };
    match answer {
        Some(Err(st)) => assert_eq!(st.code(), Code::Unavailable, "{st:?}"),
        other => panic!("expected UNAVAILABLE, got {other:?}"),
    }
    let a = stream_enqueue(&ptx, &mut acks).await;
    let err = a.error.expect("refused while the database is down");
    assert_eq!(err.code, "unavailable", "{err:?}");
    assert!(a.job_ids.is_empty());

    // Back on the same port: the same server, stream and key work again.
    let cluster = start_cluster(ClusterOptions {
        port: Some(port),
        ..opts
    })
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let resp = enqueue().await.unwrap();
        if resp.status() == 201 {
            break;
        }
        assert_eq!(resp.status(), 503, "only unavailable while recovering");
        assert!(tokio::time::Instant::now() < deadline, "did not recover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    admin
        .get_job(authed(&key, pb::GetJobRequest { id }))
        .await
        .expect("admin after recovery");
    let a = stream_enqueue(&ptx, &mut acks).await;
    assert!(a.error.is_none(), "{a:?}");
    assert_eq!(a.job_ids.len(), 1);
    drop(ptx);
    server.stop().await;
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .unwrap()
        .unwrap();
}

/// A worker's result that reaches the server while its database is down is refused as
/// `unavailable` (not recorded, so not acknowledged). The worker sends it again until the
/// database is back and then it is recorded as the attempt's outcome: the job completes
/// on attempt 1, without waiting for its lease (60 s, the default here, longer than this
/// test's patience) to run out and running again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_refused_in_an_outage_is_sent_again_and_recorded() {
    let Setup {
        _dir,
        opts,
        cluster,
        port,
        server,
        key,
        http,
    } = setup().await;
    let resp = http
        .post(format!("{}/v1/jobs", server.http_url))
        .bearer_auth(&key)
        .json(&json!({"queue": "q", "kind": "k"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let id = resp.json::<Value>().await.unwrap()["job_id"]
        .as_i64()
        .unwrap();

    // A worker whose handler finishes only when told to.
    let (started_tx, mut started) = mpsc::unbounded_channel::<i64>();
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let (ack_tx, mut acks) = mpsc::unbounded_channel();
    let mut wopts = pgferry_client::WorkerOptions::new(&server.url, &key, &["q"], 1);
    wopts.acks = Some(ack_tx);
    let handler = {
        let release = release.clone();
        move |job: pgferry_client::JobCtx| {
            let (started_tx, release) = (started_tx.clone(), release.clone());
            async move {
                let _ = started_tx.send(job.id);
                release.notified().await;
                pgferry_client::Outcome::Ok(None)
            }
        }
    };
    let worker = pgferry_client::Worker::new(wopts, handler);
    let stats = worker.stats();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(worker.run(
        async move {
            let _ = stop_rx.await;
        },
        Duration::from_secs(5),
    ));
    let got = tokio::time::timeout(PATIENCE, started.recv())
        .await
        .expect("the job reaches the handler");
    assert_eq!(got, Some(id));

    // The database goes away; the handler finishes meanwhile.
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .unwrap()
        .expect("stop postgres");
    release.notify_one();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while stats
        .results_resent
        .load(std::sync::atomic::Ordering::Relaxed)
        == 0
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the result was never refused as unavailable"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        acks.try_recv().is_err(),
        "nothing is acknowledged while the database is down"
    );

    // Back on the same port: the result is sent again and recorded.
    let cluster = start_cluster(ClusterOptions {
        port: Some(port),
        ..opts
    })
    .await;
    let ack = tokio::time::timeout(PATIENCE, acks.recv())
        .await
        .expect("the result is recorded once the database is back")
        .expect("an ack");
    assert_eq!((ack.id, ack.attempt, ack.stale), (id, 1, false));
    assert_eq!(
        stats
            .result_errors
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "unavailable is not a final refusal"
    );
    let job: Value = http
        .get(format!("{}/v1/jobs/{id}", server.http_url))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(job["state"], "completed", "{job}");
    let attempts = job["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 1, "one attempt, not a rerun: {job}");
    assert_eq!(attempts[0]["outcome"], "completed", "{job}");

    let _ = stop_tx.send(());
    run.await.unwrap().unwrap();
    server.stop().await;
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .unwrap()
        .unwrap();
}
