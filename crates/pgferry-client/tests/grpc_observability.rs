//! Observability of the gRPC front over real sockets: the W3C trace context of an enqueue
//! (gRPC metadata of a Producer stream or an Admin call, a job's own meta, an HTTP header)
//! reaches the worker in `Job.meta`; gRPC traffic and lease rescues show up in `/metrics`
//! per tenant and user queue; cancelling over HTTP reaches a running stream worker.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{loopback, queue_lease, tenant_key, Server};
use pb::worker_request::Msg as In;
use pb::worker_response::Msg as Out;
use pgferry_client::proto::v1 as pb;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

const PATIENCE: Duration = Duration::from_secs(30);
const TP_STREAM: &str = "00-11111111111111111111111111111111-1111111111111111-01";
const TP_OWN: &str = "00-22222222222222222222222222222222-2222222222222222-01";
const TP_ADMIN: &str = "00-33333333333333333333333333333333-3333333333333333-01";
const TP_HTTP: &str = "00-44444444444444444444444444444444-4444444444444444-01";

fn spec(queue: &str, n: i64) -> pb::JobSpec {
    pb::JobSpec {
        queue: queue.into(),
        kind: "k".into(),
        args: json!({ "n": n }).to_string(),
        ..Default::default()
    }
}

/// Opens a Producer stream whose opening request carries `traceparent` metadata.
async fn traced_producer(
    url: &str,
    key: &str,
    traceparent: &str,
) -> (
    mpsc::UnboundedSender<pb::ProducerRequest>,
    tonic::Streaming<pb::ProducerResponse>,
) {
    let mut client = pb::producer_client::ProducerClient::connect(url.to_string())
        .await
        .unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tx.send(pb::ProducerRequest {
        msg: Some(pb::producer_request::Msg::Hello(pb::Hello {
            api_key: key.into(),
            client_name: "test".into(),
        })),
    })
    .unwrap();
    let mut req = tonic::Request::new(UnboundedReceiverStream::new(rx));
    req.metadata_mut()
        .insert("traceparent", traceparent.parse().unwrap());
    let mut responses = client.stream(req).await.unwrap().into_inner();
    match responses.next().await {
        Some(Ok(pb::ProducerResponse {
            msg: Some(pb::producer_response::Msg::HelloAck(_)),
        })) => {}
        other => panic!("expected hello_ack, got {other:?}"),
    }
    (tx, responses)
}

async fn next_ack(rx: &mut tonic::Streaming<pb::ProducerResponse>) -> pb::EnqueueAck {
    match tokio::time::timeout(PATIENCE, rx.next()).await {
        Ok(Some(Ok(pb::ProducerResponse {
            msg: Some(pb::producer_response::Msg::Ack(a)),
        }))) => a,
        other => panic!("expected an ack, got {other:?}"),
    }
}

/// A raw worker stream on one queue.
struct RawWorker {
    tx: mpsc::UnboundedSender<pb::WorkerRequest>,
    rx: tonic::Streaming<pb::WorkerResponse>,
}

impl RawWorker {
    async fn open(url: &str, key: &str, queue: &str) -> RawWorker {
        let mut client = pb::worker_client::WorkerClient::connect(url.to_string())
            .await
            .unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let w_tx = tx.clone();
        w_tx.send(pb::WorkerRequest {
            msg: Some(In::Hello(pb::WorkerHello {
                api_key: key.into(),
                worker_id: "raw".into(),
                queues: vec![queue.into()],
                kinds: vec![],
                // Single messages, as a worker from before batching.
                max_batch: 0,
            })),
        })
        .unwrap();
        let mut rx = client
            .stream(UnboundedReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        match rx.next().await {
            Some(Ok(pb::WorkerResponse {
                msg: Some(Out::HelloAck(_)),
            })) => {}
            other => panic!("expected hello_ack, got {other:?}"),
        }
        RawWorker { tx, rx }
    }

    fn send(&self, m: In) {
        self.tx.send(pb::WorkerRequest { msg: Some(m) }).unwrap();
    }

    async fn next(&mut self) -> Out {
        match tokio::time::timeout(PATIENCE, self.rx.next()).await {
            Ok(Some(Ok(pb::WorkerResponse { msg: Some(m) }))) => m,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    async fn jobs(&mut self, n: usize) -> Vec<pb::Job> {
        let mut out = Vec::new();
        while out.len() < n {
            match self.next().await {
                Out::Job(j) => out.push(j),
                other => panic!("expected a job, got {other:?}"),
            }
        }
        out
    }

    fn result(&self, job: &pb::Job, outcome: pb::job_result::Outcome) {
        self.send(In::Result(pb::JobResult {
            r#ref: job.r#ref.clone(),
            outcome: Some(outcome),
            duration_ms: 1,
        }));
    }

    async fn result_acks(&mut self, n: usize) -> Vec<pb::ResultAck> {
        let mut out = Vec::new();
        while out.len() < n {
            match self.next().await {
                Out::ResultAck(a) => out.push(a),
                other => panic!("expected a result_ack, got {other:?}"),
            }
        }
        out
    }
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(PATIENCE)
        .build()
        .unwrap()
}

async fn metrics_text(server: &Server) -> String {
    http()
        .get(format!("{}/metrics", server.http_url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of one sample line (`name{labels}`) of the exposition text.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn id_of(job: &pb::Job) -> i64 {
    job.r#ref.as_ref().unwrap().id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_context_reaches_workers_and_grpc_traffic_is_counted() {
    let db = pgferry_testkit::test_db().await;
    let (tenant, key) = tenant_key(&db, "acme").await;
    let server = Server::start(&db, loopback(), Default::default()).await;

    // Producer stream opened with a trace context: it applies to jobs without their own.
    let (ptx, mut acks) = traced_producer(&server.url, &key, TP_STREAM).await;
    let mut own = spec("obs", 2);
    own.meta.insert("traceparent".into(), TP_OWN.into());
    ptx.send(pb::ProducerRequest {
        msg: Some(pb::producer_request::Msg::Batch(pb::EnqueueBatch {
            seq: 1,
            jobs: vec![spec("obs", 1), own],
            ..Default::default()
        })),
    })
    .unwrap();
    let ack = next_ack(&mut acks).await;
    assert!(ack.error.is_none(), "{ack:?}");
    let (stream_job, own_job) = (ack.job_ids[0], ack.job_ids[1]);

    // Admin.Enqueue with the trace context in the call's metadata.
    let mut admin = pb::admin_client::AdminClient::connect(server.url.clone())
        .await
        .unwrap();
    let mut req = tonic::Request::new(pb::EnqueueRequest {
        jobs: vec![spec("obs", 3)],
    });
    req.metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    req.metadata_mut()
        .insert("traceparent", TP_ADMIN.parse().unwrap());
    let admin_job = admin.enqueue(req).await.unwrap().into_inner().job_ids[0];

    // An HTTP enqueue with a traceparent header, worked by the same stream worker.
    let resp = http()
        .post(format!("{}/v1/jobs", server.http_url))
        .bearer_auth(&key)
        .header("traceparent", TP_HTTP)
        .json(&json!({"queue": "obs", "kind": "k", "args": {"n": 4}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    let http_job = resp.json::<Value>().await.unwrap()["job_id"]
        .as_i64()
        .unwrap();

    let mut w = RawWorker::open(&server.url, &key, "obs").await;
    w.send(In::Credit(pb::Credit { n: 4 }));
    let jobs = w.jobs(4).await;
    let meta: HashMap<i64, Option<String>> = jobs
        .iter()
        .map(|j| (id_of(j), j.meta.get("traceparent").cloned()))
        .collect();
    assert_eq!(meta[&stream_job].as_deref(), Some(TP_STREAM));
    assert_eq!(meta[&own_job].as_deref(), Some(TP_OWN), "a job's own wins");
    assert_eq!(meta[&admin_job].as_deref(), Some(TP_ADMIN));
    assert_eq!(meta[&http_job].as_deref(), Some(TP_HTTP));

    // Outcomes: two successes, a permanent failure, a retried failure.
    use pb::job_result::Outcome as O;
    let by_id = |id: i64| jobs.iter().find(|j| id_of(j) == id).unwrap();
    w.result(by_id(stream_job), O::Ok(pb::Success::default()));
    w.result(by_id(http_job), O::Ok(pb::Success::default()));
    w.result(
        by_id(own_job),
        O::Error(pb::Failure {
            message: "no".into(),
            retryable: false,
            ..Default::default()
        }),
    );
    w.result(
        by_id(admin_job),
        O::Error(pb::Failure {
            message: "again".into(),
            retryable: true,
            retry_delay_ms: Some(60_000),
            ..Default::default()
        }),
    );
    let results = w.result_acks(4).await;
    assert!(
        results.iter().all(|a| a.error.is_none() && !a.stale),
        "{results:?}"
    );

    // A job on a queue with a short lease, received and never answered: rescued.
    queue_lease(&server.engine, tenant, "lapse", Duration::from_millis(300)).await;
    ptx.send(pb::ProducerRequest {
        msg: Some(pb::producer_request::Msg::Enqueue(pb::Enqueue {
            seq: 2,
            job: Some(spec("lapse", 5)),
            ..Default::default()
        })),
    })
    .unwrap();
    assert!(next_ack(&mut acks).await.error.is_none());
    let mut idle = RawWorker::open(&server.url, &key, "lapse").await;
    idle.send(In::Credit(pb::Credit { n: 1 }));
    idle.jobs(1).await;

    let series = |name: &str, q: &str| format!("{name}{{tenant=\"acme\",queue=\"{q}\"}}");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let text = loop {
        let text = metrics_text(&server).await;
        if sample(&text, &series("pgferry_jobs_rescued_total", "lapse")).is_some()
            || tokio::time::Instant::now() > deadline
        {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for (name, q, want) in [
        ("pgferry_jobs_enqueued_total", "obs", 4.0),
        ("pgferry_jobs_claimed_total", "obs", 4.0),
        ("pgferry_jobs_completed_total", "obs", 2.0),
        ("pgferry_jobs_failed_total", "obs", 2.0),
        ("pgferry_jobs_enqueued_total", "lapse", 1.0),
        ("pgferry_jobs_claimed_total", "lapse", 1.0),
        ("pgferry_jobs_rescued_total", "lapse", 1.0),
    ] {
        assert_eq!(
            sample(&text, &series(name, q)),
            Some(want),
            "{name} {q} in\n{text}"
        );
    }
    // Every enqueue request (stream batch, Admin call, HTTP, stream single) went through
    // group commit.
    assert_eq!(
        sample(&text, "pgferry_coalescer_requests_total{kind=\"enqueue\"}"),
        Some(4.0),
        "{text}"
    );
    // Latencies of the gRPC paths: claims by dispatchers, commits of the coalescers.
    for h in [
        "pgferry_claim_seconds_count",
        "pgferry_enqueue_commit_seconds_count",
        "pgferry_complete_commit_seconds_count",
    ] {
        assert!(sample(&text, h).is_some_and(|n| n >= 1.0), "{h} in\n{text}");
    }
    server.stop().await;
}

/// `POST /v1/jobs/{id}/cancel` reaches the stream worker running the job as a `cancel`;
/// the worker's `cancelled` outcome is what the job ends with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_cancel_reaches_a_running_stream_worker() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = tenant_key(&db, "acme").await;
    let server = Server::start(&db, loopback(), Default::default()).await;
    let mut w = RawWorker::open(&server.url, &key, "c").await;
    w.send(In::Credit(pb::Credit { n: 1 }));
    let resp = http()
        .post(format!("{}/v1/jobs", server.http_url))
        .bearer_auth(&key)
        .json(&json!({"queue": "c", "kind": "k"}))
        .send()
        .await
        .unwrap();
    let id = resp.json::<Value>().await.unwrap()["job_id"]
        .as_i64()
        .unwrap();
    let job = w.jobs(1).await.remove(0);
    assert_eq!(id_of(&job), id);
    let resp = http()
        .post(format!("{}/v1/jobs/{id}/cancel", server.http_url))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["cancel_requested"],
        true
    );
    match w.next().await {
        Out::Cancel(c) => assert_eq!(c.r#ref.unwrap().id, id),
        other => panic!("expected cancel, got {other:?}"),
    }
    w.result(
        &job,
        pb::job_result::Outcome::Cancelled(pb::Cancelled {
            message: "stopped".into(),
        }),
    );
    let ack = w.result_acks(1).await.remove(0);
    assert!(ack.error.is_none() && !ack.stale, "{ack:?}");
    let info = server.engine.get_job(id).await.unwrap();
    assert_eq!(info.state.as_str(), "cancelled");
    server.stop().await;
}
