//! Chaos (short runs): processes die — a worker mid-job, the server, the leader.

mod chaos_support;

use pgferry_chaos::Fault;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_sigkilled_mid_job_repeatedly() {
    let r = chaos_support::run(Fault::WorkerKill).await;
    assert!(
        r.details["workers_killed"].as_u64().unwrap_or(0) >= 3,
        "{r:?}"
    );
    // Each kill waits for the worker's ledger to show a job started and unacknowledged.
    assert!(
        r.details["workers_killed_mid_job"].as_u64().unwrap_or(0) >= 3,
        "{r:?}"
    );
    // So the killed workers' jobs ran again elsewhere, counted.
    assert!(r.duplicate_executions > 0, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_sigkilled_and_restarted() {
    chaos_support::run(Fault::ServerKill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigkilled_and_taken_over() {
    let r = chaos_support::run(Fault::LeaderTakeover).await;
    assert!(r.details["takeover_s"].as_f64().is_some(), "{r:?}");
}
