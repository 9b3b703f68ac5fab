//! `pgferry bench two-process` (issue 27): two real servers on one database, a latency
//! figure per process in the JSON report, and the takeover after the leader is killed.
//! (Figures are reported, never asserted against a time.)

mod common;

use common::{pgferry, run};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_report_per_process_latency_and_the_takeover() {
    let db = pgferry_testkit::test_db().await;
    let mut cmd = pgferry();
    cmd.args([
        "bench",
        "two-process",
        "--json",
        "--database-url",
        &db.url(),
    ])
    .args([
        "--duration",
        "2",
        "--warmup",
        "0",
        "--rate",
        "20",
        "--kill-leader",
    ]);
    let mut p = run(cmd);
    let status = p.wait(common::START_TIMEOUT);
    assert!(status.success(), "{}", p.diag());
    let r: Value =
        serde_json::from_str(&p.stdout()).unwrap_or_else(|e| panic!("{e}\n{}", p.diag()));
    assert_eq!(r["mode"], "two_process", "{r}");
    let both = &r["windows"][0];
    assert_eq!(both["window"], "both_processes", "{r}");
    let procs = both["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 2, "{r}");
    assert_eq!(
        (procs[0]["leader"].as_bool(), procs[1]["leader"].as_bool()),
        (Some(true), Some(false)),
        "{r}"
    );
    // Each process enqueued and workers started jobs. (Jobs the killed leader had claimed
    // wait for their lease, so `not_started` may be above zero.)
    let started: u64 = procs.iter().map(|p| p["started"].as_u64().unwrap()).sum();
    assert!(
        procs.iter().all(|p| p["enqueued"].as_u64() > Some(0)),
        "{r}"
    );
    assert!(both["not_started"].is_u64(), "{r}");
    assert!(started > 0, "{r}");
    for p in procs {
        let (p50, p99) = (
            p["enqueued_here_p50_ms"].as_f64(),
            p["enqueued_here_p99_ms"].as_f64(),
        );
        assert!(
            matches!((p50, p99), (Some(a), Some(b)) if a > 0.0 && b >= a),
            "{r}"
        );
    }
    // The survivor took over and served the second window alone, as the leader.
    assert!(r["takeover_ms"].as_f64().is_some_and(|t| t > 0.0), "{r}");
    let after = &r["windows"][1];
    assert_eq!(after["window"], "after_leader_killed", "{r}");
    assert_eq!(after["processes"][0]["process"], "second", "{r}");
    assert_eq!(after["processes"][0]["leader"], true, "{r}");
    assert!(after["processes"][0]["started"].as_u64() > Some(0), "{r}");
}
