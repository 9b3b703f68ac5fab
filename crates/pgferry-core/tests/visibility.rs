//! Tick visibility: late commits are claimed exactly once, rollbacks never, and an open
//! transaction does not make claims rescan history.

mod common;

use std::collections::HashSet;

use pgferry_core::NewJob;
use serde_json::json;

fn jobs(n: usize, tag: &str) -> Vec<NewJob> {
    (0..n)
        .map(|i| NewJob::new("q", "k", json!({ "tag": tag, "i": i })))
        .collect()
}

#[tokio::test]
async fn late_commit_is_claimed_exactly_once_and_rollback_never() {
    let s = common::setup().await;
    let mut late_conn = s.db.connect().await;
    let mut rollback_conn = s.db.connect().await;
    // Warm the lane cache so the open transactions only insert.
    s.engine.enqueue(&jobs(1, "warm")).await.unwrap();

    let late_tx = late_conn.transaction().await.unwrap();
    let late_ids = s
        .engine
        .enqueue_tx(&late_tx, &jobs(5, "late"))
        .await
        .unwrap();
    let rb_tx = rollback_conn.transaction().await.unwrap();
    let rb_ids = s
        .engine
        .enqueue_tx(&rb_tx, &jobs(5, "rolled-back"))
        .await
        .unwrap();

    let mut seen = Vec::new();
    // Many ticks and claims while both stay open; later jobs (with higher seq) committed and
    // claimed meanwhile.
    for round in 0..20 {
        s.engine
            .enqueue(&jobs(7, &format!("r{round}")))
            .await
            .unwrap();
        s.tick().await;
        for _ in 0..3 {
            seen.extend(
                s.engine
                    .claim("q", 3, "w")
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|j| j.job_id),
            );
        }
    }
    assert!(
        late_ids.iter().all(|id| !seen.contains(id)),
        "claimed before commit"
    );
    late_tx.commit().await.unwrap();
    rb_tx.rollback().await.unwrap();
    for _ in 0..5 {
        s.tick().await;
        loop {
            let c = s.engine.claim("q", 50, "w").await.unwrap();
            if c.is_empty() {
                break;
            }
            seen.extend(c.into_iter().map(|j| j.job_id));
        }
    }
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "a job was claimed twice");
    for id in &late_ids {
        assert_eq!(seen.iter().filter(|s| *s == id).count(), 1, "late job {id}");
    }
    for id in &rb_ids {
        assert!(!seen.contains(id), "rolled-back job {id} was claimed");
    }
    assert_eq!(seen.len(), 1 + 5 + 20 * 7);
}

#[tokio::test]
async fn open_transaction_does_not_make_claims_rescan() {
    let s = common::setup().await;
    s.engine.enqueue(&jobs(1, "warm")).await.unwrap();
    // A transaction holding an xid, left open for the whole test.
    let mut holder = s.db.connect().await;
    let open = holder.transaction().await.unwrap();
    open.batch_execute("CREATE TEMP TABLE hold (a int); INSERT INTO hold VALUES (1)")
        .await
        .unwrap();
    // And one open transaction that has enqueued (its rows are in progress).
    let mut producer = s.db.connect().await;
    let in_progress = producer.transaction().await.unwrap();
    s.engine
        .enqueue_tx(&in_progress, &jobs(3, "open"))
        .await
        .unwrap();

    // Build a long history behind the open transactions.
    for _ in 0..20 {
        s.engine.enqueue(&jobs(500, "history")).await.unwrap();
        s.tick().await;
        while !s.engine.claim("q", 1000, "w").await.unwrap().is_empty() {}
    }
    let client = s.db.connect().await;
    client.batch_execute("ANALYZE pgferry.ready").await.unwrap();

    let (observer, mut notices) = common::connect_with_notices(&s.db).await;
    common::enable_auto_explain(&observer).await;
    let lane: i32 = client
        .query_one("SELECT min(lane) FROM pgferry.lanes", &[])
        .await
        .unwrap()
        .get(0);
    let batch = 50usize;
    for round in 0..5 {
        s.engine
            .enqueue(&jobs(200, &format!("new{round}")))
            .await
            .unwrap();
        s.tick().await;
        common::drain(&mut notices);
        let rows = observer
            .query(
                "SELECT job_id FROM pgferry.claim($1, $2, 'w', 60000)",
                &[&lane, &(batch as i32)],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), batch);
        let plans = common::drain(&mut notices);
        let read: u64 = common::plans_with(&plans, "FROM pgferry.ready r")
            .iter()
            .map(|p| common::rows_read(p, "ready"))
            .sum();
        // Bounded by the batch plus the in-progress rows (+1: LIMIT peeks no further, but a
        // filter may reject the in-progress transaction's rows in the range step).
        assert!(
            read <= (batch + 3 + 1) as u64,
            "round {round}: claim read {read} ready rows for a batch of {batch}:\n{}",
            plans.join("\n")
        );
        while !s.engine.claim("q", 1000, "w").await.unwrap().is_empty() {}
    }
    in_progress.rollback().await.unwrap();
    open.rollback().await.unwrap();
}

/// A transaction that creates a queue by enqueueing into it first, then rolls back, must not
/// leave this process believing in the queue: before the fix the lane cache kept the rolled
/// back queue's lanes, later enqueues wrote jobs into lanes that did not exist, and another
/// process's claims never found them (acknowledged, never run); this process's own reload
/// a second later failed with "queue not found".
#[tokio::test]
async fn a_queue_created_by_a_rolled_back_transaction_is_not_cached() {
    let s = common::setup().await;
    let mut conn = s.db.connect().await;
    let fresh = |tag: &str| vec![NewJob::new("fresh", "k", json!({ "tag": tag }))];

    let tx = conn.transaction().await.unwrap();
    s.engine
        .enqueue_tx(&tx, &fresh("rolled-back"))
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    // A second transaction that commits, and a plain enqueue: both must be claimable.
    let tx = conn.transaction().await.unwrap();
    let in_tx = s.engine.enqueue_tx(&tx, &fresh("committed")).await.unwrap();
    tx.commit().await.unwrap();
    let plain = s.engine.enqueue(&fresh("plain")).await.unwrap();

    // Another process (its own engine and lane cache) claims them.
    let other = pgferry_core::Engine::new(s.db.pool(4), pgferry_core::EngineConfig::default());
    let mut claimed = HashSet::new();
    for _ in 0..50 {
        s.tick().await;
        for j in other.claim("fresh", 10, "w").await.unwrap() {
            claimed.insert(j.job_id);
        }
        if claimed.len() >= 2 {
            break;
        }
    }
    let expected: HashSet<i64> = in_tx.into_iter().chain(plain).collect();
    assert_eq!(
        claimed, expected,
        "the committed jobs of the queue are claimed"
    );
}

/// The fallback of `enqueue_tx` for a queue it cannot create on its own connection: another
/// transaction holds an uncommitted insert of the same queue. The engine's own creation gives
/// up after its lock timeout, the caller's transaction creates (waiting for that one, as
/// Postgres must), nothing uncommitted is cached, and the job is claimed by another process.
#[tokio::test]
async fn a_queue_held_by_another_open_transaction_is_created_in_the_callers() {
    let s = common::setup().await;
    let holder = s.db.connect().await;
    let mut conn = s.db.connect().await;
    holder
        .batch_execute("BEGIN; INSERT INTO pgferry.queues (name) VALUES ('held')")
        .await
        .unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        holder.batch_execute("COMMIT").await.unwrap();
    });
    let tx = conn.transaction().await.unwrap();
    let ids = s
        .engine
        .enqueue_tx(&tx, &[NewJob::new("held", "k", json!({}))])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    release.await.unwrap();

    let other = pgferry_core::Engine::new(s.db.pool(4), pgferry_core::EngineConfig::default());
    let mut claimed = Vec::new();
    for _ in 0..50 {
        s.tick().await;
        claimed.extend(
            other
                .claim("held", 10, "w")
                .await
                .unwrap()
                .iter()
                .map(|j| j.job_id),
        );
        if !claimed.is_empty() {
            break;
        }
    }
    assert_eq!(claimed, ids);
}
