//! Workflow races and a ledger under concurrency, against real Postgres: concurrent starts
//! with one correlation key, a signal racing its await, cancel racing an outcome, a child
//! ending while its parent is cancelled, a cancel waiting for its chain while a step
//! commits, expired leases; then many instances through
//! several workers with signals, children, sleeps and cancels, checked from the database:
//! no step outcome applied twice, no step after cancel, each signal consumed once, each
//! child joined once, each parent resumed once, every instance ended.

mod common;

use std::sync::Arc;
use std::time::Duration;

use pgferry_core::workflow::{
    Child, ClaimedStep, Join, Machine, Outcome, Start, Target, Worker, WorkerConfig, Workflows,
};
use serde_json::json;

const LEASE: Duration = Duration::from_secs(30);

/// History rows recorded after their instance's cancel row (a step row's time is when its
/// outcome was applied, under the instance's lock: migration 0029).
const STEPS_AFTER_A_CANCEL: &str = "SELECT count(*) FROM pgferry.wf_steps s
       JOIN pgferry.wf_steps c ON c.instance_id = s.instance_id AND c.outcome = 'cancelled'
      WHERE s.outcome <> 'cancelled' AND s.finished_at > c.finished_at";

async fn claim_all(wf: &Workflows, queue: &str) -> Vec<ClaimedStep> {
    wf.claim(queue, 1000, "w", LEASE).await.unwrap()
}

async fn one_row_i64(c: &tokio_postgres::Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn concurrent_starts_with_one_correlation_key_make_one_instance() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    for round in 0..5 {
        let key = format!("k-{round}");
        let starts = (0..16).map(|_| {
            let wf = wf.clone();
            let mut st = Start::new("k", "q", json!({}));
            st.correlation_key = Some(key.clone());
            tokio::spawn(async move { wf.start(&st).await.unwrap() })
        });
        let got: Vec<_> = futures_util::future::join_all(starts)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(got.iter().filter(|g| !g.duplicate).count(), 1, "{got:?}");
        assert!(got.iter().all(|g| g.id == got[0].id));
    }
    let admin = s.db.connect().await;
    assert_eq!(
        one_row_i64(&admin, "SELECT count(*) FROM pgferry.wf_instances").await,
        5
    );
}

#[tokio::test]
async fn signal_racing_its_await_is_consumed_exactly_once() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    wf.register(&[&Machine::new("k").with_inbox()])
        .await
        .unwrap();
    let n = 60;
    for i in 0..n {
        wf.start(&Start::new("k", "q", json!(i))).await.unwrap();
    }
    let steps = claim_all(&wf, "q").await;
    assert_eq!(steps.len(), n);
    let races = steps.into_iter().map(|st| {
        let wf = wf.clone();
        tokio::spawn(async move {
            let batch = [(
                st.reference(),
                Outcome::await_signals(&["go"], "after", None),
            )];
            let (target, payload) = (Target::Id(st.id), json!(st.id));
            let park = wf.finish(&batch);
            let send = wf.signal(&target, "go", &payload);
            let (parked, sent) = tokio::join!(park, send);
            assert!(parked.unwrap()[0]);
            sent.unwrap();
        })
    });
    for r in futures_util::future::join_all(races).await {
        r.unwrap();
    }
    // Whichever came first, every instance resumed once with its signal.
    let resumed = claim_all(&wf, "q").await;
    assert_eq!(resumed.len(), n);
    for r in &resumed {
        let inbox = r.inbox.clone().unwrap();
        assert_eq!(inbox.len(), 1);
        assert_eq!(inbox[0].payload, json!(r.id));
    }
    let admin = s.db.connect().await;
    assert_eq!(
        one_row_i64(
            &admin,
            "SELECT count(*) FROM pgferry.wf_signals WHERE consumed_gen IS NULL"
        )
        .await,
        0
    );
}

#[tokio::test]
async fn cancel_racing_an_outcome_leaves_no_step() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let n = 60;
    for i in 0..n {
        wf.start(&Start::new("k", "q", json!(i))).await.unwrap();
    }
    let steps = claim_all(&wf, "q").await;
    let races = steps.into_iter().enumerate().map(|(i, st)| {
        let wf = wf.clone();
        tokio::spawn(async move {
            let o = match i % 3 {
                0 => Outcome::next("more", json!({})),
                1 => Outcome::spawn(vec![Child::new("kid", json!(1))], "joined", Join::All),
                _ => Outcome::retry(Duration::ZERO, "again"),
            };
            let batch = [(st.reference(), o)];
            let out = wf.finish(&batch);
            let cancel = wf.cancel(st.id, Some("race"));
            let (out, cancel) = tokio::join!(out, cancel);
            out.unwrap();
            cancel.unwrap();
        })
    });
    for r in futures_util::future::join_all(races).await {
        r.unwrap();
    }
    assert!(claim_all(&wf, "q").await.is_empty(), "a step after cancel");
    let admin = s.db.connect().await;
    assert_eq!(
        one_row_i64(&admin, "SELECT count(*) FROM pgferry.wf_ready").await,
        0
    );
    assert_eq!(
        one_row_i64(
            &admin,
            "SELECT count(*) FROM pgferry.wf_instances WHERE active"
        )
        .await,
        0,
        "every instance (children included) cancelled"
    );
}

#[tokio::test]
async fn child_ending_while_its_parent_is_cancelled() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let n = 40;
    for i in 0..n {
        wf.start(&Start::new("parent", "p", json!(i)))
            .await
            .unwrap();
    }
    for p in claim_all(&wf, "p").await {
        let mut kids = vec![Child::new("kid", json!(1))];
        kids[0].queue = Some("c".into());
        assert!(
            wf.finish(&[(p.reference(), Outcome::spawn(kids, "joined", Join::All))])
                .await
                .unwrap()[0]
        );
    }
    let kids = claim_all(&wf, "c").await;
    assert_eq!(kids.len(), n);
    let races = kids.into_iter().enumerate().map(|(i, k)| {
        let wf = wf.clone();
        tokio::spawn(async move {
            let o = if i % 2 == 0 {
                Outcome::done(json!(1))
            } else {
                Outcome::fail("x")
            };
            let batch = [(k.reference(), o)];
            let done = wf.finish(&batch);
            let cancel = wf.cancel(k.parent_id.unwrap(), None);
            let (done, cancel) = tokio::join!(done, cancel);
            done.unwrap();
            cancel.unwrap();
        })
    });
    for r in futures_util::future::join_all(races).await {
        r.unwrap();
    }
    assert!(
        claim_all(&wf, "p").await.is_empty(),
        "no parent resumed after its cancel"
    );
    let admin = s.db.connect().await;
    // A parent ends cancelled, or failed when its failing child came first (fail_parent).
    let resumed = one_row_i64(
        &admin,
        "SELECT count(*) FROM pgferry.wf_instances
          WHERE queue = 'p' AND status NOT IN ('cancelled', 'failed')",
    )
    .await;
    assert_eq!(resumed, 0);
    assert_eq!(
        one_row_i64(&admin, "SELECT count(*) FROM pgferry.wf_ready").await,
        0
    );
}

/// A cancel whose statement began before a step's outcome, but which waited for its
/// instance's chain (taken root first) while that outcome committed, is recorded after it:
/// the history lists the step, then the cancel, and their times agree. With the statement's
/// start as the cancel's time, the ledger below saw a "step after cancel" in CI.
#[tokio::test]
async fn cancel_waiting_for_the_chain_is_recorded_after_the_step_that_won() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let (parent, kid) = common::parent_with_a_claimed_kid(&wf).await;
    // Hold the parent's row: the kid's cancel locks its chain from the root and waits there.
    let mut holder = s.db.connect().await;
    let tx = holder.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM pgferry.wf_instances WHERE id = $1 FOR UPDATE",
        &[&parent],
    )
    .await
    .unwrap();
    let cancel = tokio::spawn({
        let wf = wf.clone();
        async move { wf.cancel(kid.id, Some("late")).await }
    });
    let admin = s.db.connect().await;
    // The cancel waits for the parent's row.
    common::until_a_lock_is_awaited(&admin).await;
    // The kid's plain step locks only the kid: it commits while the cancel waits.
    assert!(
        wf.finish(&[(kid.reference(), Outcome::next("b", json!({})))])
            .await
            .unwrap()[0]
    );
    tx.commit().await.unwrap();
    assert_eq!(cancel.await.unwrap().unwrap(), "runnable");
    let history = wf.get(kid.id).await.unwrap().history;
    let outcomes: Vec<&str> = history.iter().map(|h| h.outcome.as_str()).collect();
    assert_eq!(outcomes, ["next", "cancelled"]);
    let out_of_order = one_row_i64(&admin, STEPS_AFTER_A_CANCEL).await;
    assert_eq!(out_of_order, 0, "the step's time is after the cancel's");
}

#[tokio::test]
async fn expired_lease_claims_again_and_the_late_outcome_is_stale() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let mut st = Start::new("k", "q", json!({}));
    st.max_attempts = Some(2);
    let id = wf.start(&st).await.unwrap().id;
    let first = wf
        .claim("q", 10, "w1", Duration::from_millis(100))
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    assert!(
        wf.claim("q", 10, "w2", LEASE).await.unwrap().is_empty(),
        "leased"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = wf.claim("q", 10, "w2", LEASE).await.unwrap();
    assert_eq!((second.len(), second[0].attempt), (1, 2));
    let late = wf
        .finish(&[(first[0].reference(), Outcome::done(json!("late")))])
        .await
        .unwrap();
    assert!(!late[0], "the first claim's outcome is stale");
    let won = wf
        .finish(&[(second[0].reference(), Outcome::done(json!("ok")))])
        .await
        .unwrap();
    assert!(won[0]);
    assert_eq!(wf.get(id).await.unwrap().result, Some(json!("ok")));
}

/// Many instances, several workers, signals sent at random moments (before or after the
/// await), children, sleeps and cancels; then the books are checked in the database.
#[tokio::test]
async fn ledger_under_concurrency() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let resumed = Arc::new(std::sync::Mutex::new(
        std::collections::HashMap::<i64, u32>::new(),
    ));
    let r2 = resumed.clone();
    let flow = Machine::new("flow")
        .with_inbox()
        .with_children()
        .step("start", |_s: ClaimedStep| async move {
            let kids = (0..3).map(|i| Child::new("leaf", json!(i))).collect();
            Outcome::spawn(kids, "joined", Join::All)
        })
        .step("joined", move |s: ClaimedStep| {
            let r2 = r2.clone();
            async move {
                let kids = s.children.unwrap_or_default();
                assert_eq!(kids.len(), 3);
                assert!(kids.iter().all(|k| k.status == "done"));
                *r2.lock().unwrap().entry(s.id).or_default() += 1;
                Outcome::await_signals(&["go"], "signalled", Some(Duration::from_secs(120)))
            }
        })
        .step("signalled", |s: ClaimedStep| async move {
            assert!(!s.timed_out());
            let inbox = s.inbox.unwrap_or_default();
            assert_eq!(inbox.len(), 1);
            Outcome::sleep_for(Duration::from_millis(5), "end")
        })
        .step(
            "end",
            |s: ClaimedStep| async move { Outcome::done(json!(s.id)) },
        );
    let leaf = Machine::new("leaf").step("start", |s: ClaimedStep| async move {
        if s.attempt == 1 && s.input == json!(1) {
            return Outcome::retry(Duration::ZERO, "first attempt fails");
        }
        Outcome::next("finish", json!({}))
    });
    let leaf = leaf.step(
        "finish",
        |s: ClaimedStep| async move { Outcome::done(s.input) },
    );
    let (stop, rx) = tokio::sync::watch::channel(false);
    let mut workers = Vec::new();
    for w in 0..4 {
        let mut cfg = WorkerConfig::new("ledger");
        cfg.name = format!("w{w}");
        cfg.batch = 16;
        let worker = Worker::new(wf.clone(), cfg)
            .machine(flow.clone())
            .machine(leaf.clone());
        workers.push(tokio::spawn(worker.run(rx.clone())));
    }
    let n = 150;
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            wf.start(&Start::new("flow", "ledger", json!(i)))
                .await
                .unwrap()
                .id,
        );
    }
    // Signals from several tasks at random moments; every 10th instance is cancelled.
    let senders: Vec<_> = ids
        .chunks(30)
        .map(|chunk| {
            let wf = wf.clone();
            let chunk = chunk.to_vec();
            tokio::spawn(async move {
                for (j, id) in chunk.iter().enumerate() {
                    tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 20)).await;
                    if j % 10 == 3 {
                        wf.cancel(*id, Some("ledger")).await.unwrap();
                    } else {
                        wf.signal(&Target::Id(*id), "go", &json!(id)).await.unwrap();
                    }
                }
            })
        })
        .collect();
    for t in senders {
        t.await.unwrap();
    }
    let admin = s.db.connect().await;
    for _ in 0..600 {
        let active = one_row_i64(
            &admin,
            "SELECT count(*) FROM pgferry.wf_instances WHERE active",
        )
        .await;
        if active == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.send(true).unwrap();
    for w in workers {
        w.await.unwrap().unwrap();
    }
    // Every started instance (children included) ended.
    let open = one_row_i64(
        &admin,
        "SELECT count(*) FROM pgferry.wf_instances WHERE active",
    )
    .await;
    assert_eq!(open, 0, "instances still active");
    let (done, cancelled): (i64, i64) = {
        let r = admin
            .query_one(
                "SELECT count(*) FILTER (WHERE status = 'done'),
                        count(*) FILTER (WHERE status = 'cancelled')
                   FROM pgferry.wf_instances WHERE kind = 'flow'",
                &[],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!((done + cancelled, cancelled), (n as i64, 15));
    // No claim has two outcomes.
    let twice = one_row_i64(
        &admin,
        "SELECT count(*) FROM (SELECT 1 FROM pgferry.wf_steps WHERE outcome <> 'cancelled'
                                GROUP BY instance_id, step_seq HAVING count(*) > 1) d",
    )
    .await;
    assert_eq!(twice, 0);
    // No step after cancel: nothing recorded after the cancel row of an instance.
    let after = one_row_i64(&admin, STEPS_AFTER_A_CANCEL).await;
    assert_eq!(after, 0);
    // Each done flow consumed exactly one signal; no signal consumed twice is possible by
    // construction (one row, one consumed_gen), so count them.
    let bad_signals = one_row_i64(
        &admin,
        "SELECT count(*) FROM pgferry.wf_instances i
          WHERE i.kind = 'flow' AND i.status = 'done'
            AND (SELECT count(*) FROM pgferry.wf_signals s
                  WHERE s.instance_id = i.id AND s.consumed_gen IS NOT NULL) <> 1",
    )
    .await;
    assert_eq!(bad_signals, 0);
    // Each parent that got past its join was resumed exactly once, with every child joined.
    let resumed = resumed.lock().unwrap().clone();
    assert!(resumed.values().all(|&n| n == 1), "a parent resumed twice");
    // A parent whose `joined` outcome was applied ran its handler; one cancelled while at
    // `joined` may or may not have (the cancel can land while the handler runs: its step row
    // then says `cancelled` and the handler's outcome is stale). No other parent ran it.
    let joined_ids = |outcome: &'static str| {
        let admin = &admin;
        async move {
            admin
                .query(
                    "SELECT instance_id FROM pgferry.wf_steps WHERE step = 'joined' AND outcome = $1",
                    &[&outcome],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<_, i64>(0))
                .collect::<std::collections::HashSet<i64>>()
        }
    };
    let applied = joined_ids("await").await;
    let cancelled_at_join = joined_ids("cancelled").await;
    assert!(
        applied.iter().all(|id| resumed.contains_key(id)),
        "an applied `joined` outcome without its handler having run"
    );
    assert!(
        resumed
            .keys()
            .all(|id| applied.contains(id) || cancelled_at_join.contains(id)),
        "a handler ran for a parent that never reached `joined`"
    );
    let pending = one_row_i64(
        &admin,
        "SELECT count(*) FROM pgferry.wf_instances
          WHERE kind = 'flow' AND status = 'done' AND children_pending <> 0",
    )
    .await;
    assert_eq!(pending, 0);
    // The concurrency of it all left nothing behind in the picker or among waiters.
    assert_eq!(
        one_row_i64(&admin, "SELECT count(*) FROM pgferry.wf_ready").await,
        0
    );
    assert_eq!(
        one_row_i64(&admin, "SELECT count(*) FROM pgferry.wf_key_waiters").await,
        0
    );
}
