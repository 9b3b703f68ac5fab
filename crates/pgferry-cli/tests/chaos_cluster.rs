//! Chaos (short runs): failover to a streaming standby, an xid held open, every
//! connection slot taken.

mod chaos_support;

use pgferry_chaos::Fault;

/// Synchronous replication: the promoted standby has every acknowledged job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_with_synchronous_standby_loses_nothing() {
    let r = chaos_support::run(Fault::FailoverSync).await;
    assert!(!r.loss_allowed);
}

/// Asynchronous replication: loss is allowed but counted and reported, never silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_with_asynchronous_standby_reports_loss() {
    let r = chaos_support::run(Fault::FailoverAsync).await;
    assert!(r.loss_allowed);
    // Every acknowledged job is accounted for: finished, or counted lost.
    let unfinished: u64 = r.unfinished.values().sum();
    assert_eq!(unfinished, 0, "{r:?}");
    assert_eq!(r.completed + r.dead + r.lost, r.acknowledged, "{r:?}");
}

/// Claims stay flat and the log tables get no dead tuple while an xid is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xid_held_open_while_jobs_flow() {
    let r = chaos_support::run(Fault::XidHold).await;
    assert_eq!(r.details["log_tables_dead_tuples"], 0, "{r:?}");
    assert_eq!(r.details["log_tables_updates_deletes"], 0, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_slots_exhausted() {
    let r = chaos_support::run(Fault::PoolExhaustion).await;
    assert!(
        r.details["connections_held"].as_u64().unwrap_or(0) > 0,
        "{r:?}"
    );
}
