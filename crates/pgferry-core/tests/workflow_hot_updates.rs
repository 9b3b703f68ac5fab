//! Step updates of an instance row are HOT (migration 0024, ADR 0016 addendum "HOT step
//! updates"): a claim and a plain outcome change no indexed column of wf_instances, and a
//! page keeps room for their new versions even when every row of the page is updated twice
//! before any of it can be pruned. A non-HOT update moves the row to another page and
//! inserts it into three indexes; at fillfactor 50 that was about half of all step updates
//! (docs/performance.md, "Why the outcome statement cost what it did").
//!
//! The counts are the transaction's own (pg_stat_get_xact_*), read in the transaction that
//! ran the engine's functions: no statistics flush to wait for. One transaction is the
//! hardest case for HOT (nothing it wrote can be pruned before it ends).

mod common;

use pgferry_core::workflow::{Start, Workflows};
use serde_json::json;

/// Instances claimed and finished together: more than one page of wf_instances at any
/// fillfactor, as the engine's batches are.
const BATCH: i64 = 200;

async fn updates(tx: &tokio_postgres::Transaction<'_>) -> (i64, i64) {
    let r = tx
        .query_one(
            "SELECT pg_stat_get_xact_tuples_updated('pgferry.wf_instances'::regclass) AS upd,
                    pg_stat_get_xact_tuples_hot_updated('pgferry.wf_instances'::regclass) AS hot",
            &[],
        )
        .await
        .unwrap();
    (r.get("upd"), r.get("hot"))
}

#[tokio::test]
async fn a_claim_and_a_continued_next_of_a_full_batch_are_hot_updates() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    for i in 0..BATCH {
        wf.start(&Start::new("three", "hot", json!({ "i": i })))
            .await
            .unwrap();
    }
    let mut admin = s.db.connect().await;
    let tx = admin.transaction().await.unwrap();
    // The engine's claim and outcome functions, as the worker calls them
    // (src/sql/workflow/claim.sql and finish.sql), with a continued `next` for every step.
    let claimed: serde_json::Value = tx
        .query_one(
            "SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'id', c.id, 'seq', c.step_seq, 'outcome', 'next', 'step', 'two',
                        'state', jsonb_build_object('n', c.id), 'continue_lease_ms', 30000)
                      ORDER BY c.id), '[]') AS o
               FROM pgferry.wf_claim('hot', $1, 'w', 30000) c",
            &[&(BATCH as i32)],
        )
        .await
        .unwrap()
        .get("o");
    assert_eq!(claimed.as_array().unwrap().len() as i64, BATCH);
    let (claim_upd, claim_hot) = updates(&tx).await;
    assert_eq!(claim_upd, BATCH, "the claim updates each instance once");

    let answered = tx.query(common::WF_FINISH, &[&claimed]).await.unwrap();
    assert_eq!(answered.len() as i64, BATCH);
    for r in &answered {
        assert!(r.get::<_, bool>("applied"));
        let c: serde_json::Value = r.get("continued");
        assert_eq!(c["step"], "two", "{c}");
        assert_eq!(c["state"]["n"], c["id"], "{c}");
    }
    let (upd, hot) = updates(&tx).await;
    assert_eq!(
        upd,
        2 * BATCH,
        "the outcome updates each instance once more"
    );
    // Without migration 0024 (fillfactor 50) 200 of these 400 were HOT: 188 of the claim's
    // and 12 of the outcome's.
    assert_eq!(
        (claim_hot, hot),
        (BATCH, 2 * BATCH),
        "every step update of wf_instances is HOT"
    );
    tx.rollback().await.unwrap();
}

#[tokio::test]
async fn a_mixed_batch_answers_in_the_given_order() {
    // wf_finish answers an all-plain batch from its arrays without the per-outcome loop;
    // a batch with a stale or non-plain outcome goes through the loop. Both keep the
    // given order and each outcome's own answer.
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    for i in 0..4 {
        wf.start(&Start::new("three", "mix", json!({ "i": i })))
            .await
            .unwrap();
    }
    let admin = s.db.connect().await;
    let claimed: Vec<(i64, i32)> = admin
        .query(
            "SELECT id, step_seq FROM pgferry.wf_claim('mix', 4, 'w', 30000) ORDER BY id DESC",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("id"), r.get("step_seq")))
        .collect();
    assert_eq!(claimed.len(), 4);
    let (a, b, c, d) = (claimed[0], claimed[1], claimed[2], claimed[3]);
    // In the given order: a continued next, a stale next (wrong seq), an await (not plain),
    // a plain next without continuing, then `a` again (a repeat is stale).
    let outcomes = json!([
        {"id": a.0, "seq": a.1, "outcome": "next", "step": "two", "state": {"k": "a"},
         "continue_lease_ms": 30000},
        {"id": b.0, "seq": b.1 + 7, "outcome": "next", "step": "two"},
        {"id": c.0, "seq": c.1, "outcome": "await", "step": "two", "signals": ["go"]},
        {"id": d.0, "seq": d.1, "outcome": "next", "step": "two"},
        {"id": a.0, "seq": a.1, "outcome": "next", "step": "three"},
    ]);
    let rows = admin.query(common::WF_FINISH, &[&outcomes]).await.unwrap();
    let got: Vec<(i64, bool, Option<String>)> = rows
        .iter()
        .map(|r| {
            let c: Option<serde_json::Value> = r.get("continued");
            (
                r.get("id"),
                r.get("applied"),
                c.map(|c| c["step"].as_str().unwrap().to_owned()),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (a.0, true, Some("two".to_owned())),
            (b.0, false, None),
            (c.0, true, None),
            (d.0, true, None),
            (a.0, false, None),
        ]
    );
    let status = |id: i64| {
        let admin = &admin;
        async move {
            admin
                .query_one(
                    "SELECT status, step FROM pgferry.wf_instances WHERE id = $1",
                    &[&id],
                )
                .await
                .map(|r| (r.get::<_, String>("status"), r.get::<_, String>("step")))
                .unwrap()
        }
    };
    assert_eq!(status(a.0).await, ("running".into(), "two".into()));
    assert_eq!(status(b.0).await, ("running".into(), "start".into()));
    assert_eq!(status(c.0).await, ("awaiting".into(), "two".into()));
    assert_eq!(status(d.0).await, ("runnable".into(), "two".into()));

    // An all-plain batch: the continued step's next outcome and a `done`.
    let seq_a: i32 = admin
        .query_one(
            "SELECT step_seq FROM pgferry.wf_instances WHERE id = $1",
            &[&a.0],
        )
        .await
        .unwrap()
        .get("step_seq");
    let plain = json!([
        {"id": a.0, "seq": seq_a, "outcome": "next", "step": "three",
         "continue_lease_ms": 30000},
    ]);
    let rows = admin.query(common::WF_FINISH, &[&plain]).await.unwrap();
    assert_eq!(rows.len(), 1);
    let c: serde_json::Value = rows[0].get("continued");
    assert_eq!(
        (
            rows[0].get::<_, i64>("id"),
            rows[0].get::<_, bool>("applied")
        ),
        (a.0, true)
    );
    assert_eq!(c["step"], "three");
    assert_eq!(c["step_seq"], seq_a + 1);
    let done = json!([{"id": a.0, "seq": seq_a + 1, "outcome": "done", "result": 1}]);
    let rows = admin.query(common::WF_FINISH, &[&done]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].get::<_, bool>("applied"));
    assert!(rows[0]
        .get::<_, Option<serde_json::Value>>("continued")
        .is_none());
    assert_eq!(status(a.0).await, ("done".into(), "three".into()));
}
