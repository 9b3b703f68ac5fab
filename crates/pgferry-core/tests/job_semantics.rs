//! Job semantics on the log (issue 4): scheduled jobs, snooze, backoff, cancellation,
//! heartbeats with rescue, pause/resume, lookups and bad input. Real Postgres throughout.

mod common;

use std::time::{Duration, SystemTime};

use pgferry_core::leader::{promoter, rescuer};
use pgferry_core::{
    AttemptRef, Backoff, CancelResult, Error, JobState, NewJob, QueueOptions, QueueSettings,
};
use serde_json::json;

fn job(i: i64) -> NewJob {
    NewJob::new("q", "k", json!({ "i": i }))
}

/// Promotes due scheduled jobs until `n` have moved (bounded: the job's run_at is the only
/// thing waited for).
async fn promote_until(s: &common::Setup, n: u64) {
    let client = s.db.connect().await;
    let mut moved = 0;
    for _ in 0..100 {
        moved += promoter::promote(&client, 1000).await.unwrap();
        if moved >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("only {moved} of {n} scheduled jobs became due");
}

#[tokio::test]
async fn scheduled_job_waits_for_its_time_then_runs() {
    let s = common::setup().await;
    let later = job(1).delay(Duration::from_millis(400));
    let ids = s.engine.enqueue(&[later, job(2)]).await.unwrap();
    assert_eq!(
        s.engine.get_job(ids[0]).await.unwrap().state,
        JobState::Scheduled
    );
    // Not yet due: promotion moves nothing and the claim sees only the immediate job.
    let client = s.db.connect().await;
    assert_eq!(promoter::promote(&client, 1000).await.unwrap(), 0);
    s.tick().await;
    let first = s.engine.claim("q", 10, "w").await.unwrap();
    assert_eq!(
        first.iter().map(|j| j.job_id).collect::<Vec<_>>(),
        vec![ids[1]]
    );
    promote_until(&s, 1).await;
    s.tick().await;
    let second = s.engine.claim("q", 10, "w").await.unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!((second[0].job_id, second[0].attempt), (ids[0], 1));
    assert_eq!(
        s.engine.get_job(ids[0]).await.unwrap().state,
        JobState::Running
    );
    s.engine
        .complete(&[second[0].completed(Some(json!({ "sent": true })))])
        .await
        .unwrap();
    let info = s.engine.get_job(ids[0]).await.unwrap();
    assert_eq!(info.result, Some(json!({ "sent": true })));
    assert_eq!(info.state, JobState::Completed);
    assert_eq!(info.attempts.len(), 1);
    assert_eq!(info.attempts[0].outcome, "completed");
    assert_eq!(info.args, json!({ "i": 1 }));
}

#[tokio::test]
async fn snooze_does_not_use_up_an_attempt() {
    let s = common::setup().await;
    let id = s.engine.enqueue(&[job(1).max_attempts(1)]).await.unwrap()[0];
    s.tick().await;
    let c = s.engine.claim("q", 1, "w").await.unwrap();
    let r = s
        .engine
        .complete(&[c[0].snooze(Duration::ZERO)])
        .await
        .unwrap();
    assert!(!r[0].stale);
    s.tick().await;
    let c = s.engine.claim("q", 1, "w").await.unwrap();
    assert_eq!(
        (c[0].attempt, c[0].max_attempts),
        (2, 2),
        "snooze added an attempt"
    );
    // The one real attempt fails: dead, because snoozing did not count.
    s.engine.complete(&[c[0].fail("boom")]).await.unwrap();
    let info = s.engine.get_job(id).await.unwrap();
    assert_eq!(info.state, JobState::Dead);
    let outcomes: Vec<_> = info.attempts.iter().map(|a| a.outcome).collect();
    assert_eq!(outcomes, ["snoozed", "dead"]);
    assert_eq!(info.attempts[1].error.as_deref(), Some("boom"));
}

#[tokio::test]
async fn failure_retries_after_the_queues_backoff() {
    let s = common::setup().await;
    s.engine
        .upsert_queue(
            "q",
            &QueueOptions {
                shards: 1,
                max_attempts: 5,
                lease: Duration::from_secs(60),
            },
        )
        .await
        .unwrap();
    let base = Duration::from_secs(60);
    let settings = QueueSettings {
        backoff_base: Some(base),
        backoff_cap: Some(Duration::from_secs(600)),
        ..Default::default()
    };
    s.engine.update_queue("q", &settings).await.unwrap();
    let id = s.engine.enqueue(&[job(1)]).await.unwrap()[0];
    s.tick().await;
    let c = s.engine.claim("q", 1, "w").await.unwrap();
    assert_eq!(c[0].backoff.base, base, "claims carry the queue's policy");
    let before = SystemTime::now();
    s.engine.complete(&[c[0].fail("boom")]).await.unwrap();
    let info = s.engine.get_job(id).await.unwrap();
    assert_eq!(info.state, JobState::Scheduled);
    assert_eq!(info.attempts[0].outcome, "failed");
    assert_eq!(info.attempts[0].error.as_deref(), Some("boom"));
    let wait = info.run_at.unwrap().duration_since(before).unwrap();
    assert!(
        wait >= base / 2 - Duration::from_secs(1) && wait <= base + Duration::from_secs(1),
        "{wait:?}"
    );
}

#[test]
fn backoff_grows_exponentially_with_jitter_and_a_cap() {
    let b = Backoff {
        base: Duration::from_secs(1),
        cap: Duration::from_secs(100),
    };
    for attempt in 1..=40 {
        let full = Duration::from_secs(1u64 << (attempt - 1).min(20)).min(b.cap);
        for _ in 0..50 {
            let d = b.delay(attempt);
            assert!(
                d >= full / 2 && d <= full,
                "attempt {attempt}: {d:?} vs {full:?}"
            );
        }
    }
}

#[tokio::test]
async fn cancel_pending_scheduled_and_running_jobs() {
    let s = common::setup().await;
    let ids = s.engine.enqueue(&[job(1), job(2), job(3)]).await.unwrap();
    let sched = s
        .engine
        .enqueue(&[job(4).delay(Duration::from_secs(3600))])
        .await
        .unwrap()[0];
    // Pending: never handed out, closed as cancelled by the claim that meets it.
    assert_eq!(
        s.engine.cancel(ids[1], Some("not needed")).await.unwrap(),
        CancelResult::Requested
    );
    assert_eq!(
        s.engine.get_job(ids[1]).await.unwrap().state,
        JobState::Cancelled
    );
    s.tick().await;
    let c = s.engine.claim("q", 10, "w").await.unwrap();
    assert_eq!(
        c.iter().map(|j| j.job_id).collect::<Vec<_>>(),
        vec![ids[0], ids[2]]
    );
    let info = s.engine.get_job(ids[1]).await.unwrap();
    assert_eq!(info.state, JobState::Cancelled);
    assert_eq!(info.attempts[0].outcome, "cancelled");
    assert!(matches!(
        s.engine.cancel(ids[1], None).await,
        Err(Error::Conflict(_))
    ));
    // Scheduled: removed, still visible to get_job.
    assert_eq!(
        s.engine.cancel(sched, None).await.unwrap(),
        CancelResult::Unscheduled
    );
    let info = s.engine.get_job(sched).await.unwrap();
    assert_eq!((info.state, info.kind.as_str()), (JobState::Cancelled, "k"));
    // Running: the worker hears it (NOTIFY through the listener, and heartbeats) and reports.
    let listener = tokio::spawn(pgferry_core::listen::run_tick_listener(
        s.engine.clone(),
        s.db.config.clone(),
    ));
    let mut heard = s.engine.signals().subscribe_cancels();
    let running = &c[0];
    let mut got = None;
    for _ in 0..50 {
        // The listener may not be subscribed yet: repeat the request until it is heard.
        let _ = s.engine.cancel(running.job_id, None).await.unwrap();
        if let Ok(Ok(id)) = tokio::time::timeout(Duration::from_millis(100), heard.recv()).await {
            got = Some(id);
            break;
        }
        // A repeated request is AlreadyRequested and sends nothing: clear it to resend.
        s.db.connect()
            .await
            .execute(
                "DELETE FROM pgferry.cancels WHERE job_id = $1",
                &[&running.job_id],
            )
            .await
            .unwrap();
    }
    assert_eq!(got, Some(running.job_id));
    listener.abort();
    let beat = s
        .engine
        .heartbeat(&[AttemptRef::from(running)], Duration::from_secs(60), "w")
        .await
        .unwrap();
    assert!(beat[0].held && beat[0].cancelled, "{beat:?}");
    s.engine
        .complete(&[running.cancelled("stopped"), c[1].completed(None)])
        .await
        .unwrap();
    assert_eq!(
        s.engine.get_job(running.job_id).await.unwrap().state,
        JobState::Cancelled
    );
    assert_eq!(
        s.engine.get_job(c[1].job_id).await.unwrap().state,
        JobState::Completed
    );
    assert!(matches!(
        s.engine.cancel(424242, None).await,
        Err(Error::NotFound { .. })
    ));
}

#[tokio::test]
async fn heartbeat_keeps_a_long_job_and_rescue_takes_it_when_beats_stop() {
    let s = common::setup().await;
    s.engine
        .upsert_queue(
            "q",
            &QueueOptions {
                shards: 1,
                max_attempts: 3,
                lease: Duration::from_millis(200),
            },
        )
        .await
        .unwrap();
    s.engine.enqueue(&[job(1), job(2)]).await.unwrap();
    s.tick().await;
    let c = s.engine.claim("q", 2, "w").await.unwrap();
    let (long, short) = (&c[0], &c[1]);
    let beat = s
        .engine
        .heartbeat(&[long.into()], Duration::from_secs(60), "w")
        .await
        .unwrap();
    assert!(beat[0].held && !beat[0].cancelled);
    // Past the receipt's lease: the short job is rescued, the heartbeated one is not.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut rc = s.db.connect().await;
    let rep = rescuer::rescue(&mut rc, Duration::ZERO).await.unwrap();
    assert_eq!((rep.retried, rep.dead), (1, 0), "{rep:?}");
    assert_eq!(
        s.engine.get_job(long.job_id).await.unwrap().state,
        JobState::Running
    );
    assert_eq!(
        s.engine.get_job(short.job_id).await.unwrap().attempts[0].outcome,
        "rescued"
    );
    // The short job's worker lost it: heartbeat says so, its late result is stale.
    let beat = s
        .engine
        .heartbeat(&[short.into()], Duration::from_secs(60), "w")
        .await
        .unwrap();
    assert!(!beat[0].held);
    assert!(s.engine.complete(&[short.completed(None)]).await.unwrap()[0].stale);
    // The long job's beats stop: once its extended lease lapses the rescuer takes it.
    s.engine
        .heartbeat(&[long.into()], Duration::from_millis(100), "w")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rep = rescuer::rescue(&mut rc, Duration::ZERO).await.unwrap();
    assert_eq!(rep.retried, 1, "{rep:?}");
    assert!(s.engine.complete(&[long.completed(None)]).await.unwrap()[0].stale);
    let left: i64 = rc
        .query_one("SELECT count(*) FROM pgferry.long_leases", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "expired long leases are dropped");
}

#[tokio::test]
async fn pause_stops_claims_everywhere_and_resume_restarts_them() {
    let s = common::setup().await;
    let other = pgferry_core::Engine::new(s.db.pool(4), Default::default());
    s.engine.enqueue(&[job(1), job(2)]).await.unwrap();
    s.tick().await;
    // The other server claims one job, so it has the queue's settings cached.
    assert_eq!(other.claim("q", 1, "w2").await.unwrap().len(), 1);
    let info = s.engine.pause_queue("q").await.unwrap();
    assert!(info.paused);
    assert!(
        s.engine.claim("q", 10, "w").await.unwrap().is_empty(),
        "paused locally at once"
    );
    // Other servers re-read settings within a second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(
        other.claim("q", 10, "w2").await.unwrap().is_empty(),
        "paused everywhere"
    );
    s.engine.resume_queue("q").await.unwrap();
    assert_eq!(
        s.engine.claim("q", 10, "w").await.unwrap().len(),
        1,
        "the job left waiting"
    );
}

#[tokio::test]
async fn bad_input_gets_typed_errors() {
    let s = common::setup().await;
    assert!(matches!(
        s.engine.get_job(99).await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        s.engine.pause_queue("nope").await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        s.engine.pause_queue("Bad Name").await,
        Err(Error::InvalidName { .. })
    ));
    s.engine.enqueue(&[job(1)]).await.unwrap();
    let bad = QueueSettings {
        max_attempts: Some(0),
        ..Default::default()
    };
    assert!(matches!(
        s.engine.update_queue("q", &bad).await,
        Err(Error::InvalidArgument { .. })
    ));
    let bad = QueueSettings {
        lease: Some(Duration::from_millis(5)),
        ..Default::default()
    };
    assert!(matches!(
        s.engine.update_queue("q", &bad).await,
        Err(Error::InvalidArgument { .. })
    ));
    s.tick().await;
    let c = s.engine.claim("q", 1, "w").await.unwrap();
    let r = s
        .engine
        .heartbeat(&[(&c[0]).into()], Duration::from_millis(5), "w")
        .await;
    assert!(matches!(
        r,
        Err(Error::InvalidArgument { field: "lease", .. })
    ));
}

#[tokio::test]
async fn get_job_tells_who_claimed_each_attempt_and_when() {
    let s = common::setup().await;
    let id = s.engine.enqueue(&[job(1)]).await.unwrap()[0];
    let pending = s.engine.get_job(id).await.unwrap();
    // Not claimed yet: no attempt at all (issue 18), so nothing claimed it.
    assert!(pending.attempts.is_empty(), "{:?}", pending.attempts);
    s.tick().await;
    let c = s.engine.claim("q", 1, "w1").await.unwrap();
    let running = s.engine.get_job(id).await.unwrap();
    let a = &running.attempts[0];
    assert_eq!((a.outcome, a.worker.as_deref()), ("running", Some("w1")));
    let claimed_1 = a.claimed_at.expect("claimed_at of the running attempt");
    s.engine
        .complete(&[c[0].failed("boom", Duration::ZERO)])
        .await
        .unwrap();
    s.tick().await;
    let c = s.engine.claim("q", 1, "w2").await.unwrap();
    s.engine.complete(&[c[0].completed(None)]).await.unwrap();
    let done = s.engine.get_job(id).await.unwrap();
    let got: Vec<_> = done
        .attempts
        .iter()
        .map(|a| {
            (
                a.attempt,
                a.outcome,
                a.worker.as_deref(),
                a.error.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (1, "failed", Some("w1"), Some("boom")),
            (2, "completed", Some("w2"), None)
        ]
    );
    assert_eq!(done.attempts[0].claimed_at, Some(claimed_1));
    for a in &done.attempts {
        assert!(a.claimed_at.unwrap() <= a.finished_at.unwrap());
    }
    assert!(done.attempts[1].claimed_at.unwrap() >= claimed_1);
}
