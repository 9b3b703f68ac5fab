//! The outcome use case: a worker's report about one attempt it holds.

use std::time::Instant;

use pgferry_core::{Completed, Outcome, OutcomeKind, Report};

use crate::auth::token::Attempt;
use crate::coalesce::{Coalescers, SubmitError};
use crate::metrics::{Latency, Metrics};

/// The engine outcome of `report` for attempt `a`: retried with the handler's delay or the
/// queue's backoff (as it was when the job was claimed) while attempts remain, otherwise
/// dead-lettered; decided by [`Report::decide`], as the in-process runtime decides it.
pub fn outcome(a: &Attempt, report: Report) -> Outcome {
    let (kind, error, result) = report.decide(a.attempt, a.max_attempts, a.backoff());
    a.outcome(kind, error, result)
}

/// Records a worker's outcomes through group commit, answered in order after COMMIT; the
/// commit latency (what the worker waits) is observed here.
pub async fn record(
    coalescers: &Coalescers,
    metrics: &Metrics,
    outcomes: Vec<Outcome>,
) -> Result<Vec<Completed>, SubmitError> {
    let started = Instant::now();
    let done = coalescers.complete(outcomes).await?;
    metrics.observe(Latency::CompleteCommit, started.elapsed());
    Ok(done)
}

/// Counts the outcomes that were recorded (`recorded[i]`: outcome i won, not stale) under
/// their user-facing queue names.
pub fn count_recorded<'a>(
    metrics: &Metrics,
    tenant: &str,
    outcomes: impl IntoIterator<Item = (&'a str, &'a OutcomeKind, bool)>,
) {
    metrics.count_outcomes(
        tenant,
        outcomes
            .into_iter()
            .filter(|(_, _, recorded)| *recorded)
            .map(|(q, k, _)| (q, k)),
    );
}
