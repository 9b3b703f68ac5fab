//! Short runs of `pgferry chaos` faults against the workspace's `pgferry` binary: each test
//! starts its own cluster, servers and worker processes (crates/pgferry-chaos) and asserts
//! the ledger balanced. Timing is never asserted; the runs are short to fit CI.

#![allow(dead_code)] // each test binary uses a different subset

use std::time::Duration;

use pgferry_chaos::{ChaosConfig, Fault, FaultReport};

/// A short run: 3 s warmup, 8 s of fault, 2 s of recovery, at 1000 jobs/s.
pub fn config() -> ChaosConfig {
    let mut c = ChaosConfig::new(env!("CARGO_BIN_EXE_pgferry").into());
    c.warmup = Duration::from_secs(3);
    c.duration = Duration::from_secs(8);
    c.recovery = Duration::from_secs(2);
    c.rate = 1000;
    c.max_backlog = 10_000;
    c.workers = 2;
    c.worker_slots = 32;
    c
}

/// Runs `fault` and asserts the invariants every fault promises; returns the report for
/// fault-specific assertions.
pub async fn run(fault: Fault) -> FaultReport {
    run_with(fault, config()).await
}

pub async fn run_with(fault: Fault, cfg: ChaosConfig) -> FaultReport {
    let r = pgferry_chaos::run_fault(&cfg, fault)
        .await
        .unwrap_or_else(|e| panic!("running {}: {e}", fault.name()));
    let json = serde_json::to_string_pretty(&r).expect("report as JSON");
    eprintln!("{json}");
    assert!(r.fault_events > 0, "the fault was never injected:\n{json}");
    assert!(r.acknowledged > 0, "no job acknowledged:\n{json}");
    assert_eq!(r.two_outcome_attempts, 0, "two outcomes (ledger):\n{json}");
    assert_eq!(
        r.two_outcome_attempts_db, 0,
        "two outcomes (database):\n{json}"
    );
    assert_eq!(
        r.unexplained_duplicates, 0,
        "duplicates not in flight at a fault:\n{json}"
    );
    if !r.loss_allowed {
        assert_eq!(r.lost, 0, "acknowledged jobs lost:\n{json}");
        assert_eq!(
            r.lost_completions, 0,
            "acknowledged completions lost:\n{json}"
        );
        assert_eq!(
            r.completed + r.dead,
            r.acknowledged,
            "acknowledged jobs not finished:\n{json}"
        );
    }
    assert!(r.passed, "violations {:?}:\n{json}", r.violations);
    r
}
