//! Fires prepared ahead and committed at their time (ADR 0025), against real Postgres and
//! the real clock: a prepared fire waits for its time.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use pgferry_schedules::ahead::{prepare_at, prepare_next};
use pgferry_schedules::{Overlap, Target};
use serde_json::json;

/// A whole second `secs` from now.
fn soon(secs: u64) -> SystemTime {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    SystemTime::UNIX_EPOCH + Duration::from_secs(now + secs)
}

async fn count(c: &tokio_postgres::Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_fire_is_invisible_until_its_time_then_fired_once() {
    let s = setup().await;
    // Far enough ahead that the preparer looks before `t` on a loaded CI machine: it
    // prepares only fires still to come (next_preparable.sql).
    let t = soon(5);
    s.schedules
        .create(0, &every("ahead", 60, t, "aq"))
        .await
        .unwrap();
    let engine = s.engine.clone();
    let mut c = s.db.connect().await;
    let preparing =
        tokio::spawn(async move { prepare_next(&engine, &mut c, Duration::from_secs(10)).await });

    let probe = s.db.connect().await;
    let mut seen_locked = false;
    loop {
        let fires = count(&probe, "SELECT count(*) FROM pgferry_sched.fires").await;
        let after = SystemTime::now();
        // Visible means committed, and the commit waits for t.
        assert!(fires == 0 || after >= t, "fire visible before its time");
        // A preparer that ended without a fire (it looked too late, or failed) would leave
        // this loop waiting for ever: its answer is checked below.
        if fires > 0 || preparing.is_finished() {
            break;
        }
        let free = count(
            &probe,
            "SELECT count(*) FROM (SELECT 1 FROM pgferry_sched.schedules \
             FOR UPDATE SKIP LOCKED) x",
        )
        .await;
        seen_locked |= free == 0 && SystemTime::now() < t;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let report = preparing
        .await
        .unwrap()
        .unwrap()
        .unwrap_or_else(|| panic!("no fire to prepare: t {t:?}, now {:?}", SystemTime::now()));
    assert!(seen_locked, "the schedule was not held before its time");
    assert_eq!((report.schedules, report.fired), (1, 1));

    let f = fires(&s, "ahead").await;
    assert_eq!(f.len(), 1);
    assert_eq!((f[0].0, f[0].1.as_str()), (t, "fired"));
    // Recorded no earlier than the fire time: the monitors' watcher reads by recorded_at.
    let recorded: SystemTime = probe
        .query_one("SELECT recorded_at FROM pgferry_sched.fires", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(recorded, t);
    let job = s.engine.get_job(f[0].2.unwrap()).await.unwrap();
    assert_eq!(job.meta.unwrap().to_value()["schedule"]["name"], "ahead");
    let next = s.schedules.get(0, "ahead").await.unwrap();
    assert_eq!(next.next_fire_at, Some(t + Duration::from_secs(60)));
    // The regular pass at the same time finds nothing left to fire.
    assert_eq!(fire(&s, t + Duration::from_secs(1)).await.fired, 0);
    assert_eq!(drain(&s, "aq").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_fires_needing_no_state_at_their_time_are_prepared() {
    let s = setup().await;
    let t = soon(2);
    s.schedules
        .create(0, &every("allow", 60, t, "mixed"))
        .await
        .unwrap();
    let mut skip = every("skip", 60, t, "mixed");
    skip.overlap = Overlap::Skip;
    s.schedules.create(0, &skip).await.unwrap();
    let mut wf = every("wf", 60, t, "mixed");
    wf.target = Target::Workflow {
        queue: "mixed".into(),
        kind: "flow".into(),
        input: json!({}),
    };
    s.schedules.create(0, &wf).await.unwrap();
    let mut paused = every("paused", 60, t, "mixed");
    paused.paused = true;
    s.schedules.create(0, &paused).await.unwrap();
    let mut jittered = every("jittered", 60, t, "mixed");
    jittered.jitter_ms = 500;
    s.schedules.create(0, &jittered).await.unwrap();

    let mut c = s.db.connect().await;
    let report = prepare_at(&s.engine, &mut c, t).await.unwrap();
    assert_eq!((report.schedules, report.fired), (2, 2), "{report:?}");
    assert!(SystemTime::now() >= t);
    assert_eq!(fires(&s, "allow").await.len(), 1);
    // A jittered job runs within its jitter after the fire time, not after its writing.
    let j = fires(&s, "jittered").await;
    let job = s.engine.get_job(j[0].2.unwrap()).await.unwrap();
    let run_at = job.run_at.expect("a jittered job has a run_at");
    assert!(
        run_at >= t && run_at <= t + Duration::from_millis(500),
        "{run_at:?}"
    );
    for name in ["skip", "wf", "paused"] {
        assert!(fires(&s, name).await.is_empty(), "{name} was prepared");
    }
    // The firer's pass at the time fires the others, each once.
    let r = fire(&s, t + Duration::from_millis(100)).await;
    assert_eq!(r.fired, 2, "{r:?}");
    for name in ["allow", "skip", "wf", "jittered"] {
        assert_eq!(fires(&s, name).await.len(), 1, "{name}");
    }
    assert!(fires(&s, "paused").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preparing_and_firing_at_once_fire_each_time_once() {
    let s = setup().await;
    let t = soon(2);
    for i in 0..60 {
        s.schedules
            .create(0, &every(&format!("r{i}"), 60, t, "race"))
            .await
            .unwrap();
    }
    let (e1, e2) = (s.engine.clone(), s.engine.clone());
    let (mut c1, mut c2) = (s.db.connect().await, s.db.connect().await);
    let a = tokio::spawn(async move { prepare_at(&e1, &mut c1, t).await.unwrap() });
    let b = tokio::spawn(async move { prepare_at(&e2, &mut c2, t).await.unwrap() });
    // Passes told it is already the fire time, racing the preparers for the same rows.
    let (p, q) = tokio::join!(fire(&s, t), fire(&s, t));
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!(
        a.fired + b.fired + p.fired + q.fired,
        60,
        "{a:?} {b:?} {p:?} {q:?}"
    );
    // Whatever was left locked by a preparer while the passes ran is fired by now.
    assert_eq!(fire(&s, t + Duration::from_secs(1)).await.fired, 0);
    let client = s.db.connect().await;
    let row = client
        .query_one(
            "SELECT count(*) AS n, count(DISTINCT job_id) AS jobs, \
                    count(DISTINCT schedule_id) AS schedules \
             FROM pgferry_sched.fires WHERE outcome = 'fired'",
            &[],
        )
        .await
        .unwrap();
    let (n, jobs, ids): (i64, i64, i64) = (row.get("n"), row.get("jobs"), row.get("schedules"));
    assert_eq!((n, jobs, ids), (60, 60, 60));
    assert_eq!(drain(&s, "race").await, 60);
}
