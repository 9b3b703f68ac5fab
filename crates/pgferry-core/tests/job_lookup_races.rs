//! A job's lookup is two statements when an attempt was claimed (`jobs_detail.sql`, then
//! `jobs_outcomes.sql`), so each reads its own snapshot. A job dead-lettered between them
//! shows a dead outcome without its dead-letter row: it must be read again, not taken for
//! a job purged from the DLQ. Before the fix `get_job` answered NotFound for a job that
//! existed throughout (seen as a failing `test_tasks_fail_fast_too` in the Python SDK,
//! which polls a job while the worker dead-letters it).

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pgferry_core::{Error, JobState, NewJob};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_dead_lettered_during_its_lookup_is_found_dead() {
    let s = common::setup().await;
    const JOBS: usize = 60;
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|i| NewJob::new("dying", "k", json!({ "i": i })).max_attempts(1))
        .collect();
    s.engine.enqueue(&jobs).await.unwrap();
    s.tick().await;
    let claimed = s.engine.claim("dying", JOBS, "w").await.unwrap();
    assert_eq!(claimed.len(), JOBS);

    let not_found = Arc::new(AtomicUsize::new(0));
    let lookups = Arc::new(AtomicUsize::new(0));
    for job in &claimed {
        // Two pollers look the job up in a tight loop while it is dead-lettered, so some
        // lookup is between its two statements when the outcome commits.
        let dead = Arc::new(AtomicBool::new(false));
        let mut pollers = Vec::new();
        for _ in 0..2 {
            let (engine, id) = (s.engine.clone(), job.job_id);
            let (dead, not_found, lookups) = (dead.clone(), not_found.clone(), lookups.clone());
            pollers.push(tokio::spawn(async move {
                loop {
                    let done = dead.load(Ordering::SeqCst);
                    match engine.get_job(id).await {
                        Ok(info) if info.state == JobState::Dead => return,
                        Ok(info) => assert!(!done, "job {id} {:?} after it died", info.state),
                        Err(Error::NotFound { .. }) => {
                            not_found.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => panic!("job {id}: {e}"),
                    }
                    lookups.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
        let done = s.engine.complete(&[job.fail("boom")]).await.unwrap();
        assert_eq!(done.len(), 1);
        dead.store(true, Ordering::SeqCst);
        for p in pollers {
            tokio::time::timeout(Duration::from_secs(30), p)
                .await
                .expect("the job was never seen dead")
                .unwrap();
        }
    }
    assert!(
        lookups.load(Ordering::SeqCst) > JOBS,
        "the pollers never ran"
    );
    assert_eq!(
        not_found.load(Ordering::SeqCst),
        0,
        "lookups of existing jobs answered NotFound ({} lookups)",
        lookups.load(Ordering::SeqCst)
    );
}
