//! Enqueue, claim, complete: the round trip, outcomes, staleness, bad input.

mod common;

use std::time::Duration;

use pgferry_core::{Error, NewJob, OutcomeKind};
use serde_json::json;

fn job(i: i64) -> NewJob {
    NewJob::new("emails", "send", json!({ "i": i }))
}

#[tokio::test]
async fn round_trip_in_order_and_idle_claim_writes_nothing() {
    let s = common::setup().await;
    let ids = s
        .engine
        .enqueue(&(0..10).map(job).collect::<Vec<_>>())
        .await
        .unwrap();
    assert_eq!(ids.len(), 10);
    // Not claimable before a tick makes it visible.
    assert!(s.engine.claim("emails", 100, "w").await.unwrap().is_empty());
    s.tick().await.expect("log grew, so a tick is written");
    let claimed = s.engine.claim("emails", 4, "w").await.unwrap();
    assert_eq!(
        claimed.iter().map(|j| j.job_id).collect::<Vec<_>>(),
        ids[..4]
    );
    let rest = s.engine.claim("emails", 100, "w").await.unwrap();
    assert_eq!(rest.iter().map(|j| j.job_id).collect::<Vec<_>>(), ids[4..]);
    assert_eq!(rest[0].args, json!({ "i": 4 }));

    let client = s.db.connect().await;
    assert_eq!(receipts(&client).await, 2);
    // Idle claims (nothing visible) write no receipt.
    for _ in 0..3 {
        assert!(s.engine.claim("emails", 100, "w").await.unwrap().is_empty());
    }
    assert_eq!(receipts(&client).await, 2);

    let outcomes: Vec<_> = claimed
        .iter()
        .chain(&rest)
        .map(|j| j.completed(None))
        .collect();
    let done = s.engine.complete(&outcomes).await.unwrap();
    assert!(done.iter().all(|d| !d.stale));
}

#[tokio::test]
async fn outcomes_retry_now_later_dead_and_results() {
    let s = common::setup().await;
    let jobs: Vec<_> = (0..4).map(|i| job(i).max_attempts(2)).collect();
    let ids = s.engine.enqueue(&jobs).await.unwrap();
    s.tick().await;
    let c = s.engine.claim("emails", 10, "w").await.unwrap();
    assert_eq!(c.len(), 4);
    let outcomes = vec![
        c[0].completed(Some(json!({ "sent": true }))),
        c[1].failed("smtp timeout", Duration::ZERO),
        c[2].failed("rate limited", Duration::from_secs(3600)),
        c[3].discarded("bad address"),
    ];
    let r = s.engine.complete(&outcomes).await.unwrap();
    assert!(r.iter().all(|d| !d.stale));

    // Job 1 is back in the log as attempt 2 right away.
    s.tick().await;
    let again = s.engine.claim("emails", 10, "w").await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].job_id, again[0].attempt), (ids[1], 2));
    // Its second failure is its last attempt: dead.
    assert_eq!(
        again[0].failed("still down", Duration::ZERO).kind,
        OutcomeKind::Dead
    );
    s.engine
        .complete(&[again[0].failed("still down", Duration::ZERO)])
        .await
        .unwrap();

    let client = s.db.connect().await;
    let dead: Vec<(i64, i32, String)> = client
        .query(
            "SELECT job_id, attempt, error FROM pgferry.dead ORDER BY job_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        dead,
        vec![
            (ids[1], 2, "still down".to_string()),
            (ids[3], 1, "bad address".to_string())
        ]
    );
    let later: (i64, i32) = client
        .query_one("SELECT job_id, attempt FROM pgferry.scheduled", &[])
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(later, (ids[2], 2));
    let result: serde_json::Value = client
        .query_one(
            "SELECT result FROM pgferry.results WHERE job_id = $1",
            &[&ids[0]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(result, json!({ "sent": true }));
}

#[tokio::test]
async fn first_outcome_wins_and_late_one_is_stale() {
    let s = common::setup().await;
    s.engine.enqueue(&[job(1)]).await.unwrap();
    s.tick().await;
    let c = s.engine.claim("emails", 1, "w").await.unwrap();
    let first = s
        .engine
        .complete(&[c[0].failed("boom", Duration::ZERO)])
        .await
        .unwrap();
    assert!(!first[0].stale);
    // The same attempt reported again (a late worker): stale, and no second retry.
    let second = s.engine.complete(&[c[0].completed(None)]).await.unwrap();
    assert!(second[0].stale);
    // Duplicates inside one batch: one wins.
    s.tick().await;
    let c2 = s.engine.claim("emails", 1, "w").await.unwrap();
    assert_eq!(c2[0].attempt, 2);
    let both = s
        .engine
        .complete(&[c2[0].completed(None), c2[0].completed(None)])
        .await
        .unwrap();
    assert_eq!(both.iter().filter(|d| !d.stale).count(), 1);
    let client = s.db.connect().await;
    let (ready, done): (i64, i64) = client
        .query_one(
            "SELECT (SELECT count(*) FROM pgferry.ready),
                    (SELECT sum(cardinality(job_ids)) FROM pgferry.completions)",
            &[],
        )
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(
        (ready, done),
        (2, 2),
        "one ready row and one outcome per attempt"
    );
    // An outcome for an attempt that never existed is stale too.
    let mut fake = c2[0].completed(None);
    fake.attempt = 7;
    assert!(s.engine.complete(&[fake]).await.unwrap()[0].stale);
}

#[tokio::test]
async fn bad_input_is_rejected_and_nothing_is_written() {
    let s = common::setup().await;
    let big = "x".repeat(1 << 20);
    let cases: Vec<(Vec<NewJob>, &str)> = vec![
        (
            vec![job(1), NewJob::new("Bad Queue", "k", json!({}))],
            "invalid_name",
        ),
        (vec![NewJob::new("q", "", json!({}))], "invalid_name"),
        (
            vec![NewJob::new("q", "k", json!({})).priority(4)],
            "invalid_argument",
        ),
        (
            vec![NewJob::new("q", "k", json!({})).max_attempts(0)],
            "invalid_argument",
        ),
        (
            vec![job(1), NewJob::new("q", "k", json!({ "s": big }))],
            "payload_too_large",
        ),
    ];
    for (batch, code) in cases {
        let err = s.engine.enqueue(&batch).await.unwrap_err();
        assert_eq!(err.code(), code, "{err}");
        assert!(err.is_invalid_input());
    }
    let too_many: Vec<_> = (0..10_001).map(job).collect();
    assert!(matches!(
        s.engine.enqueue(&too_many).await,
        Err(Error::BatchTooLarge { .. })
    ));
    let client = s.db.connect().await;
    let n: i64 = client
        .query_one("SELECT count(*) FROM pgferry.ready", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0, "a rejected batch writes nothing");
}

#[tokio::test]
async fn transactional_enqueue_follows_the_callers_transaction() {
    let s = common::setup().await;
    let mut client = s.db.connect().await;
    let tx = client.transaction().await.unwrap();
    let kept = s.engine.enqueue_tx(&tx, &[job(1)]).await.unwrap();
    tx.commit().await.unwrap();
    let tx = client.transaction().await.unwrap();
    s.engine.enqueue_tx(&tx, &[job(2)]).await.unwrap();
    tx.rollback().await.unwrap();
    s.tick().await;
    let c = s.engine.claim("emails", 10, "w").await.unwrap();
    assert_eq!(c.iter().map(|j| j.job_id).collect::<Vec<_>>(), kept);
}

async fn receipts(c: &tokio_postgres::Client) -> i64 {
    c.query_one("SELECT count(*) FROM pgferry.receipts", &[])
        .await
        .unwrap()
        .get(0)
}

/// A worker reporting its whole claimed batch takes the whole-receipt path
/// (pgferry.complete_whole(): array equality instead of per-outcome checks). First outcome still wins: the same batch
/// again is all stale, and after part of a batch was reported, the whole batch wins only the
/// rest — exactly one outcome per attempt either way.
#[tokio::test]
async fn whole_batch_completion_keeps_first_outcome_wins() {
    let s = common::setup().await;
    let jobs: Vec<_> = (0..50).map(job).collect();
    s.engine.enqueue(&jobs).await.unwrap();
    s.tick().await;
    let c = s.engine.claim("emails", 20, "w").await.unwrap();
    assert_eq!(c.len(), 20);
    let all: Vec<_> = c.iter().map(|j| j.completed(None)).collect();
    let first = s.engine.complete(&all).await.unwrap();
    assert!(first.iter().all(|d| !d.stale));
    let again = s.engine.complete(&all).await.unwrap();
    assert!(again.iter().all(|d| d.stale), "a batch reported twice");

    // Part first (3 of the batch, one of them failed), then the whole batch.
    let c = s.engine.claim("emails", 20, "w").await.unwrap();
    let part = [
        c[0].completed(None),
        c[5].failed("boom", Duration::ZERO),
        c[19].completed(None),
    ];
    assert!(s
        .engine
        .complete(&part)
        .await
        .unwrap()
        .iter()
        .all(|d| !d.stale));
    let whole: Vec<_> = c.iter().map(|j| j.completed(None)).collect();
    let done = s.engine.complete(&whole).await.unwrap();
    let stale: Vec<usize> = (0..20).filter(|&i| done[i].stale).collect();
    assert_eq!(
        stale,
        vec![0, 5, 19],
        "only the attempts not reported before win"
    );

    let client = s.db.connect().await;
    let dups: i64 = client
        .query_one(
            "SELECT count(*) FROM (
                 SELECT c.receipt_id, u.job_id, u.attempt
                   FROM pgferry.completions c, unnest(c.job_ids, c.attempts) u(job_id, attempt)
                  GROUP BY 1, 2, 3 HAVING count(*) > 1) d",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(dups, 0, "an attempt with two outcomes");
}

/// A report made of several whole receipts (a worker that claimed over two shards, or a
/// server flush of several workers' batches) is one completion row per receipt; anything
/// less than whole receipts falls back to the per-outcome path with the same answers.
#[tokio::test]
async fn several_whole_receipts_in_one_report() {
    let s = common::setup().await;
    let opts = pgferry_core::QueueOptions {
        shards: 2,
        ..Default::default()
    };
    s.engine.upsert_queue("emails", &opts).await.unwrap();
    s.engine
        .enqueue(&(0..400).map(job).collect::<Vec<_>>())
        .await
        .unwrap();
    s.tick().await;
    let client = s.db.connect().await;
    let receipts_of = |c: &[pgferry_core::ClaimedJob]| {
        let mut r: Vec<i64> = c.iter().map(|j| j.receipt_id).collect();
        r.dedup();
        r
    };
    let rows_for = |r: Vec<i64>| {
        let client = &client;
        async move {
            client
                .query_one(
                    "SELECT count(*) FROM pgferry.completions WHERE receipt_id = ANY($1)",
                    &[&r],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };

    // Two claims (one receipt each, from either shard) reported at once.
    let a = s.engine.claim("emails", 60, "w").await.unwrap();
    let b = s.engine.claim("emails", 60, "w").await.unwrap();
    let both: Vec<_> = a.iter().chain(&b).map(|j| j.completed(None)).collect();
    let rs: Vec<i64> = receipts_of(&a).into_iter().chain(receipts_of(&b)).collect();
    assert_eq!(rs.len(), 2, "{rs:?}");
    let done = s.engine.complete(&both).await.unwrap();
    assert!(done.iter().all(|d| !d.stale));
    assert_eq!(
        rows_for(rs.clone()).await,
        rs.len() as i64,
        "one row per receipt"
    );
    let again = s.engine.complete(&both).await.unwrap();
    assert!(
        again.iter().all(|d| d.stale),
        "a report of whole receipts twice"
    );

    // One attempt of the second receipt reported first: the whole report then wins for
    // every other attempt only.
    let mut c = s.engine.claim("emails", 60, "w").await.unwrap();
    c.extend(s.engine.claim("emails", 60, "w").await.unwrap());
    let rc = receipts_of(&c);
    assert!(rc.len() >= 2, "{rc:?}");
    let k = c.iter().position(|j| j.receipt_id == rc[1]).unwrap();
    assert!(!s.engine.complete(&[c[k].completed(None)]).await.unwrap()[0].stale);
    let all: Vec<_> = c.iter().map(|j| j.completed(None)).collect();
    let done = s.engine.complete(&all).await.unwrap();
    let stale: Vec<usize> = (0..c.len()).filter(|&i| done[i].stale).collect();
    assert_eq!(stale, vec![k]);

    // Receipts interleaved (not contiguous) and one job reported twice in the same batch:
    // the per-outcome path, first outcome per attempt wins.
    let mut d = s.engine.claim("emails", 60, "w").await.unwrap();
    d.extend(s.engine.claim("emails", 60, "w").await.unwrap());
    let mut mixed: Vec<_> = d.iter().rev().map(|j| j.completed(None)).collect();
    mixed.push(d[0].completed(None));
    let done = s.engine.complete(&mixed).await.unwrap();
    let stale: Vec<usize> = (0..mixed.len()).filter(|&i| done[i].stale).collect();
    assert_eq!(stale, vec![mixed.len() - 1]);

    let dups: i64 = client
        .query_one(
            "SELECT count(*) FROM (
                 SELECT u.job_id, u.attempt
                   FROM pgferry.completions c, unnest(c.job_ids, c.attempts) u(job_id, attempt)
                  GROUP BY 1, 2 HAVING count(*) > 1) d",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(dups, 0, "an attempt with two outcomes");
    let closed: i64 = client
        .query_one(
            "SELECT coalesce(sum(cardinality(job_ids)), 0) FROM pgferry.completions",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(closed, (a.len() + b.len() + c.len() + d.len()) as i64);
}

/// complete_whole.sql over runs of one lane and receipt segment (`lo` None: a NULL array).
struct Batch<'a> {
    client: &'a tokio_postgres::Client,
    stmt: &'a tokio_postgres::Statement,
    lane: i32,
    rseg: i16,
    seg: i16,
}

impl Batch<'_> {
    async fn runs(
        &self,
        receipts: &[i64],
        lo: Option<Vec<i32>>,
        hi: &[i32],
        ids: &[i64],
        attempts: &[i32],
    ) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
        let lanes = vec![self.lane; receipts.len()];
        let rsegs = vec![self.rseg; receipts.len()];
        let durations: Option<Vec<Option<i32>>> = None;
        self.client
            .query(
                self.stmt,
                &[
                    &receipts, &lanes, &rsegs, &lo, &hi, &ids, &attempts, &self.seg, &durations,
                ],
            )
            .await
    }
}

/// complete_whole() does not trust the runs it is sent: runs that leave an outcome out (or
/// overlap, or are out of order) are refused before anything is written, so no outcome is
/// ever answered "recorded" without its row; and a receipt named by two runs is closed once.
#[tokio::test]
async fn complete_whole_refuses_bad_runs_and_closes_a_receipt_once() {
    let s = common::setup().await;
    s.engine
        .enqueue(&(0..10).map(job).collect::<Vec<_>>())
        .await
        .unwrap();
    s.tick().await;
    let c = s.engine.claim("emails", 10, "w").await.unwrap();
    assert_eq!(c.len(), 10);
    let client = s.db.connect().await;
    let stmt = client
        .prepare(include_str!("../src/sql/complete_whole.sql"))
        .await
        .unwrap();
    let ids: Vec<i64> = c.iter().map(|j| j.job_id).collect();
    let atts: Vec<i32> = c.iter().map(|j| j.attempt).collect();
    let (r, lane, rseg, seg) = (
        c[0].receipt_id,
        c[0].lane,
        c[0].receipt_segment,
        c[0].segment,
    );
    let batch = Batch {
        client: &client,
        stmt: &stmt,
        lane,
        rseg,
        seg,
    };
    let refused = |err: tokio_postgres::Error| {
        assert_eq!(
            err.code(),
            Some(&tokio_postgres::error::SqlState::INVALID_PARAMETER_VALUE),
            "{err:?}"
        )
    };
    // (lo, hi) of the single run: a gap at either end, past the end, backwards.
    for (lo, hi) in [(2, 10), (1, 9), (1, 11), (10, 1)] {
        refused(
            batch
                .runs(&[r], Some(vec![lo]), &[hi], &ids, &atts)
                .await
                .unwrap_err(),
        );
    }
    // A NULL where runs are expected; two runs with a hole between them.
    refused(
        batch
            .runs(&[r], None, &[10], &ids, &atts)
            .await
            .unwrap_err(),
    );
    refused(
        batch
            .runs(&[r, r + 1], Some(vec![1, 6]), &[4, 10], &ids, &atts)
            .await
            .unwrap_err(),
    );
    let written: i64 = client
        .query_one("SELECT count(*) FROM pgferry.completions", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(written, 0);
    // The batch twice in one call, as two runs of the same receipt: each run alone is whole,
    // but the receipt must be closed once — the second report is stale, outcome by outcome.
    let twice: Vec<i64> = ids.iter().chain(&ids).copied().collect();
    let twice_atts: Vec<i32> = atts.iter().chain(&atts).copied().collect();
    let r2 = batch
        .runs(&[r, r], Some(vec![1, 11]), &[10, 20], &twice, &twice_atts)
        .await
        .unwrap();
    let won: Vec<bool> = {
        let mut w = vec![false; 20];
        for row in &r2 {
            let ord: i64 = row.get(0);
            assert!(ord >= 1, "answered as a whole batch: {ord}");
            w[ord as usize - 1] = row.get(1);
        }
        w
    };
    assert_eq!(won, [vec![true; 10], vec![false; 10]].concat());
    let closed: Vec<i64> = client
        .query(
            "SELECT u.job_id FROM pgferry.completions c, unnest(c.job_ids) u(job_id)
              WHERE c.receipt_id = $1 ORDER BY 1",
            &[&r],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(closed, sorted, "each attempt closed exactly once");

    // The next batch, tiled: recorded, and answered with one row for all of it.
    let c = {
        s.engine
            .enqueue(&(10..20).map(job).collect::<Vec<_>>())
            .await
            .unwrap();
        s.tick().await;
        s.engine.claim("emails", 10, "w").await.unwrap()
    };
    assert_eq!(c.len(), 10);
    let done = s
        .engine
        .complete(&c.iter().map(|j| j.completed(None)).collect::<Vec<_>>())
        .await
        .unwrap();
    assert!(done.iter().all(|d| !d.stale));
}

/// Any JSON the API accepts must come back out of the database: Postgres prints a number
/// like f64::MAX as 309 exact digits, and a parse of those that is only within one ULP
/// overflowed — the job could then be neither claimed, looked up nor listed (a fuzzing find:
/// claim, GET /v1/jobs and GET /v1/dead answered 500).
#[tokio::test]
async fn extreme_numbers_in_args_come_back() {
    let s = common::setup().await;
    let args = json!({
        "max": f64::MAX, "min": -f64::MAX, "tiny": 5e-324, "small": f64::MIN_POSITIVE,
        "u": u64::MAX, "i": i64::MIN, "big": 1.2345678901234568e29,
    });
    let job = NewJob::new("emails", "send", args.clone())
        .meta(json!({ "m": f64::MAX }))
        .max_attempts(1);
    let id = s.engine.enqueue(&[job]).await.unwrap()[0];
    s.tick().await;
    let c = s.engine.claim("emails", 10, "w").await.unwrap();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].args, args);
    assert_eq!(s.engine.get_job(id).await.unwrap().args, args);
    // Dead-lettered: the DLQ listing reads the same args.
    s.engine.complete(&[c[0].fail("boom")]).await.unwrap();
    let dead = s
        .engine
        .list_dead(&Default::default(), None, 10)
        .await
        .unwrap();
    assert_eq!(dead.jobs.len(), 1);
    assert_eq!(dead.jobs[0].args, args);
}

/// Issue 18: a job waiting in the log lists no attempt it has not started.
#[tokio::test]
async fn a_never_claimed_job_has_no_attempts() {
    let s = common::setup().await;
    let id = s
        .engine
        .enqueue(&[NewJob::new("q", "k", json!({}))])
        .await
        .unwrap()[0];
    let job = s.engine.get_job(id).await.unwrap();
    assert_eq!(job.state, pgferry_core::JobState::Pending);
    assert!(job.attempts.is_empty(), "{:?}", job.attempts);
    // Failed once and waiting for its retry in the log: one attempt, the failed one.
    s.tick().await;
    let claimed = s.engine.claim("q", 1, "w").await.unwrap();
    s.engine
        .complete(&[claimed[0].failed("boom", std::time::Duration::ZERO)])
        .await
        .unwrap();
    let job = s.engine.get_job(id).await.unwrap();
    assert_eq!(job.state, pgferry_core::JobState::Pending);
    let outcomes: Vec<_> = job
        .attempts
        .iter()
        .map(|a| (a.attempt, a.outcome))
        .collect();
    assert_eq!(outcomes, vec![(1, "failed")]);
}
