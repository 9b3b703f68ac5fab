//! pgferry.ready_rows() finds a fresh job's row from its block's anchor, whatever the
//! statistics say (issue 24). Its generic plan (complete()'s failure path, the rescuer, the
//! listing) drove the join from the fresh row's side when the current segment had no
//! statistics yet (a segment fills faster than autovacuum analyzes it, ADR 0009): an index
//! scan of ready_claim on `seq` alone, a non-leading column, which reads the whole index of
//! every partition. Seeding 10M jobs measured 11,500 buffers per failed job at 2.3M jobs,
//! and complete() of a batch with ten failures took 0.5 s.
//!
//! A guard of the plan's shape: on this test's 40,000 jobs the planner picks the anchor's
//! side with the old plain join too (it did not fail before the fix here; the 10M-job
//! measurement in docs/performance.md is what showed the other plan). The LATERAL ...
//! OFFSET 0 form leaves it no other plan, which is what this checks.

mod common;

use pgferry_core::NewJob;
use serde_json::json;

#[tokio::test]
async fn a_fresh_row_is_probed_through_its_anchor_under_generic_plans() {
    let s = common::setup().await;
    let admin = s.db.connect().await;
    for b in 0..40 {
        let jobs: Vec<_> = (0..1000)
            .map(|i| NewJob::new("q", format!("k{}", i % 10), json!({ "n": b * 1000 + i })))
            .collect();
        s.engine.enqueue(&jobs).await.unwrap();
    }
    // A job in the middle of a block of the last batch: found through its anchor.
    let id: i64 = admin
        .query_one(
            "SELECT max(job_id) - 300 FROM pgferry.ready WHERE job_id & 255 <> 0",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    admin
        .batch_execute(
            "SET enable_seqscan = off; SET plan_cache_mode = force_generic_plan; SET jit = off;
             PREPARE one(bigint, smallint, int) AS
             SELECT r.job_id, r.kind FROM pgferry.ready_rows($1) r
              WHERE r.segment = $2 AND r.attempt = $3 LIMIT 1",
        )
        .await
        .unwrap();
    let found = admin
        .query_one(&format!("EXECUTE one({id}, 0, 1)"), &[])
        .await
        .unwrap();
    assert_eq!(found.get::<_, i64>("job_id"), id);
    let plan: Vec<String> = admin
        .query(
            &format!("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) EXECUTE one({id}, 0, 1)"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(plan.contains("$1"), "not the generic plan:\n{plan}");
    // The caller names the segment and attempt, as complete() and the rescuer do.
    // The fresh row: one probe with all three keys of ready_claim, never `seq` alone.
    assert!(
        plan.contains("Index Cond: ((lane = a.lane) AND (xid = a.xid) AND (seq = $1))"),
        "{plan}"
    );
    assert!(!plan.contains("Index Cond: (seq = $1)"), "{plan}");
    // A few probes per partition, not the index (40,000 entries, over 100 pages).
    let hits: u64 = plan
        .lines()
        .find(|l| l.contains("Buffers:"))
        .and_then(|l| l.split("hit=").nth(1))
        .and_then(|h| h.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|h| h.parse().ok())
        .expect("buffers");
    assert!(hits <= 40, "{hits} buffers:\n{plan}");
}
