//! Chaos (short runs) against the scheduler features of one `pgferry serve`: HTTP jobs with
//! completion callbacks to a loopback target that records every request by item, inbound
//! webhook events fanned out to two targets, heartbeat monitors pinged twice a second, and
//! two schedules firing every second, while the server is SIGKILLed mid-delivery, backends
//! are terminated, or Postgres restarts (fast) or crashes (immediate stop). The ledger
//! (crates/pgferry-chaos/src/scheduler/check.rs) must balance: nothing acknowledged lost,
//! at-least-once duplicates counted, one job per fire, no false late alert.

mod chaos_support;

use pgferry_chaos::{Fault, SchedulerReport};

async fn run(fault: Fault) -> SchedulerReport {
    let mut cfg = chaos_support::config();
    cfg.warmup = std::time::Duration::from_secs(3);
    cfg.duration = std::time::Duration::from_secs(6);
    cfg.recovery = std::time::Duration::from_secs(3);
    // HTTP jobs per second (events at half of it).
    cfg.rate = 30;
    cfg.drain_timeout = std::time::Duration::from_secs(90);
    let r = pgferry_chaos::run_scheduler_fault(&cfg, fault)
        .await
        .unwrap_or_else(|e| panic!("running {}: {e}", fault.name()));
    let json = serde_json::to_string_pretty(&r).expect("report as JSON");
    eprintln!("{json}");
    assert!(r.fault_events > 0, "the fault was never injected:\n{json}");
    assert!(
        r.jobs_acknowledged > 0 && r.events_acknowledged > 0 && r.pings_acknowledged > 0,
        "nothing flowed:\n{json}"
    );
    assert!(r.fires > 0, "nothing fired:\n{json}");
    assert_eq!(r.jobs_lost, 0, "acknowledged HTTP jobs lost:\n{json}");
    assert_eq!(r.callbacks_missing, 0, "callbacks lost:\n{json}");
    assert_eq!(r.events_not_stored, 0, "acknowledged events lost:\n{json}");
    assert_eq!(r.fanout_missing, 0, "fan-out lost:\n{json}");
    assert_eq!(r.pings_not_recorded, 0, "acknowledged pings lost:\n{json}");
    assert_eq!(r.false_late_alerts, 0, "false late alerts:\n{json}");
    assert_eq!(
        r.fires_without_one_job, 0,
        "fires not exactly once:\n{json}"
    );
    assert!(r.passed, "violations {:?}:\n{json}", r.violations);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_server_sigkilled_mid_delivery() {
    run(Fault::ServerKill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_backends_terminated() {
    run(Fault::Terminate2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_postgres_fast_restart() {
    run(Fault::PgRestart).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_postgres_crash() {
    run(Fault::PgCrash).await;
}
