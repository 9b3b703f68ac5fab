//! `Workflows::start_many` against real Postgres: a batch of starts in one transaction,
//! the plain ones set-based (`start_many.sql`), the keyed ones through `wf_start`; the rows
//! it writes are the rows `start` writes; bad input writes nothing.

mod common;

use std::time::{Duration, SystemTime};

use pgferry_core::workflow::{Start, Workflows, MAX_START_BATCH};
use pgferry_core::Error;
use serde_json::json;
use tokio_postgres::Client;

const LEASE: Duration = Duration::from_secs(30);

/// An instance's row and its picker row as text, without what differs between two starts
/// of the same thing (ids, times).
async fn rows_of(c: &Client, id: i64) -> (String, Option<String>) {
    let i: String = c
        .query_one(
            "SELECT (to_jsonb(i) - 'id' - 'created_at' - 'updated_at')::text
               FROM pgferry.wf_instances i WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    let r: Option<String> = c
        .query_opt(
            "SELECT (to_jsonb(r) - 'instance_id' - 'visible_at')::text
               FROM pgferry.wf_ready r WHERE instance_id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .map(|r| r.get(0));
    (i, r)
}

async fn count(c: &Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

fn variants() -> Vec<Start> {
    let plain = Start::new("order", "q", json!({"n": 1}));
    let mut shaped = Start::new("order", "q", json!({"n": 2}));
    shaped.step = "second".into();
    shaped.state = Some(json!({"s": true}));
    shaped.priority = 7;
    shaped.max_attempts = Some(3);
    let mut later = Start::new("order", "q", json!({"n": 3}));
    later.run_at = Some(SystemTime::now() + Duration::from_secs(3600));
    vec![plain, shaped, later]
}

#[tokio::test]
async fn a_batch_writes_the_rows_start_writes() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let c = s.db.connect().await;
    for st in variants() {
        let one = wf.start(&st).await.unwrap();
        let many = wf.start_many(std::slice::from_ref(&st)).await.unwrap();
        assert_eq!(many.len(), 1);
        assert!(!many[0].duplicate);
        assert_ne!(one.id, many[0].id);
        assert_eq!(
            rows_of(&c, one.id).await,
            rows_of(&c, many[0].id).await,
            "{st:?}"
        );
    }
    // The one started for later is not claimable; the four due now are.
    let claimed = wf.claim("q", 100, "w", LEASE).await.unwrap();
    assert_eq!(claimed.len(), 4, "{claimed:?}");
    let later: Vec<i64> = c
        .query(
            "SELECT instance_id FROM pgferry.wf_ready WHERE visible_at > now() + interval '50 minutes'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(later.len(), 2, "both starts for later wait in the picker");
}

#[tokio::test]
async fn a_mixed_batch_keeps_its_order_and_its_keys() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let c = s.db.connect().await;
    let mut first = Start::new("order", "q", json!({}));
    first.correlation_key = Some("order-1".into());
    let existing = wf.start(&first).await.unwrap().id;

    let mut batch = Vec::new();
    for i in 0..5 {
        batch.push(Start::new("order", "q", json!({ "i": i })));
    }
    batch.insert(2, first.clone());
    let mut keyed = Start::new("order", "q", json!({"keyed": true}));
    keyed.concurrency_key = Some("k".into());
    keyed.concurrency_limit = Some(1);
    batch.insert(4, keyed.clone());
    let mut waits = keyed.clone();
    waits.input = json!({"keyed": "waits"});
    batch.push(waits);

    let started = wf.start_many(&batch).await.unwrap();
    assert_eq!(started.len(), batch.len());
    assert_eq!(
        (started[2].id, started[2].duplicate),
        (existing, true),
        "the correlation key's active instance"
    );
    for (st, got) in batch.iter().zip(&started) {
        let input: serde_json::Value = c
            .query_one(
                "SELECT input FROM pgferry.wf_instances WHERE id = $1",
                &[&got.id],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(input, st.input, "answers in the given order");
    }
    let statuses: Vec<String> = c
        .query(
            "SELECT status FROM pgferry.wf_instances WHERE concurrency_key = 'k' ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        statuses,
        ["runnable", "queued"],
        "the key's limit of 1 holds"
    );
}

#[tokio::test]
async fn bad_input_anywhere_in_a_batch_writes_nothing() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let c = s.db.connect().await;
    let mut batch: Vec<Start> = (0..10)
        .map(|i| Start::new("order", "q", json!({ "i": i })))
        .collect();
    batch[7].queue = "no spaces allowed".into();
    let err = wf.start_many(&batch).await.unwrap_err();
    assert!(matches!(err, Error::InvalidName { .. }), "{err:?}");
    batch[7].queue = "q".into();
    batch[9].priority = 12;
    let err = wf.start_many(&batch).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidArgument {
                field: "priority",
                ..
            }
        ),
        "{err:?}"
    );
    let big: Vec<Start> = (0..MAX_START_BATCH + 1)
        .map(|_| Start::new("order", "q", json!({})))
        .collect();
    let err = wf.start_many(&big).await.unwrap_err();
    assert!(matches!(err, Error::BatchTooLarge { .. }), "{err:?}");
    // A failure inside the transaction undoes the plain starts written before it: here a
    // keyed start (through wf_start, after the plain statement) breaks a constraint the
    // test adds.
    c.batch_execute(
        "ALTER TABLE pgferry.wf_instances ADD CONSTRAINT no_boom CHECK (input->>'boom' IS NULL)",
    )
    .await
    .unwrap();
    batch[9].priority = 9;
    let mut boom = Start::new("order", "q", json!({"boom": 1}));
    boom.concurrency_key = Some("k".into());
    batch.push(boom);
    let err = wf.start_many(&batch).await.unwrap_err();
    assert!(matches!(err, Error::Db(_)), "{err:?}");
    assert_eq!(
        count(&c, "SELECT count(*) FROM pgferry.wf_instances").await,
        0
    );
    assert_eq!(count(&c, "SELECT count(*) FROM pgferry.wf_ready").await, 0);
    assert!(wf.start_many(&[]).await.unwrap().is_empty());
}
