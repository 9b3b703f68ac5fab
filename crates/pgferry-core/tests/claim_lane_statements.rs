//! The statements a claim over several lanes runs (sql/functions/claim_lanes.sql;
//! docs/performance.md, "The ticker's statement prepared once; empty lanes skipped"): its
//! data statement (the log read, the receipt, the cancelled jobs closed) only for lanes with
//! something to take, where a lane whose range is done and whose next range holds no row
//! costs one index probe; the latest tick and the pending-cancellation probe once per call,
//! not per lane; the short statement of range 2 alone when that is all a lane can hold.
//! Each statement inside a claim pays its own executor start-up.

mod common;

use pgferry_core::{NewJob, QueueOptions};
use serde_json::json;

/// One test at a time: a snapshot lists every transaction in progress in the cluster, so
/// another test's transactions would put work into the xip step and change which statement
/// a claim runs.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn a_lane_with_nothing_new_runs_no_claim_statement() {
    let _serial = SERIAL.lock().await;
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
    // The lane's own range was done and nothing is cancelled: the short statement of range 2
    // alone, not the general one with all four parts.
    assert_eq!(per_call("claim: range 2 alone"), 1, "{plans:#?}");
    assert_eq!(per_call("UNION ALL"), 0, "{plans:#?}");
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

/// A pending cancellation takes the general statement, which closes the cancelled job under
/// the new receipt; the short one would hand it out.
#[tokio::test]
async fn a_pending_cancellation_takes_the_general_statement() {
    let _serial = SERIAL.lock().await;
    let s = common::setup_with(common::quiet_counters()).await;
    let first: Vec<_> = (0..4)
        .map(|i| NewJob::new("c", "k", json!({ "i": i })))
        .collect();
    s.engine.enqueue(&first).await.unwrap();
    s.tick().await;
    assert_eq!(s.engine.claim("c", 100, "w").await.unwrap().len(), 4);

    // Two new jobs in the lane whose range is done; one of them cancelled before any claim.
    let ids = s
        .engine
        .enqueue(&[
            NewJob::new("c", "k", json!({ "cancel": true })),
            NewJob::new("c", "k", json!({ "keep": true })),
        ])
        .await
        .unwrap();
    s.engine.cancel(ids[0], None).await.unwrap();
    s.tick().await;

    let admin = s.db.connect().await;
    let lanes: Vec<i32> = admin
        .query(
            "SELECT DISTINCT lane FROM pgferry.ready WHERE job_id = ANY($1)",
            &[&ids],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get("lane"))
        .collect();
    assert_eq!(lanes.len(), 1);
    let (client, mut notices) = common::connect_with_notices(&s.db).await;
    common::enable_auto_explain(&client).await;
    common::drain(&mut notices);
    let got: Vec<i64> = client
        .query(
            "SELECT job_id FROM pgferry.claim_lanes($1, 100, 'w2', 60000)",
            &[&lanes],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get("job_id"))
        .collect();
    assert_eq!(got, vec![ids[1]], "the cancelled job is not handed out");
    let plans = common::drain(&mut notices);
    assert!(
        common::plans_with(&plans, "claim: range 2 alone").is_empty(),
        "{plans:#?}"
    );
    assert_eq!(
        common::plans_with(&plans, "UNION ALL").len(),
        1,
        "{plans:#?}"
    );
    let closed: i64 = admin
        .query_one(
            "SELECT count(*) FROM pgferry.completions WHERE outcome = 4 AND $1 = ANY(job_ids)",
            &[&ids[0]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(closed, 1, "closed as cancelled under the claim's receipt");
}
