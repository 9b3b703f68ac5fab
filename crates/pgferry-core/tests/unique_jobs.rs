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

/// The janitor releases exactly the keys whose holder no longer holds them (completed past
/// its period, dead, cancelled), in batches of one statement each, and keeps the others.
#[tokio::test]
async fn janitor_releases_keys_of_finished_holders_in_batches() {
    use pgferry_core::leader::janitor;
    let s = common::setup_with(common::quiet_counters()).await;
    let hour = Duration::from_secs(3600);
    let e = &s.engine;
    let ids: Vec<i64> = e
        .enqueue_many(&[
            keyed("pending"),
            keyed("running"),
            keyed("done"),
            keyed("done-hour").unique_period(hour),
            keyed("done-ms").unique_period(Duration::from_millis(1)),
            keyed("dead"),
            keyed("cancelled"),
            keyed("retrying"),
        ])
        .await
        .unwrap()
        .iter()
        .map(|x| x.id)
        .collect();
    let later = std::time::SystemTime::now() + hour;
    e.enqueue_many(&[
        keyed("scheduled").run_at(later),
        keyed("unscheduled").run_at(later),
    ])
    .await
    .unwrap();
    let unscheduled = e.enqueue_many(&[keyed("unscheduled")]).await.unwrap()[0].id;
    e.cancel(unscheduled, None).await.unwrap();
    s.tick().await;
    // Claim everything; "pending" is handed back at once (its next attempt is pending).
    let c = e.claim("q", 10, "w").await.unwrap();
    let by = |id: i64| c.iter().find(|j| j.job_id == id).unwrap();
    e.cancel(ids[6], None).await.unwrap();
    e.complete(&[
        by(ids[0]).release(),
        by(ids[2]).completed(None),
        by(ids[3]).completed(None),
        by(ids[4]).completed(None),
        by(ids[5]).discarded("bad"),
        by(ids[6]).cancelled("asked"),
        by(ids[7]).failed("again", hour),
    ])
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;

    let client = s.db.connect().await;
    let admin = s.db.connect().await;
    common::reset_statements(&admin).await;
    let mut after = None;
    let (mut batches, mut released) = (0, 0);
    loop {
        let step = janitor::prune_unique(&client, after.as_ref(), 3)
            .await
            .unwrap();
        batches += 1;
        released += step.released;
        after = step.after;
        if after.is_none() {
            break;
        }
    }
    let stmts = common::statements(&admin).await;
    let calls: i64 = stmts.iter().map(|(_, n)| n).sum();
    assert_eq!(calls, batches, "one statement per batch: {stmts:?}");
    assert_eq!(batches, 4, "10 keys in batches of 3");
    let mut left: Vec<String> = client
        .query("SELECT key FROM pgferry.unique_keys ORDER BY key", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    left.sort();
    assert_eq!(
        left,
        vec!["done-hour", "pending", "retrying", "running", "scheduled"]
    );
    assert_eq!(released, 5);
    // A released key is free; a kept one still answers its holder.
    let again = e
        .enqueue_many(&[keyed("done"), keyed("running")])
        .await
        .unwrap();
    assert!(!again[0].duplicate);
    assert_eq!((again[1].id, again[1].duplicate), (ids[1], true));
}
