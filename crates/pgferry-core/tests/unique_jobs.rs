//! Unique jobs: duplicates answer the holder's id without aborting the batch; the key frees
//! when its holder finishes (or after its period); concurrent enqueuers: exactly one wins.

mod common;

use std::time::Duration;

use pgferry_core::{Error, NewJob};
use serde_json::json;

fn keyed(key: &str) -> NewJob {
    NewJob::new("q", "k", json!({})).unique(key)
}

#[tokio::test]
async fn duplicates_in_and_across_batches_return_the_holder() {
    let s = common::setup().await;
    let first = s
        .engine
        .enqueue_many(&[keyed("a"), keyed("a"), NewJob::new("q", "k", json!({}))])
        .await
        .unwrap();
    assert!(!first[0].duplicate && first[1].duplicate && !first[2].duplicate);
    assert_eq!(
        first[1].id, first[0].id,
        "in-batch duplicate names the first job"
    );
    let again = s
        .engine
        .enqueue_many(&[keyed("b"), keyed("a")])
        .await
        .unwrap();
    assert!(!again[0].duplicate);
    assert_eq!((again[1].id, again[1].duplicate), (first[0].id, true));
    // Same key in another queue is another key.
    let other = s
        .engine
        .enqueue_many(&[NewJob::new("q2", "k", json!({})).unique("a")])
        .await
        .unwrap();
    assert!(!other[0].duplicate);
    // Only the winners are in the log.
    s.tick().await;
    let claimed = s.engine.claim("q", 10, "w").await.unwrap();
    assert_eq!(claimed.len(), 3);
    // While running it still holds; once completed the key is free again.
    assert!(s.engine.enqueue_many(&[keyed("a")]).await.unwrap()[0].duplicate);
    s.complete_all(&claimed).await;
    let after = s.engine.enqueue_many(&[keyed("a")]).await.unwrap();
    assert!(!after[0].duplicate);
    assert_ne!(after[0].id, first[0].id);
}

#[tokio::test]
async fn completed_holder_keeps_the_key_for_its_period() {
    let s = common::setup().await;
    let id = s
        .engine
        .enqueue_many(&[keyed("p").unique_period(Duration::from_secs(3600))])
        .await
        .unwrap()[0]
        .id;
    s.tick().await;
    let c = s.engine.claim("q", 1, "w").await.unwrap();
    s.complete_all(&c).await;
    let dup = s
        .engine
        .enqueue_many(&[keyed("p").unique_period(Duration::from_secs(3600))])
        .await
        .unwrap()[0];
    assert_eq!((dup.id, dup.duplicate), (id, true));
    // Scheduled holders hold too.
    let later = s
        .engine
        .enqueue_many(&[keyed("s").delay(Duration::from_secs(3600))])
        .await
        .unwrap()[0];
    assert!(s.engine.enqueue_many(&[keyed("s")]).await.unwrap()[0].duplicate);
    // A cancelled holder releases it.
    s.engine.cancel(later.id, None).await.unwrap();
    assert!(!s.engine.enqueue_many(&[keyed("s")]).await.unwrap()[0].duplicate);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_enqueuers_exactly_one_wins() {
    let s = common::setup().await;
    for round in 0..10 {
        let key = format!("race-{round}");
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (engine, key) = (s.engine.clone(), key.clone());
                tokio::spawn(async move { engine.enqueue_many(&[keyed(&key)]).await.unwrap()[0] })
            })
            .collect();
        let results: Vec<_> = futures_util::future::join_all(tasks)
            .await
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        let winners: Vec<_> = results.iter().filter(|e| !e.duplicate).collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        assert!(results.iter().all(|e| e.id == winners[0].id), "{results:?}");
    }
    s.tick().await;
    assert_eq!(s.engine.claim("q", 100, "w").await.unwrap().len(), 10);
}

#[tokio::test]
async fn bad_keys_and_transactional_use_are_refused() {
    let s = common::setup().await;
    let r = s.engine.enqueue(&[keyed("")]).await;
    assert!(matches!(
        r,
        Err(Error::InvalidArgument {
            field: "unique_key",
            ..
        })
    ));
    let r = s.engine.enqueue(&[keyed(&"x".repeat(300))]).await;
    assert!(matches!(
        r,
        Err(Error::InvalidArgument {
            field: "unique_key",
            ..
        })
    ));
    let mut c = s.db.connect().await;
    let tx = c.transaction().await.unwrap();
    let r = s.engine.enqueue_tx(&tx, &[keyed("t")]).await;
    assert!(matches!(
        r,
        Err(Error::InvalidArgument {
            field: "unique_key",
            ..
        })
    ));
}
