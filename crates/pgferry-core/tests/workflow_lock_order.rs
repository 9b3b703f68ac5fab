//! The order in which workflow statements take their row locks, against real Postgres.
//! Each test holds a row in a transaction of its own to put two statements in the one
//! interleaving that used to deadlock, and sets that transaction's deadlock_timeout so
//! that Postgres's choice of victim is known: the test's transaction when the fix under
//! test is the statement's lock order, the statement when it is the engine's retry.

mod common;

use std::time::Duration;

use pgferry_core::workflow::{ClaimedStep, Outcome, Start, Workflows};
use serde_json::json;
use tokio_postgres::Client;

const LEASE: Duration = Duration::from_secs(30);

async fn claim_all(wf: &Workflows, queue: &str) -> Vec<ClaimedStep> {
    wf.claim(queue, 1000, "w", LEASE).await.unwrap()
}

async fn status(admin: &Client, id: i64) -> String {
    admin
        .query_one(
            "SELECT status FROM pgferry.wf_instances WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0)
}

/// A batch whose first outcome gives back a slot of key k (locking k's row) and whose
/// second outcome's instance is being cancelled (the cancel holds that instance, then
/// wants k's row). The batch takes every instance's lock before any key's, so it waits
/// for the cancel without holding k: no deadlock, the cancel wins, the second outcome is
/// stale. (Before, the cancel was aborted as a deadlock victim: round_robin ledger test.)
#[tokio::test]
async fn a_batch_locks_its_instances_before_the_keys_a_cancel_wants() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let mut ids = Vec::new();
    for i in 0..2 {
        let mut st = Start::new("k", "q", json!(i));
        st.concurrency_key = Some("k".into());
        st.concurrency_limit = Some(2);
        ids.push(wf.start(&st).await.unwrap().id);
    }
    let mut steps = claim_all(&wf, "q").await;
    steps.sort_by_key(|st| st.id);
    assert_eq!(steps.len(), 2, "both hold a slot of k");
    let (first, second) = (steps[0].id, steps[1].id);

    let mut holder = s.db.connect().await;
    let admin = s.db.connect().await;
    let tx = holder.transaction().await.unwrap();
    // This transaction is the victim should a deadlock come (checked after 10 ms).
    tx.batch_execute("SET LOCAL deadlock_timeout = '10ms'")
        .await
        .unwrap();
    tx.execute(
        "SELECT 1 FROM pgferry.wf_instances WHERE id = $1 FOR UPDATE",
        &[&second],
    )
    .await
    .unwrap();
    let batch = {
        let wf = wf.clone();
        let outcomes = [
            (steps[0].reference(), Outcome::next("two", json!({}))),
            (steps[1].reference(), Outcome::next("two", json!({}))),
        ];
        tokio::spawn(async move { wf.finish(&outcomes).await })
    };
    common::until_a_lock_is_awaited(&admin).await;
    let previous: String = tx
        .query_one(
            "SELECT pgferry.wf_cancel($1, 'race') AS previous",
            &[&second],
        )
        .await
        .expect("the cancel is not a deadlock victim")
        .get(0);
    assert_eq!(previous, "running");
    tx.commit().await.unwrap();
    let applied = batch.await.unwrap().unwrap();
    assert_eq!(applied, vec![true, false], "the cancelled one is stale");
    assert_eq!(status(&admin, first).await, "runnable");
    assert_eq!(status(&admin, second).await, "cancelled");
    let running: i32 = admin
        .query_one("SELECT running FROM pgferry.wf_keys WHERE key = 'k'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        running, 1,
        "the first holds a slot again, the cancelled one none"
    );
}

/// A cancel that is chosen as a deadlock victim is run again, and the caller sees only
/// its answer. Here the cancel holds the parent and waits for a child that a batch has
/// locked (a plain outcome of that child, locked before the batch's chain locks), and the
/// batch then wants the parent (another child's end joins it).
#[tokio::test]
async fn a_cancel_chosen_as_a_deadlock_victim_runs_again() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let (parent, child) = common::parent_with_a_claimed_kid(&wf).await;
    let child = child.id;

    let mut holder = s.db.connect().await;
    let admin = s.db.connect().await;
    let tx = holder.transaction().await.unwrap();
    // The cancel (deadlock_timeout 1 s) is the victim: this transaction checks late.
    tx.batch_execute("SET LOCAL deadlock_timeout = '20s'")
        .await
        .unwrap();
    tx.execute(
        "SELECT 1 FROM pgferry.wf_instances WHERE id = $1 FOR UPDATE",
        &[&child],
    )
    .await
    .unwrap();
    let cancel = {
        let wf = wf.clone();
        tokio::spawn(async move { wf.cancel(parent, Some("race")).await })
    };
    common::until_a_lock_is_awaited(&admin).await;
    // The cancel holds the parent while it waits for the child this transaction holds: this
    // statement gets the parent only when the cancel was aborted (a deadlock victim).
    tx.execute(
        "SELECT 1 FROM pgferry.wf_instances WHERE id = $1 FOR UPDATE",
        &[&parent],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let previous = cancel.await.unwrap().expect("the cancel is run again");
    assert_eq!(previous, "waiting_children");
    assert_eq!(status(&admin, parent).await, "cancelled");
    assert_eq!(status(&admin, child).await, "cancelled");
}

/// Workers started together register the same kinds, each in its own order (a worker's
/// machines are a map), and two registrations that lock two kinds' rows in opposite orders
/// deadlock: a worker then failed to start (seen in `bench workflow`'s fan-out phase). The
/// rows are written in kind order, so a registration waiting for one kind's row holds no
/// row of a kind after it. Without the order the one named first here (`lock_b`) is held.
#[tokio::test]
async fn kinds_are_registered_in_kind_order() {
    use pgferry_core::workflow::Machine;
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    // Both rows exist: a registration locks the row it finds, changed or not.
    wf.register(&[&Machine::new("lock_a"), &Machine::new("lock_b")])
        .await
        .unwrap();
    let mut holder = s.db.connect().await;
    let admin = s.db.connect().await;
    let tx = holder.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM pgferry.wf_kinds WHERE kind = 'lock_a' FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    let wf2 = wf.clone();
    let waiting = tokio::spawn(async move {
        let (b, a) = (Machine::new("lock_b").with_inbox(), Machine::new("lock_a"));
        wf2.register(&[&b, &a]).await
    });
    common::until_a_lock_is_awaited(&admin).await;
    let probe = admin
        .execute(
            "SELECT 1 FROM pgferry.wf_kinds WHERE kind = 'lock_b' FOR UPDATE NOWAIT",
            &[],
        )
        .await;
    assert!(
        probe.is_ok(),
        "the waiting registration holds lock_b: {probe:?}"
    );
    tx.rollback().await.unwrap();
    waiting.await.unwrap().unwrap();
}
