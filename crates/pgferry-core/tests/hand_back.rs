//! A hand-back (`ClaimedJob::release`: a prefetched job handed back unstarted, by a worker's
//! drain, a dispatcher's buffer or a runtime's shutdown) is not an attempt (issue 18): the
//! next run is the same attempt with the same `max_attempts`, and the job's history does not
//! list it. A snooze, by contrast, is a run that does not use up an attempt.

mod common;

use std::time::Duration;

use pgferry_core::{AttemptRef, NewJob, QueueOptions};
use serde_json::json;

async fn claim_one(s: &common::Setup, queue: &str) -> pgferry_core::ClaimedJob {
    s.tick().await;
    let mut jobs = s.engine.claim(queue, 1, "w").await.expect("claim");
    assert_eq!(jobs.len(), 1, "one job claimable");
    jobs.pop().unwrap()
}

#[tokio::test]
async fn a_released_job_runs_as_the_same_attempt() {
    let s = common::setup().await;
    let queue = QueueOptions {
        max_attempts: 2,
        ..QueueOptions::default()
    };
    s.engine.upsert_queue("hb", &queue).await.unwrap();
    let id = s
        .engine
        .enqueue(&[NewJob::new("hb", "k", json!({}))])
        .await
        .unwrap()[0];
    let first = claim_one(&s, "hb").await;
    assert_eq!(
        (first.job_id, first.attempt, first.max_attempts),
        (id, 1, 2)
    );
    let done = s.engine.complete(&[first.release()]).await.unwrap();
    assert!(!done[0].stale, "the hand-back is recorded");

    // Handed back twice more: still the first attempt, still two allowed.
    for _ in 0..2 {
        let again = claim_one(&s, "hb").await;
        assert_eq!(
            (again.job_id, again.attempt, again.max_attempts),
            (id, 1, 2)
        );
        s.engine.complete(&[again.release()]).await.unwrap();
    }
    let run = claim_one(&s, "hb").await;
    assert_eq!((run.attempt, run.max_attempts), (1, 2));
    // Its failure uses the first attempt: one more run is allowed, then dead.
    s.engine
        .complete(&[run.failed("boom", Duration::ZERO)])
        .await
        .unwrap();
    let last = claim_one(&s, "hb").await;
    assert_eq!((last.attempt, last.max_attempts), (2, 2));
    s.complete_all(&[last]).await;

    let info = s.engine.get_job(id).await.unwrap();
    let listed: Vec<(i32, &str)> = info
        .attempts
        .iter()
        .map(|a| (a.attempt, a.outcome))
        .collect();
    assert_eq!(
        listed,
        [(1, "failed"), (2, "completed")],
        "hand-backs are not attempts"
    );
}

#[tokio::test]
async fn a_released_job_that_was_heartbeated_is_numbered_as_a_snooze() {
    // Its worker heartbeated it, so a long_leases row holds (job, attempt): the re-run gets
    // the next number (as a snooze would), never a second lease row of the same attempt.
    let s = common::setup().await;
    let id = s
        .engine
        .enqueue(&[NewJob::new("hb2", "k", json!({}))])
        .await
        .unwrap()[0];
    let first = claim_one(&s, "hb2").await;
    let beat = s
        .engine
        .heartbeat(&[AttemptRef::from(&first)], Duration::from_secs(60), "w")
        .await
        .unwrap();
    assert!(beat[0].held);
    s.engine.complete(&[first.release()]).await.unwrap();
    let again = claim_one(&s, "hb2").await;
    assert_eq!(again.job_id, id);
    assert_eq!(
        (again.attempt, again.max_attempts),
        (2, first.max_attempts + 1),
        "does not use up an attempt"
    );
}

/// What a dead-letter retry grants (issue 18: decided and documented in
/// docs/architecture.md §3.3): the next attempt number and a fresh set of `max_attempts`
/// attempts on top of those used, whatever attempt the job died on.
#[tokio::test]
async fn a_dead_letter_retry_grants_a_fresh_set_of_attempts() {
    let s = common::setup().await;
    let id = s
        .engine
        .enqueue(&[NewJob::new("dl", "k", json!({})).max_attempts(3)])
        .await
        .unwrap()[0];
    let first = claim_one(&s, "dl").await;
    // A permanent failure on the first of three attempts.
    s.engine
        .complete(&[first.discarded("bad input")])
        .await
        .unwrap();
    let filter = pgferry_core::DeadFilter {
        ids: Some(vec![id]),
        ..Default::default()
    };
    assert_eq!(s.engine.retry_dead(&filter, 10).await.unwrap(), 1);
    let again = claim_one(&s, "dl").await;
    assert_eq!(
        (again.attempt, again.max_attempts),
        (2, 4),
        "1 used + 3 fresh"
    );
}

/// Issue 18: a job purged from the DLQ is gone (404), as a retry of it says; and a job shows
/// the unique key it holds.
#[tokio::test]
async fn a_purged_dead_job_is_gone_and_a_job_shows_its_unique_key() {
    let s = common::setup().await;
    let id = s
        .engine
        .enqueue(&[NewJob::new("pd", "k", json!({})).unique("order-7")])
        .await
        .unwrap()[0];
    assert_eq!(
        s.engine.get_job(id).await.unwrap().unique_key.as_deref(),
        Some("order-7")
    );
    let job = claim_one(&s, "pd").await;
    s.engine.complete(&[job.discarded("bad")]).await.unwrap();
    assert_eq!(
        s.engine.get_job(id).await.unwrap().state,
        pgferry_core::JobState::Dead
    );
    let filter = pgferry_core::DeadFilter {
        ids: Some(vec![id]),
        ..Default::default()
    };
    assert_eq!(s.engine.purge_dead(&filter).await.unwrap(), 1);
    match s.engine.get_job(id).await {
        Err(pgferry_core::Error::NotFound { .. }) => {}
        other => panic!("a purged job must be gone, got {other:?}"),
    }
}
