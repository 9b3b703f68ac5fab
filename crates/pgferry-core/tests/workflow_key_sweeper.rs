//! The key sweeper (workflow/sweeper.rs): a concurrency slot given back while the key's
//! only waiter is held by another transaction stays free, and only the sweeper promotes
//! that waiter; an idle pass writes nothing; racing outcomes, it never exceeds a key's
//! limit; its statement reads indexes only.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use pgferry_core::leader::duty::{Duty, Next};
use pgferry_core::workflow::sweeper::{sweep, KeySweeper};
use pgferry_core::workflow::{ClaimedStep, ConcurrencyStrategy, Outcome, Start, Workflows};
use pgferry_core::{Leader, LeaderConfig};
use serde_json::json;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_postgres::{AsyncMessage, Client, NoTls};

const LEASE: Duration = Duration::from_secs(30);

fn keyed(key: &str, limit: i32, strategy: ConcurrencyStrategy, i: i64) -> Start {
    let mut st = Start::new("k", "q", json!({ "i": i }));
    st.concurrency_key = Some(key.into());
    st.concurrency_limit = Some(limit);
    st.concurrency_strategy = Some(strategy);
    st
}

async fn claim(wf: &Workflows) -> Vec<ClaimedStep> {
    wf.claim("q", 10, "w", LEASE).await.unwrap()
}

async fn done(wf: &Workflows, s: &ClaimedStep) {
    let applied = wf
        .finish(&[(s.reference(), Outcome::done(json!(s.id)))])
        .await
        .unwrap();
    assert_eq!(applied, [true]);
}

async fn status(wf: &Workflows, id: i64) -> String {
    wf.get(id).await.unwrap().status
}

/// The key's `running` and how many of its active instances hold a slot.
async fn slots(c: &Client, key: &str) -> (i32, i64) {
    let row = c
        .query_one(
            "SELECT k.running,
                    (SELECT count(*) FROM pgferry.wf_instances i
                      WHERE i.concurrency_key = k.key AND i.active AND i.has_slot)
               FROM pgferry.wf_keys k WHERE k.key = $1",
            &[&key],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// A: running with the key's one slot; B: its only waiter. B is held by another
/// transaction (as a late, stale outcome of one of its children holds it through its
/// chain) while A's outcome gives the slot back, so the slot stays free and B waits.
async fn strand(
    s: &common::Setup,
    wf: &Workflows,
    key: &str,
    strategy: ConcurrencyStrategy,
) -> i64 {
    let a = wf.start(&keyed(key, 1, strategy, 1)).await.unwrap().id;
    let b = wf.start(&keyed(key, 1, strategy, 2)).await.unwrap().id;
    let steps = claim(wf).await;
    assert_eq!(steps.iter().map(|s| s.id).collect::<Vec<_>>(), [a]);
    assert_eq!(status(wf, b).await, "queued");
    let mut holder = s.db.connect().await;
    let tx = holder.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM pgferry.wf_instances WHERE id = $1 FOR UPDATE",
        &[&b],
    )
    .await
    .unwrap();
    done(wf, &steps[0]).await;
    tx.commit().await.unwrap();
    b
}

/// A connection LISTENing on `pgferry_wf_ready`; the payloads it hears.
async fn listen_ready(db: &pgferry_testkit::TestDb) -> (Client, UnboundedReceiver<String>) {
    let (client, mut conn) = db.config.connect(NoTls).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = stream.next().await {
            if let AsyncMessage::Notification(n) = m {
                let _ = tx.send(n.payload().to_string());
            }
        }
    });
    client
        .batch_execute("LISTEN pgferry_wf_ready")
        .await
        .unwrap();
    (client, rx)
}

#[tokio::test]
async fn a_waiter_held_while_its_slot_was_given_back_is_promoted_by_the_sweeper() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let mut c = s.db.connect().await;
    let (_listener, mut ready) = listen_ready(&s.db).await;
    let mut sweeper = KeySweeper::new(&LeaderConfig::default());
    for (key, strategy) in [
        ("plain", ConcurrencyStrategy::Queue),
        ("rr", ConcurrencyStrategy::RoundRobin),
    ] {
        let b = strand(&s, &wf, key, strategy).await;
        // The bug: the slot is free, B waits, and nothing on the key would ever wake it.
        assert_eq!(status(&wf, b).await, "queued", "{key}");
        assert_eq!(slots(&c, key).await, (0, 0), "{key}");
        assert!(claim(&wf).await.is_empty(), "{key}");
        while ready.try_recv().is_ok() {}

        assert_eq!(sweeper.run_once(&mut c).await.unwrap(), Next::Idle);
        assert_eq!(status(&wf, b).await, "runnable", "{key}");
        // Idle workers of the queue are woken, not left to their next poll.
        let heard = tokio::time::timeout(Duration::from_secs(5), ready.recv()).await;
        assert_eq!(heard.ok().flatten().as_deref(), Some("q"), "{key}");
        assert_eq!(slots(&c, key).await, (1, 1), "{key}");
        let steps = claim(&wf).await;
        assert_eq!(steps.iter().map(|s| s.id).collect::<Vec<_>>(), [b], "{key}");
        done(&wf, &steps[0]).await;
        assert_eq!(status(&wf, b).await, "done", "{key}");
        assert_eq!(slots(&c, key).await, (0, 0), "{key}");
    }
}

#[test]
fn settings_are_validated_and_the_field_named() {
    let zero = LeaderConfig {
        key_sweep_interval: Duration::ZERO,
        ..LeaderConfig::default()
    };
    let e = zero.validate().unwrap_err().to_string();
    assert!(e.contains("key_sweep_interval"), "{e}");
    let batch = LeaderConfig {
        key_sweep_batch: 0,
        ..LeaderConfig::default()
    };
    let e = batch.validate().unwrap_err().to_string();
    assert!(e.contains("key_sweep_batch"), "{e}");
}

#[tokio::test]
async fn the_leader_runs_the_sweeper() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let b = strand(&s, &wf, "k", ConcurrencyStrategy::Queue).await;
    // A pass every hour: the one at start may have come before the stranding, so the
    // trigger runs the pass that finds it.
    let config = LeaderConfig {
        key_sweep_interval: Duration::from_secs(3600),
        ..LeaderConfig::default()
    };
    let leader = Leader::new(s.engine.clone(), s.db.config.clone(), config);
    let sweeper = leader.duties().handle("workflow-key-sweeper");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let run = tokio::spawn(leader.run(stopped));
    let mut runnable = false;
    for _ in 0..200 {
        sweeper.trigger();
        if status(&wf, b).await == "runnable" {
            runnable = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.send(true).unwrap();
    run.await.unwrap();
    assert!(runnable, "the leader's sweeper promoted the waiter");
    assert!(sweeper.stats.snapshot().passes >= 1);
}

/// Runs one sweep statement in a transaction of its own; returns its result and whether
/// that transaction wrote anything (a row lock counts: it takes a transaction id).
async fn sweep_wrote(c: &mut Client) -> (pgferry_core::workflow::sweeper::Swept, bool) {
    let tx = c.transaction().await.unwrap();
    let swept = sweep(&tx, "", 1000).await.unwrap();
    let wrote: bool = tx
        .query_one("SELECT pg_current_xact_id_if_assigned() IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    tx.commit().await.unwrap();
    (swept, wrote)
}

#[tokio::test]
async fn an_idle_pass_writes_nothing() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let mut c = s.db.connect().await;
    // Nothing waits.
    let (swept, wrote) = sweep_wrote(&mut c).await;
    assert_eq!((swept.walked, swept.promoted, wrote), (0, 0, false));
    // A full key with a backlog, and a round_robin key whose representative is in the
    // picker beside a free slot (kept for the claim that takes it): waiters, nothing to do.
    for i in 0..3 {
        wf.start(&keyed("full", 1, ConcurrencyStrategy::Queue, i))
            .await
            .unwrap();
        wf.start(&keyed("rr", 2, ConcurrencyStrategy::RoundRobin, i))
            .await
            .unwrap();
    }
    assert_eq!(slots(&c, "rr").await, (1, 1));
    let (swept, wrote) = sweep_wrote(&mut c).await;
    assert_eq!((swept.walked, swept.promoted, wrote), (2, 0, false));
    // The duty's pass over them is idle too.
    let mut sweeper = KeySweeper::new(&LeaderConfig::default());
    assert_eq!(sweeper.run_once(&mut c).await.unwrap(), Next::Idle);
    assert_eq!(slots(&c, "full").await, (1, 1));
    assert_eq!(slots(&c, "rr").await, (1, 1));
}

#[tokio::test]
async fn a_batch_walks_on_where_the_last_one_ended() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let c = s.db.connect().await;
    for key in ["a", "b", "c"] {
        for i in 0..2 {
            wf.start(&keyed(key, 1, ConcurrencyStrategy::Queue, i))
                .await
                .unwrap();
        }
    }
    // Raising limits frees slots no outcome hands on: the sweeper fills them, two keys
    // per statement.
    for key in ["a", "b", "c"] {
        wf.set_concurrency_limit(key, 2).await.unwrap();
    }
    let first = sweep(&c, "", 2).await.unwrap();
    assert_eq!(
        (first.walked, first.last.as_deref(), first.promoted),
        (2, Some("b"), 2)
    );
    let second = sweep(&c, "b", 2).await.unwrap();
    assert_eq!(
        (second.walked, second.last.as_deref(), second.promoted),
        (1, Some("c"), 1)
    );
    for key in ["a", "b", "c"] {
        assert_eq!(slots(&c, key).await, (2, 2), "{key}");
    }
    assert_eq!(claim(&wf).await.len(), 6);
}

#[tokio::test]
async fn a_start_holding_the_key_is_never_waited_for_nor_overrun() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let mut c = s.db.connect().await;
    let b = strand(&s, &wf, "k", ConcurrencyStrategy::Queue).await;
    // A start of the key takes the free slot in a transaction still open: it holds the
    // key's row, and the sweeper skips the key instead of waiting for it.
    let mut starter = s.db.connect().await;
    let tx = starter.transaction().await.unwrap();
    let late = Workflows::start_tx(&tx, &keyed("k", 1, ConcurrencyStrategy::Queue, 3))
        .await
        .unwrap()
        .id;
    let swept = tokio::time::timeout(Duration::from_secs(10), sweep(&c, "", 1000))
        .await
        .expect("the sweeper waited for a key's row")
        .unwrap();
    assert_eq!(swept.promoted, 0);
    tx.commit().await.unwrap();
    // The slot is the late start's now: the sweeper leaves B waiting for it.
    let mut sweeper = KeySweeper::new(&LeaderConfig::default());
    sweeper.run_once(&mut c).await.unwrap();
    assert_eq!(slots(&c, "k").await, (1, 1));
    assert_eq!(status(&wf, b).await, "queued");
    let steps = claim(&wf).await;
    assert_eq!(steps.iter().map(|s| s.id).collect::<Vec<_>>(), [late]);
    done(&wf, &steps[0]).await;
    let steps = claim(&wf).await;
    assert_eq!(steps.iter().map(|s| s.id).collect::<Vec<_>>(), [b]);
}

/// Workers finish a limit-1 key's instances while another transaction holds all its waiters
/// now and then (stranding slots) and the sweeper runs without pause: at no point do two of the
/// key's instances hold a slot, and every instance ends done.
#[tokio::test]
async fn racing_outcomes_the_sweeper_never_exceeds_the_limit() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let n = 40;
    for i in 0..n {
        wf.start(&keyed("k", 1, ConcurrencyStrategy::Queue, i))
            .await
            .unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let sweeps = {
        let (db, stop) = (s.db.connect().await, stop.clone());
        tokio::spawn(async move {
            let mut promoted = 0;
            while !stop.load(Ordering::Relaxed) {
                promoted += sweep(&db, "", 1000).await.unwrap().promoted;
            }
            promoted
        })
    };
    let holds = {
        let (mut db, stop) = (s.db.connect().await, stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let tx = db.transaction().await.unwrap();
                // Every waiter, so that a slot given back meanwhile is stranded.
                tx.execute(
                    "SELECT 1 FROM pgferry.wf_instances i
                       JOIN pgferry.wf_key_waiters kw ON kw.instance_id = i.id
                        FOR UPDATE OF i SKIP LOCKED",
                    &[],
                )
                .await
                .unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
                tx.commit().await.unwrap();
            }
        })
    };
    let c = s.db.connect().await;
    let mut ended = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while ended < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{ended} of {n} ended"
        );
        let steps = claim(&wf).await;
        assert!(steps.len() <= 1, "two of a limit-1 key claimed: {steps:?}");
        let (running, holding) = slots(&c, "k").await;
        assert!(
            running <= 1 && holding <= 1,
            "running {running}, holding {holding}"
        );
        for st in &steps {
            done(&wf, st).await;
            ended += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    holds.await.unwrap();
    let promoted = sweeps.await.unwrap();
    // The holds stranded slots and the sweeper handed them on, while outcomes went on.
    assert!(
        promoted > 0,
        "no slot was stranded: the race tested nothing"
    );
    assert_eq!(slots(&c, "k").await, (0, 0));
    let left: i64 = c
        .query_one(
            "SELECT count(*) FROM pgferry.wf_instances WHERE status <> 'done'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}

/// 60k ended instances, 20k keys nobody waits for, 3k full keys with a waiter each, 500
/// round_robin keys whose representative is in the picker beside a free slot (with a
/// waiter each), and one stranded key: a free slot and a waiter.
const SEED: &str = "
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, active, finished_at, result)
SELECT g, 'k', 'q', 'end', 'done', false, now() - interval '1 hour', '1'
  FROM generate_series(1, 60000) g;
INSERT INTO pgferry.wf_keys (key, max, running)
SELECT 'idle-' || g, 1, 0 FROM generate_series(1, 20000) g;
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, concurrency_key, has_slot)
SELECT g, 'k', 'q', 'start', 'runnable', 'full-' || g, true FROM generate_series(60001, 63000) g;
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, concurrency_key)
SELECT g, 'k', 'q', 'start', 'queued', 'full-' || (g - 3000) FROM generate_series(63001, 66000) g;
INSERT INTO pgferry.wf_keys (key, max, running)
SELECT 'full-' || g, 1, 1 FROM generate_series(60001, 63000) g;
INSERT INTO pgferry.wf_key_waiters (key, instance_id)
SELECT 'full-' || (g - 3000), g FROM generate_series(63001, 66000) g;
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, concurrency_key, has_slot)
SELECT g, 'k', 'q', 'start', 'runnable', 'rr-' || g, true FROM generate_series(66001, 66500) g;
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, concurrency_key)
SELECT g, 'k', 'q', 'start', 'queued', 'rr-' || (g - 500) FROM generate_series(66501, 67000) g;
INSERT INTO pgferry.wf_keys (key, max, running, strategy, rep)
SELECT 'rr-' || g, 2, 1, 'round_robin', g FROM generate_series(66001, 66500) g;
INSERT INTO pgferry.wf_key_waiters (key, instance_id)
SELECT 'rr-' || (g - 500), g FROM generate_series(66501, 67000) g;
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, concurrency_key)
VALUES (67001, 'k', 'q', 'start', 'queued', 'stranded');
INSERT INTO pgferry.wf_keys (key, max, running) VALUES ('stranded', 1, 0);
INSERT INTO pgferry.wf_key_waiters (key, instance_id) VALUES ('stranded', 67001);
SELECT setval('pgferry.wf_instance_ids', 100000);
ANALYZE;
";

/// Scans in a plan that read `table` other than through its primary key.
fn other_scans<'a>(plan: &'a str, table: &str) -> Vec<&'a str> {
    plan.lines()
        .filter(|l| l.contains(" Scan ") && l.contains(&format!(" on {table} ")))
        .filter(|l| !l.contains(&format!("using {table}_pkey on {table} ")))
        .collect()
}

#[tokio::test]
async fn the_sweep_reads_indexes_only() {
    let s = common::setup().await;
    let admin = s.db.connect().await;
    admin.batch_execute(SEED).await.unwrap();
    let (client, mut notices) = common::connect_with_notices(&s.db).await;
    common::enable_auto_explain(&client).await;
    common::drain(&mut notices);
    // The walk: 3.5k keys with waiters, a batch of 1000 per statement.
    let (mut after, mut walked, mut promoted, mut plans) = (String::new(), 0, 0, Vec::new());
    loop {
        let swept = sweep(&client, &after, 1000).await.unwrap();
        plans.extend(common::drain(&mut notices));
        walked += swept.walked;
        promoted += swept.promoted;
        match swept.last {
            Some(last) if swept.walked == 1000 => after = last,
            _ => break,
        }
    }
    assert_eq!((walked, promoted), (3501, 1));
    let walk = common::plans_with(&plans, "WITH RECURSIVE");
    assert_eq!(walk.len(), 4, "{plans:#?}");
    assert!(
        plans.len() > walk.len(),
        "wf_sweep_key's statements were explained too"
    );
    for p in &plans {
        for t in ["wf_key_waiters", "wf_keys", "wf_instances"] {
            let others = other_scans(p, t);
            assert!(
                others.is_empty(),
                "{t} read not by its primary key: {others:?}\n{p}"
            );
        }
    }
    for p in &walk {
        assert!(
            p.contains("Index Only Scan using wf_key_waiters_pkey"),
            "{p}"
        );
    }
    // Idle: nothing waits. wf_key_waiters alone is read: neither wf_keys nor any instance.
    for sql in [
        "DELETE FROM pgferry.wf_key_waiters",
        "VACUUM ANALYZE pgferry.wf_key_waiters",
    ] {
        admin.batch_execute(sql).await.unwrap();
    }
    common::drain(&mut notices);
    let swept = sweep(&client, "", 1000).await.unwrap();
    assert_eq!((swept.walked, swept.promoted), (0, 0));
    let plans = common::drain(&mut notices);
    assert_eq!(plans.len(), 1, "{plans:#?}");
    for line in plans[0].lines() {
        if line.contains(" on wf_keys") || line.contains(" on wf_instances") {
            assert!(
                line.contains("never executed"),
                "read when idle: {line}\n{}",
                plans[0]
            );
        }
    }
}
