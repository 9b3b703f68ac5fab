//! Races that decide a job's fate: cancel against claim, rescue against a late completion.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pgferry_core::leader::rescuer;
use pgferry_core::{CancelResult, JobState, NewJob, QueueOptions};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_cancelled_before_a_claim_is_never_handed_out() {
    let s = common::setup().await;
    let jobs: Vec<_> = (0..300)
        .map(|i| NewJob::new("q", "k", json!({ "i": i })))
        .collect();
    let ids = s.engine.enqueue(&jobs).await.unwrap();
    s.tick().await;
    // Cancel every other job while two claimers take small batches. The claimers start once
    // the first cancel is requested: two claimers can otherwise drain all 300 jobs before a
    // slow first cancel (a new pooled connection preparing its statements) lands, leaving no
    // cancel to race (about 1 run in 10 on a busy 2-core machine). The other 149 cancels
    // still race the claims.
    let cancelled_at: Arc<Mutex<Vec<(i64, Instant)>>> = Arc::default();
    let (first_cancel, started) = tokio::sync::watch::channel(false);
    let canceller = {
        let (engine, ids, done) = (s.engine.clone(), ids.clone(), cancelled_at.clone());
        tokio::spawn(async move {
            for id in ids.iter().step_by(2) {
                if let Ok(CancelResult::Requested) = engine.cancel(*id, None).await {
                    done.lock().unwrap().push((*id, Instant::now()));
                    first_cancel.send_replace(true);
                }
            }
        })
    };
    let mut claimers = Vec::new();
    for w in 0..2 {
        let engine = s.engine.clone();
        let mut started = started.clone();
        claimers.push(tokio::spawn(async move {
            // Bounded: with no cancel at all the claimers go on, and the check below fails.
            let _ = tokio::time::timeout(Duration::from_secs(10), started.wait_for(|s| *s)).await;
            let mut got: Vec<(i64, Instant)> = Vec::new();
            for _ in 0..200 {
                let started = Instant::now();
                let c = engine.claim("q", 3, &format!("w{w}")).await.unwrap();
                got.extend(c.iter().map(|j| (j.job_id, started)));
                let outs: Vec<_> = c.iter().map(|j| j.completed(None)).collect();
                engine.complete(&outs).await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            got
        }));
    }
    canceller.await.unwrap();
    let mut handed: Vec<(i64, Instant)> = Vec::new();
    for c in claimers {
        handed.extend(c.await.unwrap());
    }
    let cancelled = cancelled_at.lock().unwrap().clone();
    assert!(!cancelled.is_empty());
    for (id, at) in &cancelled {
        if let Some((_, started)) = handed.iter().find(|(h, _)| h == id) {
            assert!(
                started < at,
                "job {id} handed out by a claim that began after its cancel"
            );
        }
    }
    // Whatever was not handed out is closed as cancelled, nothing is both.
    s.tick().await;
    while !s.engine.claim("q", 100, "w").await.unwrap().is_empty() {}
    for (id, _) in &cancelled {
        let info = s.engine.get_job(*id).await.unwrap();
        let was_handed = handed.iter().any(|(h, _)| h == id);
        let want = if was_handed {
            JobState::Completed
        } else {
            JobState::Cancelled
        };
        assert_eq!(info.state, want, "job {id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rescue_racing_a_late_completion_leaves_exactly_one_outcome() {
    let s = common::setup().await;
    let opts = QueueOptions {
        shards: 1,
        max_attempts: 5,
        lease: Duration::from_millis(100),
    };
    s.engine.upsert_queue("q", &opts).await.unwrap();
    for round in 0..5 {
        let jobs: Vec<_> = (0..60)
            .map(|i| NewJob::new("q", "k", json!({ "i": i })))
            .collect();
        s.engine.enqueue(&jobs).await.unwrap();
        s.tick().await;
        let c = s.engine.claim("q", 60, "w").await.unwrap();
        assert_eq!(c.len(), 60);
        tokio::time::sleep(Duration::from_millis(150)).await;
        // The worker reports in three slices (odd rounds: the whole batch at once, which is
        // complete()'s whole-receipt path) while the rescuer runs.
        let mut rc = s.db.connect().await;
        let rescue =
            tokio::spawn(async move { rescuer::rescue(&mut rc, Duration::ZERO).await.unwrap() });
        let mut won = 0;
        let slice = if round % 2 == 0 { 20 } else { 60 };
        for part in c.chunks(slice) {
            let outs: Vec<_> = part.iter().map(|j| j.completed(None)).collect();
            won += s
                .engine
                .complete(&outs)
                .await
                .unwrap()
                .iter()
                .filter(|d| !d.stale)
                .count() as i64;
        }
        let rep = rescue.await.unwrap();
        assert_eq!(
            won + rep.retried,
            60,
            "round {round}: won {won}, rescued {rep:?}"
        );
        // Drain the retried attempts so the next round starts clean.
        s.tick().await;
        let again = s.engine.claim("q", 100, "w").await.unwrap();
        assert_eq!(again.len() as i64, rep.retried);
        s.complete_all(&again).await;
    }
    let twice: i64 =
        s.db.connect()
            .await
            .query_one(
                "SELECT count(*) FROM (SELECT u.job_id, u.attempt FROM pgferry.completions c,
                    unnest(c.job_ids, c.attempts) u(job_id, attempt) GROUP BY 1, 2
                    HAVING count(*) > 1) x",
                &[],
            )
            .await
            .unwrap()
            .get(0);
    assert_eq!(twice, 0, "an attempt with two outcomes");
}
