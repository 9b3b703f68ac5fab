//! Workflows over gRPC on a real loopback server: the WorkflowAdmin RPCs (start with
//! correlation dedup, signal by id and by key, cancel, retry, get, list, typed errors,
//! tenant isolation) and the WorkflowWorker stream running a machine with a signal and
//! children, with credits, heartbeats and a cancel pushed to the worker holding the step.

mod common;

use std::time::Duration;

use pb::workflow_admin_client::WorkflowAdminClient;
use pb::workflow_worker_client::WorkflowWorkerClient;
use pb::workflow_worker_request::Msg;
use pb::workflow_worker_response::Msg as Out;
use pgferry_client::proto::v1 as pb;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Code, Request, Streaming};

fn authed<T>(key: &str, msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    r
}

fn start(kind: &str, queue: &str, input: Value) -> pb::WorkflowStartRequest {
    pb::WorkflowStartRequest {
        kind: kind.into(),
        queue: queue.into(),
        input: input.to_string(),
        ..Default::default()
    }
}

struct Stream {
    tx: mpsc::UnboundedSender<pb::WorkflowWorkerRequest>,
    rx: Streaming<pb::WorkflowWorkerResponse>,
}

impl Stream {
    async fn open(url: &str, hello: pb::WorkflowHello) -> (Stream, pb::WorkflowHelloAck) {
        let mut c = WorkflowWorkerClient::connect(url.to_string())
            .await
            .unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(pb::WorkflowWorkerRequest {
            msg: Some(Msg::Hello(hello)),
        })
        .unwrap();
        let mut rx = c
            .stream(UnboundedReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        let ack = match rx.next().await.unwrap().unwrap().msg {
            Some(Out::HelloAck(a)) => a,
            other => panic!("no hello_ack: {other:?}"),
        };
        (Stream { tx, rx }, ack)
    }

    fn send(&self, m: Msg) {
        self.tx
            .send(pb::WorkflowWorkerRequest { msg: Some(m) })
            .unwrap();
    }

    async fn next(&mut self) -> Out {
        tokio::time::timeout(common::PATIENCE, self.rx.next())
            .await
            .expect("a message within the patience")
            .expect("stream open")
            .expect("no error")
            .msg
            .expect("a message")
    }
}

fn outcome(r: &pb::StepRef, kind: &str) -> pb::StepOutcome {
    pb::StepOutcome {
        r#ref: Some(r.clone()),
        outcome: kind.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_worker_runs_a_machine_with_a_signal_and_children() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = common::tenant_key(&db, "a").await;
    let server = common::Server::start(&db, common::loopback(), Default::default()).await;
    let mut admin = WorkflowAdminClient::connect(server.url.clone())
        .await
        .unwrap();
    let mut req = start("order", "shop", json!({"items": [1, 2]}));
    req.correlation_key = Some("o-1".into());
    let first = admin
        .start(authed(&key, req.clone()))
        .await
        .unwrap()
        .into_inner();
    let dup = admin.start(authed(&key, req)).await.unwrap().into_inner();
    assert_eq!(
        (dup.id, dup.duplicate, first.duplicate),
        (first.id, true, false)
    );

    let (mut w, ack) = Stream::open(
        &server.url,
        pb::WorkflowHello {
            api_key: key.clone(),
            worker_id: "grpc-test".into(),
            queues: vec!["shop".into()],
            lease_ms: 30_000,
            max_batch: 16,
            kinds: vec![pb::KindCaps {
                kind: "order".into(),
                inbox: true,
                children: true,
            }],
        },
    )
    .await;
    assert_eq!(
        (ack.tenant.as_str(), ack.max_batch, ack.lease_ms),
        ("a", 16, 30_000)
    );
    w.send(Msg::Credit(pb::StepCredit { n: 4 }));
    let mut seen = Vec::new();
    let mut signalled = false;
    let mut heartbeated = false;
    while seen.last().map(String::as_str) != Some("order:ship") {
        let batch = match w.next().await {
            Out::Steps(b) => b,
            Out::Acks(a) => {
                for ack in a.acks {
                    assert_eq!(ack.result, pb::StepResult::StepApplied as i32, "{ack:?}");
                }
                continue;
            }
            Out::HeartbeatAck(h) => {
                assert!(h.beats.iter().all(|b| b.held && !b.cancelled), "{h:?}");
                continue;
            }
            other => panic!("unexpected {other:?}"),
        };
        let mut outs = Vec::new();
        for s in batch.steps {
            assert_eq!(s.queue, "shop");
            let r = s.r#ref.clone().unwrap();
            let name = format!("{}:{}", s.kind, s.step);
            seen.push(name.clone());
            let state: Value = serde_json::from_str(&s.state).unwrap();
            let o = match name.as_str() {
                "order:start" => {
                    if !heartbeated {
                        heartbeated = true;
                        w.send(Msg::Heartbeat(pb::StepHeartbeat {
                            refs: vec![r.clone()],
                        }));
                        // Its answer before the step's outcome: heartbeats and outcomes
                        // are applied independently, and one that lands after the outcome
                        // rightly answers "not held".
                        match w.next().await {
                            Out::HeartbeatAck(h) => {
                                assert!(h.beats.iter().all(|b| b.held && !b.cancelled), "{h:?}")
                            }
                            other => panic!("expected the heartbeat's answer, got {other:?}"),
                        }
                    }
                    pb::StepOutcome {
                        step: Some("pay".into()),
                        state: Some(json!({"n": 1}).to_string()),
                        ..outcome(&r, "next")
                    }
                }
                "order:pay" => {
                    assert_eq!(state, json!({"n": 1}));
                    pb::StepOutcome {
                        step: Some("pack".into()),
                        signals: vec!["paid".into()],
                        ..outcome(&r, "await")
                    }
                }
                "order:pack" => {
                    assert_eq!(s.wake, "signal");
                    let inbox: Value = serde_json::from_str(&s.inbox).unwrap();
                    assert_eq!(inbox[0]["payload"], json!({"amount": 30}));
                    pb::StepOutcome {
                        step: Some("ship".into()),
                        children: (1..=2)
                            .map(|n| pb::ChildSpec {
                                kind: "pack".into(),
                                input: n.to_string(),
                                ..Default::default()
                            })
                            .collect(),
                        ..outcome(&r, "spawn")
                    }
                }
                "pack:start" => pb::StepOutcome {
                    result: Some(s.input.clone()),
                    ..outcome(&r, "done")
                },
                "order:ship" => {
                    assert_eq!(s.wake, "children");
                    let children: Value = serde_json::from_str(&s.children).unwrap();
                    let mut got: Vec<i64> = children
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| c["result"].as_i64().unwrap())
                        .collect();
                    got.sort();
                    pb::StepOutcome {
                        result: Some(json!({"packed": got}).to_string()),
                        ..outcome(&r, "done")
                    }
                }
                other => panic!("unexpected step {other}"),
            };
            outs.push(o);
        }
        let n = outs.len() as u32;
        w.send(Msg::Outcomes(pb::StepOutcomeBatch {
            outcomes: outs,
            credit: n,
        }));
        if seen.last().map(String::as_str) == Some("order:pay") && !signalled {
            // Wait for the await to be recorded, then signal by correlation key.
            loop {
                let i = admin
                    .get(authed(&key, pb::WorkflowIdRequest { id: first.id }))
                    .await
                    .unwrap()
                    .into_inner();
                if i.status == "awaiting" {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let sent = admin
                .signal(authed(
                    &key,
                    pb::WorkflowSignalRequest {
                        target: Some(pb::workflow_signal_request::Target::Correlation(
                            pb::CorrelationTarget {
                                queue: "shop".into(),
                                key: "o-1".into(),
                            },
                        )),
                        name: "paid".into(),
                        payload: json!({"amount": 30}).to_string(),
                    },
                ))
                .await
                .unwrap()
                .into_inner();
            assert!(sent.delivered);
            assert_eq!(sent.instance_id, first.id);
            signalled = true;
        }
    }
    // The last ack, then the instance as get and list show it.
    loop {
        if let Out::Acks(a) = w.next().await {
            assert_eq!(a.acks[0].result, pb::StepResult::StepApplied as i32);
            break;
        }
    }
    let i = admin
        .get(authed(&key, pb::WorkflowIdRequest { id: first.id }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((i.status.as_str(), i.queue.as_str()), ("done", "shop"));
    assert_eq!(
        serde_json::from_str::<Value>(&i.result).unwrap(),
        json!({"packed": [1, 2]})
    );
    let outcomes: Vec<&str> = i.history.iter().map(|h| h.outcome.as_str()).collect();
    assert_eq!(outcomes, ["next", "await", "spawn", "done"]);
    assert_eq!(i.history[0].worker, "grpc-test");
    let list = admin
        .list(authed(
            &key,
            pb::WorkflowListRequest {
                queue: "shop".into(),
                kind: "pack".into(),
                limit: 1,
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((list.instances.len(), list.has_more), (1, true));
    let rest = admin
        .list(authed(
            &key,
            pb::WorkflowListRequest {
                queue: "shop".into(),
                kind: "pack".into(),
                before: list.next.unwrap(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((rest.instances.len(), rest.has_more), (1, false));
    assert_eq!(rest.instances[0].parent_id, Some(first.id));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_the_stream_and_admin_errors_are_typed_per_tenant() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = common::tenant_key(&db, "a").await;
    let (_, other) = common::tenant_key(&db, "b").await;
    let server = common::Server::start(&db, common::loopback(), Default::default()).await;
    let mut admin = WorkflowAdminClient::connect(server.url.clone())
        .await
        .unwrap();
    let id = admin
        .start(authed(&key, start("slow", "q", json!(1))))
        .await
        .unwrap()
        .into_inner()
        .id;
    // Tenant b neither sees it nor gets its step.
    let e = admin
        .get(authed(&other, pb::WorkflowIdRequest { id }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let (mut wb, _) = Stream::open(
        &server.url,
        pb::WorkflowHello {
            api_key: other.clone(),
            queues: vec!["q".into()],
            ..Default::default()
        },
    )
    .await;
    wb.send(Msg::Credit(pb::StepCredit { n: 10 }));

    let (mut w, _) = Stream::open(
        &server.url,
        pb::WorkflowHello {
            api_key: key.clone(),
            queues: vec!["q".into()],
            ..Default::default()
        },
    )
    .await;
    w.send(Msg::Credit(pb::StepCredit { n: 1 }));
    let step = match w.next().await {
        Out::Steps(b) => b.steps.into_iter().next().unwrap(),
        other => panic!("{other:?}"),
    };
    let r = step.r#ref.clone().unwrap();
    assert_eq!(r.id, id);
    // Tenant b cannot answer it with a's token.
    wb.send(Msg::Outcomes(pb::StepOutcomeBatch {
        outcomes: vec![outcome(&r, "done")],
        credit: 0,
    }));
    match wb.next().await {
        Out::Acks(a) => {
            let e = a.acks[0].error.as_ref().expect("refused");
            assert_eq!(
                (e.code.as_str(), e.field.as_str()),
                ("not_found", "outcomes[0].ref.token")
            );
        }
        other => panic!("{other:?}"),
    }
    // A bad outcome is refused naming the field, and nothing is recorded.
    w.send(Msg::Outcomes(pb::StepOutcomeBatch {
        outcomes: vec![outcome(&r, "next")],
        credit: 0,
    }));
    match w.next().await {
        Out::Acks(a) => {
            let e = a.acks[0].error.as_ref().expect("refused");
            assert_eq!(
                (e.code.as_str(), e.field.as_str()),
                ("invalid_argument", "outcomes[0].step")
            );
        }
        other => panic!("{other:?}"),
    }
    let cancelled = admin
        .cancel(authed(
            &key,
            pb::WorkflowCancelRequest {
                id,
                reason: "not needed".into(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cancelled.previous_status, "running");
    assert_eq!(cancelled.instance.unwrap().status, "cancelled");
    match w.next().await {
        Out::Cancel(c) => assert_eq!(c.r#ref.unwrap(), r),
        other => panic!("expected a cancel, got {other:?}"),
    }
    w.send(Msg::Heartbeat(pb::StepHeartbeat {
        refs: vec![r.clone()],
    }));
    match w.next().await {
        Out::HeartbeatAck(h) => assert!(!h.beats[0].held && h.beats[0].cancelled, "{h:?}"),
        other => panic!("{other:?}"),
    }
    w.send(Msg::Outcomes(pb::StepOutcomeBatch {
        outcomes: vec![outcome(&r, "done")],
        credit: 0,
    }));
    match w.next().await {
        Out::Acks(a) => assert_eq!(a.acks[0].result, pb::StepResult::StepCancelled as i32),
        other => panic!("{other:?}"),
    }
    // Drain: answered, and no step is sent after it.
    w.send(Msg::Drain(pb::StepDrain {}));
    assert!(matches!(w.next().await, Out::Drained(_)));

    // Typed errors naming the field; retry of an instance that is not failed conflicts.
    let mut bad = start("k", "q", json!(1));
    bad.priority = 10;
    let e = admin.start(authed(&key, bad)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("(priority)"), "{e:?}");
    let e = admin
        .start(authed(&key, start("k", "Bad Queue", json!(1))))
        .await
        .unwrap_err();
    assert!(
        e.code() == Code::InvalidArgument && e.message().contains("queue"),
        "{e:?}"
    );
    let e = admin
        .retry(authed(&key, pb::WorkflowIdRequest { id }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let e = admin
        .list(authed(
            &key,
            pb::WorkflowListRequest {
                queue: "q".into(),
                status: "bogus".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert!(
        e.code() == Code::InvalidArgument && e.message().contains("(status)"),
        "{e:?}"
    );
    let e = admin
        .signal(authed(
            &key,
            pb::WorkflowSignalRequest {
                target: Some(pb::workflow_signal_request::Target::Id(id)),
                name: "x".into(),
                payload: "{not json".into(),
            },
        ))
        .await
        .unwrap_err();
    assert!(
        e.code() == Code::InvalidArgument && e.message().contains("(payload)"),
        "{e:?}"
    );
    // Tenant b's stream got nothing of a's.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), wb.rx.next())
            .await
            .is_err(),
        "tenant b's stream got a message"
    );
    server.stop().await;
}

/// The concurrency strategies are chosen per start over gRPC (WorkflowStartRequest's
/// `concurrency_strategy`): `cancel_newest` ends the new instance, `cancel_in_progress`
/// takes the slot of the one holding it, `round_robin` keeps one of the key's steps in the
/// picker; an unknown name is INVALID_ARGUMENT naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_strategies_are_chosen_over_grpc() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = common::tenant_key(&db, "a").await;
    let server = common::Server::start(&db, common::loopback(), Default::default()).await;
    let mut admin = WorkflowAdminClient::connect(server.url.clone())
        .await
        .unwrap();
    let keyed = |strategy: Option<&str>| pb::WorkflowStartRequest {
        concurrency_key: Some("acct".into()),
        concurrency_strategy: strategy.map(String::from),
        ..start("k", "q", json!(1))
    };
    let first = started(&mut admin, &key, keyed(None)).await;
    let newest = started(&mut admin, &key, keyed(Some("cancel_newest"))).await;
    assert_eq!(status_of(&mut admin, &key, newest).await, "cancelled");
    assert_eq!(status_of(&mut admin, &key, first).await, "runnable");
    let taker = started(&mut admin, &key, keyed(Some("cancel_in_progress"))).await;
    assert_eq!(status_of(&mut admin, &key, first).await, "cancelled");
    assert_eq!(status_of(&mut admin, &key, taker).await, "runnable");
    let waiter = started(&mut admin, &key, keyed(Some("queue"))).await;
    assert_eq!(status_of(&mut admin, &key, waiter).await, "queued");
    // round_robin (limit 10): the key keeps one step in the picker and the others wait
    // their turn among its waiters (with `queue`, all three would be runnable).
    let fair = |i: i64| pb::WorkflowStartRequest {
        concurrency_key: Some("fair".into()),
        concurrency_limit: Some(10),
        concurrency_strategy: Some("round_robin".into()),
        ..start("k", "q", json!(i))
    };
    let mut fair_status = Vec::new();
    for i in 0..3 {
        let id = started(&mut admin, &key, fair(i)).await;
        fair_status.push(status_of(&mut admin, &key, id).await);
    }
    assert_eq!(fair_status, ["runnable", "queued", "queued"]);

    let e = admin
        .start(authed(&key, keyed(Some("newest_wins"))))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("concurrency_strategy"), "{e:?}");
    server.stop().await;
}

async fn started(
    admin: &mut WorkflowAdminClient<tonic::transport::Channel>,
    key: &str,
    r: pb::WorkflowStartRequest,
) -> i64 {
    admin.start(authed(key, r)).await.unwrap().into_inner().id
}

async fn status_of(
    admin: &mut WorkflowAdminClient<tonic::transport::Channel>,
    key: &str,
    id: i64,
) -> String {
    admin
        .get(authed(key, pb::WorkflowIdRequest { id }))
        .await
        .unwrap()
        .into_inner()
        .status
}
