//! The checker: balances the producers' ledger against the workers' ledgers, asks the
//! server about every acknowledged job the workers did not finish, and computes the report's
//! counts and recovery times.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use futures_util::StreamExt;

use crate::ledger::{ProducerBook, WorkerEntry};
use crate::report::{FaultReport, Recovery};

/// A fault event: when it began and when it was over (a restart's downtime), Unix µs.
#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub start: u64,
    pub end: u64,
}

/// An execution whose predecessor started up to this long after a fault event ended may
/// still have been caught by it (a completion sent to a server that had just lost its
/// connections; a lease granted just before the fault).
const IN_FLIGHT_SLACK_US: u64 = 2_000_000;

/// Lookups run at once.
const LOOKUP_CONCURRENCY: usize = 16;

/// What a job's lookup said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    State(String),
    NotFound,
    Failed(String),
}

/// Looks up jobs over HTTP (`GET /v1/jobs/{id}`), retrying transient failures.
pub async fn lookup_jobs(base: &str, key: &str, ids: Vec<i64>) -> HashMap<i64, Lookup> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("HTTP client");
    futures_util::stream::iter(ids)
        .map(|id| {
            let http = http.clone();
            async move {
                let mut last = String::new();
                for _ in 0..20 {
                    match http
                        .get(format!("{base}/v1/jobs/{id}"))
                        .bearer_auth(key)
                        .send()
                        .await
                    {
                        Ok(r) if r.status().as_u16() == 404 => return (id, Lookup::NotFound),
                        Ok(r) if r.status().is_success() => {
                            let body: serde_json::Value = r.json().await.unwrap_or_default();
                            let state = body["state"].as_str().unwrap_or("?").to_owned();
                            return (id, Lookup::State(state));
                        }
                        Ok(r) => last = format!("http {}", r.status().as_u16()),
                        Err(e) => last = e.to_string(),
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                (id, Lookup::Failed(last))
            }
        })
        .buffer_unordered(LOOKUP_CONCURRENCY)
        .collect()
        .await
}

/// One execution in the workers' ledgers.
#[derive(Debug, Clone)]
struct Exec {
    at: u64,
    attempt: i32,
    worker: String,
    /// When its result was acknowledged, and whether stale.
    ack: Option<(u64, bool)>,
}

/// Indexes the workers' entries by job.
fn executions(entries: &[WorkerEntry]) -> HashMap<i64, Vec<Exec>> {
    let mut acks: HashMap<(i64, i32, &str), (u64, bool)> = HashMap::new();
    for e in entries {
        if let WorkerEntry::Ack {
            at,
            id,
            attempt,
            stale,
            worker,
        } = e
        {
            acks.entry((*id, *attempt, worker.as_str()))
                .or_insert((*at, *stale));
        }
    }
    let mut by_job: HashMap<i64, Vec<Exec>> = HashMap::new();
    for e in entries {
        if let WorkerEntry::Start {
            at,
            id,
            attempt,
            worker,
        } = e
        {
            by_job.entry(*id).or_default().push(Exec {
                at: *at,
                attempt: *attempt,
                worker: worker.clone(),
                ack: acks.get(&(*id, *attempt, worker.as_str())).copied(),
            });
        }
    }
    for v in by_job.values_mut() {
        v.sort_by_key(|x| x.at);
    }
    by_job
}

/// Fills the ledger part of `report`; returns the acknowledged ids the workers' ledgers do
/// not show completed (to be looked up).
pub fn balance(
    report: &mut FaultReport,
    book: &ProducerBook,
    entries: &[WorkerEntry],
    events: &[Event],
) -> Vec<i64> {
    report.enqueued = book.sent;
    report.client_errors = book.errors.clone();
    report
        .details
        .insert("batches_replayed".into(), serde_json::json!(book.replayed));
    report.details.insert(
        "batches_abandoned".into(),
        serde_json::json!(book.abandoned),
    );
    let acked: HashSet<i64> = book.acked.iter().map(|(id, _)| *id).collect();
    report.acknowledged = acked.len() as u64;
    let execs = executions(entries);

    // Completed per the ledgers: some attempt got a non-stale acknowledgement.
    let mut completed_attempt: HashMap<i64, i32> = HashMap::new();
    let mut outcomes: HashMap<(i64, i32), u64> = HashMap::new();
    for e in entries {
        if let WorkerEntry::Ack {
            id,
            attempt,
            stale: false,
            ..
        } = e
        {
            *outcomes.entry((*id, *attempt)).or_default() += 1;
            let a = completed_attempt.entry(*id).or_insert(*attempt);
            *a = (*a).min(*attempt);
        }
    }
    report.two_outcome_attempts = outcomes.values().filter(|n| **n > 1).count() as u64;
    report.lost_completions = completed_attempt
        .iter()
        .filter(|(id, a)| {
            execs
                .get(id)
                .is_some_and(|v| v.iter().any(|x| x.attempt > **a))
        })
        .count() as u64;

    for (id, v) in &execs {
        if !acked.contains(id) {
            report.ghost_executions += 1;
        }
        for pair in v.windows(2) {
            report.duplicate_executions += 1;
            let prev = &pair[0];
            // Where loss is allowed (asynchronous failover) a completion acknowledged before
            // the fault may be lost with it: then only the start time must precede it.
            let caught = events.iter().any(|ev| {
                prev.at <= ev.end + IN_FLIGHT_SLACK_US
                    && (report.loss_allowed || !matches!(prev.ack, Some((at, _)) if at < ev.start))
            });
            if !caught {
                report.unexplained_duplicates += 1;
                if report.unexplained_duplicates <= 5 {
                    report.violations.push(format!(
                        "job {id}: attempt {} on {} ran again (attempt {} on {}) without a fault in flight",
                        prev.attempt, prev.worker, pair[1].attempt, pair[1].worker
                    ));
                }
            }
        }
    }
    let mut rest: Vec<i64> = acked
        .iter()
        .filter(|id| !completed_attempt.contains_key(id))
        .copied()
        .collect();
    rest.sort_unstable();
    report.completed = acked.len() as u64 - rest.len() as u64;
    report.recovery = recovery(entries, events, report.warmup_s);
    rest
}

/// Adds the lookups of the jobs the ledgers did not show completed.
pub fn add_lookups(report: &mut FaultReport, looked: &HashMap<i64, Lookup>) {
    let mut lost_ids = Vec::new();
    for (id, l) in looked {
        match l {
            Lookup::State(s) if s == "completed" => report.completed += 1,
            Lookup::State(s) if s == "dead" => report.dead += 1,
            Lookup::State(s) => *report.unfinished.entry(s.clone()).or_default() += 1,
            Lookup::NotFound => {
                report.lost += 1;
                lost_ids.push(*id);
            }
            Lookup::Failed(e) => {
                *report
                    .unfinished
                    .entry(format!("lookup failed: {e}"))
                    .or_default() += 1
            }
        }
    }
    lost_ids.sort_unstable();
    if !lost_ids.is_empty() {
        report.details.insert(
            "lost_ids_sample".into(),
            serde_json::json!(lost_ids.iter().take(20).collect::<Vec<_>>()),
        );
    }
}

/// Decides `passed` from the counts (plus fault-specific violations already recorded).
pub fn verdict(report: &mut FaultReport) {
    let mut v = Vec::new();
    if report.lost > 0 && !report.loss_allowed {
        v.push(format!("{} acknowledged jobs lost", report.lost));
    }
    if report.lost_completions > 0 && !report.loss_allowed {
        v.push(format!(
            "{} acknowledged completions lost (their attempt ran again)",
            report.lost_completions
        ));
    }
    if report.two_outcome_attempts > 0 || report.two_outcome_attempts_db > 0 {
        v.push(format!(
            "attempts with two outcomes: {} in the ledgers, {} in the database",
            report.two_outcome_attempts, report.two_outcome_attempts_db
        ));
    }
    let unfinished: u64 = report.unfinished.values().sum();
    if unfinished > 0 {
        v.push(format!(
            "{unfinished} acknowledged jobs unfinished after the drain: {:?}",
            report.unfinished
        ));
    }
    if report.fault_events == 0 {
        v.push("the fault was never injected".into());
    }
    if report.acknowledged == 0 {
        v.push("no job was acknowledged".into());
    }
    report.violations.extend(v);
    report.passed = report.violations.is_empty();
}

/// Recovery times after the last fault event, from the non-stale acknowledgements.
fn recovery(entries: &[WorkerEntry], events: &[Event], warmup_s: f64) -> Recovery {
    let mut done: Vec<u64> = entries
        .iter()
        .filter_map(|e| match e {
            WorkerEntry::Ack {
                at, stale: false, ..
            } => Some(*at),
            _ => None,
        })
        .collect();
    done.sort_unstable();
    let (Some(first), Some(last)) = (events.first(), events.last()) else {
        return Recovery::default();
    };
    let count = |lo: u64, hi: u64| {
        done.partition_point(|t| *t < hi)
            .saturating_sub(done.partition_point(|t| *t < lo))
    };
    // The baseline skips the warmup's first second (connections, first claims).
    let base_span = ((warmup_s - 1.0).max(0.5) * 1e6) as u64;
    let baseline =
        count(first.start.saturating_sub(base_span), first.start) as f64 / (base_span as f64 / 1e6);
    let during_us = last.end.saturating_sub(first.start);
    let during = (during_us > 1_000_000)
        .then(|| count(first.start, last.end) as f64 / (during_us as f64 / 1e6));
    let t = last.end;
    let first_completion = done
        .get(done.partition_point(|x| *x <= t))
        .map(|x| (x - t) as f64 / 1e6);
    let mut to_90 = None;
    let end = done.last().copied().unwrap_or(t);
    let mut hi = t + 1_000_000;
    while hi <= end + 1_000_000 && baseline > 0.0 {
        if count(hi - 1_000_000, hi) as f64 >= 0.9 * baseline {
            to_90 = Some((hi - t) as f64 / 1e6);
            break;
        }
        hi += 100_000;
    }
    Recovery {
        baseline_per_s: baseline,
        during_fault_per_s: during,
        first_completion_s: first_completion,
        to_90pct_throughput_s: to_90,
    }
}

/// Per-state counts, for messages.
pub fn states(looked: &HashMap<i64, Lookup>) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for l in looked.values() {
        let k = match l {
            Lookup::State(s) => s.clone(),
            Lookup::NotFound => "not found".into(),
            Lookup::Failed(_) => "lookup failed".into(),
        };
        *m.entry(k).or_default() += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(at: u64, id: i64, attempt: i32, w: &str) -> WorkerEntry {
        WorkerEntry::Start {
            at,
            id,
            attempt,
            worker: w.into(),
        }
    }

    fn ack(at: u64, id: i64, attempt: i32, stale: bool, w: &str) -> WorkerEntry {
        WorkerEntry::Ack {
            at,
            id,
            attempt,
            stale,
            worker: w.into(),
        }
    }

    #[test]
    fn balances_a_run() {
        let book = ProducerBook {
            sent: 5,
            acked: vec![(1, 0), (2, 0), (3, 0), (4, 0)],
            errors: BTreeMap::from([("http 503 unavailable".into(), 1)]),
            ..ProducerBook::default()
        };
        let events = [Event {
            start: 10_000_000,
            end: 10_000_000,
        }];
        let entries = vec![
            start(1_000_000, 1, 1, "a"),
            ack(1_100_000, 1, 1, false, "a"),
            // job 2: in flight at the fault on worker a (killed), rerun on b: explained.
            start(9_900_000, 2, 1, "a"),
            start(14_000_000, 2, 2, "b"),
            ack(14_100_000, 2, 2, false, "b"),
            // job 3: finished before the fault, yet ran again: a lost completion, and the
            // duplicate is not explained.
            start(2_000_000, 3, 1, "a"),
            ack(2_100_000, 3, 1, false, "a"),
            start(30_000_000, 3, 2, "b"),
            ack(30_100_000, 3, 2, false, "b"),
            // job 9: never acknowledged to a producer (ghost), one attempt, two outcomes.
            start(3_000_000, 9, 1, "a"),
            ack(3_100_000, 9, 1, false, "a"),
            ack(3_200_000, 9, 1, false, "b"),
        ];
        let mut r = FaultReport {
            warmup_s: 3.0,
            ..FaultReport::default()
        };
        let rest = balance(&mut r, &book, &entries, &events);
        assert_eq!(rest, vec![4]);
        assert_eq!((r.enqueued, r.acknowledged, r.completed), (5, 4, 3));
        assert_eq!(r.duplicate_executions, 2);
        assert_eq!(r.unexplained_duplicates, 1);
        assert_eq!(r.lost_completions, 1);
        assert_eq!(r.ghost_executions, 1);
        assert_eq!(r.two_outcome_attempts, 1);
        add_lookups(&mut r, &HashMap::from([(4, Lookup::NotFound)]));
        assert_eq!(r.lost, 1);
        verdict(&mut r);
        assert!(!r.passed);
        assert!(r
            .violations
            .iter()
            .any(|v| v.contains("1 acknowledged jobs lost")));
        assert!(r.violations.iter().any(|v| v.contains("job 3")));
    }

    #[test]
    fn recovery_times() {
        // 100 completions/s for 5 s, nothing for 2 s after a fault at 5 s, then 100/s.
        let mut entries = Vec::new();
        let mut t = 0;
        while t < 12_000_000 {
            if !(5_000_000..7_000_000).contains(&t) {
                entries.push(ack(t, t as i64, 1, false, "w"));
            }
            t += 10_000;
        }
        let ev = [Event {
            start: 5_000_000,
            end: 5_000_000,
        }];
        let r = recovery(&entries, &ev, 3.0);
        assert!((r.baseline_per_s - 100.0).abs() < 1.0, "{r:?}");
        assert!((r.first_completion_s.unwrap() - 2.0).abs() < 0.02, "{r:?}");
        let to90 = r.to_90pct_throughput_s.unwrap();
        assert!((2.8..=3.1).contains(&to90), "{r:?}");
    }
}
