//! Cancelling every job of a queue that matches a filter: pending, scheduled and running jobs
//! of the kind, in batches of one statement, never another kind or a finished job.

mod common;

use std::time::{Duration, SystemTime};

use pgferry_core::{AttemptRef, CancelFilter, Error, JobState, NewJob};
use serde_json::json;

fn job(kind: &str) -> NewJob {
    NewJob::new("cm", kind, json!({}))
}

#[tokio::test]
async fn cancels_pending_scheduled_and_running_jobs_of_a_kind() {
    let s = common::setup_with(common::quiet_counters()).await;
    let e = &s.engine;
    let first = e.enqueue(&[job("a"), job("a"), job("a")]).await.unwrap();
    s.tick().await;
    let c = e.claim("cm", 3, "w").await.unwrap();
    e.complete(&[c[2].completed(None)]).await.unwrap();
    let pending = e
        .enqueue(&[job("a"), job("a"), job("a"), job("b"), job("b")])
        .await
        .unwrap();
    let later = SystemTime::now() + Duration::from_secs(3600);
    let sched = e
        .enqueue(&[job("a").run_at(later), job("a").run_at(later)])
        .await
        .unwrap();

    let f = CancelFilter {
        kind: Some("a".into()),
        states: Vec::new(),
    };
    let done = e
        .cancel_matching("cm", &f, Some("bulk"), 100)
        .await
        .unwrap();
    assert_eq!(
        (done.scheduled, done.pending, done.running, done.has_more),
        (2, 3, 2, false)
    );
    let state = |id: i64| async move { e.get_job(id).await.unwrap() };
    for &id in sched.iter().chain(&pending[..3]) {
        assert_eq!(state(id).await.state, JobState::Cancelled, "job {id}");
    }
    for &id in &pending[3..] {
        assert_eq!(state(id).await.state, JobState::Pending);
    }
    assert_eq!(state(first[2]).await.state, JobState::Completed);
    for &id in &first[..2] {
        let j = state(id).await;
        assert_eq!((j.state, j.cancel_requested), (JobState::Running, true));
    }
    // Running workers are told on their next heartbeat.
    let refs: Vec<AttemptRef> = c[..2].iter().map(AttemptRef::from).collect();
    let beats = e
        .heartbeat(&refs, Duration::from_secs(60), "w")
        .await
        .unwrap();
    assert!(beats.iter().all(|b| b.held && b.cancelled));
    // The cancelled pending jobs are never handed out.
    s.tick().await;
    let rest = e.claim("cm", 10, "w").await.unwrap();
    let mut got: Vec<i64> = rest.iter().map(|j| j.job_id).collect();
    got.sort();
    assert_eq!(got, pending[3..].to_vec());
    // Counted: 5 cancelled at once (the running two when their outcome comes).
    e.flush_counters().await.unwrap();
    let counts = e.queue_counts(&["cm".to_string()]).await.unwrap()["cm"];
    assert_eq!(
        (
            counts.pending,
            counts.scheduled,
            counts.running,
            counts.cancelled
        ),
        (0, 0, 4, 5)
    );
    // Nothing left to cancel of kind a.
    let again = e.cancel_matching("cm", &f, None, 100).await.unwrap();
    assert_eq!((again.scheduled, again.pending, again.running), (0, 0, 0));
}

#[tokio::test]
async fn cancels_in_batches_up_to_a_limit() {
    let s = common::setup_with(common::quiet_counters()).await;
    let e = &s.engine;
    let jobs: Vec<_> = (0..2500).map(|_| job("x")).collect();
    e.enqueue(&jobs).await.unwrap();
    let admin = s.db.connect().await;
    common::reset_statements(&admin).await;
    let pending_only = CancelFilter {
        kind: None,
        states: vec![JobState::Pending],
    };
    let r = e
        .cancel_matching("cm", &pending_only, None, 1200)
        .await
        .unwrap();
    assert_eq!((r.pending, r.has_more), (1200, true));
    let batches: i64 = common::statements(&admin)
        .await
        .iter()
        .filter(|(q, _)| q.contains("INSERT INTO pgferry.cancels"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(batches, 2, "1000 + 200");
    let r = e
        .cancel_matching("cm", &pending_only, None, 100_000)
        .await
        .unwrap();
    assert_eq!((r.pending, r.has_more), (1300, false));
    s.tick().await;
    assert!(e.claim("cm", 100, "w").await.unwrap().is_empty());
}

#[tokio::test]
async fn bad_filters_are_refused() {
    let s = common::setup().await;
    let e = &s.engine;
    e.enqueue(&[job("a")]).await.unwrap();
    let done = CancelFilter {
        kind: None,
        states: vec![JobState::Completed],
    };
    let any = CancelFilter::default();
    let bad_kind = CancelFilter {
        kind: Some("no spaces".into()),
        states: Vec::new(),
    };
    for (q, f, limit, code) in [
        ("cm", &done, 10, "invalid_argument"),
        ("cm", &any, 0, "invalid_argument"),
        ("cm", &any, 100_001, "invalid_argument"),
        ("Bad Queue", &any, 10, "invalid_name"),
        ("cm", &bad_kind, 10, "invalid_name"),
    ] {
        let err = e.cancel_matching(q, f, None, limit).await.unwrap_err();
        assert_eq!(err.code(), code, "{err}");
    }
    assert!(matches!(
        e.cancel_matching("cm", &done, None, 10).await,
        Err(Error::InvalidArgument {
            field: "states",
            ..
        })
    ));
    let client = s.db.connect().await;
    let n: i64 = client
        .query_one("SELECT count(*) FROM pgferry.cancels", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "a refused filter writes nothing");
}

/// The janitor drops a cancellation request once its job is finished (or, cancelled while
/// scheduled, once its retention passed), batch by batch, and keeps those a claim or a
/// heartbeat still needs.
#[tokio::test]
async fn janitor_drops_requests_of_finished_jobs() {
    use pgferry_core::leader::janitor;
    let s = common::setup_with(common::quiet_counters()).await;
    let e = &s.engine;
    let run = e.enqueue(&[job("b"), job("c"), job("f")]).await.unwrap();
    s.tick().await;
    let c = e.claim("cm", 3, "w").await.unwrap();
    for id in &run {
        e.cancel(*id, None).await.unwrap();
    }
    // b finishes, c keeps running, f fails and is retried at once (pending again: the next
    // claim closes it as cancelled).
    e.complete(&[c[0].completed(None), c[2].failed("x", Duration::ZERO)])
        .await
        .unwrap();
    let a = e.enqueue(&[job("a")]).await.unwrap()[0];
    e.cancel(a, None).await.unwrap();
    s.tick().await;
    assert!(
        e.claim("cm", 10, "w").await.unwrap().is_empty(),
        "a and f's retry are closed"
    );
    let d = e.enqueue(&[job("d")]).await.unwrap()[0];
    e.cancel(d, None).await.unwrap();
    let later = SystemTime::now() + Duration::from_secs(3600);
    let sched = e.enqueue(&[job("e").run_at(later)]).await.unwrap()[0];
    e.cancel(sched, None).await.unwrap();

    let client = s.db.connect().await;
    let left = || async {
        let mut v: Vec<i64> = client
            .query("SELECT job_id FROM pgferry.cancels", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        v.sort();
        v
    };
    let pass = |retention: Duration| {
        let client = &client;
        async move {
            let mut after = 0;
            loop {
                let step = janitor::prune_cancels(client, after, 2, retention)
                    .await
                    .unwrap();
                match step.after {
                    Some(a) => after = a,
                    None => return,
                }
            }
        }
    };
    pass(Duration::from_secs(3600)).await;
    let mut want = vec![run[1], d, sched];
    want.sort();
    assert_eq!(
        left().await,
        want,
        "a, f (closed) and b (completed) dropped"
    );
    pass(Duration::ZERO).await;
    want.retain(|id| *id != sched);
    assert_eq!(
        left().await,
        want,
        "the unscheduled one after its retention"
    );
    assert_eq!(e.get_job(a).await.unwrap().state, JobState::Cancelled);
    assert_eq!(e.get_job(run[0]).await.unwrap().state, JobState::Completed);
    // The pending one is closed by the next claim, then dropped; c runs on.
    s.tick().await;
    assert!(e.claim("cm", 10, "w").await.unwrap().is_empty());
    pass(Duration::ZERO).await;
    assert_eq!(left().await, vec![run[1]]);
    assert_eq!(e.get_job(d).await.unwrap().state, JobState::Cancelled);
    assert_eq!(e.get_job(run[2]).await.unwrap().state, JobState::Cancelled);
}
