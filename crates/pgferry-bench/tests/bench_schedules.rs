//! `pgferry bench schedules` at small scale: every schedule fires exactly once at the
//! measured minute, every fired job starts, the report's counts agree with the fires table,
//! and lags are present. No time thresholds (a busy machine may be slow, never wrong).
//! Waits for one minute boundary (up to ~60 s).

use pgferry_bench::schedules::{run, SchedulesOpts};
use serde_json::Value;

const N: usize = 300;

fn lag_ok(lags: &Value, what: &str) {
    assert_eq!(lags["count"], N, "{what}: {lags}");
    for p in ["p50", "p95", "p99", "max"] {
        let v = lags[p]
            .as_f64()
            .unwrap_or_else(|| panic!("{what}.{p} missing: {lags}"));
        assert!(v >= 0.0, "{what}.{p} negative: {lags}");
    }
    assert!(
        lags["p50"].as_f64() <= lags["max"].as_f64(),
        "{what}: {lags}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_schedule_fires_once_per_minute_and_starts() {
    let db = pgferry_testkit::test_db().await;
    let opts = SchedulesOpts {
        schedules: N,
        minutes: 1,
        // The default: the minute's fires are prepared ahead (ADR 0025).
        prepare_ahead_ms: None,
    };
    let report = run(&db.config, &opts).await.expect("bench runs");
    eprintln!("{report:#}");

    assert_eq!(report["variant"], "schedules");
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(report["errors"].as_array().map(Vec::len), Some(0));
    assert_eq!(report["create"]["schedules"], N);
    assert!(report["create"]["seconds"].as_f64().is_some());
    // The test kit's cluster does not track commit timestamps.
    assert!(report["fire_lag_basis"]
        .as_str()
        .is_some_and(|b| b.starts_with("transaction_start")));

    let minutes = report["minutes"].as_array().expect("minutes");
    assert_eq!(minutes.len(), 1);
    let m = &minutes[0];
    assert_eq!(m["expected"], N);
    assert_eq!(m["fired"], N, "{m:#}");
    assert_eq!(m["missing"], 0);
    assert_eq!(m["duplicates"], 0);
    assert_eq!(m["reruns"], 0);
    assert_eq!(m["unrecorded_jobs"], 0);
    assert_eq!(m["started"], N);
    assert_eq!(m["other_outcomes"], serde_json::json!({}));
    lag_ok(&m["fire_lag_ms"], "fire_lag_ms");
    lag_ok(&m["start_lag_ms"], "start_lag_ms");
    // The passes that fired the minute account for every fire.
    let passes = m["passes"].as_array().expect("passes");
    assert!(!passes.is_empty());
    let in_passes: u64 = passes.iter().map(|p| p["fires"].as_u64().unwrap()).sum();
    assert_eq!(in_passes, N as u64);
    for key in ["fired", "started", "expected"] {
        assert_eq!(report["overall"][key], N, "overall.{key}");
    }
    assert_eq!(report["overall"]["duplicates"], 0);
    lag_ok(&report["overall"]["fire_lag_ms"], "overall.fire_lag_ms");

    // The same count straight from the database, independently of the bench's reading.
    let client = db.connect().await;
    let at = pgferry_schedules::schedule::parse_time("fire_at", m["fire_at"].as_str().unwrap())
        .expect("fire_at is RFC 3339");
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE outcome = 'fired' AND job_id IS NOT NULL) AS fired,
                    count(DISTINCT schedule_id) AS schedules,
                    (SELECT count(*) FROM pgferry_sched.schedules) AS created
             FROM pgferry_sched.fires WHERE fire_at = $1",
            &[&at],
        )
        .await
        .unwrap();
    let fired: i64 = row.get("fired");
    let schedules: i64 = row.get("schedules");
    let created: i64 = row.get("created");
    assert_eq!((fired, schedules, created), (N as i64, N as i64, N as i64));
}
