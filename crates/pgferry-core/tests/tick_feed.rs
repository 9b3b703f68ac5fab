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
        let seen = *b.subscribe_ticks().borrow();
        ids.extend(
            s.engine
                .enqueue(&[NewJob::new("q", "k", json!({}))])
                .await
                .unwrap(),
        );
        let now = b.wait_for_tick(seen, Duration::from_secs(5)).await;
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
    assert!(*b.subscribe_ticks().borrow() > 0, "B never heard a tick");
    assert!(got.len() >= 3, "B claimed {got:?} of {ids:?}");
    let _ = stop_tx.send(true);
    leader.await.unwrap();
    listener.abort();
}
