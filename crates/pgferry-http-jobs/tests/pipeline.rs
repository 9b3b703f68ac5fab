//! The service's queue pipeline on real Postgres against a loopback target that holds
//! requests: requests from several claimed batches are in flight at once, and each
//! destination key still gets at most `per_destination` of them.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use axum::routing::post;
use axum::Router;
use pgferry_core::NewJob;
use pgferry_http_jobs::worker::{WorkerConfig, KIND};
use serde_json::json;
use tokio::sync::watch;

/// What the target saw: requests at once, overall and per group, and their highs.
#[derive(Default)]
struct Seen {
    now: usize,
    max: usize,
    per_group: HashMap<String, usize>,
    max_per_group: HashMap<String, usize>,
    hits: usize,
}

/// A target that holds each request until `release_at` requests are in at once (or
/// `HOLD` passes), so how many a worker keeps in flight shows.
async fn holding_target(seen: Arc<Mutex<Seen>>, release_at: usize) -> String {
    const HOLD: Duration = Duration::from_secs(2);
    let (open_tx, open_rx) = watch::channel(false);
    let open_tx = Arc::new(open_tx);
    let app = Router::new().route(
        "/hold",
        post(move |headers: HeaderMap| {
            let (seen, open_tx, mut open_rx) = (seen.clone(), open_tx.clone(), open_rx.clone());
            async move {
                let group = headers
                    .get("x-group")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                {
                    let mut s = seen.lock().unwrap();
                    s.hits += 1;
                    s.now += 1;
                    s.max = s.max.max(s.now);
                    let g = s.per_group.entry(group.clone()).or_default();
                    *g += 1;
                    let g = *g;
                    let m = s.max_per_group.entry(group.clone()).or_default();
                    *m = (*m).max(g);
                    if s.now >= release_at {
                        let _ = open_tx.send(true);
                    }
                }
                let _ = tokio::time::timeout(HOLD, open_rx.wait_for(|o| *o)).await;
                let mut s = seen.lock().unwrap();
                s.now -= 1;
                *s.per_group.get_mut(&group).unwrap() -= 1;
                "held"
            }
        }),
    );
    common::serve(app).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_of_several_claims_are_in_flight_within_each_destinations_parallelism() {
    const BATCH: usize = 10;
    const PER_DESTINATION: usize = 3;
    const GROUPS: usize = 4;
    const JOBS: usize = 40;
    // Four destination keys at their parallelism: more than one claim's batch at once.
    const ALL_AT_ONCE: usize = GROUPS * PER_DESTINATION;
    const _: () = assert!(ALL_AT_ONCE > BATCH);

    let (db, engine) = common::migrated().await;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let base = holding_target(seen.clone(), ALL_AT_ONCE).await;

    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|i| {
            let group = format!("g{}", i % GROUPS);
            NewJob::new(
                "http",
                KIND,
                json!({
                    "method": "POST",
                    "url": format!("{base}/hold"),
                    "headers": {"x-group": group},
                    "group": group,
                }),
            )
        })
        .collect();
    let ids = engine.enqueue(&jobs).await.unwrap();

    let (stop_tx, stop_rx) = watch::channel(false);
    // The leader's ticker, as a test-sized loop: claims see what ticks published.
    let ticker = common::ticker(&db, stop_rx.clone());
    let service = common::service(
        &engine,
        WorkerConfig {
            batch: BATCH,
            per_destination: PER_DESTINATION,
            queue_in_flight: 64,
            ..Default::default()
        },
        stop_rx,
    );

    common::until_completed(&engine, &ids).await;
    let _ = stop_tx.send(true);
    service.await.unwrap();
    ticker.await.unwrap();

    let s = seen.lock().unwrap();
    assert_eq!(s.hits, JOBS, "each job sent once");
    assert_eq!(
        s.max, ALL_AT_ONCE,
        "requests in flight across claims of {BATCH}: every destination at its parallelism"
    );
    assert_eq!(s.max_per_group.len(), GROUPS);
    for (g, m) in &s.max_per_group {
        assert!(
            *m <= PER_DESTINATION,
            "{g}: {m} at once, over {PER_DESTINATION}"
        );
    }
}

/// A queue lease of 2 s, one request to a destination at a time, and a destination that
/// answers each request after 3 s: every job outlives its lease, first waiting for its
/// destination's turn (parallelism) and then for the slow answer, while the leader's
/// rescuer runs. The pipeline's keeper extends the leases of the jobs it holds, so each job
/// is sent once, in one attempt. (Without it the rescuer takes the jobs back after 2 s and
/// they are sent again.) The keeper beats at a third of the lease, so a beat may be late by
/// up to two thirds of it: with a 1 s lease a loaded CI machine once made it late enough.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_waiting_on_a_slow_destination_keep_their_lease() {
    const JOBS: usize = 3;
    const ANSWER_AFTER: Duration = Duration::from_millis(3000);
    let (db, engine) = common::migrated().await;
    engine
        .upsert_queue(
            "http",
            &pgferry_core::QueueOptions {
                lease: Duration::from_secs(2),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let hits = Arc::new(Mutex::new(HashMap::<String, usize>::new()));
    let app = {
        let hits = hits.clone();
        Router::new().route(
            "/slow",
            post(move |body: String| {
                let hits = hits.clone();
                async move {
                    *hits.lock().unwrap().entry(body).or_default() += 1;
                    tokio::time::sleep(ANSWER_AFTER).await;
                    "slow"
                }
            }),
        )
    };
    let base = common::serve(app).await;

    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|i| {
            NewJob::new(
                "http",
                KIND,
                json!({"method": "POST", "url": format!("{base}/slow"), "body": format!("job-{i}"),
                       "timeout_ms": 10000}),
            )
        })
        .collect();
    let ids = engine.enqueue(&jobs).await.unwrap();

    let (stop_tx, stop_rx) = watch::channel(false);
    // The leader's ticker and rescuer, as test-sized loops.
    let leader = {
        let (db, mut stop) = (db.clone(), stop_rx.clone());
        tokio::spawn(async move {
            let mut c = db.connect().await;
            loop {
                pgferry_core::leader::ticker::tick(&c).await.unwrap();
                pgferry_core::leader::rescuer::rescue(&mut c, Duration::ZERO)
                    .await
                    .unwrap();
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
        })
    };
    let service = common::service(
        &engine,
        WorkerConfig {
            per_destination: 1,
            ..Default::default()
        },
        stop_rx,
    );

    common::until_completed(&engine, &ids).await;
    let _ = stop_tx.send(true);
    service.await.unwrap();
    leader.await.unwrap();

    let hits = hits.lock().unwrap().clone();
    let want: HashMap<String, usize> = (0..JOBS).map(|i| (format!("job-{i}"), 1)).collect();
    assert_eq!(hits, want, "each job sent once");
    for id in &ids {
        let attempts: Vec<(i32, &str)> = engine
            .get_job(*id)
            .await
            .unwrap()
            .attempts
            .iter()
            .map(|a| (a.attempt, a.outcome))
            .collect();
        assert_eq!(attempts, [(1, "completed")], "job {id}");
    }
}

/// Claim statements run in this test's database so far (pg_stat_statements, preloaded by
/// the test kit's clusters).
async fn claims(db: &pgferry_testkit::TestDb) -> i64 {
    let c = db.connect().await;
    c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await
        .unwrap();
    c.query_one(
        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
          WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
            AND query LIKE '-- claim: one statement per batch%'",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// One busy destination (4 requests at once, 10 ms each) and 400 jobs: the queue's
/// in-flight budget (64) fills with jobs waiting for the destination's turn and frees one
/// place per answer. The queue claims again once an eighth of its budget (8) is free, not
/// at every answer: 56 to 64 claims here (42 that take jobs, the rest finding the queue
/// empty at the end), where claiming at each freed place made 275 to 294.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_waiting_on_its_destination_claims_in_batches() {
    const JOBS: usize = 400;
    let (db, engine) = common::migrated().await;
    let app = Router::new().route(
        "/busy",
        post(|| async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            "ok"
        }),
    );
    let base = common::serve(app).await;
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|_| {
            NewJob::new(
                "http",
                KIND,
                json!({"method": "POST", "url": format!("{base}/busy")}),
            )
        })
        .collect();
    let ids = engine.enqueue(&jobs).await.unwrap();
    let before = claims(&db).await;

    let (stop_tx, stop_rx) = watch::channel(false);
    let ticker = common::ticker(&db, stop_rx.clone());
    let config = WorkerConfig {
        batch: 100,
        per_destination: 4,
        queue_in_flight: 64,
        ..Default::default()
    };
    let service = common::service(&engine, config, stop_rx);
    common::until_completed(&engine, &ids).await;
    let _ = stop_tx.send(true);
    service.await.unwrap();
    ticker.await.unwrap();

    let used = claims(&db).await - before;
    // At least four jobs a claim on average, empty claims included.
    assert!(
        used <= JOBS as i64 / 4,
        "{used} claim statements for {JOBS} jobs"
    );
}
