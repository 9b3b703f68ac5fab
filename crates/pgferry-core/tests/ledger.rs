//! The ledger under concurrency: 4 producers, 8 claimers, 100k jobs, 10% random failures
//! with retries (immediate and delayed), the leader ticking, promoting, rescuing and rotating
//! segments throughout. Every job ends completed or dead-lettered exactly per its attempts;
//! no attempt has two outcomes; nothing is lost. The same ledger, shorter, on a queue with
//! asynchronous commit (architecture.md §1.7): the mode changes when commits are flushed, never what
//! a claim sees or which outcome wins.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pgferry_core::db::Pools;
use pgferry_core::{
    Durability, Engine, Leader, LeaderConfig, NewJob, OutcomeKind, QueueOptions, QueueSettings,
};
use rand::Rng;
use serde_json::json;

const PRODUCERS: usize = 4;
const CLAIMERS: usize = 8;
const MAX_ATTEMPTS: i32 = 4;

/// Accepted outcomes per (job id, attempt), as the claimers saw them acknowledged.
type Ledger = HashMap<(i64, i32), Vec<Recorded>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recorded {
    Completed,
    Retry,
    Dead,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_job_is_accounted_for() {
    run(Durability::Sync, 25_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_job_is_accounted_for_on_an_async_queue() {
    run(Durability::Async, 5_000).await;
}

async fn run(durability: Durability, jobs_per_producer: usize) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("pgferry_core=debug")
        .with_test_writer()
        .try_init();
    let s = common::setup().await;
    // Both pools, as `pgferry serve` has them: a sync queue never touches the async one.
    let engine = Engine::new(Pools::new(&s.db.config, "ledger", 16), Default::default());
    engine
        .upsert_queue(
            "ledger",
            &QueueOptions {
                shards: 4,
                max_attempts: MAX_ATTEMPTS,
                lease: Duration::from_secs(120),
            },
        )
        .await
        .unwrap();
    let settings = QueueSettings {
        durability: Some(durability),
        ..Default::default()
    };
    assert_eq!(
        engine
            .update_queue("ledger", &settings)
            .await
            .unwrap()
            .durability,
        durability
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let leader_cfg = LeaderConfig {
        tick_interval: Duration::from_millis(1),
        idle_tick_interval: Duration::from_millis(10),
        promote_interval: Duration::from_millis(20),
        rotate_interval: Duration::from_millis(200),
        segment_duration: Duration::from_millis(700),
        retention: Duration::ZERO,
        ..LeaderConfig::default()
    };
    let leader =
        tokio::spawn(Leader::new(engine.clone(), s.db.config.clone(), leader_cfg).run(stop_rx));

    let total = PRODUCERS * jobs_per_producer;
    let enqueued = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let finals = Arc::new(AtomicUsize::new(0));
    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let stale = Arc::new(AtomicUsize::new(0));

    let mut tasks = Vec::new();
    for p in 0..PRODUCERS {
        let (engine, enqueued) = (engine.clone(), enqueued.clone());
        tasks.push(tokio::spawn(async move {
            for b in 0..jobs_per_producer / 250 {
                let batch: Vec<_> = (0..250)
                    .map(|i| NewJob::new("ledger", "work", json!({ "p": p, "b": b, "i": i })))
                    .collect();
                let ids = engine.enqueue(&batch).await.unwrap();
                enqueued.lock().unwrap().extend(ids);
            }
        }));
    }
    for w in 0..CLAIMERS {
        let (engine, finals, ledger, stale) = (
            engine.clone(),
            finals.clone(),
            ledger.clone(),
            stale.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let worker = format!("w{w}");
            let mut seen_tick = 0;
            while finals.load(Ordering::SeqCst) < total {
                let jobs = engine.claim("ledger", 200, &worker).await.unwrap();
                if jobs.is_empty() {
                    seen_tick = engine
                        .signals()
                        .wait_for_tick(seen_tick, Duration::from_millis(50))
                        .await;
                    continue;
                }
                let outcomes: Vec<_> = {
                    let mut rng = rand::thread_rng();
                    jobs.iter()
                        .map(|j| {
                            if rng.gen_bool(0.10) {
                                // A quarter of failures retry later (scheduled + promoter).
                                let delay = if rng.gen_bool(0.25) {
                                    Duration::from_millis(30)
                                } else {
                                    Duration::ZERO
                                };
                                j.failed("random failure", delay)
                            } else {
                                j.completed(None)
                            }
                        })
                        .collect()
                };
                let results = engine.complete(&outcomes).await.unwrap();
                let mut l = ledger.lock().unwrap();
                for (o, r) in outcomes.iter().zip(&results) {
                    assert_eq!((o.job_id, o.attempt), (r.job_id, r.attempt));
                    if r.stale {
                        stale.fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                    let rec = match o.kind {
                        OutcomeKind::Completed => Recorded::Completed,
                        OutcomeKind::Retry { .. } => Recorded::Retry,
                        OutcomeKind::Dead => Recorded::Dead,
                        OutcomeKind::Cancelled
                        | OutcomeKind::Snooze { .. }
                        | OutcomeKind::Released => unreachable!(),
                    };
                    l.entry((o.job_id, o.attempt)).or_default().push(rec);
                    if rec != Recorded::Retry {
                        finals.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }));
    }
    let all = futures_util::future::join_all(tasks);
    tokio::time::timeout(Duration::from_secs(600), all)
        .await
        .expect("ledger run did not finish in 10 minutes")
        .into_iter()
        .for_each(|r| r.unwrap());
    // Rotation runs on its own timer: give it (bounded) time to free a closed segment while
    // the leader still runs; a segment that cannot be freed (a writer holding its lock, an
    // unclosed job) still fails below. Diagnostics first if it never happens.
    let probe = s.db.connect().await;
    for _ in 0..100 {
        if (ready_rows(&probe).await as usize) < total {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if (ready_rows(&probe).await as usize) >= total {
        let locks: Vec<String> = probe
            .query(
                "SELECT format('%s %s pid=%s state=%s query=%s', l.relation::regclass, l.mode,
                        l.pid, a.state, left(a.query, 60))
                   FROM pg_locks l LEFT JOIN pg_stat_activity a USING (pid)
                  WHERE l.relation::regclass::text LIKE 'pgferry.ready%'",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        eprintln!("rotation never freed a segment; locks on ready partitions: {locks:?}");
    }
    let _ = stop_tx.send(true);
    leader.await.unwrap();

    let enqueued = enqueued.lock().unwrap().clone();
    assert_eq!(enqueued.len(), total);
    let ledger: Ledger = std::mem::take(&mut *ledger.lock().unwrap());
    assert_eq!(
        stale.load(Ordering::SeqCst),
        0,
        "no lease expired, so nothing may be stale"
    );
    let mut dead = 0;
    for id in &enqueued {
        let mut attempt = 1;
        loop {
            let outs = ledger
                .get(&(*id, attempt))
                .unwrap_or_else(|| panic!("job {id} attempt {attempt} has no outcome"));
            assert_eq!(
                outs.len(),
                1,
                "job {id} attempt {attempt} has outcomes {outs:?}"
            );
            match outs[0] {
                Recorded::Retry => {
                    assert!(attempt < MAX_ATTEMPTS, "retry past max_attempts");
                    attempt += 1;
                }
                Recorded::Dead => {
                    assert_eq!(attempt, MAX_ATTEMPTS, "dead before its last attempt");
                    dead += 1;
                    break;
                }
                Recorded::Completed => break,
            }
        }
        assert!(
            !ledger.contains_key(&(*id, attempt + 1)),
            "job {id} ran after its final outcome"
        );
    }
    let attempts_recorded: usize = ledger.values().map(|v| v.len()).sum();
    assert!(attempts_recorded > total, "10% failures must cause retries");

    let client = s.db.connect().await;
    let db_dead: i64 = client
        .query_one("SELECT count(*) FROM pgferry.dead", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(db_dead, dead as i64);
    let open: i64 = client
        .query_one(
            "SELECT count(*) FROM (
                 SELECT segment, job_id, attempt FROM pgferry.ready
                 EXCEPT
                 SELECT c.segment, u.job_id, u.attempt
                   FROM pgferry.completions c, unnest(c.job_ids, c.attempts) AS u(job_id, attempt)) x",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(open, 0, "attempts left without an outcome");
    // Outcomes are arrays without a unique index: check the receipt locks kept them single.
    let twice: i64 = client
        .query_one(
            "SELECT count(*) FROM (
                 SELECT u.job_id, u.attempt
                   FROM pgferry.completions c, unnest(c.job_ids, c.attempts) AS u(job_id, attempt)
                  GROUP BY 1, 2 HAVING count(*) > 1) x",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(twice, 0, "an attempt with two outcomes in the database");
    let scheduled: i64 = client
        .query_one("SELECT count(*) FROM pgferry.scheduled", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(scheduled, 0);
    // Rotation really ran during the test: closed segments were truncated away.
    let rows: i64 = client
        .query_one("SELECT count(*) FROM pgferry.ready", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        (rows as usize) < attempts_recorded,
        "no segment was ever freed ({rows} rows kept)"
    );
    // The writes went where the queue's durability says (the async pool's sessions are
    // named pgferry-ledger-async and stay open, idle, in the pool).
    let async_sessions: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgferry-ledger-async'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        async_sessions > 0,
        durability == Durability::Async,
        "{async_sessions} async sessions"
    );
}

async fn ready_rows(c: &tokio_postgres::Client) -> i64 {
    c.query_one("SELECT count(*) FROM pgferry.ready", &[])
        .await
        .unwrap()
        .get(0)
}
