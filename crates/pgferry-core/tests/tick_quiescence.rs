//! Ticks stop when nothing happens. Alone in its test binary (and so alone on its cluster):
//! xids are cluster-wide, and any other test's writes are activity a tick must notice.

mod common;

use pgferry_core::NewJob;
use serde_json::json;

#[tokio::test]
async fn ticks_do_not_beget_ticks() {
    let s = common::setup().await;
    s.engine
        .enqueue(&[NewJob::new("q", "k", json!({}))])
        .await
        .unwrap();
    assert!(s.tick().await.is_some(), "the log grew");
    let c = s.engine.claim("q", 10, "w").await.unwrap();
    s.engine.complete(&[c[0].completed(None)]).await.unwrap();
    // The receipt and the completion were write activity: one more tick may follow.
    s.tick().await;
    // After that, nothing happens, so nothing is written — however often the ticker asks.
    for _ in 0..5 {
        assert_eq!(s.tick().await, None);
    }
    // A late commit of a transaction that got its xid after the last tick's snapshot (so it
    // is not in that snapshot's xip) is noticed.
    let mut producer = s.db.connect().await;
    let tx = producer.transaction().await.unwrap();
    let ids = s
        .engine
        .enqueue_tx(&tx, &[NewJob::new("q", "k", json!({}))])
        .await
        .unwrap();
    // Its rows are not visible to anyone yet: nothing to tick for, however often asked.
    assert_eq!(s.tick().await, None, "uncommitted rows need no tick");
    assert_eq!(s.tick().await, None);
    tx.commit().await.unwrap();
    assert!(s.tick().await.is_some(), "a transaction ended");
    let c = s.engine.claim("q", 10, "w").await.unwrap();
    assert_eq!(c.iter().map(|j| j.job_id).collect::<Vec<_>>(), ids);
}
