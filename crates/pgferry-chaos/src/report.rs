//! The JSON report of one fault's run.

use std::collections::BTreeMap;

use serde::Serialize;

/// How throughput came back after the (last) fault event.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Recovery {
    /// Completions per second over the warmup (before any fault).
    pub baseline_per_s: f64,
    /// Completions per second between the first and the last fault event (repeated faults).
    pub during_fault_per_s: Option<f64>,
    /// From the last fault event to the first completion after it.
    pub first_completion_s: Option<f64>,
    /// From the last fault event until a 1 s window reached 90% of the baseline.
    pub to_90pct_throughput_s: Option<f64>,
}

/// One fault's run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FaultReport {
    pub fault: String,
    pub description: String,
    /// True when every invariant the fault promises held.
    pub passed: bool,
    /// The invariants that did not hold, in words.
    pub violations: Vec<String>,
    pub warmup_s: f64,
    pub fault_window_s: f64,
    /// How many times the fault was injected.
    pub fault_events: usize,
    /// Jobs producers sent (acknowledged or not).
    pub enqueued: u64,
    /// Jobs whose ids the server returned.
    pub acknowledged: u64,
    /// Acknowledged jobs that completed.
    pub completed: u64,
    /// Acknowledged jobs in the dead-letter queue.
    pub dead: u64,
    /// Acknowledged jobs that do not exist (GET /v1/jobs/{id} answers 404).
    pub lost: u64,
    /// Whether this fault allows loss (asynchronous replication): then `lost` is reported,
    /// not a violation.
    pub loss_allowed: bool,
    /// Acknowledged jobs neither completed nor dead when the drain ended (state: count).
    pub unfinished: BTreeMap<String, u64>,
    /// Successful results a worker was told were recorded whose attempt ran again later
    /// (an acknowledged completion that was not committed).
    pub lost_completions: u64,
    /// Attempts with two outcomes: in the workers' ledgers (two non-stale acks) and in the
    /// completions table.
    pub two_outcome_attempts: u64,
    pub two_outcome_attempts_db: u64,
    /// Executions beyond each job's first.
    pub duplicate_executions: u64,
    /// Duplicates whose earlier execution was not in flight at any fault event.
    pub unexplained_duplicates: u64,
    /// Jobs executed whose ids no producer was given (a batch answered with an error that
    /// committed anyway).
    pub ghost_executions: u64,
    pub recovery: Recovery,
    /// Every error clients saw, grouped, with counts.
    pub client_errors: BTreeMap<String, u64>,
    /// Fault-specific measurements.
    pub details: BTreeMap<String, serde_json::Value>,
    /// Where the run's logs and ledgers were (removed after the run unless kept).
    pub run_dir: String,
}
