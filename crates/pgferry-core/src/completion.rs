//! The one statement that records a batch of outcomes, and which of two it is.
//!
//! Most batches a worker reports are its whole claimed batches, all successes (ADR 0006):
//! those go to `pgferry.complete_whole()` described by one element per receipt — the runs of
//! the batch — instead of seven arrays of one element per outcome, and are answered with one
//! row instead of one per outcome (ADR 0010). The engine holds the batch in order already, so
//! finding the runs here costs a pass over it; in SQL it cost a sort and a GROUP BY. Every
//! other batch goes to `pgferry.complete()`, which decides each outcome on its own. Either
//! way it is one statement, and the database still proves a run whole before trusting it.

use std::collections::HashSet;

use deadpool_postgres::Object;
use serde_json::Value;

use crate::bound_params::bind_params;
use crate::error::Result;
use crate::job::{Outcome, OutcomeKind};

const COMPLETE: &str = include_str!("sql/complete.sql");
const COMPLETE_WHOLE: &str = include_str!("sql/complete_whole.sql");

/// Records `outcomes` (non-empty) in one statement; answers, per outcome, whether it won.
pub(crate) async fn record(client: &Object, outcomes: &[Outcome]) -> Result<Vec<bool>> {
    let rows = match Runs::of(outcomes) {
        Some(runs) => {
            let stmt = client.prepare_cached(COMPLETE_WHOLE).await?;
            client.query(&stmt, &runs.params()).await?
        }
        None => {
            let each = PerOutcome::of(outcomes);
            let stmt = client.prepare_cached(COMPLETE).await?;
            client.query(&stmt, &each.params()).await?
        }
    };
    // ord 0 answers for the whole batch; any other ord is one outcome's 1-based position
    // (outcomes of handed-over attempts, ADR 0008, are answered before the others).
    let mut won = vec![false; outcomes.len()];
    for r in &rows {
        let (ord, w): (i64, bool) = (r.get("ord"), r.get("won"));
        if ord == 0 {
            won.iter_mut().for_each(|x| *x = w);
        } else if let Some(x) = usize::try_from(ord - 1).ok().and_then(|i| won.get_mut(i)) {
            *x = w;
        }
    }
    Ok(won)
}

/// A batch made of runs, one per receipt: the parameters of complete_whole.sql.
#[derive(Debug, PartialEq)]
struct Runs {
    receipts: Vec<i64>,
    lanes: Vec<i32>,
    rsegs: Vec<i16>,
    /// First and last position (1-based, inclusive) of each receipt's outcomes.
    lo: Vec<i32>,
    hi: Vec<i32>,
    ids: Vec<i64>,
    attempts: Vec<i32>,
    segment: i16,
    durations: Option<Vec<Option<i32>>>,
}

impl Runs {
    /// The runs, if the batch can be whole receipts: every outcome a success without a
    /// result, one job segment (a completion row names one), each receipt's outcomes
    /// contiguous. Whether each run is its receipt's whole batch is for the database to say.
    fn of(outcomes: &[Outcome]) -> Option<Runs> {
        let first = outcomes.first()?;
        let mut runs = Runs {
            receipts: Vec::new(),
            lanes: Vec::new(),
            rsegs: Vec::new(),
            lo: Vec::new(),
            hi: Vec::new(),
            ids: Vec::with_capacity(outcomes.len()),
            attempts: Vec::with_capacity(outcomes.len()),
            segment: first.segment,
            durations: None,
        };
        let mut seen = HashSet::new();
        for (i, o) in outcomes.iter().enumerate() {
            if o.kind != OutcomeKind::Completed || o.result.is_some() || o.segment != runs.segment {
                return None;
            }
            let pos = i32::try_from(i + 1).ok()?;
            if runs.receipts.last() == Some(&o.receipt_id) {
                *runs.hi.last_mut()? = pos;
            } else if !seen.insert(o.receipt_id) {
                // A receipt's outcomes split by another's: not contiguous.
                return None;
            } else {
                runs.receipts.push(o.receipt_id);
                runs.lanes.push(o.lane);
                runs.rsegs.push(o.receipt_segment);
                runs.lo.push(pos);
                runs.hi.push(pos);
            }
            runs.ids.push(o.job_id);
            runs.attempts.push(o.attempt);
        }
        if outcomes.iter().any(|o| o.duration_ms.is_some()) {
            runs.durations = Some(outcomes.iter().map(|o| o.duration_ms).collect());
        }
        Some(runs)
    }
}

bind_params!(Runs {
    fn params, const PARAMS = [
        receipts, lanes, rsegs, lo, hi, ids, attempts, segment, durations,
    ];
});

/// Any batch, one element per outcome: the parameters of complete.sql.
struct PerOutcome<'a> {
    ids: Vec<i64>,
    attempts: Vec<i32>,
    segments: Vec<i16>,
    receipts: Vec<i64>,
    lanes: Vec<i32>,
    rsegs: Vec<i16>,
    codes: Vec<i16>,
    // Columns nobody set travel as NULL arrays: cheaper to send and to read.
    errors: Option<Vec<Option<&'a str>>>,
    delays: Option<Vec<Option<i64>>>,
    results: Option<Vec<Option<&'a Value>>>,
    durations: Option<Vec<Option<i32>>>,
}

impl<'a> PerOutcome<'a> {
    fn of(outcomes: &'a [Outcome]) -> PerOutcome<'a> {
        fn some<T: Copy>(v: Vec<Option<T>>) -> Option<Vec<Option<T>>> {
            v.iter().any(Option::is_some).then_some(v)
        }
        fn col<'a, T>(outcomes: &'a [Outcome], f: impl Fn(&'a Outcome) -> T) -> Vec<T> {
            outcomes.iter().map(f).collect()
        }
        PerOutcome {
            ids: col(outcomes, |o| o.job_id),
            attempts: col(outcomes, |o| o.attempt),
            segments: col(outcomes, |o| o.segment),
            receipts: col(outcomes, |o| o.receipt_id),
            lanes: col(outcomes, |o| o.lane),
            rsegs: col(outcomes, |o| o.receipt_segment),
            codes: col(outcomes, |o| o.kind.code()),
            errors: some(col(outcomes, |o| o.error.as_deref())),
            delays: some(col(outcomes, |o| match o.kind {
                OutcomeKind::Retry { delay } | OutcomeKind::Snooze { delay } => {
                    Some(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX))
                }
                _ => None,
            })),
            results: some(col(outcomes, |o| o.result.as_ref())),
            durations: some(col(outcomes, |o| o.duration_ms)),
        }
    }
}

bind_params!(PerOutcome<'_> {
    fn params, const PARAMS = [
        ids, attempts, segments, receipts, lanes, rsegs, codes, errors, delays, results,
        durations,
    ];
});

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn done(job_id: i64, receipt_id: i64) -> Outcome {
        Outcome {
            job_id,
            attempt: 1,
            segment: 3,
            receipt_id,
            lane: 7,
            receipt_segment: 4,
            kind: OutcomeKind::Completed,
            error: None,
            result: None,
            duration_ms: None,
        }
    }

    #[test]
    fn both_statements_declare_the_parameters_their_structs_bind() {
        crate::bound_params::assert_declared(COMPLETE, PerOutcome::PARAMS);
        crate::bound_params::assert_declared(COMPLETE_WHOLE, Runs::PARAMS);
    }

    #[test]
    fn contiguous_successes_make_one_run_per_receipt() {
        let batch = [
            done(10, 1),
            done(11, 1),
            done(12, 2),
            done(13, 3),
            done(14, 3),
        ];
        let runs = Runs::of(&batch).unwrap();
        assert_eq!(runs.receipts, [1, 2, 3]);
        assert_eq!((runs.lo, runs.hi), (vec![1, 3, 4], vec![2, 3, 5]));
        assert_eq!(runs.ids, [10, 11, 12, 13, 14]);
        assert_eq!((runs.segment, runs.durations), (3, None));
    }

    #[test]
    fn durations_travel_when_any_is_set() {
        let mut batch = [done(10, 1), done(11, 1)];
        batch[1].duration_ms = Some(5);
        assert_eq!(
            Runs::of(&batch).unwrap().durations,
            Some(vec![None, Some(5)])
        );
    }

    #[test]
    fn anything_else_is_decided_per_outcome() {
        let split = [done(10, 1), done(12, 2), done(11, 1)];
        assert_eq!(Runs::of(&split), None);
        let mut failed = [done(10, 1), done(11, 1)];
        failed[1].kind = OutcomeKind::Retry {
            delay: Duration::ZERO,
        };
        assert_eq!(Runs::of(&failed), None);
        let mut result = [done(10, 1)];
        result[0].result = Some(serde_json::json!(1));
        assert_eq!(Runs::of(&result), None);
        let mut two_segments = [done(10, 1), done(11, 2)];
        two_segments[1].segment = 4;
        assert_eq!(Runs::of(&two_segments), None);
        assert_eq!(Runs::of(&[]), None);
    }
}
