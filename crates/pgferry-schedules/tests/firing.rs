//! Firing against real Postgres, with simulated clocks: each pass is told what "now" is.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use pgferry_core::JobState;
use pgferry_schedules::{Missed, Overlap, ScheduleError};

#[tokio::test]
async fn a_fire_happens_once_and_carries_its_time() {
    let s = setup().await;
    let start = future_minute();
    let created = s
        .schedules
        .create(0, &every("once", 60, start, "q"))
        .await
        .unwrap();
    assert_eq!(created.next_fire_at, Some(start));

    let r = fire(&s, at(start, 1)).await;
    assert_eq!(r.fired, 1);
    // The same instant again, and a moment later: nothing new.
    assert_eq!(fire(&s, at(start, 1)).await.fired, 0);
    assert_eq!(fire(&s, at(start, 30)).await.fired, 0);
    let f = fires(&s, "once").await;
    assert_eq!(f.len(), 1);
    assert_eq!((f[0].0, f[0].1.as_str()), (start, "fired"));
    let job = s.engine.get_job(f[0].2.unwrap()).await.unwrap();
    assert_eq!(job.kind, "tick");
    assert_eq!(job.args.to_value()["hello"], "world");
    let meta = job.meta.unwrap().to_value();
    assert_eq!(meta["schedule"]["name"], "once");
    let carried: jiff::Timestamp = meta["schedule"]["fire_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(SystemTime::from(carried), start);

    assert_eq!(fire(&s, at(start, 61)).await.fired, 1);
    let again = s.schedules.get(0, "once").await.unwrap();
    assert_eq!(again.next_fire_at, Some(at(start, 120)));
    assert_eq!(drain(&s, "q").await, 2);
}

#[tokio::test]
async fn two_firers_racing_fire_each_time_once() {
    let s = setup().await;
    let start = future_minute();
    for i in 0..40 {
        s.schedules
            .create(0, &every(&format!("s{i}"), 10, start, "race"))
            .await
            .unwrap();
    }
    // Two "leaders" pass over the same due schedules at the same simulated instants.
    for step in 0..5u64 {
        let now = at(start, step * 10 + 1);
        let (a, b) = tokio::join!(fire(&s, now), fire(&s, now));
        assert_eq!(a.fired + b.fired, 40, "step {step}: {a:?} {b:?}");
    }
    let client = s.db.connect().await;
    let row = client
        .query_one(
            "SELECT count(*) AS n, count(DISTINCT job_id) AS jobs, \
                    count(DISTINCT (schedule_id, fire_at)) AS times \
             FROM pgferry_sched.fires WHERE outcome = 'fired'",
            &[],
        )
        .await
        .unwrap();
    let (n, jobs, times): (i64, i64, i64) = (row.get("n"), row.get("jobs"), row.get("times"));
    assert_eq!((n, jobs, times), (200, 200, 200));
    // Exactly the fired jobs exist in the queue.
    assert_eq!(drain(&s, "race").await, 200);
}

async fn missed_case(missed: Missed, max: i32) -> Vec<(u64, String)> {
    let s = setup().await;
    let start = future_minute();
    let mut spec = every("m", 60, start, "mq");
    spec.missed = missed;
    spec.grace_ms = 10_000;
    spec.catchup_window_ms = 300_000;
    spec.catchup_max = max;
    s.schedules.create(0, &spec).await.unwrap();
    // Down for ten and a half minutes: every fire is past its grace.
    fire(&s, at(start, 630)).await;
    fires(&s, "m")
        .await
        .into_iter()
        .map(|(t, o, _)| (t.duration_since(start).unwrap().as_secs(), o))
        .collect()
}

fn outcomes(v: &[(u64, String)], which: &str) -> Vec<u64> {
    v.iter()
        .filter(|(_, o)| o == which)
        .map(|(t, _)| *t)
        .collect()
}

#[tokio::test]
async fn missed_fires_follow_the_policy() {
    let skip = missed_case(Missed::Skip, 10).await;
    assert_eq!(outcomes(&skip, "fired"), Vec::<u64>::new());
    assert_eq!(outcomes(&skip, "missed").len(), 11);

    let once = missed_case(Missed::RunOnce, 10).await;
    assert_eq!(outcomes(&once, "fired"), vec![600]);
    assert_eq!(outcomes(&once, "missed").len(), 10);

    // The catch-up window (5 min) holds 6:00..10:00; the newest three run.
    let all = missed_case(Missed::RunAll, 3).await;
    assert_eq!(outcomes(&all, "fired"), vec![480, 540, 600]);
    assert_eq!(outcomes(&all, "missed").len(), 8);
    let all = missed_case(Missed::RunAll, 100).await;
    assert_eq!(outcomes(&all, "fired"), vec![360, 420, 480, 540, 600]);
}

async fn overlap_setup(policy: Overlap) -> (Setup, SystemTime) {
    let s = setup().await;
    let start = future_minute();
    let mut spec = every("o", 60, start, "oq");
    spec.overlap = policy;
    s.schedules.create(0, &spec).await.unwrap();
    assert_eq!(fire(&s, at(start, 1)).await.fired, 1);
    (s, start)
}

#[tokio::test]
async fn overlap_skip_and_allow() {
    let (s, start) = overlap_setup(Overlap::Skip).await;
    let r = fire(&s, at(start, 61)).await;
    assert_eq!((r.fired, r.skipped), (0, 1));
    drain(&s, "oq").await;
    assert_eq!(fire(&s, at(start, 121)).await.fired, 1);
    let o: Vec<String> = fires(&s, "o").await.into_iter().map(|f| f.1).collect();
    assert_eq!(o, ["fired", "skipped", "fired"]);

    let (s, start) = overlap_setup(Overlap::Allow).await;
    assert_eq!(fire(&s, at(start, 61)).await.fired, 1);
}

#[tokio::test]
async fn overlap_buffer_one_runs_one_waiting_fire_after_the_previous() {
    let (s, start) = overlap_setup(Overlap::BufferOne).await;
    assert_eq!(fire(&s, at(start, 61)).await.buffered, 1);
    assert_eq!(fire(&s, at(start, 121)).await.skipped, 1);
    // Still running: the buffered fire waits.
    assert_eq!(fire(&s, at(start, 130)).await.fired, 0);
    assert_eq!(drain(&s, "oq").await, 1);
    let r = fire(&s, at(start, 140)).await;
    assert_eq!(r.fired, 1);
    let f = fires(&s, "o").await;
    let o: Vec<&str> = f.iter().map(|f| f.1.as_str()).collect();
    assert_eq!(o, ["fired", "fired", "skipped"]);
    assert!(f[1].2.is_some(), "the buffered fire has its job");
    let job = s.engine.get_job(f[1].2.unwrap()).await.unwrap();
    let carried: jiff::Timestamp = job.meta.unwrap().to_value()["schedule"]["fire_at"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(SystemTime::from(carried), at(start, 60));
}

#[tokio::test]
async fn overlap_cancel_previous_cancels_the_running_job() {
    let (s, start) = overlap_setup(Overlap::CancelPrevious).await;
    let first = fires(&s, "o").await[0].2.unwrap();
    assert_eq!(fire(&s, at(start, 61)).await.fired, 1);
    let job = s.engine.get_job(first).await.unwrap();
    assert!(
        job.state == JobState::Cancelled || job.cancel_requested,
        "{:?}",
        job.state
    );
    // Only the second is handed out.
    assert_eq!(drain(&s, "oq").await, 1);
}

#[tokio::test]
async fn backfill_runs_past_times_once() {
    let s = setup().await;
    let start = future_minute();
    s.schedules
        .create(0, &every("b", 60, start, "bq"))
        .await
        .unwrap();
    fire(&s, at(start, 121)).await;
    let done = s
        .schedules
        .backfill(0, "b", start, at(start, 300))
        .await
        .unwrap();
    // 0:00-2:00 ran (run_once took 2:00; 0:00 and 1:00 were recorded missed, so they
    // have fires); 3:00, 4:00, 5:00 are new.
    let times: Vec<u64> = done
        .iter()
        .map(|(t, _)| t.duration_since(start).unwrap().as_secs())
        .collect();
    assert_eq!(times, vec![180, 240, 300]);
    assert!(s
        .schedules
        .backfill(0, "b", start, at(start, 300))
        .await
        .unwrap()
        .is_empty());
    assert!(matches!(
        s.schedules.backfill(0, "b", at(start, 10), start).await,
        Err(ScheduleError::Invalid { field: "to", .. })
    ));
    // The leader later reaches 3:00..5:00 and fires nothing twice.
    assert_eq!(fire(&s, at(start, 301)).await.fired, 0);
    assert_eq!(drain(&s, "bq").await, 4);
}

#[tokio::test]
async fn paused_schedules_do_not_fire_and_resume_from_now() {
    let s = setup().await;
    let start = SystemTime::now() - Duration::from_secs(3600);
    s.schedules
        .create(0, &every("p", 1, start, "pq"))
        .await
        .unwrap();
    s.schedules.set_paused(0, "p", true).await.unwrap();
    let later = SystemTime::now() + Duration::from_secs(5);
    assert_eq!(fire(&s, later).await.schedules, 0);
    let resumed = s.schedules.set_paused(0, "p", false).await.unwrap();
    assert!(resumed.next_fire_at.unwrap() > SystemTime::now() - Duration::from_secs(1));
    assert!(fires(&s, "p").await.is_empty());
}

#[tokio::test]
async fn jitter_delays_the_job_within_bounds() {
    let s = setup().await;
    let start = future_minute();
    let mut spec = every("j", 60, start, "jq");
    spec.jitter_ms = 3_600_000;
    s.schedules.create(0, &spec).await.unwrap();
    let before = SystemTime::now();
    fire(&s, at(start, 1)).await;
    let job = s
        .engine
        .get_job(fires(&s, "j").await[0].2.unwrap())
        .await
        .unwrap();
    let run_at = job.run_at.expect("a jittered job has a run time");
    assert!(run_at >= before && run_at <= SystemTime::now() + Duration::from_secs(3600));
    // The fire time itself is not jittered.
    assert_eq!(fires(&s, "j").await[0].0, start);
}

#[tokio::test]
async fn end_at_stops_fires_and_preview_lists_the_next_ones() {
    let s = setup().await;
    let start = future_minute();
    let mut spec = every("e", 60, start, "eq");
    spec.end_at = Some(at(start, 120));
    let created = s.schedules.create(0, &spec).await.unwrap();
    let preview = created.upcoming(SystemTime::now(), 10).unwrap();
    assert_eq!(preview, vec![start, at(start, 60), at(start, 120)]);
    let r = fire(&s, at(start, 125)).await;
    assert_eq!(r.fired + r.missed, 3);
    assert_eq!(s.schedules.get(0, "e").await.unwrap().next_fire_at, None);
    assert_eq!(fire(&s, at(start, 3600)).await.schedules, 0);
}

#[tokio::test]
async fn bad_definitions_name_the_field() {
    let s = setup().await;
    let start = future_minute();
    let mut spec = every("x", 60, start, "q");
    spec.cron = Some("* * * * *".into());
    let cases: Vec<(&str, pgferry_schedules::NewSchedule)> = vec![
        ("cron", spec),
        ("name", every("bad name!", 60, start, "q")),
        ("interval_ms", every("x", 0, start, "q")),
        ("jitter_ms", {
            let mut s = every("x", 60, start, "q");
            s.jitter_ms = -1;
            s
        }),
        ("end_at", {
            let mut s = every("x", 60, start, "q");
            s.end_at = Some(start);
            s
        }),
        ("timezone", {
            let mut s = every("x", 60, start, "q");
            s.interval_ms = None;
            s.cron = Some("@daily".into());
            s.timezone = "Nowhere/City".into();
            s
        }),
    ];
    for (field, spec) in cases {
        let e = s.schedules.create(0, &spec).await.unwrap_err();
        assert!(
            matches!(&e, ScheduleError::Invalid { field: f, .. } if *f == field),
            "{field}: {e}"
        );
    }
    s.schedules
        .create(0, &every("dup", 60, start, "q"))
        .await
        .unwrap();
    assert!(matches!(
        s.schedules.create(0, &every("dup", 60, start, "q")).await,
        Err(ScheduleError::Exists(_))
    ));
    // Another tenant's names are its own.
    s.schedules
        .create(7, &every("dup", 60, start, "q"))
        .await
        .unwrap();
    assert!(matches!(
        s.schedules.get(8, "dup").await,
        Err(ScheduleError::NotFound(_))
    ));
}
