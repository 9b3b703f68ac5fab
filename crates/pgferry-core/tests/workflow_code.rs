//! Code-first workflows (issue 20) against real Postgres and in-process workers: a worker
//! killed mid-workflow (journaled steps do not run again, the one in flight runs once
//! more), sleep and signal resume, recorded now/random, step retries, child workflows with
//! fan-out and fan-in, cancel mid-workflow, non-determinism parking and retry after a fix,
//! version markers, and the replay check finding a deliberate divergence.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pgferry_core::workflow::code::{
    self, replay_kind, Ctx, ReplayVerdict, Retries, StepError, Workflow,
};
use pgferry_core::workflow::{
    InstanceFilter, Machine, Worker, WorkerConfig, WorkerStats, Workflows,
};
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::task::JoinHandle;

const WAIT: Duration = Duration::from_secs(30);

struct Running {
    stop: watch::Sender<bool>,
    task: JoinHandle<pgferry_core::Result<()>>,
    stats: Arc<WorkerStats>,
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(true);
        self.task.await.unwrap().unwrap();
    }
}

fn worker(wf: &Workflows, queue: &str, machines: Vec<Machine>, lease: Duration) -> Running {
    let mut cfg = WorkerConfig::new(queue);
    cfg.lease = lease;
    cfg.idle_poll = Duration::from_millis(5);
    let mut w = Worker::new(wf.clone(), cfg);
    for m in machines {
        w = w.machine(m);
    }
    let stats = w.stats();
    let (stop, rx) = watch::channel(false);
    Running {
        stop,
        task: tokio::spawn(w.run(rx)),
        stats,
    }
}

fn counters(n: usize) -> Arc<Vec<AtomicU32>> {
    Arc::new((0..n).map(|_| AtomicU32::new(0)).collect())
}

fn counts(c: &[AtomicU32]) -> Vec<u32> {
    c.iter().map(|a| a.load(Ordering::SeqCst)).collect()
}

async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..3000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn wait_status(wf: &Workflows, id: i64, status: &str) {
    for _ in 0..3000 {
        if wf.get(id).await.unwrap().status == status {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("instance {id} never reached {status}");
}

async fn outcomes(wf: &Workflows, id: i64) -> Vec<String> {
    let info = wf.get(id).await.unwrap();
    info.history.into_iter().map(|h| h.outcome).collect()
}

/// Three steps; the second never returns on its first run (its worker "dies" there).
fn killable(runs: Arc<Vec<AtomicU32>>) -> Workflow<u32, u32> {
    Workflow::new("killable", move |ctx: Ctx, input: u32| {
        let runs = runs.clone();
        async move {
            let a = ctx
                .step("one", || async {
                    runs[0].fetch_add(1, Ordering::SeqCst);
                    Ok::<_, String>(input + 1)
                })
                .await?;
            let b = ctx
                .step("two", || async {
                    if runs[1].fetch_add(1, Ordering::SeqCst) == 0 {
                        std::future::pending::<()>().await;
                    }
                    Ok::<_, String>(a * 10)
                })
                .await?;
            ctx.step("three", || async {
                runs[2].fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(b + 1)
            })
            .await
        }
    })
}

#[tokio::test]
async fn a_worker_killed_mid_workflow_replays_without_running_journaled_steps() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let runs = counters(3);
    let def = killable(runs.clone());
    let lease = Duration::from_millis(800);
    let a = worker(&wf, "kq", vec![def.machine()], lease);
    let h = def.start(&wf, "kq", &4).await.unwrap();
    wait_until("step two in flight", || runs[1].load(Ordering::SeqCst) == 1).await;
    // The worker dies: its loop is gone, its claim stays leased, its step never returns.
    a.task.abort();
    let b = worker(&wf, "kq", vec![def.machine()], lease);
    assert_eq!(h.result(WAIT).await.unwrap(), 51);
    assert_eq!(
        counts(&runs),
        [1, 2, 1],
        "one: once; two: once more; three: once"
    );
    let info = h.describe().await.unwrap();
    assert!(
        info.history.iter().any(|r| r.attempt == 2),
        "{:?}",
        info.history
    );
    b.stop().await;
}

#[tokio::test]
async fn each_step_costs_one_outcome_and_the_journal_is_the_state() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let def = code::examples::three_steps();
    let w = worker(&wf, "q3", vec![def.machine()], WAIT);
    let h = def
        .start(&wf, "q3", &code::examples::Numbered { i: 5 })
        .await
        .unwrap();
    assert_eq!(h.result(WAIT).await.unwrap(), 7);
    // Three steps, three outcome statements: the third step's claim also returns.
    assert_eq!(outcomes(&wf, h.id()).await, ["next", "next", "done"]);
    let state = h.describe().await.unwrap().state;
    assert_eq!(
        state,
        json!({"journal": [{"t": "step", "name": "one", "ok": 5}, {"t": "step", "name": "two", "ok": 6}]})
    );
    w.stop().await;
}

#[derive(serde::Serialize, serde::Deserialize, Debug)]
struct Report {
    slept_ms: u128,
    random_before: u64,
    random_seen: u64,
    paid: Option<Value>,
    late_timed_out: bool,
}

#[tokio::test]
async fn sleep_and_signal_resume_with_recorded_now_and_random() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let runs = counters(2);
    let r2 = runs.clone();
    let def: Workflow<(), Report> = Workflow::new("sleepy", move |ctx: Ctx, _: ()| {
        let runs = r2.clone();
        async move {
            let t0 = ctx.now().await;
            let r = ctx.random().await;
            let seen = ctx
                .step("see", || async {
                    runs[0].fetch_add(1, Ordering::SeqCst);
                    Ok::<_, String>(r)
                })
                .await?;
            ctx.sleep(Duration::from_millis(300)).await;
            let t1 = ctx.now().await;
            let paid = ctx
                .wait_for_signal(&["paid"], Some(Duration::from_secs(60)))
                .await;
            let late = ctx
                .wait_for_signal(&["never"], Some(Duration::from_millis(100)))
                .await;
            ctx.step("after", || async {
                runs[1].fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(())
            })
            .await?;
            Ok::<_, StepError>(Report {
                slept_ms: t1.duration_since(t0).unwrap().as_millis(),
                random_before: r,
                random_seen: seen,
                paid: paid.map(|s| s.payload),
                late_timed_out: late.is_none(),
            })
        }
    });
    let w = worker(&wf, "sq", vec![def.machine()], WAIT);
    let h = def.start(&wf, "sq", &()).await.unwrap();
    wait_status(&wf, h.id(), "awaiting").await;
    assert_eq!(
        h.describe().await.unwrap().awaits,
        Some(vec!["paid".to_string()])
    );
    h.signal("paid", &json!({"amount": 5})).await.unwrap();
    let r = h.result(WAIT).await.unwrap();
    assert!(r.slept_ms >= 300, "{r:?}");
    assert_eq!(
        r.random_before, r.random_seen,
        "random replayed as recorded"
    );
    assert_eq!(r.paid, Some(json!({"amount": 5})));
    assert!(r.late_timed_out);
    assert_eq!(counts(&runs), [1, 1]);
    let o = outcomes(&wf, h.id()).await;
    for kind in ["sleep", "await", "done"] {
        assert!(o.iter().any(|x| x == kind), "{o:?}");
    }
    w.stop().await;
}

#[tokio::test]
async fn step_retries_then_a_recorded_error() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let runs = counters(2);
    let r2 = runs.clone();
    let def: Workflow<(), u32> = Workflow::new("flaky", move |ctx: Ctx, _: ()| {
        let runs = r2.clone();
        async move {
            let quick = Duration::from_millis(10);
            let n = ctx
                .step_with("flaky", Retries::new(3).backoff(quick, quick), || async {
                    let n = runs[0].fetch_add(1, Ordering::SeqCst) + 1;
                    if n < 3 {
                        Err(format!("try {n}"))
                    } else {
                        Ok(n)
                    }
                })
                .await?;
            let never: Result<u32, StepError> = ctx
                .step_with("broken", Retries::new(1).backoff(quick, quick), || async {
                    runs[1].fetch_add(1, Ordering::SeqCst);
                    Err::<u32, _>("always")
                })
                .await;
            Ok::<_, StepError>(n * 100 + u32::from(never.is_err()))
        }
    });
    let w = worker(&wf, "rq", vec![def.machine()], WAIT);
    let h = def.start(&wf, "rq", &()).await.unwrap();
    assert_eq!(h.result(WAIT).await.unwrap(), 301);
    assert_eq!(counts(&runs), [3, 2], "3 tries; 1 + 1 retry");
    w.stop().await;
}

fn square(runs: Arc<Vec<AtomicU32>>) -> Workflow<i64, i64> {
    Workflow::new("square", move |ctx: Ctx, x: i64| {
        let runs = runs.clone();
        async move {
            ctx.step_with("square", Retries::new(0), || async {
                runs[0].fetch_add(1, Ordering::SeqCst);
                if x == 13 {
                    Err("unlucky".to_string())
                } else {
                    Ok(x * x)
                }
            })
            .await
        }
    })
}

#[tokio::test]
async fn child_workflows_fan_out_and_fan_in() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let runs = counters(1);
    let sq = square(runs.clone());
    let sq2 = sq.clone();
    let parent: Workflow<Vec<i64>, Value> =
        Workflow::new("sum_squares", move |ctx: Ctx, xs: Vec<i64>| {
            let sq = sq2.clone();
            async move {
                let all = ctx.fan_out(&sq, &xs).await;
                let sum: i64 = all.iter().filter_map(|r| r.as_ref().ok()).sum();
                let failed: Vec<String> = all
                    .iter()
                    .filter_map(|r| {
                        r.as_ref()
                            .err()
                            .map(|e| format!("{}: {}", e.status, e.error))
                    })
                    .collect();
                let one = ctx.child(&sq, &4).await?;
                Ok::<_, code::ChildError>(json!({"sum": sum, "failed": failed, "one": one}))
            }
        });
    let w = worker(&wf, "fq", vec![parent.machine(), sq.machine()], WAIT);
    let h = parent.start(&wf, "fq", &vec![1, 2, 3, 13]).await.unwrap();
    let r = h.result(WAIT).await.unwrap();
    assert_eq!(r["sum"], json!(14));
    assert_eq!(r["one"], json!(16));
    let failed = r["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 1);
    assert!(
        failed[0].as_str().unwrap().starts_with("failed:"),
        "{failed:?}"
    );
    assert!(
        failed[0].as_str().unwrap().contains("unlucky"),
        "{failed:?}"
    );
    assert_eq!(counts(&runs), [5], "each child's step ran once");
    let o = outcomes(&wf, h.id()).await;
    assert_eq!(o.iter().filter(|x| *x == "spawn").count(), 2, "{o:?}");
    w.stop().await;
}

#[tokio::test]
async fn cancel_mid_workflow_while_awaiting_and_while_a_step_runs() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let runs = counters(3);
    let gate = Arc::new(tokio::sync::Notify::new());
    let (r2, g2) = (runs.clone(), gate.clone());
    let def: Workflow<bool, ()> = Workflow::new("cancellable", move |ctx: Ctx, slow: bool| {
        let (runs, gate) = (r2.clone(), g2.clone());
        async move {
            if slow {
                ctx.step("slow", || async {
                    runs[0].fetch_add(1, Ordering::SeqCst);
                    gate.notified().await;
                    Ok::<_, String>(())
                })
                .await?;
            } else {
                ctx.wait_for_signal(&["go"], None).await;
            }
            ctx.step("after", || async {
                runs[1].fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(())
            })
            .await
        }
    });
    let w = worker(&wf, "cq", vec![def.machine()], WAIT);
    // Parked on a signal: cancelled, and a late signal is refused.
    let parked = def.start(&wf, "cq", &false).await.unwrap();
    wait_status(&wf, parked.id(), "awaiting").await;
    assert_eq!(
        parked.cancel(Some("customer left")).await.unwrap(),
        "awaiting"
    );
    assert!(matches!(
        parked.result(WAIT).await,
        Err(code::Error::Cancelled { .. })
    ));
    assert!(parked.signal("go", &json!({})).await.is_err());
    // A step running when the cancel commits: its outcome is stale, nothing runs after.
    let busy = def.start(&wf, "cq", &true).await.unwrap();
    wait_until("the slow step", || runs[0].load(Ordering::SeqCst) == 1).await;
    assert_eq!(busy.cancel(None).await.unwrap(), "running");
    gate.notify_one();
    wait_until("the stale outcome", || {
        w.stats.stale.load(Ordering::SeqCst) == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(counts(&runs), [1, 0, 0], "no step after a cancel");
    assert_eq!(busy.describe().await.unwrap().status, "cancelled");
    w.stop().await;
}

/// v1: reserve, wait for "go", finish. v2 renamed the first step without a version marker.
/// v3 renamed it behind `patched`, the safe way.
fn evolving(version: u32, runs: Arc<Vec<AtomicU32>>) -> Workflow<(), String> {
    Workflow::new("evolving", move |ctx: Ctx, _: ()| {
        let runs = runs.clone();
        async move {
            let new_name = match version {
                1 => false,
                2 => true,
                _ => ctx.patched("reserve-v2").await,
            };
            let first = if new_name { "reserve_v2" } else { "reserve" };
            ctx.step(first, || async {
                runs[0].fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(())
            })
            .await?;
            ctx.wait_for_signal(&["go"], None).await;
            ctx.step("finish", || async {
                runs[1].fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(first.to_string())
            })
            .await
        }
    })
}

#[tokio::test]
async fn non_determinism_parks_the_instance_until_a_fixed_deploy_retries_it() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let runs = counters(2);
    let v1 = evolving(1, runs.clone());
    let w = worker(&wf, "nq", vec![v1.machine()], WAIT);
    let h = v1.start(&wf, "nq", &()).await.unwrap();
    wait_status(&wf, h.id(), "awaiting").await;
    w.stop().await;
    // A deploy renames the journaled step: the resumed instance is parked, not wrong.
    let w = worker(&wf, "nq", vec![evolving(2, runs.clone()).machine()], WAIT);
    h.signal("go", &json!(null)).await.unwrap();
    match h.result(WAIT).await {
        Err(code::Error::NonDeterminism { error, .. }) => {
            assert!(error.starts_with(code::NONDETERMINISM), "{error}");
            assert!(error.contains("position 0"), "{error}");
            assert!(
                error.contains("\"reserve\"") && error.contains("\"reserve_v2\""),
                "{error}"
            );
        }
        other => panic!("expected a non-determinism error, got {other:?}"),
    }
    assert_eq!(counts(&runs), [1, 0], "nothing ran on the diverged code");
    w.stop().await;
    // The fix (v3: the rename behind a version marker) is deployed; the instance retried.
    let w = worker(&wf, "nq", vec![evolving(3, runs.clone()).machine()], WAIT);
    wf.retry(h.id()).await.unwrap();
    assert_eq!(
        h.result(WAIT).await.unwrap(),
        "reserve",
        "old record: old branch"
    );
    // New instances take the new branch.
    let fresh = evolving(3, runs.clone())
        .start(&wf, "nq", &())
        .await
        .unwrap();
    wait_status(&wf, fresh.id(), "awaiting").await;
    fresh.signal("go", &json!(null)).await.unwrap();
    assert_eq!(fresh.result(WAIT).await.unwrap(), "reserve_v2");
    assert_eq!(counts(&runs), [2, 2]);
    w.stop().await;
}

#[tokio::test]
async fn replay_finds_a_deliberate_divergence_without_side_effects() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let runs = counters(2);
    let v1 = evolving(1, runs.clone());
    let w = worker(&wf, "pq", vec![v1.machine()], WAIT);
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(v1.start(&wf, "pq", &()).await.unwrap());
    }
    for h in &ids {
        wait_status(&wf, h.id(), "awaiting").await;
    }
    ids[0].signal("go", &json!(null)).await.unwrap();
    ids[0].result(WAIT).await.unwrap();
    w.stop().await;
    let before = counts(&runs);
    assert_eq!(before, [3, 1]);

    let same = replay_kind(&wf, &v1, 100).await.unwrap();
    assert!(same.ok(), "{same:?}");
    assert_eq!((same.instances, same.consistent), (3, 3));
    let patched = replay_kind(&wf, &evolving(3, runs.clone()), 100)
        .await
        .unwrap();
    assert!(
        patched.ok(),
        "a rename behind a version marker replays: {patched:?}"
    );

    let renamed = replay_kind(&wf, &evolving(2, runs.clone()), 100)
        .await
        .unwrap();
    assert!(!renamed.ok());
    assert_eq!(renamed.instances, 3);
    assert_eq!(renamed.divergent.len(), 3, "{renamed:?}");
    for d in &renamed.divergent {
        assert_eq!(
            d.verdict,
            ReplayVerdict::Diverged {
                position: 0,
                recorded: "step \"reserve\"".into(),
                found: "step \"reserve_v2\"".into(),
            }
        );
    }
    assert_eq!(counts(&runs), before, "a replay runs no step");
    // Nothing was written either: the awaiting instances still await.
    assert_eq!(wf.get(ids[1].id()).await.unwrap().status, "awaiting");
}

#[tokio::test]
async fn first_of_takes_the_first_child_to_end_and_cancels_the_others() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let racer: Workflow<u64, u64> = Workflow::new("racer", |ctx: Ctx, ms: u64| async move {
        ctx.sleep(Duration::from_millis(ms)).await;
        ctx.step("arrive", || async move { Ok::<_, String>(ms) })
            .await
    });
    let r2 = racer.clone();
    let race: Workflow<(), u64> = Workflow::new("race", move |ctx: Ctx, _: ()| {
        let racer = r2.clone();
        async move { ctx.first_of(&racer, &[60_000, 10, 60_000]).await }
    });
    let w = worker(&wf, "raceq", vec![race.machine(), racer.machine()], WAIT);
    let h = race.start(&wf, "raceq", &()).await.unwrap();
    assert_eq!(h.result(WAIT).await.unwrap(), 10);
    let filter = InstanceFilter {
        queue: "raceq".into(),
        kind: Some("racer".into()),
        ..InstanceFilter::default()
    };
    let children = wf.list(&filter).await.unwrap().instances;
    let mut statuses: Vec<String> = children.into_iter().map(|c| c.status).collect();
    statuses.sort();
    assert_eq!(statuses, ["cancelled", "cancelled", "done"]);
    let journal = h.describe().await.unwrap().state;
    assert_eq!(journal["journal"][0]["any"], json!(true), "{journal}");
    w.stop().await;
}

/// An instance started from another language with input of the wrong shape fails with an
/// error naming the input (no panic, no retry loop).
#[tokio::test]
async fn input_of_the_wrong_shape_fails_the_instance_naming_the_input() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let def = code::examples::three_steps();
    let w = worker(&wf, "bq", vec![def.machine()], WAIT);
    let started = wf
        .start(&pgferry_core::workflow::Start::new(
            "code_three",
            "bq",
            json!({"i": "not a number"}),
        ))
        .await
        .unwrap();
    match def.handle(&wf, started.id).result(WAIT).await {
        Err(code::Error::Failed { error, .. }) => {
            assert!(error.starts_with("input does not decode"), "{error}")
        }
        other => panic!("expected a failed instance, got {other:?}"),
    }
    assert_eq!(outcomes(&wf, started.id).await, ["fail"]);
    w.stop().await;
}
