//! Helpers of the schedules tests (real clusters from pgferry-testkit).
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use pgferry_core::{migrate, Engine, EngineConfig};
use pgferry_schedules::{NewSchedule, Schedules, Target};
use pgferry_testkit::TestDb;
use serde_json::json;

pub struct Setup {
    pub db: TestDb,
    pub engine: Arc<Engine>,
    pub schedules: Schedules,
}

/// A database with the engine's and the schedules' schemas, and an engine on it.
pub async fn setup() -> Setup {
    let db = pgferry_testkit::test_db().await;
    let mut client = db.connect().await;
    migrate::up(&mut client).await.expect("migrate");
    pgferry_schedules::migrate::up(&mut client)
        .await
        .expect("schedules migrate");
    let engine = Engine::new(db.pool(16), EngineConfig::default());
    let schedules = Schedules::new(engine.clone());
    Setup {
        db,
        engine,
        schedules,
    }
}

pub fn job(queue: &str) -> Target {
    Target::Job {
        queue: queue.into(),
        kind: "tick".into(),
        args: json!({"hello": "world"}),
        priority: 0,
        max_attempts: None,
    }
}

/// A whole minute at least an hour ahead: simulated fire times start there.
pub fn future_minute() -> SystemTime {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    SystemTime::UNIX_EPOCH + Duration::from_secs((now / 60 + 120) * 60)
}

/// An interval schedule starting at `start`.
pub fn every(name: &str, secs: u64, start: SystemTime, queue: &str) -> NewSchedule {
    let mut s = NewSchedule::cron(name, "@hourly", job(queue));
    s.cron = None;
    s.interval_ms = Some((secs * 1000) as i64);
    s.start_at = Some(start);
    s
}

pub fn at(start: SystemTime, secs: u64) -> SystemTime {
    start + Duration::from_secs(secs)
}

/// (fire time, outcome, job) of a schedule's fires, oldest first.
pub async fn fires(s: &Setup, name: &str) -> Vec<(SystemTime, String, Option<i64>)> {
    let mut f: Vec<_> = s
        .schedules
        .fires(
            0,
            name,
            SystemTime::now() + Duration::from_secs(10 * 86400),
            10_000,
        )
        .await
        .unwrap()
        .into_iter()
        .map(|f| (f.fire_at, f.outcome, f.job_id))
        .collect();
    f.reverse();
    f
}

pub async fn fire(s: &Setup, now: SystemTime) -> pgferry_schedules::FireReport {
    let mut client = s.db.connect().await;
    pgferry_schedules::fire_due(&s.engine, &mut client, now)
        .await
        .expect("fire_due")
}

/// Claims and completes every job on `queue` (ticks first).
pub async fn drain(s: &Setup, queue: &str) -> usize {
    let client = s.db.connect().await;
    pgferry_core::leader::ticker::tick(&client)
        .await
        .expect("tick");
    let jobs = s.engine.claim(queue, 1000, "w").await.expect("claim");
    let outcomes: Vec<_> = jobs.iter().map(|j| j.completed(None)).collect();
    s.engine.complete(&outcomes).await.expect("complete");
    jobs.len()
}
