//! One fault's run: set up, let jobs flow, inject, recover, drain, check, tear down.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::check::{self, Lookup};
use crate::env::{Env, PgPlan, Replication, QUEUE};
use crate::faults::{self, Details};
use crate::ledger::{LedgerTail, WorkerEntry};
use crate::producers::{self, Flow, ProducerPlan, Transport};
use crate::report::FaultReport;
use crate::stuck;
use crate::{ChaosConfig, ChaosError, Fault};

const TWO_OUTCOMES: &str = include_str!("sql/two_outcomes.sql");

/// Lease of the suite's queue: a killed worker's jobs run again soon after.
const LEASE_MS: u64 = 3000;
/// The drain gives up when no acknowledged job completed for this long.
const DRAIN_STALL: Duration = Duration::from_secs(20);

/// Runs one fault end to end. `Err` means the suite could not run it (setup failed); a
/// violated invariant is a report with `passed: false`.
pub async fn run_fault(cfg: &ChaosConfig, fault: Fault) -> Result<FaultReport, ChaosError> {
    if fault.needs_own_cluster() && cfg.database_url.is_some() {
        return Err(ChaosError::NeedsOwnCluster {
            fault: fault.name(),
        });
    }
    let plan = PgPlan {
        standby: match fault {
            Fault::FailoverSync => Some(Replication::Sync),
            Fault::FailoverAsync => Some(Replication::Async),
            _ => None,
        },
        // Small enough that the hog's connections are a handful of dozens.
        max_connections: if fault == Fault::PoolExhaustion {
            60
        } else {
            100
        },
    };
    let mut env = Env::setup(cfg, plan).await?;
    let result = run_in(&mut env, fault).await;
    if std::env::var_os("PGFERRY_CHAOS_KEEP").is_some() {
        let kept = env.dir.path().to_path_buf();
        eprintln!("pgferry chaos: keeping {}", kept.display());
        // Leaking the TempDir keeps the directory.
        std::mem::forget(std::mem::replace(
            &mut env.dir,
            tempfile::tempdir().map_err(|e| ChaosError::setup("temp dir", e))?,
        ));
    }
    let down = env.teardown().await;
    let report = result?;
    down?;
    Ok(report)
}

async fn run_in(env: &mut Env, fault: Fault) -> Result<FaultReport, ChaosError> {
    let cfg = env.cfg.clone();
    let mut report = FaultReport {
        fault: fault.name().into(),
        description: fault.description().into(),
        warmup_s: cfg.warmup.as_secs_f64(),
        fault_window_s: cfg.duration.as_secs_f64(),
        loss_allowed: fault == Fault::FailoverAsync,
        run_dir: env.dir.path().display().to_string(),
        ..FaultReport::default()
    };
    env.add_server().await?;
    if fault == Fault::LeaderTakeover {
        // The first server leads; the second joins as a follower and takes over.
        faults::wait_leader(env).await?;
        env.add_server().await?;
    }
    configure_queue(&env.http_urls()[0], &env.api_key).await?;
    let worker_server = env.servers.len() - 1;
    // The termination reproduction (issue 17) runs without workers, as reported: the server
    // only enqueues, as fast as it answers; workers start after it and drain.
    let reproduction = fault == Fault::Terminate10;
    if !reproduction {
        env.start_workers(cfg.workers, worker_server)?;
    }

    let flow = Flow::new(if reproduction {
        usize::MAX
    } else {
        cfg.max_backlog
    });
    let mut producers = Vec::new();
    for (n, plan) in producer_plans(fault, env, &cfg).into_iter().enumerate() {
        producers.push(tokio::spawn(producers::run(plan, flow.clone(), n)));
    }
    let tail = Arc::new(Mutex::new(LedgerTail::in_dir(env.dir.path())));
    let tail_task = {
        let (tail, flow) = (tail.clone(), flow.clone());
        tokio::spawn(async move {
            loop {
                let done = {
                    let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                    t.poll();
                    t.completions()
                };
                flow.completed.store(done as u64, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let bar = progress_bar(&cfg, fault);
    let ticker = {
        let (bar, flow) = (bar.clone(), flow.clone());
        tokio::spawn(async move {
            let t0 = Instant::now();
            loop {
                bar.set_position(t0.elapsed().as_secs());
                bar.set_message(format!(
                    "acked {} completed {}",
                    flow.ledger.acked_count(),
                    flow.completed.load(Ordering::Relaxed)
                ));
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };

    let mut details = Details::new();
    let stats = env.connect("chaos-stats").await?;
    tokio::time::sleep(cfg.warmup / 3).await;
    let (w0, wc0) = (
        faults::log_stats(&stats).await?,
        flow.completed.load(Ordering::SeqCst),
    );
    tokio::time::sleep(cfg.warmup - cfg.warmup / 3).await;
    let (w1, wc1) = (
        faults::log_stats(&stats).await?,
        flow.completed.load(Ordering::SeqCst),
    );
    let injected = faults::inject(fault, env, cfg.duration, &flow, &mut details).await;
    let events = match injected {
        Ok(ev) => ev,
        Err(e) => {
            flow.stop.store(true, Ordering::SeqCst);
            ticker.abort();
            tail_task.abort();
            bar.finish_and_clear();
            return Err(e);
        }
    };
    tokio::time::sleep(cfg.recovery).await;
    flow.stop.store(true, Ordering::SeqCst);
    for p in producers {
        let _ = tokio::time::timeout(Duration::from_secs(30), p).await;
    }
    ticker.abort();
    if reproduction {
        env.start_workers(cfg.workers, worker_server)?;
    }
    bar.set_message("draining");
    let book = flow.ledger.snapshot();
    drain(&tail, &book.acked, cfg.drain_timeout).await;
    tail_task.abort();
    bar.finish_and_clear();
    let entries: Vec<WorkerEntry> = {
        let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
        t.poll();
        t.entries.clone()
    };

    report.fault_events = events.len();
    let rest = check::balance(&mut report, &book, &entries, &events);
    let reacked = book.acked.len() as u64 - report.acknowledged;
    if reacked > 0 {
        // An id handed out twice: only after a failover that lost the id reservation.
        details.insert("ids_acknowledged_twice".into(), json!(reacked));
    }
    let base = env.http_urls()[env.servers.len() - 1].clone();
    let looked = check::lookup_jobs(&base, &env.api_key, rest).await;
    details.insert("looked_up".into(), json!(check::states(&looked)));
    check::add_lookups(&mut report, &looked);
    // An id acknowledged twice means the first job that had it is gone (the second one
    // exists under its id): a loss the lookups cannot see.
    report.lost += reacked;
    let client = env.connect("chaos-check").await?;
    let stuck: Vec<i64> = looked
        .iter()
        .filter(|(_, l)| !matches!(l, Lookup::State(s) if s == "completed" || s == "dead"))
        .map(|(id, _)| *id)
        .collect();
    if !stuck.is_empty() {
        let why = stuck::evidence(&client, env.dir.path(), &stuck).await;
        details.insert("unfinished_evidence".into(), why);
    }
    report.two_outcome_attempts_db = client
        .query_one(TWO_OUTCOMES, &[])
        .await
        .map_err(ChaosError::db("counting attempts with two outcomes"))?
        .get::<_, i64>("attempts") as u64;
    details.insert(
        "ready_tuples_read_per_job_warmup".into(),
        json!(faults::per_job(w1.ready_read - w0.ready_read, wc1 - wc0)),
    );
    // Statistics of the servers' sessions reach the view within a second or so.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let end = faults::log_stats(&client).await?;
    details.insert("log_tables_dead_tuples".into(), json!(end.dead));
    details.insert("log_tables_updates_deletes".into(), json!(end.upd_del));
    if fault == Fault::XidHold {
        xid_checks(&mut report, &details, end);
    }
    report.details.extend(details);
    check::verdict(&mut report);
    Ok(report)
}

/// The xid fault's own invariants: the log tables get no dead tuple (nothing on the hot path
/// updates or deletes; an aborted insert would leave one), and claims read no more per job
/// with the xid held than before (the candidate set does not depend on the oldest xid).
fn xid_checks(report: &mut FaultReport, details: &Details, end: faults::LogStats) {
    if end.dead > 0 || end.upd_del > 0 {
        report.violations.push(format!(
            "log tables: {} dead tuples, {} updates or deletes",
            end.dead, end.upd_del
        ));
    }
    let before = details["ready_tuples_read_per_job_warmup"].as_f64();
    let during = details
        .get("ready_tuples_read_per_job_during")
        .and_then(serde_json::Value::as_f64);
    match (before, during) {
        (Some(b), Some(d)) if d > 3.0 * b + 5.0 => report.violations.push(format!(
            "claims not flat: {d:.1} ready tuples read per job with the xid held, {b:.1} before"
        )),
        (Some(_), Some(_)) => {}
        _ => report
            .violations
            .push("no completions to measure claim cost on".into()),
    }
}

/// Waits until every acknowledged job completed per the ledgers, or no progress for
/// [`DRAIN_STALL`], or `timeout`.
async fn drain(tail: &Arc<Mutex<LedgerTail>>, acked: &[(i64, u64)], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let mut remaining: HashSet<i64> = acked.iter().map(|(id, _)| *id).collect();
    let mut seen = 0;
    let mut last_progress = Instant::now();
    while !remaining.is_empty() && Instant::now() < deadline {
        {
            let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
            t.poll();
            for e in &t.entries[seen..] {
                if let WorkerEntry::Ack {
                    id, stale: false, ..
                } = e
                {
                    if remaining.remove(id) {
                        last_progress = Instant::now();
                    }
                }
            }
            seen = t.entries.len();
        }
        if last_progress.elapsed() > DRAIN_STALL {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Lease, attempts and retention of the suite's queue (created by this call).
async fn configure_queue(base: &str, key: &str) -> Result<(), ChaosError> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| ChaosError::setup("HTTP client", e))?;
    let resp = http
        .patch(format!("{base}/v1/queues/{QUEUE}"))
        .bearer_auth(key)
        .json(&json!({
            "lease_ms": LEASE_MS,
            // Repeated kills must not exhaust a job's attempts.
            "max_attempts": 1000,
            // Keep history for the lookups after long runs.
            "retention_ms": 3_600_000u64,
        }))
        .send()
        .await
        .map_err(|e| ChaosError::setup("configuring the queue", e))?;
    if !resp.status().is_success() {
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        return Err(ChaosError::setup(
            "configuring the queue",
            format!("{status}: {body}"),
        ));
    }
    Ok(())
}

/// The termination faults reproduce issue 17 (3 HTTP producers, batches of 200, as fast
/// as the server answers); every other fault runs 3 producers, every third over gRPC and
/// the others over HTTP, batches of 50, at the configured rate.
fn producer_plans(fault: Fault, env: &Env, cfg: &ChaosConfig) -> Vec<ProducerPlan> {
    let (http, grpc) = (env.http_urls(), env.grpc_urls());
    let terminate = matches!(fault, Fault::Terminate2 | Fault::Terminate10);
    let n = cfg.producers.unwrap_or(3).max(1);
    let batch = cfg.batch.unwrap_or(if terminate { 200 } else { 50 }).max(1);
    let rate = if terminate {
        0.0
    } else {
        cfg.rate as f64 / n as f64
    };
    (0..n)
        .map(|i| {
            let transport = if !terminate && i % 3 == 2 {
                Transport::Grpc
            } else {
                Transport::Http
            };
            ProducerPlan {
                transport,
                urls: if transport == Transport::Http {
                    http.clone()
                } else {
                    grpc.clone()
                },
                api_key: env.api_key.clone(),
                batch,
                rate,
                // Issue 17's reproduction sends plain batches, as reported: no key, no retry.
                idempotent: fault != Fault::Terminate10,
            }
        })
        .collect()
}

fn progress_bar(cfg: &ChaosConfig, fault: Fault) -> indicatif::ProgressBar {
    if !cfg.progress {
        return indicatif::ProgressBar::hidden();
    }
    let total = (cfg.warmup + cfg.duration + cfg.recovery).as_secs().max(1);
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>16} [{bar:30}] {pos}/{len}s {msg}")
            .expect("template")
            .progress_chars("=> "),
    );
    bar.set_prefix(fault.name());
    bar
}
