//! Chaos (short runs) against workflows: the suite's machines (an order that awaits a
//! signal and spawns three children) run in HTTP worker processes while orders are started,
//! signalled by correlation key and some cancelled, and a worker is SIGKILLed mid-step,
//! backends are terminated, or Postgres restarts. The workers' ledgers and the database must
//! show no outcome applied twice, no step after a cancel, each signal consumed once, each
//! child joined once, and every instance ended (crates/pgferry-chaos/src/workflows.rs).

mod chaos_support;

use pgferry_chaos::{Fault, WorkflowReport};

async fn run(fault: Fault) -> WorkflowReport {
    let mut cfg = chaos_support::config();
    cfg.warmup = std::time::Duration::from_secs(2);
    cfg.duration = std::time::Duration::from_secs(6);
    cfg.recovery = std::time::Duration::from_secs(1);
    // Orders per second; each runs 4 steps and its 3 children 2 each.
    cfg.rate = 30;
    cfg.workers = 2;
    cfg.worker_slots = 4;
    let r = pgferry_chaos::run_workflow_fault(&cfg, fault)
        .await
        .unwrap_or_else(|e| panic!("running {}: {e}", fault.name()));
    let json = serde_json::to_string_pretty(&r).expect("report as JSON");
    eprintln!("{json}");
    assert!(r.fault_events > 0, "the fault was never injected:\n{json}");
    assert!(r.started > 0 && r.applied > 0, "nothing ran:\n{json}");
    assert_eq!(r.active, 0, "instances that never ended:\n{json}");
    assert!(r.done > 0 && r.cancelled > 0, "{json}");
    assert!(r.passed, "violations {:?}:\n{json}", r.violations);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_worker_sigkilled_mid_step() {
    let r = run(Fault::WorkerKill).await;
    // Kills land mid-step: claims lapsed and ran again, their late answers stale or lost.
    assert!(
        r.details["workers_killed"].as_u64().unwrap_or(0) >= 2,
        "{r:?}"
    );
    assert!(
        r.details["claimed_again"].as_u64().unwrap_or(0) > 0,
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_backends_terminated() {
    run(Fault::Terminate2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_postgres_restarted() {
    run(Fault::PgRestart).await;
}
