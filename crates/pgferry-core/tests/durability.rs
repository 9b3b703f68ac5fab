//! Per-queue durability (architecture.md §1.7): the hot-path writes of a queue that chose
//! `Durability::Async` run on sessions with synchronous_commit = off, everything else on the
//! synchronous pool — including any batch that mixes in a synchronous queue.
//!
//! Which session ran a statement is read from pg_stat_activity: an idle backend shows its
//! last statement, and the async pool's backends are named `pgferry-<role>-async`.

use std::sync::Arc;

use pgferry_core::db::Pools;
use pgferry_core::{migrate, Durability, Engine, Error, NewJob, QueueSettings};
use pgferry_testkit::TestDb;
use serde_json::json;
use tokio_postgres::Client;

const ASYNC_APP: &str = "pgferry-t-async";

async fn engine(db: &TestDb) -> Arc<Engine> {
    let mut client = db.connect().await;
    migrate::up(&mut client).await.expect("migrate");
    Engine::new(Pools::new(&db.config, "t", 4), Default::default())
}

async fn set(engine: &Engine, queue: &str, d: Durability) {
    engine.ensure_queue(queue).await.unwrap();
    let s = QueueSettings {
        durability: Some(d),
        ..Default::default()
    };
    assert_eq!(engine.update_queue(queue, &s).await.unwrap().durability, d);
}

/// The last statement of every backend of the async pool.
async fn async_statements(probe: &Client) -> Vec<String> {
    probe
        .query(
            "SELECT query FROM pg_stat_activity WHERE application_name = $1 ORDER BY pid",
            &[&ASYNC_APP],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// When the async pool's one backend last changed state (started or finished a statement).
async fn last_change(probe: &Client) -> std::time::SystemTime {
    probe
        .query_one(
            "SELECT state_change FROM pg_stat_activity WHERE application_name = $1",
            &[&ASYNC_APP],
        )
        .await
        .unwrap()
        .get(0)
}

async fn tick(db: &TestDb) {
    let client = db.connect().await;
    pgferry_core::leader::ticker::tick(&client).await.unwrap();
}

#[tokio::test]
async fn async_queues_write_on_async_sessions_and_mixed_batches_stay_synchronous() {
    let db = pgferry_testkit::test_db().await;
    let probe = db.connect().await;
    let engine = engine(&db).await;
    set(&engine, "fast", Durability::Async).await;
    set(&engine, "safe", Durability::Sync).await;

    // A synchronous queue never opens the async pool.
    let jobs = vec![NewJob::new("safe", "k", json!({}))];
    engine.enqueue(&jobs).await.unwrap();
    tick(&db).await;
    let claimed = engine.claim("safe", 10, "w").await.unwrap();
    assert_eq!(claimed.len(), 1);
    let safe_outcome = claimed[0].completed(None);
    engine.complete(&[safe_outcome]).await.unwrap();
    assert!(async_statements(&probe).await.is_empty());

    // Each write of the async queue runs on the (single, reused) async session.
    let jobs: Vec<_> = (0..3)
        .map(|i| NewJob::new("fast", "k", json!({ "i": i })))
        .collect();
    // A batch this small is one INSERT in an implicit transaction (a large one is a COPY
    // followed by its COMMIT on the same session, issue 17): the session that wrote the rows
    // is recorded by a statement trigger.
    probe
        .batch_execute(
            "CREATE TABLE public.writers (app text, sync text);
             CREATE FUNCTION public.note_writer() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN INSERT INTO public.writers VALUES (current_setting('application_name'),
                 current_setting('synchronous_commit')); RETURN NULL; END $$;
             CREATE TRIGGER note_writer AFTER INSERT ON pgferry.ready
               FOR EACH STATEMENT EXECUTE FUNCTION public.note_writer();",
        )
        .await
        .unwrap();
    engine.enqueue(&jobs).await.unwrap();
    let last = async_statements(&probe).await;
    assert!(
        last.len() == 1 && last[0].starts_with("-- enqueue of a small batch"),
        "{last:?}"
    );
    let writers: Vec<(String, String)> = probe
        .query("SELECT app, sync FROM public.writers", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(writers, vec![(ASYNC_APP.to_string(), "off".to_string())]);
    probe
        .batch_execute("DROP TRIGGER note_writer ON pgferry.ready")
        .await
        .unwrap();
    tick(&db).await;
    let fast = engine.claim("fast", 10, "w").await.unwrap();
    assert_eq!(fast.len(), 3);
    assert!(async_statements(&probe).await[0].contains("claim_lanes"));
    engine.complete(&[fast[0].completed(None)]).await.unwrap();
    assert!(async_statements(&probe).await[0].contains("complete_whole"));
    let before = last_change(&probe).await;

    // A batch that mixes in a synchronous queue runs on the synchronous pool: enqueue ...
    let mixed = vec![
        NewJob::new("fast", "k", json!({ "mixed": 1 })),
        NewJob::new("safe", "k", json!({ "mixed": 2 })),
    ];
    engine.enqueue(&mixed).await.unwrap();
    // ... and complete.
    tick(&db).await;
    let safe = engine.claim("safe", 10, "w").await.unwrap();
    assert_eq!(safe.len(), 1);
    let outcomes = vec![fast[1].completed(None), safe[0].completed(None)];
    let done = engine.complete(&outcomes).await.unwrap();
    assert!(done.iter().all(|c| !c.stale));
    assert_eq!(
        before,
        last_change(&probe).await,
        "a mixed batch ran on the async session"
    );

    // Switching the queue back to sync takes effect at once in this process.
    set(&engine, "fast", Durability::Sync).await;
    engine.complete(&[fast[2].completed(None)]).await.unwrap();
    engine.enqueue(&jobs).await.unwrap();
    assert_eq!(
        before,
        last_change(&probe).await,
        "the async session ran after the switch"
    );

    // Every job of both queues was completed exactly once along the way.
    let closed: i64 = probe
        .query_one(
            "SELECT coalesce(sum(cardinality(job_ids)), 0)::bigint FROM pgferry.completions",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(closed, 5);
}

#[tokio::test]
async fn async_sessions_set_synchronous_commit_off() {
    let db = pgferry_testkit::test_db().await;
    let pools = Pools::new(&db.config, "t", 1);
    let on_async = pools.async_commit.as_ref().unwrap().get().await.unwrap();
    let row = on_async
        .query_one(
            "SELECT setting, source FROM pg_settings WHERE name = 'synchronous_commit'",
            &[],
        )
        .await
        .unwrap();
    // Set by the session itself (client options), not inherited from the server.
    assert_eq!(row.get::<_, String>(0), "off");
    assert_eq!(row.get::<_, String>(1), "client");
    let on_sync = pools.sync.get().await.unwrap();
    let source: String = on_sync
        .query_one(
            "SELECT source FROM pg_settings WHERE name = 'synchronous_commit'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_ne!(source, "client");
}

#[tokio::test]
async fn durability_names_parse_and_bad_ones_are_typed_errors() {
    assert_eq!("async".parse::<Durability>().unwrap(), Durability::Async);
    assert_eq!("sync".parse::<Durability>().unwrap(), Durability::Sync);
    assert_eq!(Durability::default(), Durability::Sync);
    match "eventually".parse::<Durability>() {
        Err(Error::InvalidArgument { field, .. }) => assert_eq!(field, "durability"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    // Omitting it keeps the current value.
    let db = pgferry_testkit::test_db().await;
    let engine = engine(&db).await;
    set(&engine, "q", Durability::Async).await;
    let paused = QueueSettings {
        paused: Some(true),
        ..Default::default()
    };
    let info = engine.update_queue("q", &paused).await.unwrap();
    assert_eq!(info.durability, Durability::Async);
}
