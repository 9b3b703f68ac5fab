//! The statements a claim over several lanes runs (sql/functions/claim_lanes.sql;
//! docs/performance.md, "The ticker's statement prepared once; empty lanes skipped"): its
//! data statement (the log read, the receipt, the cancelled jobs closed) only for lanes with
//! something to take, where a lane whose range is done and whose next range holds no row
//! costs one index probe; the latest tick and the pending-cancellation probe once per call,
//! not per lane. Each statement inside a claim pays its own executor start-up.

mod common;

use pgferry_core::{NewJob, QueueOptions};
use serde_json::json;

#[tokio::test]
async fn a_lane_with_nothing_new_runs_no_claim_statement() {
    let s = common::setup_with(common::quiet_counters()).await;
    s.engine
        .upsert_queue(
            "e",
            &QueueOptions {
                shards: 2,
                ..QueueOptions::default()
            },
        )
        .await
        .unwrap();
    // Both lanes claimed to exhaustion: each has a receipt whose range is done.
    let first: Vec<_> = (0..8)
        .map(|i| NewJob::new("e", "k", json!({ "i": i })))
        .collect();
    s.engine.enqueue(&first).await.unwrap();
    s.tick().await;
    let all = s.engine.claim("e", 100, "w").await.unwrap();
    assert_eq!(all.len(), 8);
    let admin = s.db.connect().await;
    let lanes: Vec<i32> = admin
        .query(
            "SELECT DISTINCT lane FROM pgferry.receipts WHERE worker = 'w' ORDER BY lane",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get("lane"))
        .collect();
    assert_eq!(lanes.len(), 2, "both shards held jobs and were claimed");

    // One new job, in one lane; a tick makes it claimable.
    let id = s
        .engine
        .enqueue(&[NewJob::new("e", "k", json!({ "new": true }))])
        .await
        .unwrap()[0];
    let lane: i32 = admin
        .query_one("SELECT lane FROM pgferry.ready WHERE job_id = $1", &[&id])
        .await
        .unwrap()
        .get("lane");
    let empty = *lanes.iter().find(|l| **l != lane).unwrap();
    s.tick().await;

    // The empty lane first: it is looked at, and skipped before the claim statement.
    let (client, mut notices) = common::connect_with_notices(&s.db).await;
    common::enable_auto_explain(&client).await;
    common::drain(&mut notices);
    let rows = client
        .query(
            "SELECT job_id, lane FROM pgferry.claim_lanes($1, 100, 'w2', 60000)",
            &[&vec![empty, lane]],
        )
        .await
        .unwrap();
    let got: Vec<(i64, i32)> = rows
        .iter()
        .map(|r| (r.get("job_id"), r.get("lane")))
        .collect();
    assert_eq!(got, vec![(id, lane)], "the new job, from its lane");
    let plans = common::drain(&mut notices);
    let statements = common::plans_with(&plans, "INSERT INTO pgferry.receipts");
    assert_eq!(
        statements.len(),
        1,
        "one claim statement (the lane with the job), none for the empty lane: {plans:#?}"
    );
    let per_call = |needle: &str| common::plans_with(&plans, needle).len();
    assert_eq!(
        per_call("ORDER BY t.tick_id DESC"),
        1,
        "one latest-tick read: {plans:#?}"
    );
    assert_eq!(
        per_call("v_cancels :="),
        1,
        "one cancellation probe: {plans:#?}"
    );

    // Nothing new anywhere now: a second claim writes nothing and runs no claim statement.
    common::drain(&mut notices);
    let rows = client
        .query(
            "SELECT job_id FROM pgferry.claim_lanes($1, 100, 'w2', 60000)",
            &[&vec![empty, lane]],
        )
        .await
        .unwrap();
    assert!(rows.is_empty());
    let plans = common::drain(&mut notices);
    assert!(
        common::plans_with(&plans, "INSERT INTO pgferry.receipts").is_empty(),
        "{plans:#?}"
    );
}
