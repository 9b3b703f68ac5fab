//! Every schedule is a monitor: a missed fire is `late`, an overlap skip or a failed job is
//! `failed`, each with its reason, and the next good fire recovers. Fires are made by the
//! schedules' own firer (`fire_due` with simulated times); the watcher runs in the duty.

mod common;

use std::time::{Duration, SystemTime};

use common::{secs, setup, Setup, TENANT};
use pgferry_schedules::{fire_due, Missed, NewSchedule, Overlap, Schedules, Target};
use serde_json::json;

/// A whole minute at least an hour ahead: simulated fire times start there.
fn future_minute() -> SystemTime {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    SystemTime::UNIX_EPOCH + Duration::from_secs((now / 60 + 120) * 60)
}

fn every_minute(name: &str, start: SystemTime) -> NewSchedule {
    let target = Target::Job {
        queue: format!("t{TENANT}.work-{name}"),
        kind: "tick".into(),
        args: json!({}),
        priority: 0,
        max_attempts: Some(1),
    };
    let mut s = NewSchedule::cron(name, "@hourly", target);
    s.cron = None;
    s.interval_ms = Some(60_000);
    s.start_at = Some(start);
    s.grace_ms = 30_000;
    s
}

async fn fire(s: &Setup, at: SystemTime) {
    let mut c = s.db.connect().await;
    fire_due(&s.engine, &mut c, at).await.unwrap();
}

/// The watcher reads fires recorded at least `settle` (10 s) before its `now`.
async fn watch(s: &Setup) -> usize {
    s.pass(SystemTime::now() + secs(60)).await.schedule_alerts
}

/// Claims the one job of the schedule's last fire (claims see a new job once the leader
/// ticked) and completes or kills it.
async fn finish_jobs(s: &Setup, name: &str, ok: bool) -> usize {
    let mut jobs = Vec::new();
    for _ in 0..200 {
        jobs = s
            .engine
            .claim(&format!("t{TENANT}.work-{name}"), 100, "test")
            .await
            .unwrap();
        if !jobs.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let done: Vec<_> = jobs
        .iter()
        .map(|j| {
            if ok {
                j.completed(None)
            } else {
                j.discarded("boom")
            }
        })
        .collect();
    s.engine.complete(&done).await.unwrap();
    jobs.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_fire_is_late_and_the_next_good_fire_recovers() {
    let s = setup().await;
    let schedules = Schedules::new(s.engine.clone());
    let start = future_minute();
    let mut spec = every_minute("missy", start);
    spec.missed = Missed::Skip;
    schedules.create(TENANT, &spec).await.unwrap();
    // The engine was "down" for five minutes: four fires missed, the fifth on time.
    fire(&s, start + secs(240)).await;
    assert_eq!(watch(&s).await, 1);
    // The on-time fire's job is still pending: no verdict yet.
    assert_eq!(watch(&s).await, 0);
    assert_eq!(finish_jobs(&s, "missy", true).await, 1);
    assert_eq!(watch(&s).await, 1);
    let alerts = s.alerts("schedule", "missy").await;
    let kinds: Vec<&str> = alerts.iter().map(|a| a.0.as_str()).collect();
    assert_eq!(kinds, ["late", "recovered"], "{alerts:?}");
    assert!(
        alerts[0].1.contains("missed") && alerts[0].1.contains("grace"),
        "{alerts:?}"
    );
    let sent = s.notifications_n(2).await;
    let sent_kinds: Vec<&str> = sent.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(sent_kinds, ["schedule.late", "schedule.recovered"]);
    assert_eq!(sent[0]["details"]["cause"], "missed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlap_skip_is_failed_with_its_reason() {
    let s = setup().await;
    let schedules = Schedules::new(s.engine.clone());
    let start = future_minute();
    let mut spec = every_minute("busy", start);
    spec.overlap = Overlap::Skip;
    schedules.create(TENANT, &spec).await.unwrap();
    fire(&s, start).await;
    // The first job is still pending at the next fire: skipped.
    fire(&s, start + secs(60)).await;
    assert_eq!(watch(&s).await, 1);
    let alerts = s.alerts("schedule", "busy").await;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0].0, "failed");
    assert!(alerts[0].1.contains("overlap skip"), "{alerts:?}");
    // The first job completes (an older fire: no recovery), then a later fire runs and
    // completes: recovered.
    finish_jobs(&s, "busy", true).await;
    assert_eq!(watch(&s).await, 0);
    fire(&s, start + secs(120)).await;
    finish_jobs(&s, "busy", true).await;
    assert_eq!(watch(&s).await, 1);
    let kinds: Vec<String> = s
        .alerts("schedule", "busy")
        .await
        .into_iter()
        .map(|a| a.0)
        .collect();
    assert_eq!(kinds, ["failed", "recovered"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_is_failed_once_until_a_success() {
    let s = setup().await;
    let schedules = Schedules::new(s.engine.clone());
    let start = future_minute();
    schedules
        .create(TENANT, &every_minute("crashy", start))
        .await
        .unwrap();
    fire(&s, start).await;
    finish_jobs(&s, "crashy", false).await;
    fire(&s, start + secs(60)).await;
    finish_jobs(&s, "crashy", false).await;
    // Two dead jobs, one outage: one alert.
    assert_eq!(watch(&s).await, 1);
    let alerts = s.alerts("schedule", "crashy").await;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0].0, "failed");
    assert!(alerts[0].1.contains("ended dead"), "{alerts:?}");
    fire(&s, start + secs(120)).await;
    finish_jobs(&s, "crashy", true).await;
    assert_eq!(watch(&s).await, 1);
    assert_eq!(s.alerts("schedule", "crashy").await[1].0, "recovered");
    // Other schedules stay quiet; a deleted schedule takes its health with it.
    schedules.delete(TENANT, "crashy").await.unwrap();
    assert_eq!(watch(&s).await, 0);
}
