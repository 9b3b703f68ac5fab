//! Group commit and per-queue durability (architecture.md §1.6, §1.7): requests whose queues all
//! chose async durability flush apart from the others, so their statements commit on the
//! engine's async sessions instead of being merged into synchronous flushes.

use std::sync::Arc;
use std::time::Duration;

use pgferry_core::db::Pools;
use pgferry_core::{migrate, Durability, Engine, NewJob, Outcome, QueueSettings};
use pgferry_server::coalesce::{CoalesceConfig, Coalescers, ReceiptBook};
use serde_json::json;
use tokio::sync::Barrier;
use tokio_postgres::Client;

/// A window wide enough that concurrent callers would share one flush.
fn wide() -> CoalesceConfig {
    CoalesceConfig {
        max_rows: 1000,
        max_wait: Duration::from_millis(100),
        // Merging itself is under test: always wait for company.
        adaptive: false,
        caller_flush: true,
        max_inflight: 1,
        lanes: 1,
        gather_wait: Duration::ZERO,
        queue_depth: 1024,
    }
}

fn jobs(queue: &str, n: usize) -> Vec<NewJob> {
    (0..n)
        .map(|i| NewJob::new(queue, "k", json!({ "i": i })))
        .collect()
}

/// The last statement of each backend of the engine's async pool, and when it ran.
async fn async_statements(probe: &Client) -> Vec<(String, std::time::SystemTime)> {
    probe
        .query(
            "SELECT query, query_start FROM pg_stat_activity \
              WHERE application_name = 'pgferry-t-async'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// True if an async backend started a statement containing `what` after `since`.
async fn ran_async_since(probe: &Client, what: &str, since: std::time::SystemTime) -> bool {
    let last = async_statements(probe).await;
    last.iter().any(|(q, at)| q.contains(what) && *at > since)
}

async fn db_now(probe: &Client) -> std::time::SystemTime {
    probe
        .query_one("SELECT clock_timestamp()", &[])
        .await
        .unwrap()
        .get(0)
}

/// Runs `a` and `b` released together, so that a shared window would merge them.
async fn together<A, B>(a: A, b: B) -> (A::Output, B::Output)
where
    A: std::future::Future,
    B: std::future::Future,
{
    let barrier = Barrier::new(2);
    tokio::join!(
        async {
            barrier.wait().await;
            a.await
        },
        async {
            barrier.wait().await;
            b.await
        }
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn async_queues_flush_apart_from_sync_ones() {
    let db = pgferry_testkit::test_db().await;
    let mut client = db.connect().await;
    migrate::up(&mut client).await.unwrap();
    let probe = db.connect().await;
    let engine: Arc<Engine> = Engine::new(Pools::new(&db.config, "t", 4), Default::default());
    for (queue, d) in [("fast", Durability::Async), ("safe", Durability::Sync)] {
        engine.ensure_queue(queue).await.unwrap();
        let s = QueueSettings {
            durability: Some(d),
            ..Default::default()
        };
        engine.update_queue(queue, &s).await.unwrap();
        // The server routes by what this process knows: the queue's first write loads it.
        engine.enqueue(&jobs(queue, 1)).await.unwrap();
    }
    assert!(engine.commits_async("fast") && !engine.commits_async("safe"));
    assert!(!engine.commits_async("never-used"));
    let co = Coalescers::new(engine.clone(), wide(), Arc::new(ReceiptBook::default()));
    let since = db_now(&probe).await;

    // Enqueue: one request per queue at once -> one flush in each pair, the async one on
    // the async session; a request mixing both queues goes to the synchronous pair.
    let (a, b) = together(co.enqueue(jobs("fast", 5)), co.enqueue(jobs("safe", 5))).await;
    assert_eq!((a.unwrap().len(), b.unwrap().len()), (5, 5));
    let mixed = [jobs("fast", 1), jobs("safe", 1)].concat();
    co.enqueue(mixed).await.unwrap();
    let (sync_s, async_s) = (
        co.enqueue.stats().snapshot(),
        co.enqueue_async.stats().snapshot(),
    );
    assert_eq!((sync_s.callers, async_s.callers), (2, 1));
    assert_eq!(async_s.flushes, 1);
    // The flush's COPY ends with its COMMIT on the same session (ADR 0014); which session
    // ran the COPY itself is checked in pgferry-core's tests/durability.rs.
    assert!(ran_async_since(&probe, "COMMIT", since).await);

    // Completions: the same routing, by the lanes of the outcomes.
    pgferry_core::leader::ticker::tick(&probe).await.unwrap();
    let fast = engine.claim("fast", 100, "w").await.unwrap();
    let safe = engine.claim("safe", 100, "w").await.unwrap();
    assert_eq!((fast.len(), safe.len()), (7, 7));
    let done = |js: &[pgferry_core::ClaimedJob]| -> Vec<Outcome> {
        js.iter().map(|j| j.completed(None)).collect()
    };
    let since = db_now(&probe).await;
    let (a, b) = together(co.complete(done(&fast[..5])), co.complete(done(&safe[..5]))).await;
    assert!(a.unwrap().iter().chain(&b.unwrap()).all(|c| !c.stale));
    let mixed = [done(&fast[5..]), done(&safe[5..])].concat();
    assert!(co.complete(mixed).await.unwrap().iter().all(|c| !c.stale));
    let (sync_s, async_s) = (
        co.complete.stats().snapshot(),
        co.complete_async.stats().snapshot(),
    );
    assert_eq!((sync_s.callers, async_s.callers), (2, 1));
    assert!(ran_async_since(&probe, "complete_whole", since).await);
}
