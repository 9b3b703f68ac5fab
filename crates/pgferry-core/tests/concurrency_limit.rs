//! A queue's concurrency limit holds across servers; completions and rescues free slots.

mod common;

use std::time::Duration;

use pgferry_core::leader::rescuer;
use pgferry_core::{Engine, NewJob, QueueOptions, QueueSettings};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_most_the_limit_runs_across_servers() {
    let s = common::setup().await;
    let opts = QueueOptions {
        shards: 2,
        max_attempts: 5,
        lease: Duration::from_millis(300),
    };
    s.engine.upsert_queue("q", &opts).await.unwrap();
    let limit = QueueSettings {
        concurrency: Some(3),
        ..Default::default()
    };
    assert_eq!(
        s.engine
            .update_queue("q", &limit)
            .await
            .unwrap()
            .concurrency,
        Some(3)
    );
    let jobs: Vec<_> = (0..20)
        .map(|i| NewJob::new("q", "k", json!({ "i": i })))
        .collect();
    s.engine.enqueue(&jobs).await.unwrap();
    s.tick().await;
    // Two servers claim concurrently: three jobs in all.
    let other = Engine::new(s.db.pool(4), Default::default());
    let (a, b) = tokio::join!(s.engine.claim("q", 10, "a"), other.claim("q", 10, "b"));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.len() + b.len(), 3, "{} + {}", a.len(), b.len());
    assert!(
        s.engine.claim("q", 10, "a").await.unwrap().is_empty(),
        "limit reached"
    );
    // A completion frees its slot.
    let held: Vec<_> = a.iter().chain(&b).cloned().collect();
    s.engine.complete(&[held[0].completed(None)]).await.unwrap();
    let next = s.engine.claim("q", 10, "a").await.unwrap();
    assert_eq!(next.len(), 1);
    // Expired leases free theirs through the rescue.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut rc = s.db.connect().await;
    let rep = rescuer::rescue(&mut rc, Duration::ZERO).await.unwrap();
    assert_eq!(rep.retried, 3, "{rep:?}");
    assert_eq!(
        rep.per_queue,
        vec![("q".to_string(), 3)],
        "per queue, for metrics"
    );
    s.tick().await;
    assert_eq!(s.engine.claim("q", 10, "a").await.unwrap().len(), 3);
    // Removing the limit: everything left is claimable.
    let off = QueueSettings {
        concurrency: Some(0),
        ..Default::default()
    };
    assert_eq!(
        s.engine.update_queue("q", &off).await.unwrap().concurrency,
        None
    );
    let rest = s.engine.claim("q", 100, "a").await.unwrap();
    // 20 jobs, 4 fresh ones claimed above; the 3 rescued came back and were claimed again.
    assert_eq!(rest.len(), 16, "the rest of the queue");
}
