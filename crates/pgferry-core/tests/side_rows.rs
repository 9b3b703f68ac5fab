//! Rows outside the log keep the job and its times (issue 18): a dead-letter entry keeps
//! when its job was enqueued, also once the job's segments are reused; a job cancelled while
//! scheduled keeps when it was enqueued and when it was due.

mod common;

use std::time::Duration;

use pgferry_core::leader::rotator::{self, FreeResult};
use pgferry_core::{CancelResult, DeadFilter, JobState, NewJob};
use serde_json::json;

#[tokio::test]
async fn a_dead_letter_keeps_its_job_and_enqueue_time_after_the_log_moved_on() {
    let s = common::setup().await;
    let mut rot = s.db.connect().await;
    let id = s
        .engine
        .enqueue(&[NewJob::new("q", "mail", json!({"to": "a@b"})).max_attempts(1)])
        .await
        .unwrap()[0];
    let enqueued = s.engine.get_job(id).await.unwrap().enqueued_at;
    assert!(enqueued.is_some());
    s.tick().await;
    let c = s.engine.claim("q", 10, "w").await.unwrap();
    s.engine.complete(&[c[0].fail("broke")]).await.unwrap();

    let page = s
        .engine
        .list_dead(&DeadFilter::default(), None, 10)
        .await
        .unwrap();
    assert_eq!(page.jobs.len(), 1);
    assert_eq!(
        page.jobs[0].enqueued_at, enqueued,
        "the DLQ entry's enqueue time"
    );

    // The segment holding the job's only row is closed and reused: the row is gone, the
    // dead-letter entry is all that is left of the job.
    assert!(rotator::advance(&rot, Duration::ZERO).await.unwrap());
    assert_eq!(
        rotator::free_oldest(&mut rot, Duration::ZERO)
            .await
            .unwrap(),
        FreeResult::Freed(0)
    );
    let info = s
        .engine
        .get_job(id)
        .await
        .expect("a dead job is still known");
    assert_eq!(info.state, JobState::Dead);
    assert_eq!(
        (info.kind.as_str(), info.args.to_value()),
        ("mail", json!({"to": "a@b"}))
    );
    assert_eq!(info.queue, "q");
    assert_eq!(info.enqueued_at, enqueued);
    assert_eq!(info.attempts.len(), 1);
    assert_eq!(
        (info.attempts[0].outcome, info.attempts[0].error.as_deref()),
        ("dead", Some("broke"))
    );
    // Redriven from there, it runs again.
    let only = DeadFilter {
        ids: Some(vec![id]),
        ..Default::default()
    };
    assert_eq!(s.engine.retry_dead(&only, 10).await.unwrap(), 1);
    s.tick().await;
    let again = s.engine.claim("q", 10, "w").await.unwrap();
    assert_eq!(again.iter().map(|j| j.job_id).collect::<Vec<_>>(), vec![id]);
}

#[tokio::test]
async fn a_job_cancelled_while_scheduled_keeps_its_times() {
    let s = common::setup().await;
    let id = s
        .engine
        .enqueue(&[NewJob::new("q", "k", json!({})).delay(Duration::from_secs(3600))])
        .await
        .unwrap()[0];
    let before = s.engine.get_job(id).await.unwrap();
    assert_eq!(before.state, JobState::Scheduled);
    assert!(
        before.enqueued_at.is_some(),
        "a scheduled job's enqueue time"
    );
    assert!(before.run_at.is_some());
    assert_eq!(
        s.engine.cancel(id, Some("not needed")).await.unwrap(),
        CancelResult::Unscheduled
    );
    let after = s.engine.get_job(id).await.unwrap();
    assert_eq!(after.state, JobState::Cancelled);
    assert_eq!(after.enqueued_at, before.enqueued_at);
    assert_eq!(after.run_at, before.run_at);
}
