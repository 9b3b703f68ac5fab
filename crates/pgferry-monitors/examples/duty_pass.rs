//! How fast the monitors duty turns late monitors into alerts and notification jobs:
//! N monitors past their deadline on a fresh test kit database, each with one matching
//! notification target; the duty's passes (1000 monitors each) run until none is due.
//! Prints one JSON line.
//!
//! `cargo run --release -p pgferry-monitors --example duty_pass -- 10000`

use std::time::{Duration, Instant, SystemTime};

use pgferry_core::{migrate, Engine, EngineConfig};
use pgferry_monitors::{DutyConfig, NewTarget, Targets};
use serde_json::json;

#[tokio::main]
async fn main() {
    let n: i64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("the number of monitors"))
        .unwrap_or(10_000);
    let db = pgferry_testkit::test_db().await;
    let mut client = db.connect().await;
    migrate::up_components(
        &mut client,
        &[
            migrate::ENGINE,
            pgferry_schedules::migrate::COMPONENT,
            pgferry_monitors::migrate::COMPONENT,
        ],
    )
    .await
    .expect("migrate");
    let engine = Engine::new(db.pool(8), EngineConfig::default());
    Targets::new(engine.clone())
        .create(
            1,
            &NewTarget {
                name: "ops".into(),
                url: "http://127.0.0.1:9/hook".into(),
                events: vec![],
                enabled: true,
            },
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO pgferry_mon.monitors (tenant_id, name, token, period_ms, grace_ms, state, due_at)
             SELECT 1, 'm' || i, md5(i::text) || md5((i + 1)::text), 60000, 0, 'up',
                    now() - interval '1 second'
             FROM generate_series(1, $1::bigint) AS i",
            &[&n],
        )
        .await
        .unwrap();
    client
        .batch_execute("ANALYZE pgferry_mon.monitors")
        .await
        .unwrap();
    let config = DutyConfig::default();
    let start = Instant::now();
    let (mut passes, mut late) = (0, 0);
    loop {
        let r = pgferry_monitors::run_once(&engine, &mut client, SystemTime::now(), &config)
            .await
            .unwrap();
        passes += 1;
        late += r.late;
        if r.due == 0 {
            break;
        }
    }
    let took = start.elapsed();
    let jobs: i64 = client
        .query_one(
            "SELECT count(*) AS n FROM pgferry_mon.alerts WHERE kind = 'late'",
            &[],
        )
        .await
        .unwrap()
        .get("n");
    println!(
        "{}",
        json!({
            "monitors": n,
            "late": late,
            "alerts": jobs,
            "passes": passes,
            "seconds": took.as_secs_f64(),
            "alerts_per_sec": late as f64 / took.max(Duration::from_micros(1)).as_secs_f64(),
        })
    );
}
