//! Dead-letter operations, claim-time aging of priorities, and handing jobs back.

mod common;

use std::time::Duration;

use pgferry_core::{DeadFilter, Error, JobState, NewJob, QueueOptions, QueueSettings};
use serde_json::json;

/// Enqueues `kinds` on `queue` with max_attempts 1 and fails each once: all dead.
async fn bury(s: &common::Setup, queue: &str, kinds: &[&str]) -> Vec<i64> {
    let jobs: Vec<_> = kinds
        .iter()
        .map(|k| NewJob::new(queue, *k, json!({})).max_attempts(1))
        .collect();
    let ids = s.engine.enqueue(&jobs).await.unwrap();
    s.tick().await;
    let c = s.engine.claim(queue, 100, "w").await.unwrap();
    let outs: Vec<_> = c
        .iter()
        .map(|j| j.fail(format!("{} broke", j.kind)))
        .collect();
    s.engine.complete(&outs).await.unwrap();
    ids
}

#[tokio::test]
async fn dead_jobs_list_retry_and_purge() {
    let s = common::setup().await;
    let a = bury(&s, "qa", &["mail", "mail", "sms"]).await;
    let b = bury(&s, "qb", &["mail"]).await;
    // Keyset pages of 2 over 4 dead jobs, newest first, no repeats.
    let all = DeadFilter::default();
    let p1 = s.engine.list_dead(&all, None, 2).await.unwrap();
    assert!(p1.has_more);
    let p2 = s
        .engine
        .list_dead(&all, p1.next.as_deref(), 2)
        .await
        .unwrap();
    assert!(!p2.has_more && p2.next.is_none());
    let mut seen: Vec<i64> = p1.jobs.iter().chain(&p2.jobs).map(|j| j.id).collect();
    seen.sort();
    let mut want: Vec<i64> = a.iter().chain(&b).copied().collect();
    want.sort();
    assert_eq!(seen, want);
    // Filters: queue, kind, error text.
    let f = DeadFilter {
        queues: Some(vec!["qa".into()]),
        kind: Some("mail".into()),
        ..Default::default()
    };
    assert_eq!(
        s.engine.list_dead(&f, None, 10).await.unwrap().jobs.len(),
        2
    );
    let f = DeadFilter {
        error_contains: Some("sms b".into()),
        ..Default::default()
    };
    let sms = s.engine.list_dead(&f, None, 10).await.unwrap().jobs;
    assert_eq!(sms.iter().map(|j| j.id).collect::<Vec<_>>(), vec![a[2]]);
    assert_eq!(sms[0].error.as_deref(), Some("sms broke"));
    // Retry one: same id, next attempt, earlier attempt kept in its history.
    let one = DeadFilter {
        ids: Some(vec![a[0]]),
        ..Default::default()
    };
    assert_eq!(s.engine.retry_dead(&one, 10).await.unwrap(), 1);
    s.tick().await;
    let c = s.engine.claim("qa", 10, "w").await.unwrap();
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].job_id, c[0].attempt), (a[0], 2));
    // A retried job gets its allowance again (1 attempt here): attempt 2 of 2.
    assert_eq!(c[0].max_attempts, 2);
    s.complete_all(&c).await;
    let info = s.engine.get_job(a[0]).await.unwrap();
    assert_eq!(info.state, JobState::Completed);
    let outcomes: Vec<_> = info.attempts.iter().map(|x| x.outcome).collect();
    assert_eq!(outcomes, ["dead", "completed"]);
    // Retry all matching in one call, then purge the rest.
    let qb = DeadFilter {
        queues: Some(vec!["qb".into()]),
        ..Default::default()
    };
    assert_eq!(s.engine.retry_dead(&qb, 10).await.unwrap(), 1);
    assert_eq!(s.engine.purge_dead(&all).await.unwrap(), 2);
    assert!(s
        .engine
        .list_dead(&all, None, 10)
        .await
        .unwrap()
        .jobs
        .is_empty());
    // Bad input.
    let bad = s.engine.list_dead(&all, Some("garbage"), 10).await;
    assert!(matches!(
        bad,
        Err(Error::InvalidArgument {
            field: "cursor",
            ..
        })
    ));
    let bad = s.engine.list_dead(&all, None, 0).await;
    assert!(matches!(
        bad,
        Err(Error::InvalidArgument { field: "limit", .. })
    ));
}

#[tokio::test]
async fn flood_of_urgent_jobs_cannot_starve_a_low_priority_job() {
    let s = common::setup().await;
    let opts = QueueOptions {
        shards: 1,
        max_attempts: 3,
        lease: Duration::from_secs(60),
    };
    s.engine.upsert_queue("q", &opts).await.unwrap();
    let aging = Duration::from_millis(300);
    let settings = QueueSettings {
        aging: Some(aging),
        ..Default::default()
    };
    s.engine.update_queue("q", &settings).await.unwrap();
    // The low job's wait starts when it is enqueued (its enqueued_at, by the database
    // clock): time it from before the enqueue, or a serve right at the threshold reads as
    // early by the enqueue's and tick's own duration.
    let started = std::time::Instant::now();
    let low = s
        .engine
        .enqueue(&[NewJob::new("q", "low", json!({})).priority(3)])
        .await
        .unwrap()[0];
    let flood = || -> Vec<NewJob> {
        (0..20)
            .map(|_| NewJob::new("q", "urgent", json!({})).priority(0))
            .collect()
    };
    s.engine.enqueue(&flood()).await.unwrap();
    s.tick().await;
    // Claim batches of 5 while keeping priority 0 non-empty; the low job must come through
    // once its priority has waited `aging`, with urgent jobs still waiting.
    let mut urgent_claimed = 0;
    let served = loop {
        let c = s.engine.claim("q", 5, "w").await.unwrap();
        s.complete_all(&c).await;
        if let Some(j) = c.iter().find(|j| j.job_id == low) {
            break Some((j.kind.clone(), started.elapsed()));
        }
        urgent_claimed += c.len();
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the low-priority job starved"
        );
        s.engine.enqueue(&flood()).await.unwrap();
        s.tick().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (kind, after) = served.unwrap();
    assert_eq!(kind, "low");
    assert!(
        urgent_claimed > 0,
        "urgent jobs went first until the threshold"
    );
    assert!(
        after >= aging,
        "served before its aging threshold: {after:?}"
    );
    // Aging is by the job's own wait: a fresh low-priority job does not jump the queue while
    // urgent ones wait.
    let young = s
        .engine
        .enqueue(&[NewJob::new("q", "low", json!({})).priority(3)])
        .await
        .unwrap()[0];
    s.engine.enqueue(&flood()).await.unwrap();
    s.tick().await;
    let c = s.engine.claim("q", 5, "w").await.unwrap();
    assert_eq!(c.len(), 5);
    assert!(
        c.iter().all(|j| j.job_id != young && j.kind == "urgent"),
        "a fresh low-priority job went before urgent ones"
    );
}

#[tokio::test]
async fn released_jobs_come_back_at_once_without_using_an_attempt() {
    let s = common::setup().await;
    let ids = s
        .engine
        .enqueue(&[
            NewJob::new("q", "k", json!({})).max_attempts(1),
            NewJob::new("q", "k", json!({})).max_attempts(1),
        ])
        .await
        .unwrap();
    s.tick().await;
    let c = s.engine.claim("q", 2, "w").await.unwrap();
    // A worker shutting down hands both back unstarted.
    let outs: Vec<_> = c.iter().map(|j| j.release()).collect();
    assert!(s
        .engine
        .complete(&outs)
        .await
        .unwrap()
        .iter()
        .all(|d| !d.stale));
    s.tick().await;
    let again = s.engine.claim("q", 2, "w2").await.unwrap();
    let mut got: Vec<_> = again
        .iter()
        .map(|j| (j.job_id, j.attempt, j.max_attempts))
        .collect();
    got.sort();
    // The same attempt with the same budget: a hand-back is not an attempt (issue 18).
    assert_eq!(got, vec![(ids[0], 1, 1), (ids[1], 1, 1)]);
}

#[tokio::test]
async fn list_jobs_pages_by_state_and_kind() {
    use pgferry_core::{JobFilter, JobState};
    let s = common::setup().await;
    let jobs: Vec<_> = (0..7)
        .map(|i| {
            NewJob::new(
                "lq",
                if i % 2 == 0 { "even" } else { "odd" },
                json!({ "i": i }),
            )
        })
        .collect();
    let ids = s.engine.enqueue(&jobs).await.unwrap();
    s.engine
        .enqueue(&[NewJob::new("other", "even", json!({}))])
        .await
        .unwrap();
    let later = s
        .engine
        .enqueue(&[NewJob::new("lq", "odd", json!({})).delay(Duration::from_secs(600))])
        .await
        .unwrap()[0];
    s.tick().await;
    let c = s.engine.claim("lq", 3, "w").await.unwrap();
    s.complete_all(&c).await;
    // All of lq's jobs, pages of 3: the scheduled one first, then the log newest first.
    let all = JobFilter::default();
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = s
            .engine
            .list_jobs("lq", &all, cursor.as_deref(), 3)
            .await
            .unwrap();
        assert!(page.jobs.len() <= 3);
        seen.extend(page.jobs.iter().map(|j| j.id));
        if !page.has_more {
            break;
        }
        cursor = page.next;
    }
    let mut want = ids.clone();
    want.push(later);
    want.reverse();
    assert_eq!(seen, want, "every job of the queue once, newest first");
    // By state and kind.
    let done = JobFilter {
        state: Some(JobState::Completed),
        ..Default::default()
    };
    let page = s.engine.list_jobs("lq", &done, None, 10).await.unwrap();
    let mut got: Vec<_> = page.jobs.iter().map(|j| j.id).collect();
    got.sort();
    assert_eq!(got, ids[..3].to_vec());
    assert!(!page.has_more);
    let odd_pending = JobFilter {
        state: Some(JobState::Pending),
        kind: Some("odd".into()),
        ..Default::default()
    };
    let page = s
        .engine
        .list_jobs("lq", &odd_pending, None, 10)
        .await
        .unwrap();
    assert_eq!(
        page.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![ids[5], ids[3]]
    );
    let sched = JobFilter {
        state: Some(JobState::Scheduled),
        ..Default::default()
    };
    let page = s.engine.list_jobs("lq", &sched, None, 10).await.unwrap();
    assert_eq!(
        page.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![later]
    );
    assert!(matches!(
        s.engine.list_jobs("lq", &all, Some("x"), 10).await,
        Err(Error::InvalidArgument {
            field: "cursor",
            ..
        })
    ));
    assert!(s
        .engine
        .list_jobs("nope", &all, None, 10)
        .await
        .unwrap()
        .jobs
        .is_empty());
}
