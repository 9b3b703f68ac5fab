//! get_job / list_jobs find each attempt's outcome through the receipt that claimed it
//! (jobs_outcomes.sql, after jobs_detail.sql): the completions read follow the jobs asked
//! for, not the history of their segment; an attempt whose receipt is gone still gets its
//! outcome (the overlap pass). jobs_detail.sql itself reads no completions at all.

mod common;

use std::time::Duration;

use pgferry_core::{JobState, NewJob};
use serde_json::json;

const DETAIL: &str = include_str!("../src/sql/jobs_detail.sql");
const OUTCOMES: &str = include_str!("../src/sql/jobs_outcomes.sql");

/// The arguments of jobs_outcomes.sql for the claimed attempts among rows of
/// jobs_detail.sql, as lookup.rs passes them.
#[allow(clippy::type_complexity)]
fn claimed_attempts(
    rows: &[tokio_postgres::Row],
) -> (
    Vec<i64>,
    Vec<i32>,
    Vec<i32>,
    Vec<i16>,
    Vec<String>,
    Vec<i64>,
) {
    let mut out = (vec![], vec![], vec![], vec![], vec![], vec![]);
    for r in rows {
        if r.get::<_, Option<bool>>("claimed") == Some(true)
            && r.get::<_, Option<bool>>("handed") != Some(true)
        {
            out.0.push(r.get("job_id"));
            out.1.push(r.get("attempt"));
            out.2.push(r.get("lane"));
            out.3.push(r.get("segment"));
            out.4.push(r.get("xid"));
            out.5.push(r.get("seq"));
        }
    }
    out
}

#[tokio::test]
async fn outcomes_come_through_the_claiming_receipt() {
    let s = common::setup().await;
    // 60 claim batches of 100 in one segment: 60 completion rows, one per batch.
    let mut ids = Vec::new();
    for _ in 0..60 {
        ids.extend(s.run_through("hist", 100).await);
    }
    // One job failed once, then completed: two attempts, two receipts.
    let retried = s
        .engine
        .enqueue(&[NewJob::new("hist", "k", json!({"r": 1}))])
        .await
        .unwrap()[0];
    s.tick().await;
    let c = s.engine.claim("hist", 1, "w1").await.unwrap();
    s.engine
        .complete(&[c[0].failed("boom", Duration::ZERO)])
        .await
        .unwrap();
    let mut second = Vec::new();
    for _ in 0..50 {
        s.tick().await;
        second = s.engine.claim("hist", 1, "w2").await.unwrap();
        if !second.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(second.len(), 1, "the retry came due");
    s.complete_all(&second).await;
    // More history after it.
    for _ in 0..10 {
        ids.extend(s.run_through("hist", 100).await);
    }

    let j = s.engine.get_job(retried).await.unwrap();
    assert_eq!(j.state, JobState::Completed);
    let outcomes: Vec<_> = j.attempts.iter().map(|a| a.outcome).collect();
    assert_eq!(outcomes, vec!["failed", "completed"]);
    assert_eq!(j.attempts[0].error.as_deref(), Some("boom"));
    assert_eq!(j.attempts[0].worker.as_deref(), Some("w1"));
    assert_eq!(j.attempts[1].worker.as_deref(), Some("w2"));
    for &id in [ids[0], ids[2999], ids[6999]].iter() {
        let j = s.engine.get_job(id).await.unwrap();
        assert_eq!(j.state, JobState::Completed, "job {id}");
        assert_eq!(j.attempts.len(), 1);
        assert_eq!(j.attempts[0].outcome, "completed");
        assert_eq!(j.attempts[0].worker.as_deref(), Some("w"));
    }

    // The plan: a handful of completion rows for five jobs, not the segment's 71.
    let admin = s.db.connect().await;
    admin.batch_execute("ANALYZE").await.unwrap();
    let (client, mut notices) = common::connect_with_notices(&s.db).await;
    common::enable_auto_explain(&client).await;
    let asked = vec![ids[0], ids[1500], ids[2999], retried, ids[6999]];
    // Prepared once and run as lookup.rs runs them (prepare_cached): from the sixth
    // execution on, the generic plans; those are the plans checked.
    let detail = client.prepare(DETAIL).await.unwrap();
    let outcomes = client.prepare(OUTCOMES).await.unwrap();
    for _ in 0..6 {
        client.query(&detail, &[&asked]).await.unwrap();
    }
    common::drain(&mut notices);
    let rows = client.query(&detail, &[&asked]).await.unwrap();
    assert_eq!(rows.len(), 6, "one row per attempt");
    let plans = common::drain(&mut notices);
    // The details name no completions partition: a set of jobs with no claimed attempt
    // (scheduled, pending) never starts those scans.
    assert!(
        plans.iter().all(|p| !p.contains(" on completions")),
        "jobs_detail.sql reads completions:\n{}",
        plans.join("\n")
    );
    let (ids_a, atts, lanes, segs, xids, seqs) = claimed_attempts(&rows);
    assert_eq!(ids_a.len(), 6, "every attempt was claimed");
    let args: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
        [&ids_a, &atts, &lanes, &segs, &xids, &seqs];
    for _ in 0..6 {
        client.query(&outcomes, &args).await.unwrap();
    }
    common::drain(&mut notices);
    let found = client.query(&outcomes, &args).await.unwrap();
    let plans = common::drain(&mut notices);
    let plan = common::plans_with(&plans, "Recursive Union")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no plan with the receipt search:\n{}", plans.join("\n")));
    let read = common::rows_read(plan, "completions");
    assert!(read <= 6, "read {read} completion rows:\n{plan}");
    assert_eq!(found.len(), 6, "every attempt has its outcome: {found:?}");
    for r in &found {
        let outcome: Option<i16> = r.get("outcome");
        assert!(outcome.is_some(), "every attempt has its outcome: {r:?}");
    }

    // A receipt gone (an old segment's receipts are truncated; here one is deleted): the
    // search finds a later receipt that does not list the job, and the overlap pass answers.
    let victim = ids[1500];
    admin
        .execute(
            "DELETE FROM pgferry.receipts WHERE job_ids @> ARRAY[$1::bigint]",
            &[&victim],
        )
        .await
        .unwrap();
    let rows = client.query(&detail, &[&vec![victim]]).await.unwrap();
    assert_eq!(rows.len(), 1);
    let (ids_a, atts, lanes, segs, xids, seqs) = claimed_attempts(&rows);
    common::drain(&mut notices);
    let found = client
        .query(&outcomes, &[&ids_a, &atts, &lanes, &segs, &xids, &seqs])
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].get::<_, Option<i16>>("outcome"), Some(1));
    let plans = common::drain(&mut notices);
    let plan = common::plans_with(&plans, "Recursive Union")[0];
    assert!(common::rows_read(plan, "completions") >= 60, "{plan}");
    let j = s.engine.get_job(victim).await.unwrap();
    assert_eq!(j.state, JobState::Completed);
}
