//! Tenant isolation on the gRPC streams and Admin service (a key of tenant B gets nothing
//! of tenant A's and NOT_FOUND for A's ids), and the audit log of admin actions over gRPC.

mod common;

use std::time::Duration;

use common::{loopback, tenant_key, Server};
use pb::worker_request::Msg as In;
use pb::worker_response::Msg as Out;
use pgferry_client::proto::v1 as pb;
use pgferry_client::{JobSpec, Producer};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Code, Request};

const PATIENCE: Duration = Duration::from_secs(30);

fn authed<T>(key: &str, msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    r
}

struct RawWorker {
    tx: mpsc::UnboundedSender<pb::WorkerRequest>,
    rx: tonic::Streaming<pb::WorkerResponse>,
}

impl RawWorker {
    async fn open(url: &str, key: &str, queue: &str, credits: u32) -> RawWorker {
        let mut client = pb::worker_client::WorkerClient::connect(url.to_string())
            .await
            .unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        for m in [
            In::Hello(pb::WorkerHello {
                api_key: key.into(),
                worker_id: "raw".into(),
                queues: vec![queue.into()],
                kinds: vec![],
                // Single messages, as a worker from before batching.
                max_batch: 0,
            }),
            In::Credit(pb::Credit { n: credits }),
        ] {
            tx.send(pb::WorkerRequest { msg: Some(m) }).unwrap();
        }
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

    /// The next message within `within`, or None.
    async fn next(&mut self, within: Duration) -> Option<Out> {
        match tokio::time::timeout(within, self.rx.next()).await {
            Ok(Some(Ok(pb::WorkerResponse { msg: Some(m) }))) => Some(m),
            Ok(other) => panic!("stream ended: {other:?}"),
            Err(_) => None,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_gets_nothing_of_another_tenants_jobs_and_queues_over_grpc() {
    let db = pgferry_testkit::test_db().await;
    let (_, key_a) = tenant_key(&db, "tenant-a").await;
    let (_, key_b) = tenant_key(&db, "tenant-b").await;
    let server = Server::start(&db, loopback(), Default::default()).await;
    let producer_a = Producer::connect(&server.url, &key_a).await.unwrap();
    let id = producer_a
        .enqueue(JobSpec::new("shared", "k", &json!("a")))
        .await
        .unwrap();

    // B's worker on its own "shared" queue never sees A's job; A's worker gets it.
    let mut wb = RawWorker::open(&server.url, &key_b, "shared", 10).await;
    let mut wa = RawWorker::open(&server.url, &key_a, "shared", 10).await;
    let job = match wa.next(PATIENCE).await {
        Some(Out::Job(j)) => j,
        other => panic!("expected A's job, got {other:?}"),
    };
    let aref = job.r#ref.clone().unwrap();
    assert_eq!(aref.id, id);
    // (A bounded look for a message that must not exist: it can only fail, not pass by luck.)
    assert!(
        wb.next(Duration::from_millis(500)).await.is_none(),
        "B got a job"
    );

    // B cannot report, heartbeat or release A's attempt with A's ref.
    wb.send(In::Result(pb::JobResult {
        r#ref: Some(aref.clone()),
        outcome: Some(pb::job_result::Outcome::Ok(pb::Success::default())),
        duration_ms: 1,
    }));
    match wb.next(PATIENCE).await {
        Some(Out::ResultAck(a)) => {
            let e = a.error.expect("refused");
            assert_eq!(
                (e.code.as_str(), e.field.as_str()),
                ("not_found", "ref.token")
            );
        }
        other => panic!("expected result_ack, got {other:?}"),
    }
    wb.send(In::Heartbeat(pb::Heartbeat {
        refs: vec![aref.clone()],
    }));
    match wb.next(PATIENCE).await {
        Some(Out::HeartbeatAck(h)) => assert_eq!(h.lost, vec![aref.clone()]),
        other => panic!("expected heartbeat_ack, got {other:?}"),
    }

    // Admin: A's job id is NOT_FOUND for B (get, cancel, retry); B's queue list and
    // settings are its own.
    let mut admin = pb::admin_client::AdminClient::connect(server.url.clone())
        .await
        .unwrap();
    let e = admin
        .get_job(authed(&key_b, pb::GetJobRequest { id }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    for call in ["cancel", "retry"] {
        let req = authed(&key_b, pb::JobIdRequest { id });
        let e = match call {
            "cancel" => admin.cancel_job(req).await.unwrap_err(),
            _ => admin.retry_job(req).await.unwrap_err(),
        };
        assert_eq!(e.code(), Code::NotFound, "{call}");
    }
    admin
        .update_queue(authed(
            &key_a,
            pb::UpdateQueueRequest {
                name: "a-only".into(),
                settings: Some(pb::QueueSettings {
                    max_attempts: Some(3),
                    ..Default::default()
                }),
            },
        ))
        .await
        .unwrap();
    let names = |r: pb::ListQueuesResponse| {
        let mut n: Vec<String> = r.queues.into_iter().map(|q| q.name).collect();
        n.sort();
        n
    };
    let b_queues = admin
        .list_queues(authed(&key_b, pb::ListQueuesRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(names(b_queues), ["shared"], "B's own queue only");
    // B naming "a-only" names a queue of its own, which does not exist: NOT_FOUND, and
    // A's queue is untouched.
    let e = admin
        .pause_queue(authed(
            &key_b,
            pb::QueueNameRequest {
                name: "a-only".into(),
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let a_queues = admin
        .list_queues(authed(&key_a, pb::ListQueuesRequest {}))
        .await
        .unwrap()
        .into_inner();
    let a_only = a_queues.queues.iter().find(|q| q.name == "a-only").unwrap();
    assert!(!a_only.paused, "B paused A's queue");
    assert_eq!(a_only.settings.as_ref().unwrap().max_attempts, Some(3));

    // A finishes its job; the ack is not stale (B's refused attempt changed nothing).
    wa.send(In::Result(pb::JobResult {
        r#ref: Some(aref),
        outcome: Some(pb::job_result::Outcome::Ok(pb::Success::default())),
        duration_ms: 1,
    }));
    match wa.next(PATIENCE).await {
        Some(Out::ResultAck(a)) => assert!(a.error.is_none() && !a.stale, "{a:?}"),
        other => panic!("expected result_ack, got {other:?}"),
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_actions_over_grpc_are_audited() {
    let db = pgferry_testkit::test_db().await;
    let (tenant, key) = tenant_key(&db, "acme").await;
    let server = Server::start(&db, loopback(), Default::default()).await;
    let mut admin = pb::admin_client::AdminClient::connect(server.url.clone())
        .await
        .unwrap();
    let name = || pb::QueueNameRequest { name: "q".into() };
    admin
        .update_queue(authed(
            &key,
            pb::UpdateQueueRequest {
                name: "q".into(),
                settings: Some(pb::QueueSettings {
                    lease_ms: Some(5000),
                    ..Default::default()
                }),
            },
        ))
        .await
        .unwrap();
    admin.pause_queue(authed(&key, name())).await.unwrap();
    admin.resume_queue(authed(&key, name())).await.unwrap();
    admin
        .retry_dead(authed(&key, pb::DeadFilter::default()))
        .await
        .unwrap();
    admin
        .purge_dead(authed(&key, pb::DeadFilter::default()))
        .await
        .unwrap();
    // Reads are not audited.
    admin
        .list_queues(authed(&key, pb::ListQueuesRequest {}))
        .await
        .unwrap();
    let c = db.connect().await;
    let rows = c
        .query(
            "SELECT action, target, tenant_id, key_id IS NOT NULL, detail->>'via' \
             FROM pgferry.audit_log WHERE actor = 'api' ORDER BY audit_id",
            &[],
        )
        .await
        .unwrap();
    type Row = (String, String, Option<i64>, bool, Option<String>);
    let got: Vec<Row> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    let want = |a: &str, t: &str| {
        (
            a.to_string(),
            t.to_string(),
            Some(tenant),
            true,
            Some("grpc".to_string()),
        )
    };
    assert_eq!(
        got,
        vec![
            want("queue.update", "q"),
            want("queue.pause", "q"),
            want("queue.resume", "q"),
            // As over HTTP (one use case): target "dead", the count in the detail.
            want("dead.retry", "dead"),
            want("dead.purge", "dead"),
        ]
    );
    server.stop().await;
}
