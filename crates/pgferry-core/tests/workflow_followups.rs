//! Issue 19 follow-ups against real Postgres: the set-based outcomes of a mixed batch
//! (answers in order, stale and repeated outcomes, history), idle workers woken by a
//! delivered signal (pgferry_wf_ready), the concurrency strategies (cancel_in_progress,
//! cancel_newest) with ledgers, and retention per queue.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pgferry_core::workflow::{
    ClaimedStep, ConcurrencyStrategy, Machine, Outcome, Start, Target, Worker, WorkerConfig,
    Workflows,
};
use pgferry_core::Error;
use serde_json::json;

const LEASE: Duration = Duration::from_secs(30);

async fn claim(wf: &Workflows, queue: &str, n: usize) -> Vec<ClaimedStep> {
    wf.claim(queue, n, "w", LEASE).await.unwrap()
}

async fn status(wf: &Workflows, id: i64) -> String {
    wf.get(id).await.unwrap().status
}

/// A batch mixing plain outcomes (set-based) with others (one by one): every answer in
/// the batch's order, a repeated outcome stale, a cancelled instance's outcome stale, and
/// each applied outcome's history row and status written.
#[tokio::test]
async fn a_mixed_batch_answers_in_order_with_stale_and_repeated_outcomes() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let mut ids = Vec::new();
    for i in 0..8 {
        ids.push(wf.start(&Start::new("k", "q", json!(i))).await.unwrap().id);
    }
    let mut keyed = Start::new("k", "q", json!("keyed"));
    keyed.concurrency_key = Some("key-1".into());
    let keyed = wf.start(&keyed).await.unwrap().id;
    let c = claim(&wf, "q", 20).await;
    assert_eq!(c.len(), 9);
    let by_id: HashMap<i64, &ClaimedStep> = c.iter().map(|c| (c.id, c)).collect();
    let r = |id: i64| by_id[&id].reference();
    // Cancelled after its claim: its outcome is stale.
    wf.cancel(ids[6], None).await.unwrap();
    let batch = vec![
        (r(ids[0]), Outcome::next("two", json!({"s": 0}))),
        (r(ids[1]), Outcome::done(json!("one"))),
        (
            r(ids[2]),
            Outcome::sleep_for(Duration::from_secs(3600), "later"),
        ),
        (
            r(ids[3]),
            Outcome::retry(Duration::from_secs(3600), "again"),
        ),
        (r(ids[4]), Outcome::await_signals(&["go"], "went", None)),
        (r(ids[5]), Outcome::fail("broken")),
        (r(ids[6]), Outcome::next("two", json!({}))),
        (r(keyed), Outcome::next("two", json!({"k": 1}))),
        // The same claim answered twice in one batch: the second is stale.
        (r(ids[0]), Outcome::done(json!("again"))),
        (r(ids[7]), Outcome::done(json!(7))),
    ];
    let applied = wf.finish(&batch).await.unwrap();
    assert_eq!(
        applied,
        [true, true, true, true, true, true, false, true, false, true]
    );
    let want = [
        (ids[0], "runnable"),
        (ids[1], "done"),
        (ids[2], "sleeping"),
        (ids[3], "runnable"),
        (ids[4], "awaiting"),
        (ids[5], "failed"),
        (ids[6], "cancelled"),
        (keyed, "runnable"),
        (ids[7], "done"),
    ];
    for (id, st) in want {
        assert_eq!(status(&wf, id).await, st, "instance {id}");
    }
    let a = wf.get(ids[0]).await.unwrap();
    assert_eq!((a.step.as_str(), &a.state), ("two", &json!({"s": 0})));
    assert_eq!(
        a.history
            .iter()
            .map(|h| h.outcome.as_str())
            .collect::<Vec<_>>(),
        ["next"]
    );
    let d = wf.get(ids[1]).await.unwrap();
    assert_eq!(d.result, Some(json!("one")));
    assert!(d.finished_at.is_some());
    let rt = wf.get(ids[3]).await.unwrap();
    assert_eq!((rt.attempt, rt.error.as_deref()), (2, Some("again")));
    // Only the two instances made runnable now are due; the sleeper and the delayed retry
    // are not.
    let mut due: Vec<i64> = claim(&wf, "q", 20).await.iter().map(|c| c.id).collect();
    due.sort();
    assert_eq!(due, [ids[0], keyed]);
}

/// A worker idle for long (its pause backed off towards a minute) runs a signalled step at
/// once: the delivery's NOTIFY wakes it (counted in `woken`), through the engine's LISTEN
/// task (listen.rs) and through `Workflows::listen_ready` on a bare pool.
#[tokio::test]
async fn a_delivered_signal_wakes_an_idle_worker() {
    let s = common::setup().await;
    let engine_listener = tokio::spawn(pgferry_core::listen::run_tick_listener(
        s.engine.clone(),
        s.db.config.clone(),
    ));
    let of_engine = Workflows::of(&s.engine);
    let bare = Workflows::new(s.db.pool(4));
    let bare_listener = bare.listen_ready(s.db.config.clone());
    for (queue, wf) in [("via_engine", of_engine), ("via_pool", bare)] {
        let machine = Machine::new("ping")
            .step("start", |_s: ClaimedStep| async move {
                Outcome::await_signals(&["go"], "pong", None)
            })
            .step(
                "pong",
                |_s: ClaimedStep| async move { Outcome::done(json!(1)) },
            );
        let mut cfg = WorkerConfig::new(queue);
        cfg.idle_poll = Duration::from_secs(60);
        let worker = Worker::new(wf.clone(), cfg).machine(machine);
        let stats = worker.stats();
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let run = tokio::spawn(worker.run(stop_rx));
        let id = wf
            .start(&Start::new("ping", queue, json!({})))
            .await
            .unwrap()
            .id;
        wait_status(&wf, id, "awaiting").await;
        // Idle long enough for the pause to have grown past what the rest of the test
        // waits, and for the listener to be listening.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let woken_before = stats.woken.load(std::sync::atomic::Ordering::SeqCst);
        let sent = wf.signal(&Target::Id(id), "go", &json!(1)).await.unwrap();
        assert!(sent.delivered);
        wait_status(&wf, id, "done").await;
        assert!(
            stats.woken.load(std::sync::atomic::Ordering::SeqCst) > woken_before,
            "{queue}: the step ran without a wake-up"
        );
        let _ = stop_tx.send(true);
        run.await.unwrap().unwrap();
    }
    engine_listener.abort();
    bare_listener.abort();
}

async fn wait_status(wf: &Workflows, id: i64, want: &str) {
    for _ in 0..2000 {
        if status(wf, id).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!(
        "instance {id} never reached {want}: {}",
        status(wf, id).await
    );
}

fn keyed(key: &str, strategy: Option<ConcurrencyStrategy>, i: i64) -> Start {
    let mut st = Start::new("k", "sq", json!(i));
    st.concurrency_key = Some(key.into());
    st.concurrency_strategy = strategy;
    st
}

async fn holders(client: &tokio_postgres::Client, key: &str) -> (i64, i32) {
    let r = client
        .query_one(
            "SELECT (SELECT count(*) FROM pgferry.wf_instances
                      WHERE concurrency_key = $1 AND has_slot) AS holders,
                    (SELECT running FROM pgferry.wf_keys WHERE key = $1) AS running",
            &[&key],
        )
        .await
        .unwrap();
    (r.get("holders"), r.get("running"))
}

/// cancel_in_progress: each start on the full key cancels the oldest holder and runs; the
/// cancelled one's late outcome is stale. cancel_newest: a start on the full key is
/// cancelled at once and the holder goes on. queue (the default): it waits its turn.
#[tokio::test]
async fn concurrency_strategies_cancel_in_progress_cancel_newest_and_queue() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let client = s.db.connect().await;

    // cancel_in_progress, limit 1.
    let a = wf
        .start(&keyed(
            "cip",
            Some(ConcurrencyStrategy::CancelInProgress),
            1,
        ))
        .await
        .unwrap()
        .id;
    let ca = claim(&wf, "sq", 10).await.remove(0);
    assert_eq!(ca.id, a);
    let b = wf.start(&keyed("cip", None, 2)).await.unwrap().id;
    assert_eq!(status(&wf, a).await, "cancelled");
    let ia = wf.get(a).await.unwrap();
    assert!(
        ia.error.as_deref().unwrap().contains("cancel_in_progress"),
        "{:?}",
        ia.error
    );
    assert_eq!(status(&wf, b).await, "runnable");
    assert_eq!(holders(&client, "cip").await, (1, 1));
    assert!(
        !wf.finish(&[(ca.reference(), Outcome::done(json!(1)))])
            .await
            .unwrap()[0],
        "the cancelled instance's outcome is stale"
    );
    let cb = claim(&wf, "sq", 10).await.remove(0);
    assert_eq!(cb.id, b);
    assert!(
        wf.finish(&[(cb.reference(), Outcome::done(json!(2)))])
            .await
            .unwrap()[0]
    );
    assert_eq!(holders(&client, "cip").await, (0, 0));

    // cancel_newest, limit 1.
    let h = wf
        .start(&keyed("cn", Some(ConcurrencyStrategy::CancelNewest), 3))
        .await
        .unwrap()
        .id;
    let n = wf.start(&keyed("cn", None, 4)).await.unwrap().id;
    let info = wf.get(n).await.unwrap();
    assert_eq!(info.status, "cancelled");
    assert!(info.error.as_deref().unwrap().contains("cancel_newest"));
    assert_eq!(status(&wf, h).await, "runnable");
    assert_eq!(holders(&client, "cn").await, (1, 1));
    let ch = claim(&wf, "sq", 10).await;
    assert_eq!(ch.iter().map(|c| c.id).collect::<Vec<_>>(), [h]);
    assert!(
        wf.finish(&[(ch[0].reference(), Outcome::done(json!(3)))])
            .await
            .unwrap()[0]
    );
    // A free key takes the next start.
    let m = wf.start(&keyed("cn", None, 5)).await.unwrap().id;
    assert_eq!(status(&wf, m).await, "runnable");

    // queue (default): the second waits, and runs once the first is done.
    let q1 = wf.start(&keyed("qq", None, 6)).await.unwrap().id;
    let q2 = wf.start(&keyed("qq", None, 7)).await.unwrap().id;
    assert_eq!(status(&wf, q2).await, "queued");
    let _ = q1;

    // A strategy without a key is an error naming the field.
    let mut bad = Start::new("k", "sq", json!(0));
    bad.concurrency_strategy = Some(ConcurrencyStrategy::CancelNewest);
    match wf.start(&bad).await {
        Err(Error::InvalidArgument { field, .. }) => assert_eq!(field, "concurrency_strategy"),
        other => panic!("{other:?}"),
    }
}

/// Ledger under concurrency: starters race on one cancel_in_progress key (limit 2) while
/// workers run its steps (two `next`s and a `done`, sleeping between). Every started
/// instance ends done or cancelled, no outcome of a cancelled instance is applied after
/// its cancel, the key never holds more than its limit, and its slot count returns to 0.
#[tokio::test]
async fn cancel_in_progress_ledger_under_concurrent_starts() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let client = s.db.connect().await;
    wf.set_concurrency_limit("race", 2).await.unwrap();
    let ledger: Arc<Mutex<Vec<(i64, String)>>> = Arc::default();
    let step = |name: &'static str, next: Option<&'static str>| {
        let ledger = ledger.clone();
        move |s: ClaimedStep| {
            ledger.lock().unwrap().push((s.id, name.to_string()));
            async move {
                tokio::time::sleep(Duration::from_millis(3)).await;
                match next {
                    Some(n) => Outcome::next(n, json!({})),
                    None => Outcome::done(json!(1)),
                }
            }
        }
    };
    let machine = Machine::new("k")
        .step("start", step("start", Some("two")))
        .step("two", step("two", Some("three")))
        .step("three", step("three", None));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut runs = Vec::new();
    for w in 0..3 {
        let mut cfg = WorkerConfig::new("sq");
        cfg.name = format!("w{w}");
        cfg.batch = 4;
        let worker = Worker::new(wf.clone(), cfg).machine(machine.clone());
        runs.push(tokio::spawn(worker.run(stop_rx.clone())));
    }
    let watcher = {
        let client = s.db.connect().await;
        let stop = stop_rx.clone();
        tokio::spawn(async move {
            let mut max = 0;
            while !*stop.borrow() {
                max = max.max(holders(&client, "race").await.0);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            max
        })
    };
    let mut starters = Vec::new();
    for t in 0..4 {
        let wf = wf.clone();
        starters.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..15 {
                let st = keyed(
                    "race",
                    Some(ConcurrencyStrategy::CancelInProgress),
                    t * 100 + i,
                );
                ids.push(wf.start(&st).await.unwrap().id);
                tokio::time::sleep(Duration::from_millis(4)).await;
            }
            ids
        }));
    }
    let mut ids = Vec::new();
    for st in starters {
        ids.extend(st.await.unwrap());
    }
    // Everything ends: the last starts are not cancelled by anyone and run to done.
    for id in &ids {
        for _ in 0..3000 {
            if ["done", "failed", "cancelled"].contains(&status(&wf, *id).await.as_str()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let _ = stop_tx.send(true);
    for r in runs {
        r.await.unwrap().unwrap();
    }
    let max_holders = watcher.await.unwrap();
    assert!(
        max_holders <= 2,
        "{max_holders} holders of a key with limit 2"
    );
    let mut done = 0;
    for id in &ids {
        let info = wf.get(*id).await.unwrap();
        match info.status.as_str() {
            "done" => done += 1,
            "cancelled" => {
                assert!(info
                    .error
                    .as_deref()
                    .unwrap()
                    .contains("cancel_in_progress"));
                // No outcome applied after the cancel: the cancel recorded the step the
                // instance was at, and the outcomes recorded are exactly the `next`s of the
                // steps before it (times do not tell: a start waiting for its turn has an
                // earlier now() than an outcome that committed before it).
                let cancels: Vec<_> = info
                    .history
                    .iter()
                    .filter(|h| h.outcome == "cancelled")
                    .collect();
                assert_eq!(cancels.len(), 1, "{info:?}");
                let at = ["start", "two", "three"]
                    .iter()
                    .position(|s| *s == cancels[0].step)
                    .unwrap();
                let mut before: Vec<_> = info
                    .history
                    .iter()
                    .filter(|h| h.outcome != "cancelled")
                    .map(|h| (h.step.as_str(), h.outcome.as_str()))
                    .collect();
                before.sort();
                let mut want: Vec<_> = ["start", "two"][..at]
                    .iter()
                    .map(|s| (*s, "next"))
                    .collect();
                want.sort();
                assert_eq!(before, want, "{info:?}");
                assert_eq!(info.step, cancels[0].step);
            }
            other => panic!("instance {id} ended {other}"),
        }
        let applied: Vec<_> = info.history.iter().map(|h| h.outcome.as_str()).collect();
        let nexts = applied.iter().filter(|o| **o == "next").count();
        assert!(nexts <= 2, "{applied:?}");
    }
    assert!(done >= 2, "the newest starts ran to the end ({done} done)");
    assert_eq!(holders(&client, "race").await, (0, 0));
    // Each step ran at most once per claim, and no handler ran for a step of an instance
    // after the step's outcome was applied (a step name appears at most once per
    // instance unless its lease lapsed, which a 30 s lease does not here).
    let ledger = ledger.lock().unwrap();
    let mut seen = std::collections::HashSet::new();
    for e in ledger.iter() {
        assert!(seen.insert(e.clone()), "step ran twice: {e:?}");
    }
}

/// Retention per queue: a queue with its own retention loses its ended instances after it,
/// others keep the default; clearing it goes back to the default.
#[tokio::test]
async fn retention_per_queue() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let client = s.db.connect().await;
    let mut ended = HashMap::new();
    for q in ["short", "long", "default"] {
        let id = wf.start(&Start::new("k", q, json!({}))).await.unwrap().id;
        let c = claim(&wf, q, 1).await.remove(0);
        assert!(
            wf.finish(&[(c.reference(), Outcome::done(json!(1)))])
                .await
                .unwrap()[0]
        );
        ended.insert(q, id);
    }
    let active = wf
        .start(&Start::new("k", "short", json!({})))
        .await
        .unwrap()
        .id;
    wf.set_retention("short", Some(Duration::ZERO))
        .await
        .unwrap();
    wf.set_retention("long", Some(Duration::from_secs(3600)))
        .await
        .unwrap();
    let week = Duration::from_secs(7 * 24 * 3600);
    let prune = pgferry_core::workflow::retention::prune;
    assert_eq!(prune(&client, week, 100).await.unwrap(), 1);
    assert!(matches!(
        wf.get(ended["short"]).await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(status(&wf, ended["long"]).await, "done");
    assert_eq!(status(&wf, ended["default"]).await, "done");
    assert_eq!(status(&wf, active).await, "runnable");
    // The default at zero removes the default queue's, not the one an hour long.
    assert_eq!(prune(&client, Duration::ZERO, 100).await.unwrap(), 1);
    assert!(matches!(
        wf.get(ended["default"]).await,
        Err(Error::NotFound { .. })
    ));
    assert_eq!(status(&wf, ended["long"]).await, "done");
    wf.set_retention("long", None).await.unwrap();
    assert_eq!(prune(&client, Duration::ZERO, 100).await.unwrap(), 1);
    assert!(matches!(
        wf.get(ended["long"]).await,
        Err(Error::NotFound { .. })
    ));
    let left: i64 = client
        .query_one(
            "SELECT count(*) FROM pgferry.wf_steps WHERE instance_id = ANY ($1)",
            &[&ended.values().copied().collect::<Vec<i64>>()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
    // A bad queue name is a typed error naming the field.
    assert!(matches!(
        wf.set_retention("", Some(Duration::ZERO)).await,
        Err(Error::InvalidArgument { .. }) | Err(Error::InvalidName { .. })
    ));
}

/// Starts that switch a key to cancel_in_progress, racing: a start that read the key's old
/// strategy changed it again after another start's change had committed, holding the key's
/// row while it waited for the key's turn, which the other start held while it waited for
/// the row: "deadlock detected", and a start that failed (seen once in CI). Each key here is
/// created with the default strategy and then started on by eight starters at once; every
/// start must succeed.
#[tokio::test]
async fn starts_switching_a_key_to_cancel_in_progress_do_not_deadlock() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    for k in 0..25 {
        let key = format!("switch{k}");
        wf.set_concurrency_limit(&key, 2).await.unwrap();
        let starts: Vec<_> = (0..8)
            .map(|i| {
                let (wf, key) = (wf.clone(), key.clone());
                tokio::spawn(async move {
                    let st = keyed(&key, Some(ConcurrencyStrategy::CancelInProgress), i);
                    wf.start(&st).await
                })
            })
            .collect();
        for t in starts {
            if let Err(e) = t.await.unwrap() {
                panic!("a start on {key} failed: {e}");
            }
        }
    }
}
