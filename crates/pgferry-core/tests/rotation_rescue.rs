//! Segment rotation (TRUNCATE only when closed, cursors carried forward) and lease rescue.

mod common;

use std::time::Duration;

use pgferry_core::leader::rescuer;
use pgferry_core::leader::rotator::{self, FreeResult};
use pgferry_core::{NewJob, QueueOptions};
use serde_json::json;

fn jobs(n: usize) -> Vec<NewJob> {
    (0..n)
        .map(|i| NewJob::new("q", "k", json!({ "i": i })))
        .collect()
}

async fn current_segment(c: &tokio_postgres::Client) -> i16 {
    c.query_one(
        "SELECT segment FROM pgferry.segments WHERE state = 'current'",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test]
async fn segment_is_freed_only_when_closed_and_cursor_survives() {
    let s = common::setup().await;
    let mut rot = s.db.connect().await;
    s.engine.enqueue(&jobs(10)).await.unwrap();
    s.tick().await;
    let first = s.engine.claim("q", 100, "w").await.unwrap();
    assert_eq!(first.len(), 10);

    assert!(rotator::advance(&rot, Duration::ZERO).await.unwrap());
    assert_eq!(current_segment(&rot).await, 1);
    // Nine of ten closed: the segment must stay.
    let outcomes: Vec<_> = first[..9].iter().map(|j| j.completed(None)).collect();
    s.engine.complete(&outcomes).await.unwrap();
    assert_eq!(
        rotator::free_oldest(&mut rot, Duration::ZERO)
            .await
            .unwrap(),
        FreeResult::OpenJobs(0)
    );
    s.engine
        .complete(&[first[9].completed(None)])
        .await
        .unwrap();
    // Retention not passed yet.
    assert_eq!(
        rotator::free_oldest(&mut rot, Duration::from_secs(3600))
            .await
            .unwrap(),
        FreeResult::RetentionPending(0)
    );
    assert_eq!(
        rotator::free_oldest(&mut rot, Duration::ZERO)
            .await
            .unwrap(),
        FreeResult::Freed(0)
    );
    let left: i64 = rot
        .query_one("SELECT (SELECT count(*) FROM pgferry.ready_00) + (SELECT count(*) FROM pgferry.completions_00)", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
    // The lane's cursor lived in segment 0; it was carried forward, so nothing is re-claimed
    // and new jobs are claimed.
    s.tick().await;
    assert!(s.engine.claim("q", 100, "w").await.unwrap().is_empty());
    let new_ids = s.engine.enqueue(&jobs(5)).await.unwrap();
    s.tick().await;
    let c = s.engine.claim("q", 100, "w").await.unwrap();
    assert_eq!(c.iter().map(|j| j.job_id).collect::<Vec<_>>(), new_ids);
    // A completion for an attempt whose segment is gone is stale, not a fresh outcome.
    assert!(
        s.engine
            .complete(&[first[0].completed(None)])
            .await
            .unwrap()[0]
            .stale
    );
}

#[tokio::test]
async fn open_writer_blocks_truncation() {
    let s = common::setup().await;
    let mut rot = s.db.connect().await;
    s.engine.enqueue(&jobs(1)).await.unwrap();
    let mut producer = s.db.connect().await;
    let tx = producer.transaction().await.unwrap();
    s.engine.enqueue_tx(&tx, &jobs(2)).await.unwrap();
    s.tick().await;
    let c = s.engine.claim("q", 10, "w").await.unwrap();
    s.complete_all(&c).await;
    rotator::advance(&rot, Duration::ZERO).await.unwrap();
    assert_eq!(
        rotator::free_oldest(&mut rot, Duration::ZERO)
            .await
            .unwrap(),
        FreeResult::WriterInProgress(0)
    );
    tx.commit().await.unwrap();
    // Now committed but unclaimed: still not free.
    assert_eq!(
        rotator::free_oldest(&mut rot, Duration::ZERO)
            .await
            .unwrap(),
        FreeResult::OpenJobs(0)
    );
    s.tick().await;
    let late = s.engine.claim("q", 10, "w").await.unwrap();
    assert_eq!(late.len(), 2);
    s.complete_all(&late).await;
    assert_eq!(
        rotator::free_oldest(&mut rot, Duration::ZERO)
            .await
            .unwrap(),
        FreeResult::Freed(0)
    );
}

#[tokio::test]
async fn freeing_a_segment_never_blocks_the_hot_path() {
    let s = common::setup().await;
    s.run_through("q", 1).await;
    let rot = s.db.connect().await;
    rotator::advance(&rot, Duration::ZERO).await.unwrap();
    // What the rotator's NOTIFY tells every listening process: enqueues now go to the new
    // segment (without it they keep writing the old one for a few seconds, which delays its
    // freeing but loses nothing).
    let current: i16 = rot
        .query_one(
            "SELECT segment FROM pgferry.segments WHERE state = 'current'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    s.engine.observe_segment(current);
    // A long reader holds a lock on every partition of the log (a report, a backup).
    let mut reader = s.db.connect().await;
    let rtx = reader.transaction().await.unwrap();
    rtx.query("SELECT count(*) FROM pgferry.ready", &[])
        .await
        .unwrap();
    // Freeing waits for that reader...
    let mut rot = s.db.connect().await;
    let freeing = tokio::spawn(async move { rotator::free_oldest(&mut rot, Duration::ZERO).await });
    // ...while producers and claimers carry on: enqueue, claim and complete all succeed with
    // the detach waiting. (A plain TRUNCATE would queue them behind its lock request.)
    let guard = Duration::from_secs(60);
    for _ in 0..5 {
        let ids = tokio::time::timeout(guard, s.engine.enqueue(&jobs(3)))
            .await
            .expect("enqueue blocked")
            .unwrap();
        s.tick().await;
        // A claim may come back empty while the rotator briefly holds the lane's claim lock
        // to carry its cursor forward (claimers try-lock and move on); claim until all three
        // arrive.
        let mut got = Vec::new();
        for _ in 0..200 {
            let more = tokio::time::timeout(guard, s.engine.claim("q", 10, "w"))
                .await
                .expect("claim blocked")
                .unwrap();
            got.extend(more);
            if got.len() >= ids.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(got.iter().map(|j| j.job_id).collect::<Vec<_>>(), ids);
        let outcomes: Vec<_> = got.iter().map(|j| j.completed(None)).collect();
        tokio::time::timeout(guard, s.engine.complete(&outcomes))
            .await
            .expect("complete blocked")
            .unwrap();
    }
    assert!(
        !freeing.is_finished(),
        "the detach cannot finish while the reader is open"
    );
    rtx.commit().await.unwrap();
    assert_eq!(freeing.await.unwrap().unwrap(), FreeResult::Freed(0));
    // Attached are exactly the segments in use and the next one to open: the freed one stays
    // detached until the ring comes back to it (ADR 0009).
    let (attached, in_use): (Vec<String>, Vec<String>) =
        s.db.connect()
            .await
            .query_one(
                "SELECT ARRAY(SELECT inhrelid::regclass::text FROM pg_inherits
                           WHERE inhparent = 'pgferry.ready'::regclass ORDER BY 1),
                    ARRAY(SELECT format('pgferry.ready_%s', lpad(segment::text, 2, '0'))
                            FROM pgferry.segments
                           WHERE state <> 'free'
                              OR segment = (SELECT (segment + 1) % 16 FROM pgferry.segments
                                             WHERE state = 'current')
                           ORDER BY 1)",
                &[],
            )
            .await
            .map(|r| (r.get(0), r.get(1)))
            .unwrap();
    assert_eq!(attached, in_use);
    assert_eq!(attached, ["pgferry.ready_01", "pgferry.ready_02"]);
    // A producer that still believes the freed segment is current: its COPY meets no
    // partition, is retried in the current segment, and the jobs are claimed as usual.
    s.engine.observe_segment(0);
    let ids = s.engine.enqueue(&jobs(2)).await.unwrap();
    s.tick().await;
    let got = s.engine.claim("q", 10, "w").await.unwrap();
    assert_eq!(got.iter().map(|j| j.job_id).collect::<Vec<_>>(), ids);
    assert!(
        got.iter().all(|j| j.segment == 1),
        "written to the current segment"
    );
}

#[tokio::test]
async fn interrupted_rotation_is_finished_by_the_next_pass() {
    let s = common::setup().await;
    let mut rot = s.db.connect().await;
    s.run_through("q", 2).await;
    rotator::advance(&rot, Duration::ZERO).await.unwrap();
    // Simulate a leader that died after marking and detaching two of the five partitions.
    rot.batch_execute(
        "UPDATE pgferry.segments SET state = 'freeing' WHERE segment = 0;
         ALTER TABLE pgferry.ready DETACH PARTITION pgferry.ready_00;
         ALTER TABLE pgferry.ticks DETACH PARTITION pgferry.ticks_00;",
    )
    .await
    .unwrap();
    assert_eq!(
        rotator::free_oldest(&mut rot, Duration::ZERO)
            .await
            .unwrap(),
        FreeResult::NoneSealed
    );
    let (state, attached, rows): (String, i64, i64) = rot
        .query_one(
            "SELECT (SELECT state FROM pgferry.segments WHERE segment = 0),
                    (SELECT count(*) FROM pg_inherits WHERE inhrelid::regclass::text LIKE 'pgferry.%\\_00'),
                    (SELECT count(*) FROM pgferry.ready_00) + (SELECT count(*) FROM pgferry.completions_00)",
            &[],
        )
        .await
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .unwrap();
    // Free, empty, and detached until it is opened again (ADR 0009).
    assert_eq!((state.as_str(), attached, rows), ("free", 0, 0));
    // The queue still works and nothing is re-delivered.
    s.tick().await;
    assert!(s.engine.claim("q", 10, "w").await.unwrap().is_empty());
}

#[tokio::test]
async fn expired_lease_is_rescued_and_late_completion_is_stale() {
    let s = common::setup().await;
    s.engine
        .upsert_queue(
            "q",
            &QueueOptions {
                shards: 1,
                max_attempts: 2,
                lease: Duration::from_millis(200),
            },
        )
        .await
        .unwrap();
    let ids = s.engine.enqueue(&jobs(3)).await.unwrap();
    s.tick().await;
    let c = s.engine.claim("q", 10, "w").await.unwrap();
    assert_eq!(c.len(), 3);
    // Job 0 finishes in time; 1 and 2 are held by a worker that went away.
    s.engine.complete(&[c[0].completed(None)]).await.unwrap();
    let mut client = s.db.connect().await;
    // Poll until the lease has passed (not a timing assertion: rescue is checked by state).
    let mut report = rescuer::rescue(&mut client, Duration::ZERO).await.unwrap();
    // Bounded: a rescue that never comes must fail the test, not hang it.
    for _ in 0..600 {
        if report.retried > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        report = rescuer::rescue(&mut client, Duration::ZERO).await.unwrap();
    }
    assert_eq!((report.retried, report.dead), (2, 0));
    // The late worker's results are stale.
    let late = s
        .engine
        .complete(&[c[1].completed(None), c[2].completed(None)])
        .await
        .unwrap();
    assert!(late.iter().all(|d| d.stale));
    // The rescued jobs come back as attempt 2; rescue again after expiry dead-letters them.
    s.tick().await;
    let again = s.engine.claim("q", 10, "w").await.unwrap();
    assert_eq!(
        again
            .iter()
            .map(|j| (j.job_id, j.attempt))
            .collect::<Vec<_>>(),
        vec![(ids[1], 2), (ids[2], 2)]
    );
    let mut report = rescuer::rescue(&mut client, Duration::ZERO).await.unwrap();
    for _ in 0..600 {
        if report.dead > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        report = rescuer::rescue(&mut client, Duration::ZERO).await.unwrap();
    }
    assert_eq!(report.dead, 2);
    let dead: i64 = client
        .query_one("SELECT count(*) FROM pgferry.dead", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(dead, 2);
    // A rescue pass over closed receipts changes nothing.
    let idle = rescuer::rescue(&mut client, Duration::ZERO).await.unwrap();
    assert_eq!((idle.retried, idle.dead), (0, 0));
    let mark: i64 = client
        .query_one("SELECT rescue_mark FROM pgferry.leader_state", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        mark >= again[0].receipt_id,
        "mark {mark} did not pass closed receipts"
    );
}

/// A queue's retention keeps closed segments (all queues share segments: the longest wins).
#[tokio::test]
async fn queue_retention_keeps_closed_segments() {
    use pgferry_core::QueueSettings;
    let s = common::setup().await;
    s.run_through("kept", 3).await;
    let keep = QueueSettings {
        retention: Some(Duration::from_secs(3600)),
        ..Default::default()
    };
    s.engine.update_queue("kept", &keep).await.unwrap();
    let mut rot = s.db.connect().await;
    assert!(rotator::advance(&rot, Duration::ZERO).await.unwrap());
    let freed = rotator::free_oldest(&mut rot, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(freed, FreeResult::RetentionPending(0));
    let none = QueueSettings {
        retention: Some(Duration::ZERO),
        ..Default::default()
    };
    s.engine.update_queue("kept", &none).await.unwrap();
    assert_eq!(
        rotator::free_oldest(&mut rot, Duration::ZERO)
            .await
            .unwrap(),
        FreeResult::Freed(0)
    );
}
