//! `bench cycle --shape peer-pairs`: the runtime and one gRPC worker alternate (A B …), each
//! pair reports its ratio, and the busy loops of a contended run are gone when it ends.

use std::time::Duration;

use pgferry_bench::{peer, peer_pairs, BenchOpts};

/// Processes whose command line names this process's /proc entry: the busy loops
/// (`hogs.rs`) started for this test binary.
fn own_busy_loops() -> Vec<String> {
    let needle = format!("/proc/{} ]", std::process::id());
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let pid = e.ok()?.file_name().into_string().ok()?;
            pid.parse::<u32>().ok()?;
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            cmd.contains(&needle).then_some(pid)
        })
        .collect()
}

#[tokio::test]
async fn a_pair_runs_the_runtime_then_one_grpc_worker_and_leaves_no_loop_behind() {
    let db = pgferry_testkit::test_db().await;
    let opts = BenchOpts {
        duration: Duration::from_secs(1),
        warmup: Duration::from_millis(200),
        peer_pairs: 1,
        cpu_hogs: 1,
        ..peer::shape(&BenchOpts::default())
    };
    let out = peer_pairs::run_pairs(&db.config, &opts).await.unwrap();
    assert_eq!(out["cpu_hogs"], 1);
    assert_eq!(out["pairs"]["order"], "AB", "{out}");
    let runs = out["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{out}");
    assert_eq!(runs[0]["variant"], "runtime");
    assert_eq!(runs[1]["variant"], "grpc_one_worker");
    let rate = |i: usize| runs[i]["jobs_per_s"].as_f64().unwrap();
    assert!(rate(0) > 0.0 && rate(1) > 0.0, "{out}");
    let ratio = out["pairs"]["pair_ratios"][0].as_f64().unwrap();
    // Rounded to four decimals in the report.
    assert!((ratio - rate(1) / rate(0)).abs() < 1e-4, "{out}");
    assert_eq!(out["runtime_jobs_per_s"]["mean"].as_f64().unwrap(), rate(0));
    assert_eq!(
        own_busy_loops(),
        Vec::<String>::new(),
        "the contended run's loops outlived it"
    );
}
