//! Completions partitioned by receipt against real Postgres: outcomes of one receipt, spread
//! over many concurrent requests, always meet in the same flush lane, so no two flushes
//! running at once name the same receipt (pgferry.complete() would serialise them on the
//! receipt's lock); requests spanning lanes are split and answered whole and in order;
//! repeats are stale; every job is completed exactly once.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pgferry_core::{migrate, ClaimedJob, Completed, Engine, EngineConfig, NewJob, Outcome};
use pgferry_server::coalesce::{CoalesceConfig, Coalescer, CompleteWriter, ReceiptBook, Writer};
use serde_json::json;
use tokio::sync::Barrier;

const LANES: usize = 3;

/// Records the receipts each statement named, and how many statements overlapped.
struct Recording {
    inner: CompleteWriter,
    writes: Arc<Mutex<Vec<Vec<i64>>>>,
    running: Arc<Mutex<Vec<HashSet<i64>>>>,
    overlaps: Arc<Mutex<Vec<i64>>>,
}

impl Writer for Recording {
    type Item = Outcome;
    type Output = Completed;
    const PARTITIONED: bool = CompleteWriter::PARTITIONED;

    fn validate(&self, items: &[Outcome]) -> pgferry_core::Result<()> {
        self.inner.validate(items)
    }

    fn lane_key(&self, item: &Outcome) -> u64 {
        self.inner.lane_key(item)
    }

    fn missing(&self, items: &[&Outcome]) -> Option<usize> {
        self.inner.missing(items)
    }

    fn write(
        &self,
        items: &[Outcome],
    ) -> impl Future<Output = pgferry_core::Result<Vec<Completed>>> + Send {
        let receipts: HashSet<i64> = items.iter().map(|o| o.receipt_id).collect();
        self.writes
            .lock()
            .unwrap()
            .push(receipts.iter().copied().collect());
        {
            // A receipt named by a statement still running: the lanes failed.
            let mut running = self.running.lock().unwrap();
            for other in running.iter() {
                self.overlaps
                    .lock()
                    .unwrap()
                    .extend(other.intersection(&receipts));
            }
            running.push(receipts.clone());
        }
        let running = self.running.clone();
        let fut = self.inner.write(items);
        async move {
            let out = fut.await;
            let mut running = running.lock().unwrap();
            if let Some(i) = running.iter().position(|r| *r == receipts) {
                running.swap_remove(i);
            }
            out
        }
    }
}

/// Completes each request from its own task, all released at once, and checks that every
/// request is answered, in its own order, with nothing stale.
async fn submit_together(
    co: &Arc<Coalescer<Recording>>,
    requests: &[Vec<&ClaimedJob>],
    what: &str,
) {
    let barrier = Arc::new(Barrier::new(requests.len()));
    let mut tasks = Vec::new();
    for r in requests {
        let outcomes: Vec<Outcome> = r.iter().map(|j| j.completed(None)).collect();
        let want: Vec<i64> = r.iter().map(|j| j.job_id).collect();
        let (co, barrier) = (co.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            (want, co.submit(outcomes).await)
        }));
    }
    for t in tasks {
        let (want, res) = t.await.unwrap();
        let done = res.expect("recorded");
        let got: Vec<i64> = done.iter().map(|d| d.job_id).collect();
        assert_eq!(got, want, "{what}");
        assert!(done.iter().all(|d| !d.stale));
    }
}

fn lanes_config() -> CoalesceConfig {
    CoalesceConfig {
        max_rows: 1000,
        max_wait: Duration::from_millis(20),
        lanes: LANES,
        gather_wait: Duration::ZERO,
        ..CoalesceConfig::default()
    }
}

/// `receipts` receipts of `per` jobs each, claimed one claim at a time.
async fn claimed(
    db: &pgferry_testkit::TestDb,
    engine: &Engine,
    receipts: usize,
    per: usize,
) -> Vec<ClaimedJob> {
    let jobs: Vec<NewJob> = (0..receipts * per)
        .map(|i| NewJob::new("lanes", "k", json!({ "i": i })))
        .collect();
    engine.enqueue(&jobs).await.expect("enqueue");
    let client = db.connect().await;
    pgferry_core::leader::ticker::tick(&client)
        .await
        .expect("tick");
    let mut all = Vec::new();
    for _ in 0..receipts {
        let got = engine.claim("lanes", per, "w").await.expect("claim");
        assert_eq!(got.len(), per);
        all.extend(got);
    }
    all
}

async fn completed_counts(db: &pgferry_testkit::TestDb, ids: &[i64]) -> HashMap<i64, i64> {
    let client = db.connect().await;
    client
        .query(
            "SELECT u.id, count(*) FROM pgferry.completions c, unnest(c.job_ids) u(id) \
             WHERE c.outcome = 1 AND u.id = ANY($1) GROUP BY u.id",
            &[&ids],
        )
        .await
        .expect("ledger")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_of_one_receipt_never_meet_in_concurrent_flushes() {
    let db = pgferry_testkit::test_db().await;
    let mut client = db.connect().await;
    migrate::up(&mut client).await.expect("migrate");
    let engine = Engine::new(db.pool(8), EngineConfig::default());
    let jobs = claimed(&db, &engine, 8, 30).await;
    let receipts: HashSet<i64> = jobs.iter().map(|j| j.receipt_id).collect();
    assert_eq!(receipts.len(), 8, "one receipt per claim");
    let lane = |r: i64| r as u64 as usize % LANES;

    let (writes, overlaps) = (Arc::default(), Arc::default());
    let co = Arc::new(Coalescer::new(
        Recording {
            inner: CompleteWriter {
                engine: engine.clone(),
                receipts: Default::default(),
            },
            writes: Arc::clone(&writes),
            running: Arc::default(),
            overlaps: Arc::clone(&overlaps),
        },
        lanes_config(),
    ));
    assert_eq!(co.stats().snapshot().lanes, LANES as u64);

    // Dealt out like a dispatcher does: every caller holds jobs of several receipts.
    let callers = 24;
    let mut dealt: Vec<Vec<&ClaimedJob>> = vec![Vec::new(); callers];
    for (k, j) in jobs.iter().enumerate() {
        dealt[k % callers].push(j);
    }
    let spanning = dealt
        .iter()
        .filter(|d| {
            let l: HashSet<usize> = d.iter().map(|j| lane(j.receipt_id)).collect();
            l.len() > 1
        })
        .count();
    assert!(spanning > 0, "the data must make some requests span lanes");

    submit_together(
        &co,
        &dealt,
        "one answer per outcome, in the request's order",
    )
    .await;

    for w in writes.lock().unwrap().iter() {
        let l: HashSet<usize> = w.iter().map(|r| lane(*r)).collect();
        assert_eq!(
            l.len(),
            1,
            "a statement named receipts of several lanes: {w:?}"
        );
    }
    let overlaps = overlaps.lock().unwrap().clone();
    assert!(
        overlaps.is_empty(),
        "receipts in two flushes at once: {overlaps:?}"
    );
    let s = co.stats().snapshot();
    assert_eq!(s.callers, callers as u64, "a split request counts once");
    assert_eq!(s.split, spanning as u64);
    assert_eq!(s.rows, jobs.len() as u64);
    assert_eq!(s.statements, writes.lock().unwrap().len() as u64);
    assert_eq!(*s.cumulative.last().unwrap(), s.flushes);

    // Everything again, in requests spanning every lane: each answer is stale.
    let again: Vec<Outcome> = jobs.iter().map(|j| j.completed(None)).collect();
    for chunk in again.chunks(50) {
        let done = co.submit(chunk.to_vec()).await.expect("repeat");
        assert_eq!(done.len(), chunk.len());
        assert!(done.iter().all(|d| d.stale), "a repeat was recorded twice");
    }
    let ids: Vec<i64> = jobs.iter().map(|j| j.job_id).collect();
    let counts = completed_counts(&db, &ids).await;
    assert!(ids.iter().all(|i| counts.get(i) == Some(&1)), "{counts:?}");
}

/// A request split over lanes fails if one of its parts is refused, and only that request:
/// the callers sharing the refused part's flush are re-run alone and succeed.
#[tokio::test]
async fn a_refused_part_fails_its_request_alone() {
    let db = pgferry_testkit::test_db().await;
    let mut client = db.connect().await;
    migrate::up(&mut client).await.expect("migrate");
    let engine = Engine::new(db.pool(8), EngineConfig::default());
    let jobs = claimed(&db, &engine, LANES, 4).await;
    let by_lane = |l: usize| -> Vec<&ClaimedJob> {
        jobs.iter()
            .filter(|j| j.receipt_id as u64 as usize % LANES == l)
            .collect()
    };
    let (a, b) = (by_lane(0), by_lane(1));
    assert!(
        !a.is_empty() && !b.is_empty(),
        "consecutive receipts fill every lane"
    );
    let co = Arc::new(Coalescer::new(
        CompleteWriter {
            engine: engine.clone(),
            receipts: Default::default(),
        },
        lanes_config(),
    ));
    // The bad request: a good outcome in lane 0, text Postgres refuses in lane 1.
    let bad = vec![
        a[0].completed(None),
        b[0].failed("nul\u{0}", Duration::ZERO),
    ];
    let good: Vec<Vec<Outcome>> = [&a[1..], &b[1..]]
        .iter()
        .flat_map(|js| js.iter().map(|j| vec![j.completed(None)]))
        .collect();
    let barrier = Arc::new(Barrier::new(good.len() + 1));
    let bad_task = {
        let (co, barrier) = (co.clone(), barrier.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            co.submit(bad).await
        })
    };
    let mut tasks = Vec::new();
    for g in good {
        let (co, barrier) = (co.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            co.submit(g).await
        }));
    }
    assert!(bad_task.await.unwrap().is_err(), "the NUL is refused");
    for t in tasks {
        let done = t.await.unwrap().expect("other requests are recorded");
        assert!(done.iter().all(|d| !d.stale));
    }
    assert_eq!(co.stats().snapshot().split, 1);
    // The bad request's other part was recorded (a re-report is stale); the refused
    // outcome's job is still held, and reported properly it is recorded.
    let done = co
        .submit(vec![a[0].completed(None), b[0].completed(None)])
        .await
        .expect("recorded");
    assert_eq!((done[0].stale, done[1].stale), (true, false));
}

/// A receipt's outcomes dealt over several concurrent requests, out of order: the lane
/// waits for the whole receipt (registered in the book as a dispatcher does) and writes it
/// in one statement in claim order — the engine's whole-receipt path, which stores the
/// arrays as given. Another receipt in the same lane waits for the next flush.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receipt_dealt_over_requests_is_written_whole_in_claim_order() {
    let db = pgferry_testkit::test_db().await;
    let mut client = db.connect().await;
    migrate::up(&mut client).await.expect("migrate");
    let engine = Engine::new(db.pool(8), EngineConfig::default());
    let jobs = claimed(&db, &engine, 3, 24).await;
    let book = Arc::new(ReceiptBook::default());
    book.register(&jobs);
    assert_eq!(book.len(), 3);
    let writes = Arc::new(Mutex::new(Vec::new()));
    let co = Arc::new(Coalescer::new(
        Recording {
            inner: CompleteWriter {
                engine: engine.clone(),
                receipts: book.clone(),
            },
            writes: writes.clone(),
            running: Arc::default(),
            overlaps: Arc::default(),
        },
        CoalesceConfig {
            max_wait: Duration::from_millis(1),
            // Far longer than the test needs: the flush goes when the receipt is whole.
            gather_wait: Duration::from_secs(30),
            lanes: 1,
            ..CoalesceConfig::default()
        },
    ));
    // Reversed and dealt over 9 requests of 8: each request holds one receipt's outcomes
    // (a request naming two receipts could not be part of a whole one).
    let requests: Vec<Vec<&ClaimedJob>> = jobs
        .chunks(24)
        .flat_map(|r| {
            let mut r: Vec<&ClaimedJob> = r.iter().collect();
            r.reverse();
            (0..3).map(move |k| r.iter().skip(k).step_by(3).copied().collect::<Vec<_>>())
        })
        .collect();
    assert_eq!(requests.len(), 9);
    submit_together(&co, &requests, "answers in the request's order").await;
    let writes = writes.lock().unwrap().clone();
    assert_eq!(writes.len(), 3, "one statement per receipt: {writes:?}");
    assert!(writes.iter().all(|w| w.len() == 1));
    assert!(
        book.is_empty(),
        "every receipt went by the whole-receipt path"
    );
    let client = db.connect().await;
    for r in jobs.chunks(24) {
        let rows = client
            .query(
                "SELECT job_ids FROM pgferry.completions WHERE receipt_id = $1",
                &[&r[0].receipt_id],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), 1, "one completion row for the receipt");
        let ids: Vec<i64> = rows[0].get(0);
        let claim_order: Vec<i64> = r.iter().map(|j| j.job_id).collect();
        assert_eq!(ids, claim_order, "stored as the receipt's own arrays");
    }
}
