//! Every report carries the CPU its jobs cost, for the bench process and for the cluster's
//! Postgres processes (read from /proc), so variants can be compared on a busy machine.

use std::time::Duration;

use pgferry_bench::{BenchOpts, Variant};

#[tokio::test]
async fn a_cycle_report_has_cpu_per_job_of_both_processes() {
    let db = pgferry_testkit::test_db().await;
    let name = format!("{}_cpu", db.name);
    let opts = BenchOpts {
        duration: Duration::from_secs(2),
        warmup: Duration::from_millis(200),
        producers: 1,
        workers: 2,
        max_depth: 2_000,
        ..BenchOpts::default()
    };
    let report = pgferry_bench::run(Variant::Cycle, &db.config, &name, &opts)
        .await
        .expect("cycle run");
    assert!(report.jobs > 0, "no job finished: {report:?}");
    let cpu = report
        .cpu_per_job
        .expect("the test cluster is a local process");
    // Both sides did work for every job; the clock ticks are 10 ms, so a 2 s window of a
    // busy cycle always moves both counters.
    assert!(cpu.bench_us > 0.0, "{cpu:?}");
    assert!(cpu.postgres_us > 0.0, "{cpu:?}");
    assert!((cpu.total_us - cpu.bench_us - cpu.postgres_us).abs() < 1e-6);
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["cpu_per_job"]["total_us"].as_f64().unwrap() > 0.0);
}
