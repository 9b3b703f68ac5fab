//! Long-lease hand-over (ADR 0008): a job heartbeating across many rotations no longer keeps
//! its segment — and the ring — from turning; its outcome still lands exactly once.

mod common;

use std::time::{Duration, Instant};

use pgferry_core::leader::rotator::{self, FreeResult};
use pgferry_core::leader::{janitor, rescuer, LeaderConfig};
use pgferry_core::{AttemptRef, CancelResult, ClaimedJob, JobFilter, JobState, NewJob};
use serde_json::json;
use tokio_postgres::Client;

fn quick() -> LeaderConfig {
    LeaderConfig {
        segment_duration: Duration::ZERO,
        retention: Duration::ZERO,
        ..LeaderConfig::default()
    }
}

async fn claim_one(s: &common::Setup, queue: &str, max_attempts: i32) -> ClaimedJob {
    s.engine
        .enqueue(&[NewJob::new(queue, "long", json!({"hours": 3})).max_attempts(max_attempts)])
        .await
        .unwrap();
    s.tick().await;
    let mut c = s.engine.claim(queue, 1, "w-long").await.unwrap();
    assert_eq!(c.len(), 1);
    c.pop().unwrap()
}

async fn beat(s: &common::Setup, j: &ClaimedJob, lease: Duration) -> bool {
    let b = s
        .engine
        .heartbeat(&[AttemptRef::from(j)], lease, "w-long")
        .await
        .unwrap();
    b[0].held
}

async fn count(c: &Client, sql: &str, id: i64) -> i64 {
    c.query_one(sql, &[&id]).await.unwrap().get(0)
}

/// Turns the ring `rounds` times with other traffic, heartbeating `long` in between; returns
/// how many segments were freed.
async fn turn(s: &common::Setup, rot: &mut Client, long: &ClaimedJob, rounds: usize) -> usize {
    let mut freed = 0;
    for _ in 0..rounds {
        s.run_through("other", 3).await;
        assert!(beat(s, long, Duration::from_secs(600)).await, "still held");
        let r = rotator::rotate(rot, &quick()).await.unwrap();
        freed += r
            .iter()
            .filter(|r| matches!(r, FreeResult::Freed(_)))
            .count();
    }
    freed
}

/// Queue q's running count, from the counters and from a forced recount of the truth.
async fn assert_running(s: &common::Setup, running: i64) {
    s.engine.flush_counters().await.unwrap();
    let q = "q".to_string();
    let counted = s
        .engine
        .queue_counts(std::slice::from_ref(&q))
        .await
        .unwrap()[&q]
        .running;
    assert_eq!(counted, running, "counters");
    let r = s.engine.recount_queue("q", true).await.unwrap();
    assert_eq!(r.repaired, 0, "the recount agrees: {r:?}");
    let truth = s
        .engine
        .queue_counts(std::slice::from_ref(&q))
        .await
        .unwrap()[&q]
        .running;
    assert_eq!(truth, running, "recount");
}

/// Ids of queue q's jobs in `state` (of `kind`), all pages.
async fn listed(s: &common::Setup, state: JobState, kind: Option<&str>) -> Vec<i64> {
    let f = JobFilter {
        state: Some(state),
        kind: kind.map(str::to_string),
        since: None,
    };
    let (mut ids, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let page = s
            .engine
            .list_jobs("q", &f, cursor.as_deref(), 100)
            .await
            .unwrap();
        ids.extend(page.jobs.iter().map(|j| {
            assert_eq!(j.state, state);
            j.id
        }));
        if !page.has_more {
            return ids;
        }
        cursor = page.next;
    }
}

const READY_ROWS: &str = "SELECT count(*) FROM pgferry.ready_rows($1)";
const HANDED: &str = "SELECT count(*) FROM pgferry.long_leases WHERE job_id = $1 AND handed_over";

#[tokio::test]
async fn a_job_heartbeating_across_rotations_lets_its_segment_go_then_completes() {
    let s = common::setup().await;
    let mut rot = s.db.connect().await;
    let long = claim_one(&s, "q", 25).await;
    assert!(beat(&s, &long, Duration::from_secs(600)).await);
    // More than two full turns of the 16-segment ring while the job runs.
    let freed = turn(&s, &mut rot, &long, 40).await;
    assert!(freed >= 32, "the ring kept turning: {freed} segments freed");
    // Its own segment was freed (its ready row is gone) and handed it over.
    assert_eq!(count(&rot, READY_ROWS, long.job_id).await, 0);
    assert_eq!(count(&rot, HANDED, long.job_id).await, 1);
    let info = s.engine.get_job(long.job_id).await.unwrap();
    assert_eq!(info.state, JobState::Running);
    assert_eq!(info.attempts.len(), 1);
    assert_eq!(info.attempts[0].outcome, "running");
    assert_eq!(info.attempts[0].worker.as_deref(), Some("w-long"));
    assert!(info.attempts[0].claimed_at.is_some());
    assert_eq!(info.kind, "long");
    // The queue's counters see it running, and a recount (which reads handed-over attempts
    // from long_leases once their receipt is gone) agrees.
    assert_running(&s, 1).await;
    assert_eq!(listed(&s, JobState::Running, None).await, [long.job_id]);
    assert_eq!(
        listed(&s, JobState::Running, Some("long")).await,
        [long.job_id]
    );
    // Its worker finishes: the outcome wins, once.
    let done = s
        .engine
        .complete(&[long.completed(Some(json!({"ok": true})))])
        .await
        .unwrap();
    assert!(!done[0].stale);
    let again = s.engine.complete(&[long.completed(None)]).await.unwrap();
    assert!(again[0].stale, "a second report is stale");
    assert!(!beat(&s, &long, Duration::from_secs(600)).await);
    let info = s.engine.get_job(long.job_id).await.unwrap();
    assert_eq!(info.state, JobState::Completed);
    assert_eq!(info.attempts.len(), 1);
    assert_eq!(info.attempts[0].outcome, "completed");
    assert_eq!(info.result, Some(json!({"ok": true})));
    assert_running(&s, 0).await;
    assert!(listed(&s, JobState::Running, None).await.is_empty());
    assert_eq!(
        listed(&s, JobState::Completed, Some("long")).await,
        [long.job_id]
    );
    // Nothing of it holds a segment: the ring frees everything sealed.
    let r = rotator::rotate(&mut rot, &quick()).await.unwrap();
    assert!(matches!(r.last(), Some(FreeResult::NoneSealed)), "{r:?}");
}

#[tokio::test]
async fn a_handed_over_job_that_fails_is_retried_then_dead_lettered() {
    let s = common::setup().await;
    let mut rot = s.db.connect().await;
    let long = claim_one(&s, "q", 2).await;
    assert!(beat(&s, &long, Duration::from_secs(600)).await);
    turn(&s, &mut rot, &long, 20).await;
    assert_eq!(count(&rot, HANDED, long.job_id).await, 1);
    let r = s
        .engine
        .complete(&[long.failed("boom", Duration::ZERO)])
        .await
        .unwrap();
    assert!(!r[0].stale);
    // Attempt 2 is in the log (current segment), claimable, and also runs for hours.
    s.tick().await;
    let second = s
        .engine
        .claim("q", 1, "w-long")
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!((second.job_id, second.attempt), (long.job_id, 2));
    assert!(beat(&s, &second, Duration::from_secs(600)).await);
    turn(&s, &mut rot, &second, 20).await;
    assert_eq!(count(&rot, HANDED, long.job_id).await, 2);
    let info = s.engine.get_job(long.job_id).await.unwrap();
    assert_eq!(info.state, JobState::Running);
    let outcomes: Vec<_> = info.attempts.iter().map(|a| a.outcome).collect();
    assert_eq!(outcomes, ["failed", "running"]);
    // The last attempt fails: dead-lettered from the carried job data.
    let r = s
        .engine
        .complete(&[second.fail("boom again")])
        .await
        .unwrap();
    assert!(!r[0].stale);
    assert!(s.engine.complete(&[second.completed(None)]).await.unwrap()[0].stale);
    let info = s.engine.get_job(long.job_id).await.unwrap();
    assert_eq!(info.state, JobState::Dead);
    let dead: (i32, String, serde_json::Value) = {
        let row = rot
            .query_one(
                "SELECT attempt, error, args FROM pgferry.dead WHERE job_id = $1",
                &[&long.job_id],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    assert_eq!(dead, (2, "boom again".to_string(), json!({"hours": 3})));
}

#[tokio::test]
async fn a_handed_over_job_whose_worker_died_is_rescued_once_and_hears_a_cancel() {
    let s = common::setup().await;
    let mut rot = s.db.connect().await;
    let mut rc = s.db.connect().await;
    let long = claim_one(&s, "q", 25).await;
    assert!(beat(&s, &long, Duration::from_secs(600)).await);
    turn(&s, &mut rot, &long, 20).await;
    assert_eq!(count(&rot, READY_ROWS, long.job_id).await, 0);
    // Cancelling the running, handed-over job is recorded; its worker hears of it.
    assert_eq!(
        s.engine.cancel(long.job_id, Some("stop")).await.unwrap(),
        CancelResult::Requested
    );
    assert!(
        s.engine
            .get_job(long.job_id)
            .await
            .unwrap()
            .cancel_requested
    );
    // The last beat: a short lease, then the worker is gone.
    let b = s
        .engine
        .heartbeat(
            &[AttemptRef::from(&long)],
            Duration::from_millis(100),
            "w-long",
        )
        .await
        .unwrap();
    assert!(b[0].held && b[0].cancelled, "{b:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let rep = loop {
        let rep = rescuer::rescue(&mut rc, Duration::ZERO).await.unwrap();
        if rep.retried > 0 {
            break rep;
        }
        assert!(Instant::now() < deadline, "never rescued");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!((rep.retried, rep.dead), (1, 0), "{rep:?}");
    assert_eq!(rep.per_queue, vec![("q".to_string(), 1)]);
    // The late worker: stale, and no longer held.
    assert!(s.engine.complete(&[long.completed(None)]).await.unwrap()[0].stale);
    assert!(!beat(&s, &long, Duration::from_secs(60)).await);
    // Nothing more to rescue. The retry is in the log, and the cancellation request closes
    // it at the next claim instead of handing it out.
    let rep = rescuer::rescue(&mut rc, Duration::ZERO).await.unwrap();
    assert_eq!(rep.retried + rep.dead, 0);
    s.tick().await;
    assert!(s.engine.claim("q", 1, "w2").await.unwrap().is_empty());
    let info = s.engine.get_job(long.job_id).await.unwrap();
    assert_eq!(info.state, JobState::Cancelled);
    let outcomes: Vec<_> = info.attempts.iter().map(|a| a.outcome).collect();
    assert_eq!(outcomes, ["rescued", "cancelled"]);
}

#[tokio::test]
async fn completion_racing_the_hand_over_lands_exactly_once() {
    let s = common::setup().await;
    let mut rot = s.db.connect().await;
    let check = s.db.connect().await;
    for i in 0..30 {
        // A long job and a short one in a fresh segment; the short one closes at once.
        rotator::advance(&rot, Duration::ZERO).await.unwrap();
        let ids = s
            .engine
            .enqueue(&[
                NewJob::new("q", "long", json!({ "i": i })),
                NewJob::new("q", "short", json!({ "i": i })),
            ])
            .await
            .unwrap();
        s.tick().await;
        let c = s.engine.claim("q", 2, "w").await.unwrap();
        assert_eq!(c.len(), 2);
        let (long, short) = (&c[0], &c[1]);
        assert_eq!(long.job_id, ids[0]);
        s.complete_all(std::slice::from_ref(short)).await;
        assert!(beat(&s, long, Duration::from_secs(600)).await);
        rotator::advance(&rot, Duration::ZERO).await.unwrap();
        // Mixed outcomes: a success, or a failure that retries in the current segment.
        let outcome = if i % 2 == 0 {
            long.completed(None)
        } else {
            long.failed("x", Duration::ZERO)
        };
        let (done, freed) = tokio::join!(
            s.engine.complete(std::slice::from_ref(&outcome)),
            rotator::free_oldest(&mut rot, Duration::ZERO)
        );
        assert!(!done.unwrap()[0].stale, "round {i}: the only outcome won");
        let freed = freed.unwrap();
        let second = s.engine.complete(&[outcome]).await.unwrap();
        if !second[0].stale {
            let st: Vec<(i16, String)> = check
                .query(
                    "SELECT segment, state FROM pgferry.segments ORDER BY 1",
                    &[],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            let ll: Vec<String> = check
                .query(
                    "SELECT row_to_json(l)::text FROM pgferry.long_leases l",
                    &[],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            panic!(
                "round {i}: second report won; long {long:?} freed {freed:?} segs {st:?} ll {ll:?}"
            );
        }
        // Exactly one outcome: in completions (before the hand-over) or in long_leases.
        let in_log: i64 = check
            .query_one(
                "SELECT count(*) FROM pgferry.completions c, unnest(c.job_ids) j WHERE j = $1",
                &[&long.job_id],
            )
            .await
            .unwrap()
            .get(0);
        let handed: i64 = count(
            &check,
            "SELECT count(*) FROM pgferry.long_leases WHERE job_id = $1 AND outcome IS NOT NULL",
            long.job_id,
        )
        .await;
        let freed_seg: bool = check
            .query_one(
                "SELECT state = 'free' FROM pgferry.segments WHERE segment = $1",
                &[&long.segment],
            )
            .await
            .unwrap()
            .get(0);
        // Once freed, the completion row went with the segment; the hand-over row stays.
        assert!(
            in_log + handed == 1 || (freed_seg && in_log + handed == 0),
            "round {i}: {in_log} in completions, {handed} handed over, freed {freed_seg}"
        );
        // Whatever won, every sealed segment can now be freed: nothing is left open, and
        // nothing was freed with an open attempt (a retry sits in the current segment).
        // (Without advancing: a retry waits in the current segment.)
        let last = loop {
            let r = rotator::free_oldest(&mut rot, Duration::ZERO)
                .await
                .unwrap();
            if !matches!(r, FreeResult::Freed(_)) {
                break r;
            }
        };
        assert_eq!(last, FreeResult::NoneSealed, "round {i}");
        if i % 2 == 1 {
            s.tick().await;
            let retry = s.engine.claim("q", 1, "w").await.unwrap();
            assert_eq!(retry.len(), 1, "round {i}: the retry is claimable once");
            assert_eq!((retry[0].job_id, retry[0].attempt), (long.job_id, 2));
            s.complete_all(&retry).await;
        }
    }
}

/// ADR 0008 §3: a job's segment freed while its receipt (in a later segment) lives on; a
/// duplicate report — whole receipt or not — must be stale, not counted in the segment's
/// next incarnation.
#[tokio::test]
async fn a_late_report_naming_a_freed_segment_is_stale() {
    let s = common::setup().await;
    let mut rot = s.db.connect().await;
    s.engine
        .enqueue(&[
            NewJob::new("q", "k", json!({})),
            NewJob::new("q", "k", json!({})),
        ])
        .await
        .unwrap();
    s.tick().await;
    // Claimed after an advance: the jobs are in segment 0, their receipt in segment 1.
    assert!(rotator::advance(&rot, Duration::ZERO).await.unwrap());
    let c = s.engine.claim("q", 2, "w").await.unwrap();
    assert_eq!((c[0].segment, c[0].receipt_segment), (0, 1));
    s.complete_all(&c).await;
    assert_eq!(
        rotator::free_oldest(&mut rot, Duration::ZERO)
            .await
            .unwrap(),
        FreeResult::Freed(0)
    );
    let whole: Vec<_> = c.iter().map(|j| j.completed(None)).collect();
    assert!(s
        .engine
        .complete(&whole)
        .await
        .unwrap()
        .iter()
        .all(|d| d.stale));
    let one = s
        .engine
        .complete(&[c[1].failed("x", Duration::ZERO)])
        .await
        .unwrap();
    assert!(one[0].stale);
    assert!(!beat(&s, &c[0], Duration::from_secs(60)).await);
    // Segment 0's next incarnation counts nothing of them.
    let counted: i64 = rot
        .query_one(
            "SELECT count(*) FROM pgferry.completions WHERE segment = 0",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(counted, 0);
}

#[tokio::test]
async fn a_handed_over_job_keeps_its_unique_key_for_its_period() {
    let s = common::setup().await;
    let mut rot = s.db.connect().await;
    let keyed = || {
        NewJob::new("q", "long", json!({}))
            .unique("nightly")
            .unique_period(Duration::from_secs(3600))
    };
    let id = s.engine.enqueue_many(&[keyed()]).await.unwrap()[0].id;
    s.tick().await;
    let long = s.engine.claim("q", 1, "w-long").await.unwrap().remove(0);
    assert_eq!(long.job_id, id);
    assert!(beat(&s, &long, Duration::from_secs(600)).await);
    turn(&s, &mut rot, &long, 20).await;
    assert_eq!(count(&rot, READY_ROWS, id).await, 0);
    assert_eq!(count(&rot, HANDED, id).await, 1);
    assert!(!s.engine.complete(&[long.completed(None)]).await.unwrap()[0].stale);
    // Its receipt and every segment of its time go; only long_leases remembers the job.
    for _ in 0..20 {
        s.run_through("other", 3).await;
        rotator::rotate(&mut rot, &quick()).await.unwrap();
    }
    // The janitor, with retention zero, keeps the row and the key for the key's period...
    let janitor = s.db.connect().await;
    assert_eq!(
        janitor::prune_long_leases(&janitor, 1000, Duration::ZERO)
            .await
            .unwrap(),
        0
    );
    janitor::prune_unique(&janitor, None, 1000).await.unwrap();
    const KEYS: &str = "SELECT count(*) FROM pgferry.unique_keys WHERE job_id = $1";
    assert_eq!(count(&rot, KEYS, id).await, 1);
    assert_eq!(
        s.engine.get_job(id).await.unwrap().state,
        JobState::Completed
    );
    // ...so a duplicate still answers the holder.
    let dup = s.engine.enqueue_many(&[keyed()]).await.unwrap();
    assert_eq!((dup[0].id, dup[0].duplicate), (id, true));
    // Once the period is over the key is released and the row goes.
    rot.execute(
        "UPDATE pgferry.unique_keys SET period_ms = 1 WHERE job_id = $1",
        &[&id],
    )
    .await
    .unwrap();
    janitor::prune_unique(&janitor, None, 1000).await.unwrap();
    assert_eq!(count(&rot, KEYS, id).await, 0);
    assert_eq!(
        janitor::prune_long_leases(&janitor, 1000, Duration::ZERO)
            .await
            .unwrap(),
        1
    );
}
