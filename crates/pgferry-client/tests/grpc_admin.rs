//! The unary Admin service over a real loopback socket: every RPC, tenant isolation, auth
//! and invalid input.

mod common;

use pb::admin_client::AdminClient;
use pgferry_client::proto::v1 as pb;
use tonic::{Code, Request};

fn authed<T>(key: &str, msg: T) -> Request<T> {
    let mut r = Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    r
}

fn spec(queue: &str, kind: &str, unique: Option<&str>) -> pb::JobSpec {
    pb::JobSpec {
        queue: queue.into(),
        kind: kind.into(),
        args: r#"{"n": 1}"#.into(),
        max_attempts: Some(1),
        unique_key: unique.map(String::from),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_rpcs_with_auth_and_tenant_isolation() {
    let db = pgferry_testkit::test_db().await;
    let (_, key_a) = common::tenant_key(&db, "a").await;
    let (_, key_b) = common::tenant_key(&db, "b").await;
    let server = common::Server::start(&db, common::loopback(), Default::default()).await;
    let mut c = AdminClient::connect(server.url.clone()).await.unwrap();

    // Enqueue with a unique key: the duplicate answers the holder's id.
    let r = c
        .enqueue(authed(
            &key_a,
            pb::EnqueueRequest {
                jobs: vec![
                    spec("mail", "send", Some("u1")),
                    spec("mail", "send", Some("u1")),
                ],
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.duplicates, vec![false, true]);
    assert_eq!(r.job_ids[0], r.job_ids[1]);
    let id = r.job_ids[0];

    let job = c
        .get_job(authed(&key_a, pb::GetJobRequest { id }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (job.queue.as_str(), job.kind.as_str(), job.max_attempts),
        ("mail", "send", 1)
    );
    assert!(
        matches!(job.state.as_str(), "pending" | "running"),
        "{job:?}"
    );
    // Tenant B cannot see it, cancel it or list it.
    let e = c
        .get_job(authed(&key_b, pb::GetJobRequest { id }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = c
        .cancel_job(authed(&key_b, pb::JobIdRequest { id }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let listed = c
        .list_jobs(authed(
            &key_b,
            pb::ListJobsRequest {
                queue: "mail".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(listed.jobs.is_empty());
    let listed = c
        .list_jobs(authed(
            &key_a,
            pb::ListJobsRequest {
                queue: "mail".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        listed.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![id]
    );

    // Cancel, then retry is refused (not dead).
    let j = c
        .cancel_job(authed(&key_a, pb::JobIdRequest { id }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(j.state, "cancelled");
    let e = c
        .retry_job(authed(&key_a, pb::JobIdRequest { id }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);

    // Queues: update, pause, resume, list.
    let q = c
        .update_queue(authed(
            &key_a,
            pb::UpdateQueueRequest {
                name: "mail".into(),
                settings: Some(pb::QueueSettings {
                    lease_ms: Some(5000),
                    max_attempts: Some(7),
                    concurrency: Some(4),
                    ..Default::default()
                }),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let s = q.settings.unwrap();
    assert_eq!(
        (q.name.as_str(), s.lease_ms, s.max_attempts, s.concurrency),
        ("mail", Some(5000), Some(7), Some(4))
    );
    let p = c
        .pause_queue(authed(
            &key_a,
            pb::QueueNameRequest {
                name: "mail".into(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(p.paused);
    let p = c
        .resume_queue(authed(
            &key_a,
            pb::QueueNameRequest {
                name: "mail".into(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(!p.paused);
    // Counts come from the engine's counters (flushed now rather than within a second).
    server.engine.flush_counters().await.unwrap();
    let queues = c
        .list_queues(authed(&key_a, pb::ListQueuesRequest {}))
        .await
        .unwrap()
        .into_inner()
        .queues;
    let names: Vec<&str> = queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, vec!["mail"]);
    let counts = queues[0].counts.expect("counts");
    assert_eq!((counts.enqueued, counts.scheduled, counts.dead), (1, 0, 0));
    let none = c
        .list_queues(authed(&key_b, pb::ListQueuesRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert!(none.queues.is_empty());

    // Dead letters: a job that fails its only attempt, listed, retried, purged.
    let dead_id = c
        .enqueue(authed(
            &key_a,
            pb::EnqueueRequest {
                jobs: vec![spec("dlq", "boom", None)],
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .job_ids[0];
    let engine_q =
        pgferry_server::auth::engine_queue(common::tenant_key_id(&db, "a").await, "dlq").unwrap();
    let mut claimed = Vec::new();
    for _ in 0..200 {
        claimed = server.engine.claim(&engine_q, 10, "t").await.unwrap();
        if !claimed.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    server
        .engine
        .complete(&[claimed[0].fail("boom!")])
        .await
        .unwrap();
    let dead = c
        .list_dead(authed(&key_a, pb::ListDeadRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        dead.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![dead_id]
    );
    assert_eq!(dead.jobs[0].attempts[0].error, "boom!");
    let none = c
        .list_dead(authed(&key_b, pb::ListDeadRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert!(none.jobs.is_empty());
    let n = c
        .purge_dead(authed(&key_b, pb::DeadFilter::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(n.count, 0, "B purges nothing of A's");
    let j = c
        .retry_job(authed(&key_a, pb::JobIdRequest { id: dead_id }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(j.state, "pending");
    assert_eq!(
        c.retry_dead(authed(&key_a, pb::DeadFilter::default()))
            .await
            .unwrap()
            .into_inner()
            .count,
        0
    );

    // Auth and input errors.
    let e = c
        .get_job(Request::new(pb::GetJobRequest { id }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    let e = c
        .list_jobs(authed(
            &key_a,
            pb::ListJobsRequest {
                queue: "mail".into(),
                state: "bogus".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("(state)"), "{}", e.message());
    let e = c
        .enqueue(authed(
            &key_a,
            pb::EnqueueRequest {
                jobs: vec![spec("Bad Queue", "k", None)],
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("queue"), "{}", e.message());
    let e = c
        .get_job(authed(&key_a, pb::GetJobRequest { id: 999_999 }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_key_cannot_administer() {
    let db = pgferry_testkit::test_db().await;
    let (_, _admin) = common::tenant_key(&db, "a").await;
    let mut client = db.connect().await;
    let (_, read) = pgferry_server::auth::admin::create_key(
        &mut client,
        "a",
        pgferry_server::auth::Scopes::from_names(["read"]).unwrap(),
        None,
    )
    .await
    .unwrap();
    let server = common::Server::start(&db, common::loopback(), Default::default()).await;
    let mut c = AdminClient::connect(server.url.clone()).await.unwrap();
    let key = read.expose();
    let e = c
        .pause_queue(authed(&key, pb::QueueNameRequest { name: "q".into() }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let e = c
        .enqueue(authed(
            &key,
            pb::EnqueueRequest {
                jobs: vec![spec("q", "k", None)],
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(c
        .list_queues(authed(&key, pb::ListQueuesRequest {}))
        .await
        .is_ok());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_jobs_by_filter() {
    let db = pgferry_testkit::test_db().await;
    let (_, key_a) = common::tenant_key(&db, "a").await;
    let (_, key_b) = common::tenant_key(&db, "b").await;
    let server = common::Server::start(&db, common::loopback(), Default::default()).await;
    let mut c = AdminClient::connect(server.url.clone()).await.unwrap();
    let ids = c
        .enqueue(authed(
            &key_a,
            pb::EnqueueRequest {
                jobs: vec![
                    spec("cx", "a", None),
                    spec("cx", "a", None),
                    spec("cx", "b", None),
                ],
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .job_ids;
    let req = |key: &str, states: Vec<&str>| {
        authed(
            key,
            pb::CancelJobsRequest {
                queue: "cx".into(),
                kind: "a".into(),
                states: states.into_iter().map(String::from).collect(),
                limit: 0,
            },
        )
    };
    let e = c.cancel_jobs(req(&key_a, vec!["dead"])).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let e = c.cancel_jobs(req(&key_b, vec![])).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "another tenant's queue");
    let r = c
        .cancel_jobs(req(&key_a, vec!["pending", "scheduled"]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (r.pending, r.scheduled, r.running, r.has_more),
        (2, 0, 0, false)
    );
    for (id, want) in ids.iter().zip(["cancelled", "cancelled", "pending"]) {
        let j = c
            .get_job(authed(&key_a, pb::GetJobRequest { id: *id }))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(j.state, want, "job {id}");
    }
    server.stop().await;
}

/// `settings.durability`: "async" sticks until changed, an update without it keeps it, and a
/// bad value is INVALID_ARGUMENT naming the field with nothing of the request applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_durability_is_set_kept_and_validated() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = common::tenant_key(&db, "a").await;
    let server = common::Server::start(&db, common::loopback(), Default::default()).await;
    let mut c = AdminClient::connect(server.url.clone()).await.unwrap();
    let update = |settings: pb::QueueSettings| {
        authed(
            &key,
            pb::UpdateQueueRequest {
                name: "ledger".into(),
                settings: Some(settings),
            },
        )
    };
    let durability = |q: &pb::QueueInfo| {
        (
            q.durability.clone(),
            q.settings.as_ref().unwrap().durability.clone(),
        )
    };

    // A new queue is "sync".
    let q = c
        .update_queue(update(pb::QueueSettings::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(durability(&q), ("sync".into(), Some("sync".into())));
    let q = c
        .update_queue(update(pb::QueueSettings {
            durability: Some("async".into()),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(durability(&q), ("async".into(), Some("async".into())));
    // Omitted: kept.
    let q = c
        .update_queue(update(pb::QueueSettings {
            max_attempts: Some(9),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(q.settings.as_ref().unwrap().max_attempts, Some(9));
    assert_eq!(durability(&q), ("async".into(), Some("async".into())));
    // Bad value: refused before anything is written (max_attempts stays 9 too).
    for bad in ["ASYNC", "", "fast"] {
        let e = c
            .update_queue(update(pb::QueueSettings {
                durability: Some(bad.into()),
                max_attempts: Some(2),
                ..Default::default()
            }))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad:?}: {}", e.message());
        assert!(
            e.message().contains("(settings.durability)"),
            "{bad:?}: {}",
            e.message()
        );
    }
    // A later read (ListQueues) shows the stored value.
    let queues = c
        .list_queues(authed(&key, pb::ListQueuesRequest {}))
        .await
        .unwrap()
        .into_inner()
        .queues;
    assert_eq!(queues.len(), 1);
    assert_eq!(queues[0].settings.as_ref().unwrap().max_attempts, Some(9));
    assert_eq!(
        durability(&queues[0]),
        ("async".into(), Some("async".into()))
    );
    // And back.
    let q = c
        .update_queue(update(pb::QueueSettings {
            durability: Some("sync".into()),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(durability(&q), ("sync".into(), Some("sync".into())));
    server.stop().await;
}

/// The dead-letter filter is checked by the one admin use case both transports call: over
/// gRPC as over HTTP, a bad id or a NUL in the error text is INVALID_ARGUMENT naming the
/// field, before anything is retried or purged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_filters_are_checked_as_over_http() {
    let db = pgferry_testkit::test_db().await;
    let (_, key) = common::tenant_key(&db, "a").await;
    let server = common::Server::start(&db, common::loopback(), Default::default()).await;
    let mut c = AdminClient::connect(server.url.clone()).await.unwrap();
    let bad = [
        (
            pb::DeadFilter {
                ids: vec![5, -1],
                ..Default::default()
            },
            "ids",
        ),
        (
            pb::DeadFilter {
                error_contains: "a\0b".into(),
                ..Default::default()
            },
            "error_contains",
        ),
        (
            pb::DeadFilter {
                kind: "no spaces allowed".into(),
                ..Default::default()
            },
            "kind",
        ),
    ];
    for (f, field) in bad {
        let e = c.purge_dead(authed(&key, f.clone())).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{field}: {e:?}");
        assert!(e.message().contains(field), "{field}: {}", e.message());
        let e = c.retry_dead(authed(&key, f)).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{field}: {e:?}");
    }
    server.stop().await;
}
