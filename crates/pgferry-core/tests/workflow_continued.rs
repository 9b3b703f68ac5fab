//! Continued steps (ADR 0016, addendum "Continued steps"): a plain `next` whose outcome asks
//! to continue has its next step claimed by the outcome's own statement, for the same
//! worker, without going back through the picker; everything else is answered as before.

mod common;

use std::time::Duration;

use pgferry_core::workflow::{
    ClaimedStep, Machine, Outcome, Start, Worker, WorkerConfig, Workflows,
};
use serde_json::json;

const LEASE: Duration = Duration::from_secs(30);

async fn wf() -> (common::Setup, Workflows) {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    (s, wf)
}

async fn start(wf: &Workflows, kind: &str, queue: &str, i: i64) -> i64 {
    wf.start(&Start::new(kind, queue, json!({ "i": i })))
        .await
        .unwrap()
        .id
}

fn three_steps() -> Machine {
    Machine::new("three")
        .step("start", |s: ClaimedStep| async move {
            Outcome::next("two", json!({"from": s.input["i"]}))
        })
        .step("two", |s: ClaimedStep| async move {
            Outcome::next("three", s.state)
        })
        .step(
            "three",
            |s: ClaimedStep| async move { Outcome::done(s.state) },
        )
}

/// Seconds from now to the instance's picker row's visible_at (its lease's end while it runs).
async fn lease_left(admin: &tokio_postgres::Client, id: i64) -> f64 {
    admin
        .query_one(
            "SELECT extract(epoch FROM visible_at - now())::float8 AS left_s
               FROM pgferry.wf_ready WHERE instance_id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get("left_s")
}

#[tokio::test]
async fn a_continued_next_is_claimed_by_its_outcome_statement() {
    let (s, wf) = wf().await;
    let admin = s.db.connect().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(start(&wf, "three", "q", i).await);
    }
    // Warm the pool's connections and prepared statements: steady state is counted.
    let warm = start(&wf, "warm", "w", 0).await;
    let c = wf.claim("w", 1, "w", LEASE).await.unwrap();
    wf.finish_continuing(&[(c[0].reference(), Outcome::done(json!(warm)))], LEASE)
        .await
        .unwrap();

    let batch = wf.claim("q", 10, "w1", LEASE).await.unwrap();
    assert_eq!(batch.len(), 5);
    let outs: Vec<_> = batch
        .iter()
        .map(|c| (c.reference(), Outcome::next("two", json!({"n": c.id}))))
        .collect();
    common::reset_statements(&admin).await;
    let done = wf.finish_continuing(&outs, LEASE).await.unwrap();
    let all = common::statements(&admin).await;
    assert_eq!(
        all.iter().map(|(_, n)| n).sum::<i64>(),
        1,
        "the outcomes and the continued claims are one statement: {all:?}"
    );
    for (c, f) in batch.iter().zip(&done) {
        assert!(f.applied);
        let next = f.continued.as_ref().expect("a plain next continues");
        assert_eq!(next.id, c.id);
        assert_eq!(next.step, "two");
        assert_eq!(next.state, json!({"n": c.id}));
        assert_eq!(next.input, c.input);
        assert_eq!(next.attempt, 1);
        assert_eq!(next.seq, c.seq + 1, "a new claim of the instance");
        assert!(next.wake.is_none() && next.inbox.is_none() && next.children.is_none());
    }
    // Not in the picker: the continued steps are running, held by the worker's lease.
    assert!(wf.claim("q", 10, "w2", LEASE).await.unwrap().is_empty());
    for id in &ids {
        let info = wf.get(*id).await.unwrap();
        assert_eq!(info.status, "running");
        assert_eq!(info.step, "two");
        assert!(lease_left(&admin, *id).await > 20.0);
    }
    // The first step's claim is answered: a second answer to it is stale.
    let late = wf
        .finish(&[(batch[0].reference(), Outcome::next("x", json!({})))])
        .await
        .unwrap();
    assert_eq!(late, vec![false]);
    // The chain goes on and ends; each step has its history row.
    let seconds: Vec<ClaimedStep> = done.into_iter().filter_map(|f| f.continued).collect();
    let outs: Vec<_> = seconds
        .iter()
        .map(|c| (c.reference(), Outcome::next("three", c.state.clone())))
        .collect();
    let thirds: Vec<ClaimedStep> = wf
        .finish_continuing(&outs, LEASE)
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.continued.expect("continued again"))
        .collect();
    let outs: Vec<_> = thirds
        .iter()
        .map(|c| (c.reference(), Outcome::done(c.state.clone())))
        .collect();
    let ends = wf.finish_continuing(&outs, LEASE).await.unwrap();
    assert!(ends.iter().all(|f| f.applied && f.continued.is_none()));
    for (id, c) in ids.iter().zip(&batch) {
        let info = wf.get(*id).await.unwrap();
        assert_eq!(info.status, "done");
        assert_eq!(info.result, Some(json!({"n": c.id})));
        let steps: Vec<(&str, &str)> = info
            .history
            .iter()
            .map(|h| (h.step.as_str(), h.outcome.as_str()))
            .collect();
        assert_eq!(
            steps,
            [("start", "next"), ("two", "next"), ("three", "done")]
        );
    }
    let left: i64 = admin
        .query_one("SELECT count(*) AS n FROM pgferry.wf_ready", &[])
        .await
        .unwrap()
        .get("n");
    assert_eq!(left, 0, "ended instances leave no picker rows");
}

#[tokio::test]
async fn only_plain_nexts_continue() {
    let (s, wf) = wf().await;
    let _ = &s;
    let plain = start(&wf, "k", "q", 0).await;
    let mut st = Start::new("k", "q", json!({}));
    st.concurrency_key = Some("key".into());
    st.concurrency_limit = Some(1);
    let keyed = wf.start(&st).await.unwrap().id;
    let sleeper = start(&wf, "k", "q", 2).await;
    let batch = wf.claim("q", 10, "w", LEASE).await.unwrap();
    assert_eq!(batch.len(), 3);
    let outs: Vec<_> = batch
        .iter()
        .map(|c| {
            let o = if c.id == sleeper {
                Outcome::sleep_for(Duration::from_millis(1), "woke")
            } else {
                Outcome::next("two", json!({}))
            };
            (c.reference(), o)
        })
        .collect();
    let done = wf.finish_continuing(&outs, LEASE).await.unwrap();
    for (c, f) in batch.iter().zip(&done) {
        assert!(f.applied);
        assert_eq!(f.continued.is_some(), c.id == plain, "instance {}", c.id);
    }
    // The keyed step went through the picker (its slot is handed on at emission) and
    // the sleeper comes due there.
    assert_eq!(wf.get(keyed).await.unwrap().status, "runnable");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut again: Vec<i64> = wf
        .claim("q", 10, "w", LEASE)
        .await
        .unwrap()
        .iter()
        .map(|c| c.id)
        .collect();
    again.sort_unstable();
    let mut want = vec![keyed, sleeper];
    want.sort_unstable();
    assert_eq!(again, want);
}

#[tokio::test]
async fn a_cancelled_instance_does_not_continue() {
    let (_s, wf) = wf().await;
    let id = start(&wf, "k", "q", 0).await;
    let c = wf.claim("q", 1, "w", LEASE).await.unwrap().remove(0);
    wf.cancel(id, None).await.unwrap();
    let done = wf
        .finish_continuing(&[(c.reference(), Outcome::next("two", json!({})))], LEASE)
        .await
        .unwrap();
    assert!(!done[0].applied);
    assert!(done[0].continued.is_none());
    assert_eq!(wf.get(id).await.unwrap().status, "cancelled");
}

#[tokio::test]
async fn a_continued_lease_is_renewed_below_half_and_lapses_like_a_claim() {
    let (s, wf) = wf().await;
    let admin = s.db.connect().await;
    let id = start(&wf, "k", "q", 0).await;
    let lease = Duration::from_millis(1500);
    let c = wf.claim("q", 1, "w", lease).await.unwrap().remove(0);
    // More than half left: the picker row is not written again.
    let before = lease_left(&admin, id).await;
    let f = wf
        .finish_continuing(&[(c.reference(), Outcome::next("two", json!({})))], lease)
        .await
        .unwrap()
        .remove(0);
    let c = f.continued.unwrap();
    let after = lease_left(&admin, id).await;
    assert!(after <= before, "kept: {before} then {after}");
    // Less than half left: renewed to a whole lease.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let f = wf
        .finish_continuing(&[(c.reference(), Outcome::next("three", json!({})))], lease)
        .await
        .unwrap()
        .remove(0);
    let c = f.continued.unwrap();
    let renewed = lease_left(&admin, id).await;
    assert!(renewed > 1.0, "renewed: {renewed}");
    // The worker dies here: the step comes due at its lease's end and is claimed again,
    // attempt 2, and the dead worker's late answer is stale.
    assert!(wf.claim("q", 1, "w2", lease).await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_millis(1700)).await;
    let again = wf.claim("q", 1, "w2", lease).await.unwrap().remove(0);
    assert_eq!((again.step.as_str(), again.attempt), ("three", 2));
    assert!(
        !wf.finish(&[(c.reference(), Outcome::done(json!(1)))])
            .await
            .unwrap()[0]
    );
    assert!(
        wf.finish(&[(again.reference(), Outcome::done(json!(2)))])
            .await
            .unwrap()[0]
    );
}

#[tokio::test]
async fn one_worker_pass_runs_a_three_step_instance_to_its_end() {
    let (_s, wf) = wf().await;
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(start(&wf, "three", "q", i).await);
    }
    let worker_name = WorkerConfig::new("q").name;
    let worker = Worker::new(wf.clone(), WorkerConfig::new("q")).machine(three_steps());
    worker.register().await.unwrap();
    // One claim; the two `next`s continue on this worker, so the pass ends the instances.
    assert_eq!(worker.run_once().await.unwrap(), 60);
    for (i, id) in ids.iter().enumerate() {
        let info = wf.get(*id).await.unwrap();
        assert_eq!(info.status, "done");
        assert_eq!(info.result, Some(json!({"from": i})));
        // Each step's history row is the step as it ran (its name, claim, attempt, worker
        // and start), not the row the outcome moved the instance to.
        let h: Vec<_> = info
            .history
            .iter()
            .map(|r| (r.step_seq, r.step.as_str(), r.attempt, r.outcome.as_str()))
            .collect();
        assert_eq!(
            h,
            [
                (1, "start", 1, "next"),
                (2, "two", 1, "next"),
                (3, "three", 1, "done")
            ]
        );
        for r in &info.history {
            assert_eq!(r.worker.as_deref(), Some(worker_name.as_str()));
            let started = r.started_at.as_deref().expect("a step's start");
            assert!(started <= r.finished_at.as_str(), "{r:?}");
        }
        let starts: Vec<_> = info.history.iter().map(|r| &r.started_at).collect();
        assert!(starts.windows(2).all(|w| w[0] < w[1]), "{starts:?}");
    }
    assert_eq!(
        worker
            .stats()
            .steps
            .load(std::sync::atomic::Ordering::Relaxed),
        60
    );

    // With continued steps off, each pass runs one step per instance, as before.
    let id = start(&wf, "three", "q", 99).await;
    let mut cfg = WorkerConfig::new("q");
    cfg.continue_steps = 0;
    let worker = Worker::new(wf.clone(), cfg).machine(three_steps());
    assert_eq!(worker.run_once().await.unwrap(), 1);
    assert_eq!(wf.get(id).await.unwrap().step, "two");
}
