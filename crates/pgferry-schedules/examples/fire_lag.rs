//! Fire lag of many schedules due at the same minute (issue 22: 10,000 schedules firing
//! every minute, p99 lag ≤ 1 s). Creates N `* * * * *` schedules on a fresh test-kit
//! database, runs the firer's passes as the leader does (every 200 ms when idle) until the
//! next minute's fires are all made, and prints one JSON line.
//!
//! `cargo run --release -p pgferry-schedules --example fire_lag -- 10000`

use std::time::{Duration, Instant, SystemTime};

use pgferry_core::{migrate, Engine, EngineConfig};
use pgferry_schedules::{NewSchedule, Schedules, Target};
use serde_json::json;

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let db = pgferry_testkit::test_db().await;
    let mut client = db.connect().await;
    migrate::up(&mut client).await.unwrap();
    pgferry_schedules::migrate::up(&mut client).await.unwrap();
    let engine = Engine::new(db.pool(8), EngineConfig::default());
    let schedules = Schedules::new(engine.clone());
    let made = Instant::now();
    for i in 0..n {
        let target = Target::Job {
            queue: "lag".into(),
            kind: "k".into(),
            args: json!({}),
            priority: 0,
            max_attempts: None,
        };
        schedules
            .create(0, &NewSchedule::cron(format!("s{i}"), "* * * * *", target))
            .await
            .unwrap();
    }
    let create_secs = made.elapsed().as_secs_f64();
    let mut lags: Vec<Duration> = Vec::with_capacity(n);
    let mut passes = 0;
    let started = Instant::now();
    while lags.len() < n && started.elapsed() < Duration::from_secs(300) {
        let r = pgferry_schedules::fire_due(&engine, &mut client, SystemTime::now())
            .await
            .unwrap();
        passes += 1;
        lags.extend(r.lag);
        if r.schedules == 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    lags.sort();
    let q = |p: f64| {
        lags.get(((lags.len() as f64 * p) as usize).min(lags.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "{}",
        json!({
            "schedules": n,
            "fired": lags.len(),
            "passes": passes,
            "create_s": create_secs,
            "lag_ms": {"p50": q(0.5), "p99": q(0.99), "max": q(1.0)},
        })
    );
}
