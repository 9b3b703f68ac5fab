//! Idempotency keys (issue 17): a retry with the same key answers the first request's ids
//! and writes nothing; the key is written in the same transaction as the jobs.

mod common;

use std::time::Duration;

use pgferry_core::{EnqueueRequest, Error, IdempotencyKey, NewJob};
use serde_json::json;

fn jobs(n: usize, tag: &str) -> Vec<NewJob> {
    (0..n)
        .map(|i| NewJob::new("q", "k", json!({ "i": i, "tag": tag })))
        .collect()
}

fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::new(k).unwrap()
}

async fn ready_rows(s: &common::Setup) -> i64 {
    let c = s.db.connect().await;
    c.query_one("SELECT count(*) FROM pgferry.ready", &[])
        .await
        .unwrap()
        .get(0)
}

// Requests of at most EngineConfig::insert_max_rows jobs are one INSERT with their key
// records (enqueue_ready_keyed.sql); larger ones a COPY with the records before its COMMIT.
#[tokio::test]
async fn a_retry_answers_the_first_ids_and_writes_nothing() {
    retry_answers_first_ids(5).await;
}

#[tokio::test]
async fn a_retry_of_a_large_request_answers_the_first_ids_and_writes_nothing() {
    retry_answers_first_ids(50).await;
}

async fn retry_answers_first_ids(n: usize) {
    let s = common::setup().await;
    let first = s
        .engine
        .enqueue_idempotent(key("order-1"), jobs(n, "a"))
        .await
        .unwrap();
    assert!(!first.replayed);
    assert_eq!(first.ids.len(), n);
    let again = s
        .engine
        .enqueue_idempotent(key("order-1"), jobs(n, "a"))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.ids, first.ids);
    assert_eq!(ready_rows(&s).await, n as i64, "the retry wrote nothing");
    // Another key is another request.
    let other = s
        .engine
        .enqueue_idempotent(key("order-2"), jobs(n, "a"))
        .await
        .unwrap();
    assert!(!other.replayed);
    assert_eq!(ready_rows(&s).await, 2 * n as i64);
}

#[tokio::test]
async fn a_key_reused_for_other_jobs_is_refused() {
    let s = common::setup().await;
    s.engine
        .enqueue_idempotent(key("k1"), jobs(2, "a"))
        .await
        .unwrap();
    let e = s
        .engine
        .enqueue_idempotent(key("k1"), jobs(2, "b"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                field: "idempotency_key",
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("\"k1\""),
        "names the user's key: {e}"
    );
    assert_eq!(ready_rows(&s).await, 2);
}

#[tokio::test]
async fn scheduled_requests_are_idempotent_too() {
    let s = common::setup().await;
    let later = std::time::SystemTime::now() + Duration::from_secs(3600);
    let batch: Vec<NewJob> = jobs(3, "s").into_iter().map(|j| j.run_at(later)).collect();
    let first = s
        .engine
        .enqueue_idempotent(key("sched"), batch.clone())
        .await
        .unwrap();
    let again = s
        .engine
        .enqueue_idempotent(key("sched"), batch)
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.ids, first.ids);
    let c = s.db.connect().await;
    let n: i64 = c
        .query_one("SELECT count(*) FROM pgferry.scheduled", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 3);
}

#[tokio::test]
async fn a_merged_flush_answers_each_request_and_replays_only_the_retry() {
    let s = common::setup().await;
    let first = s
        .engine
        .enqueue_idempotent(key("r1"), jobs(3, "r1"))
        .await
        .unwrap();
    // A flush of four requests: a retry of r1, a new keyed one, an unkeyed one, and a
    // reuse of r1's key for other jobs.
    let requests = vec![
        EnqueueRequest::new(jobs(3, "r1")).idempotency_key(key("r1")),
        EnqueueRequest::new(jobs(4, "r2")).idempotency_key(key("r2")),
        EnqueueRequest::new(jobs(2, "plain")),
        EnqueueRequest::new(jobs(1, "other")).idempotency_key(key("r1")),
    ];
    let answers = s.engine.enqueue_requests(&requests).await.unwrap();
    let a0 = answers[0].as_ref().unwrap();
    assert!(a0.replayed);
    assert_eq!(a0.ids, first.ids);
    let a1 = answers[1].as_ref().unwrap();
    assert!(!a1.replayed);
    assert_eq!(a1.ids.len(), 4);
    assert_eq!(answers[2].as_ref().unwrap().ids.len(), 2);
    assert!(answers[3].is_err());
    assert_eq!(ready_rows(&s).await, 3 + 4 + 2);
    // r2's record holds r2's ids (its slice of the flush).
    let again = s
        .engine
        .enqueue_idempotent(key("r2"), jobs(4, "r2"))
        .await
        .unwrap();
    assert_eq!(again.ids, a1.ids);
}

#[tokio::test]
async fn concurrent_requests_with_one_key_write_once() {
    let s = common::setup().await;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let engine = s.engine.clone();
        tasks.push(tokio::spawn(async move {
            engine.enqueue_idempotent(key("race"), jobs(10, "x")).await
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap().unwrap());
    }
    assert_eq!(answers.iter().filter(|a| !a.replayed).count(), 1);
    assert!(answers.iter().all(|a| a.ids == answers[0].ids));
    assert_eq!(ready_rows(&s).await, 10);
}

#[tokio::test]
async fn unique_requests_replay_their_answer() {
    let s = common::setup().await;
    let batch = vec![
        NewJob::new("q", "k", json!({})).unique("u-1"),
        NewJob::new("q", "k", json!({"plain": true})),
    ];
    let first = s
        .engine
        .enqueue_idempotent(key("uq"), batch.clone())
        .await
        .unwrap();
    let again = s.engine.enqueue_idempotent(key("uq"), batch).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.ids, first.ids);
    assert_eq!(ready_rows(&s).await, 2);
}

#[test]
fn keys_are_validated() {
    for bad in ["", "has space", "tab\t", &"x".repeat(256), "ünï"] {
        let e = IdempotencyKey::new(bad).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidName {
                    field: "idempotency_key",
                    ..
                }
            ),
            "{bad:?}: {e}"
        );
    }
    let k = IdempotencyKey::new("a/b:c").unwrap().scoped("t7");
    assert_eq!(k.as_str(), "t7/a/b:c");
    assert_eq!(k.user_key(), "a/b:c");
}

#[tokio::test]
async fn the_janitor_forgets_keys_after_their_retention() {
    let s = common::setup().await;
    let first = s
        .engine
        .enqueue_idempotent(key("old"), jobs(1, "o"))
        .await
        .unwrap();
    s.engine
        .enqueue_idempotent(key("new"), jobs(1, "n"))
        .await
        .unwrap();
    let c = s.db.connect().await;
    c.execute(
        "UPDATE pgferry.idempotency_keys SET created_at = now() - interval '2 days' WHERE key = 'old'",
        &[],
    )
    .await
    .unwrap();
    let pruned =
        pgferry_core::leader::janitor::prune_idempotency_keys(&c, 100, Duration::from_secs(86_400))
            .await
            .unwrap();
    assert_eq!(pruned, 1);
    // Past its retention a key is a new request again; the young one still replays.
    let again = s
        .engine
        .enqueue_idempotent(key("old"), jobs(1, "o"))
        .await
        .unwrap();
    assert!(!again.replayed && again.ids != first.ids);
    assert!(
        s.engine
            .enqueue_idempotent(key("new"), jobs(1, "n"))
            .await
            .unwrap()
            .replayed
    );
}
