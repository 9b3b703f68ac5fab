//! A process that is not the leader learns of ticks through LISTEN/NOTIFY.

mod common;

use std::time::Duration;

use pgferry_core::{listen, Engine, EngineConfig, Leader, LeaderConfig, NewJob};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_leader_process_wakes_on_notified_ticks() {
    let s = common::setup().await;
    // "Process" A leads; "process" B is another engine on the same database that only listens.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let leader = tokio::spawn(
        Leader::new(
            s.engine.clone(),
            s.db.config.clone(),
            LeaderConfig::default(),
        )
        .run(stop_rx),
    );
    let b = Engine::new(s.db.pool(2), EngineConfig::default());
    let listener = tokio::spawn(listen::run_tick_listener(b.clone(), s.db.config.clone()));
    let mut ids = Vec::new();
    let mut got = Vec::new();
    // Bounded: each round enqueues on A and waits on B's tick feed, then claims on B.
    for _ in 0..100 {
        let seen = *b.signals().subscribe_ticks().borrow();
        ids.extend(
            s.engine
                .enqueue(&[NewJob::new("q", "k", json!({}))])
                .await
                .unwrap(),
        );
        let now = b
            .signals()
            .wait_for_tick(seen, Duration::from_secs(5))
            .await;
        if now > seen {
            got.extend(
                b.claim("q", 10, "b")
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|j| j.job_id),
            );
        }
        if got.len() >= 3 {
            break;
        }
    }
    assert!(
        *b.signals().subscribe_ticks().borrow() > 0,
        "B never heard a tick"
    );
    assert!(got.len() >= 3, "B claimed {got:?} of {ids:?}");
    let _ = stop_tx.send(true);
    leader.await.unwrap();
    listener.abort();
}

/// Issue 27: an enqueue in a process that does not lead reaches the leader's idle ticker
/// (B's listener NOTIFYs pgferry_grew, A's listener wakes A's ticker), instead of waiting
/// for the ticker's idle interval — here an hour, so without the nudge no tick would come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_leaders_enqueue_wakes_the_leaders_idle_ticker() {
    let s = common::setup().await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let leader = tokio::spawn(
        Leader::new(
            s.engine.clone(),
            s.db.config.clone(),
            LeaderConfig {
                idle_tick_interval: Duration::from_secs(3600),
                ..LeaderConfig::default()
            },
        )
        .run(stop_rx),
    );
    let a_listener = tokio::spawn(listen::run_tick_listener(
        s.engine.clone(),
        s.db.config.clone(),
    ));
    let b = Engine::new(s.db.pool(2), EngineConfig::default());
    let b_listener = tokio::spawn(listen::run_tick_listener(b.clone(), s.db.config.clone()));
    // A's own enqueue wakes its ticker: B hears the tick once both listeners listen.
    let mut seen = 0;
    for _ in 0..100 {
        s.engine
            .enqueue(&[NewJob::new("q", "k", json!({}))])
            .await
            .unwrap();
        seen = b
            .signals()
            .wait_for_tick(0, Duration::from_millis(200))
            .await;
        if seen > 0 {
            break;
        }
    }
    assert!(seen > 0, "B never heard a tick");
    // Wait until the ticker is idle: no new tick for a while (bounded).
    for _ in 0..100 {
        let now = b
            .signals()
            .wait_for_tick(seen, Duration::from_millis(300))
            .await;
        if now == seen {
            break;
        }
        seen = now;
    }
    assert!(s.engine.signals().growth().ticking(), "A's ticker runs");
    assert!(!b.signals().growth().ticking());
    // B enqueues: a tick must follow without any enqueue in A.
    let id = b
        .enqueue(&[NewJob::new("q", "k", json!({}))])
        .await
        .unwrap()[0];
    let after = b
        .signals()
        .wait_for_tick(seen, Duration::from_secs(60))
        .await;
    assert!(after > seen, "no tick after B's enqueue (ticker idle)");
    let claimed: Vec<i64> = b
        .claim("q", 100, "b")
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.job_id)
        .collect();
    assert!(claimed.contains(&id), "{claimed:?} lacks {id}");
    let _ = stop_tx.send(true);
    leader.await.unwrap();
    a_listener.abort();
    b_listener.abort();
}

/// Issue 21: tick on demand. After a tick the ticker paces itself (`tick_interval`, here an
/// hour, so that without tick on demand the second job below would not become visible during
/// the test). A claimer waiting for a tick and an enqueue end that pause: the job is ticked
/// and claimed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_claimer_and_an_enqueue_end_the_tickers_pause() {
    let s = common::setup().await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let leader = tokio::spawn(
        Leader::new(
            s.engine.clone(),
            s.db.config.clone(),
            LeaderConfig {
                tick_interval: Duration::from_secs(3600),
                ..LeaderConfig::default()
            },
        )
        .run(stop_rx),
    );
    // The ticker's first pass ticks at once and starts an hour-long pause; claimers that
    // wait for ticks (as the runtime's do) get the first job all the same.
    let first = s
        .engine
        .enqueue(&[NewJob::new("q", "k", json!({ "n": 1 }))])
        .await
        .unwrap()[0];
    let mut seen = 0;
    assert_eq!(claim_waiting(&s.engine, &mut seen).await, vec![first]);
    // Now the ticker pauses for an hour. A job arrives; claimers that wait for ticks get it
    // only if their waiting ends the pause (a tick seen earlier ends a wait at once, so the
    // loop claims until the job shows up).
    let second = s
        .engine
        .enqueue(&[NewJob::new("q", "k", json!({ "n": 2 }))])
        .await
        .unwrap()[0];
    assert_eq!(claim_waiting(&s.engine, &mut seen).await, vec![second]);
    stop_tx.send(true).unwrap();
    leader.await.unwrap();
}

/// Claims as a runtime claimer does: wait for a tick newer than `seen` (holding the waiting
/// mark), claim, and again while the claim comes back empty (at most five rounds). Returns
/// the claimed job ids.
async fn claim_waiting(engine: &Engine, seen: &mut i64) -> Vec<i64> {
    for _ in 0..5 {
        *seen = engine
            .signals()
            .wait_for_tick(*seen, Duration::from_secs(60))
            .await;
        let claimed = engine.claim("q", 10, "w").await.unwrap();
        if !claimed.is_empty() {
            return claimed.into_iter().map(|j| j.job_id).collect();
        }
    }
    Vec::new()
}
