//! Queue counts from counters: exact after a mixed workload (enqueue, claims, completions,
//! retries, DLQ, cancels, scheduled jobs and their promotion), repaired by a recount where
//! they drift, and a recount never overwrites counts that moved while it read.

mod common;

use std::time::Duration;

use pgferry_core::leader::{promoter, rescuer};
use pgferry_core::{
    DeadFilter, EngineConfig, JobFilter, JobState, NewJob, QueueCounts, QueueOptions,
};
use serde_json::json;

fn fast_flush() -> EngineConfig {
    EngineConfig {
        counter_flush: Duration::from_millis(100),
        ..EngineConfig::default()
    }
}

async fn counts(s: &common::Setup, queue: &str) -> QueueCounts {
    s.engine.flush_counters().await.unwrap();
    s.engine.queue_counts(&[queue.to_string()]).await.unwrap()[queue]
}

async fn listed(s: &common::Setup, queue: &str, state: JobState) -> i64 {
    let f = JobFilter {
        state: Some(state),
        ..Default::default()
    };
    let mut n = 0;
    let mut cursor: Option<String> = None;
    loop {
        let page = s
            .engine
            .list_jobs(queue, &f, cursor.as_deref(), 100)
            .await
            .unwrap();
        n += page.jobs.len() as i64;
        if !page.has_more {
            return n;
        }
        cursor = page.next;
    }
}

#[tokio::test]
async fn counts_match_reality_after_a_mixed_workload() {
    let s = common::setup_with(fast_flush()).await;
    let m = common::mixed_workload(&s, "mix").await;
    let c = counts(&s, "mix").await;
    let dlq = s
        .engine
        .list_dead(
            &DeadFilter {
                queues: Some(vec!["mix".into()]),
                ..DeadFilter::default()
            },
            None,
            1000,
        )
        .await
        .unwrap()
        .jobs
        .len() as i64;
    let want = QueueCounts {
        pending: m.pending.len() as i64,
        running: m.running.len() as i64,
        scheduled: m.scheduled.len() as i64,
        dead: dlq,
        enqueued: m.all.len() as i64,
        completed: m.completed.len() as i64,
        // Four retried (two at once, two later), three dead-lettered.
        failed: 7,
        // Reported by a worker, cancelled while pending, cancelled while scheduled (the
        // running job with a cancel request still runs).
        cancelled: 3,
        recounted_at: None,
    };
    assert_eq!(c, want);
    assert_eq!(dlq, 1, "one of the dead jobs was purged, one retried");
    for (st, n) in [
        (JobState::Pending, c.pending),
        (JobState::Running, c.running),
        (JobState::Scheduled, c.scheduled),
    ] {
        assert_eq!(listed(&s, "mix", st).await, n, "{st:?}");
    }

    // Promotion counts in its own statement: every scheduled job due now moves to pending.
    let admin = s.db.connect().await;
    admin
        .execute(
            "UPDATE pgferry.scheduled SET run_at = now() - interval '1 second'",
            &[],
        )
        .await
        .unwrap();
    let moved = promoter::promote(&admin, 1000).await.unwrap() as i64;
    assert_eq!(moved, c.scheduled);
    let after = counts(&s, "mix").await;
    assert_eq!(after.scheduled, 0);
    assert_eq!(after.pending, c.pending + moved);

    // Claim and finish everything pending: running drains, totals grow.
    s.tick().await;
    let claimed = s.engine.claim("mix", 1000, "w").await.unwrap();
    assert_eq!(claimed.len() as i64, after.pending);
    s.complete_all(&claimed).await;
    let end = counts(&s, "mix").await;
    assert_eq!(end.pending, 0);
    assert_eq!(end.running, c.running);
    assert_eq!(end.completed, c.completed + claimed.len() as i64);

    // The counters were exact: a recount finds nothing to repair.
    let r = s.engine.recount_queue("mix", false).await.unwrap();
    assert_eq!(r.lanes, 4, "two priorities, two shards");
    assert_eq!((r.stored, r.repaired, r.busy), (4, 0, 0), "{r:?}");
    let recounted = counts(&s, "mix").await;
    assert!(recounted.recounted_at.is_some());
    assert_eq!(
        QueueCounts {
            recounted_at: None,
            ..recounted
        },
        end
    );
}

#[tokio::test]
async fn recount_repairs_drift() {
    let s = common::setup_with(fast_flush()).await;
    s.engine
        .upsert_queue(
            "drift",
            &QueueOptions {
                lease: Duration::from_millis(100),
                ..QueueOptions::default()
            },
        )
        .await
        .unwrap();
    let jobs = |n: usize| -> Vec<NewJob> {
        (0..n)
            .map(|i| NewJob::new("drift", "k", json!({ "i": i })))
            .collect()
    };
    s.engine.enqueue(&jobs(5)).await.unwrap();
    // A rolled-back transactional enqueue was counted when its statement returned.
    let mut client = s.db.connect().await;
    let tx = client.transaction().await.unwrap();
    s.engine.enqueue_tx(&tx, &jobs(3)).await.unwrap();
    tx.rollback().await.unwrap();
    // Two claimed jobs whose lease expires are rescued by the leader (not counted yet).
    s.tick().await;
    let c = s.engine.claim("drift", 2, "w").await.unwrap();
    assert_eq!(c.len(), 2);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut leader = s.db.connect().await;
    let rescued = rescuer::rescue(&mut leader, Duration::ZERO).await.unwrap();
    assert_eq!(rescued.retried, 2);
    let drifted = counts(&s, "drift").await;
    assert_eq!((drifted.pending, drifted.running), (3 + 3, 2));

    let r = s.engine.recount_queue("drift", false).await.unwrap();
    assert_eq!((r.lanes, r.stored, r.repaired, r.busy), (1, 1, 1, 0));
    let fixed = counts(&s, "drift").await;
    assert_eq!((fixed.pending, fixed.running), (5, 0));
    assert_eq!(fixed.enqueued, 8, "totals are not recounted");
    // Exact again: the next claim and completion keep it so.
    s.tick().await;
    let c = s.engine.claim("drift", 10, "w").await.unwrap();
    assert_eq!(c.len(), 5);
    s.complete_all(&c[..3]).await;
    let now = counts(&s, "drift").await;
    assert_eq!((now.pending, now.running, now.completed), (0, 2, 3));
}

/// A lane whose counters move while the recount reads its truth is left alone: deltas
/// of statements that committed before the read would otherwise be counted twice.
#[tokio::test]
async fn recount_leaves_lanes_written_meanwhile() {
    let s = common::setup_with(EngineConfig {
        counter_flush: Duration::from_secs(3),
        ..EngineConfig::default()
    })
    .await;
    s.engine
        .enqueue(&[NewJob::new("busy", "k", json!({}))])
        .await
        .unwrap();
    s.engine.flush_counters().await.unwrap();
    let engine = s.engine.clone();
    // The recount reads version and truth at once, then waits two flush intervals (6 s).
    let recount = tokio::spawn(async move { engine.recount_queue("busy", false).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    s.engine
        .enqueue(&[NewJob::new("busy", "k", json!({}))])
        .await
        .unwrap();
    s.engine.flush_counters().await.unwrap();
    let r = recount.await.unwrap().unwrap();
    assert_eq!((r.lanes, r.stored, r.busy), (1, 0, 1), "{r:?}");
    assert_eq!(counts(&s, "busy").await.pending, 2);
    // Forced, it stores what it reads.
    let r = s.engine.recount_queue("busy", true).await.unwrap();
    assert_eq!((r.stored, r.repaired), (1, 0));
    assert!(s.engine.recount_queue("Bad Name", true).await.is_err());
}
