//! `pgferry bench workflow`: the workflow engine under load, beside `bench cycle` of the
//! same run on the same cluster (issue 19's targets):
//! - three_step: a 3-step machine (`next`, `next`, `done`); steps/s, and dead tuples and
//!   HOT updates per 100k steps on the workflow tables; measured twice, around a second
//!   cycle (cycle, three_step, three_step_again, cycle_again), for its ratio to the cycle;
//! - code_first_three_step: the same as a code-first workflow function of three
//!   `ctx.step`s (issue 20), on its own queue;
//! - signal: await → signal → resumed, at half of the signal path's own saturation
//!   (closed loop first, workflow_signal.rs; p50/p99 from the signal's send to its resumed
//!   handler, and its parts);
//! - fan_out: a parent spawning 100 children joined with `all` (time to the parent's end);
//! - hot_key: steps/s of instances on 1000 keys, without and with a hot key holding 20k
//!   waiting instances;
//! - hot_statements_1m: the hot statements on a 1M-instance dataset (workflow_seed.rs).
//!
//! Workers are in-process [`Worker`]s; instances are started in bulk through the SQL function
//! (what any language can call), so the producer is not what is measured.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use pgferry_core::workflow::{
    Child, ClaimedStep, Join, Machine, Outcome, Target, Worker, WorkerConfig, Workflows,
};
use pgferry_core::{db, migrate};
use serde_json::{json, Value};
use tokio_postgres::{Client, Config};

use crate::measure::{self, Counters};
use crate::workflow_load as load;
use crate::BenchOpts;

/// Everything in one JSON document.
pub async fn run(base: &Config, opts: &BenchOpts) -> anyhow::Result<Value> {
    let cycle = crate::run(crate::Variant::Cycle, base, "bench_cycle", opts).await?;
    let db = WorkflowDb::open(base, "bench_workflow", opts).await?;
    let (config, wf) = (&db.config, &db.wf);
    let three = three_step(config, wf, opts)
        .await
        .context("the 3-step phase")?;
    let steps_per_s = three["steps_per_s"].as_f64().unwrap_or(0.0);
    // The ratio's second pair, in the reverse order (cycle, 3-step, 3-step, cycle): this
    // machine's speed drifts over minutes, and one ratio of two windows taken apart carries
    // that drift (docs/performance.md, "The update is the lock").
    let three_again = three_step_fresh(base, opts)
        .await
        .context("the second 3-step window")?;
    let cycle_again = crate::run(crate::Variant::Cycle, base, "bench_cycle_again", opts)
        .await
        .context("the second cycle window")?;
    let code = code_three_step(config, wf, opts)
        .await
        .context("the code-first phase")?;
    let code_steps_per_s = code["steps_per_s"].as_f64().unwrap_or(0.0);
    // Half of the signal path's own saturation (closed loop, workflow_signal.rs); the
    // three-step rate in round trips (each costs three steps) only sizes the probe.
    let (saturation, signal_saturation) =
        crate::workflow_signal::saturation(config, wf, opts, steps_per_s / 3.0)
            .await
            .context("the signal saturation phase")?;
    let signal_rate = (saturation / 2.0).max(10.0);
    let mut signal = signal_round_trip(config, wf, opts, signal_rate)
        .await
        .context("the signal round-trip phase")?;
    signal["saturation"] = signal_saturation;
    signal["three_step_half_rate_per_s"] = json!(steps_per_s / 2.0 / 3.0);
    let fan_out = fan_out(config, wf, opts)
        .await
        .context("the fan-out phase")?;
    let hot_key = hot_key(config, wf, opts)
        .await
        .context("the hot-key phase")?;
    db.close();
    // Last, on its own database: the hot statements on the full-size seeded dataset
    // (minutes to seed; PGFERRY_BENCH_WORKFLOW_NO_SEED=1 leaves it out while iterating).
    let statements = if std::env::var_os("PGFERRY_BENCH_WORKFLOW_NO_SEED").is_some() {
        Value::Null
    } else {
        let seeded = crate::fresh_database(base, "bench_workflow_seed").await?;
        let mut c = measure::connect(&seeded, "seed").await?;
        migrate::up(&mut c).await?;
        crate::workflow_seed::run(&c).await?
    };
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let other = |k: &str| hot_key[k]["steps_per_s"].as_f64().unwrap_or(0.0);
    let steps_again = three_again["steps_per_s"].as_f64().unwrap_or(0.0);
    let pairs = [
        ratio(steps_per_s, cycle.jobs_per_s),
        ratio(steps_again, cycle_again.jobs_per_s),
    ];
    let signal_p99 = json!({
        "resume_after_commit_ms": signal["resume_after_commit"]["p99_ms"],
        "round_trip_ms": signal["p99_ms"],
    });
    Ok(json!({
        "options": opts,
        "worker_continue_steps": continue_steps(),
        "cycle": cycle,
        "three_step": three,
        "three_step_again": three_again,
        "cycle_again": cycle_again,
        "code_first_three_step": code,
        "signal": signal,
        "fan_out": fan_out,
        "hot_key": hot_key,
        "hot_statements_1m": statements,
        "ratios": {
            // The mean of the two pairs (cycle, three_step) and (three_step_again,
            // cycle_again), taken A B B A; the first pair alone is the ratio as it was.
            "three_step_steps_vs_cycle_jobs_per_s": (pairs[0] + pairs[1]) / 2.0,
            "three_step_vs_cycle_pairs": pairs,
            "code_first_vs_state_machine_steps_per_s": ratio(code_steps_per_s, steps_per_s),
            // The mean of the A/B pairs' ratios (hot_key.pairs has each, and their interval).
            "other_keys_with_vs_without_hot_key": hot_key["pairs"]["pair_ratio_mean"],
            "other_keys_with_vs_without_hot_key_ratio_of_means": ratio(other("with_hot_key"), other("without_hot_key")),
        },
        "signal_p99": signal_p99,
        "targets": {
            "three_step_steps_vs_cycle_jobs_per_s": ">= 0.5 (the mean of the A B B A pairs)",
            "code_first_vs_state_machine_steps_per_s": ">= 0.5",
            "other_keys_with_vs_without_hot_key": ">= 0.9",
            "signal_p99_ms": "<= 20 at half of saturation (resume_after_commit_ms; round_trip_ms includes the signal's own synchronous commit)",
        },
    }))
}

/// Runs `workers` in-process workers of `machines` on `queue` until `stop`.
pub(crate) fn spawn_workers(
    wf: &Workflows,
    opts: &BenchOpts,
    queue: &str,
    machines: &[Machine],
    stop: &tokio::sync::watch::Receiver<bool>,
) -> (
    Vec<tokio::task::JoinHandle<pgferry_core::Result<()>>>,
    Vec<Arc<pgferry_core::workflow::WorkerStats>>,
) {
    let mut handles = Vec::new();
    let mut stats = Vec::new();
    for w in 0..opts.workers {
        let mut cfg = WorkerConfig::new(queue);
        cfg.name = format!("bench-{w}");
        cfg.batch = opts.claim_batch;
        // Backs off from 1 ms up to this while idle; a delivered signal wakes at once.
        cfg.idle_poll = Duration::from_millis(20);
        cfg.continue_steps = continue_steps();
        let mut worker = Worker::new(wf.clone(), cfg);
        for m in machines {
            worker = worker.machine(m.clone());
        }
        stats.push(worker.stats());
        handles.push(tokio::spawn(worker.run(stop.clone())));
    }
    (handles, stats)
}

/// `WorkerConfig::continue_steps` of the bench's workers: the default unless
/// PGFERRY_BENCH_WORKFLOW_CONTINUE_STEPS says (0: every step through the picker, as before
/// continued steps), for comparisons in one binary.
pub(crate) fn continue_steps() -> u32 {
    std::env::var("PGFERRY_BENCH_WORKFLOW_CONTINUE_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(WorkerConfig::new("q").continue_steps)
}

fn applied(stats: &[Arc<pgferry_core::workflow::WorkerStats>]) -> u64 {
    stats.iter().map(|s| s.steps.load(Ordering::Relaxed)).sum()
}

/// Statistics of the workflow tables (cumulative; the difference over a phase is its cost).
async fn table_stats(admin: &Client) -> anyhow::Result<(i64, i64, i64)> {
    let r = admin
        .query_one(
            "SELECT coalesce(sum(n_dead_tup), 0)::bigint AS dead,
                    coalesce(sum(n_tup_upd + n_tup_del), 0)::bigint AS upd_del,
                    coalesce(sum(n_tup_hot_upd) FILTER (WHERE relname = 'wf_instances'), 0)::bigint
                      AS hot_upd
               FROM pg_stat_user_tables WHERE schemaname = 'pgferry' AND relname LIKE 'wf\\_%'",
            &[],
        )
        .await?;
    Ok((r.get("dead"), r.get("upd_del"), r.get("hot_upd")))
}

async fn instance_updates(admin: &Client) -> anyhow::Result<i64> {
    Ok(admin
        .query_one(
            "SELECT coalesce(n_tup_upd, 0) AS updates FROM pg_stat_user_tables
              WHERE schemaname = 'pgferry' AND relname = 'wf_instances'",
            &[],
        )
        .await?
        .get("updates"))
}

/// A fresh, migrated database with the workers' pool and its wake-up listener.
struct WorkflowDb {
    config: Config,
    pool: deadpool_postgres::Pool,
    wf: Workflows,
    listener: tokio::task::JoinHandle<()>,
}

impl WorkflowDb {
    async fn open(base: &Config, name: &str, opts: &BenchOpts) -> anyhow::Result<WorkflowDb> {
        let config = crate::fresh_database(base, name).await?;
        let mut c = measure::connect(&config, "migrate").await?;
        migrate::up(&mut c).await?;
        let pool = db::pool(&config, "bench-wf", opts.workers + 4);
        let wf = Workflows::new(pool.clone());
        // Idle workers are woken by signal deliveries (pgferry_wf_ready), as with an engine.
        let listener = wf.listen_ready(config.clone());
        Ok(WorkflowDb {
            config,
            pool,
            wf,
            listener,
        })
    }

    fn close(&self) {
        self.pool.close();
        self.listener.abort();
    }
}

/// `three_step` again, on a fresh database of its own (as the first window had: the same
/// empty tables), with its own workers' pool.
async fn three_step_fresh(base: &Config, opts: &BenchOpts) -> anyhow::Result<Value> {
    let db = WorkflowDb::open(base, "bench_workflow_again", opts).await?;
    let report = three_step(&db.config, &db.wf, opts).await;
    db.close();
    report
}

async fn three_step(config: &Config, wf: &Workflows, opts: &BenchOpts) -> anyhow::Result<Value> {
    let machine = Machine::new("three")
        .step("start", |s: ClaimedStep| async move {
            Outcome::next("two", s.input)
        })
        .step("two", |s: ClaimedStep| async move {
            Outcome::next("three", s.state)
        })
        .step(
            "three",
            |_s: ClaimedStep| async move { Outcome::done(json!(1)) },
        );
    steps_phase(
        config,
        wf,
        opts,
        ("three", "bench", "wf_three_step"),
        machine,
    )
    .await
}

/// Producers of a steps phase: `--producers`, unless PGFERRY_BENCH_WORKFLOW_PRODUCERS says.
fn phase_producers(opts: &BenchOpts) -> usize {
    std::env::var("PGFERRY_BENCH_WORKFLOW_PRODUCERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(opts.producers)
        .max(1)
}

/// The code-first twin of `three_step` (issue 20): a workflow function of three
/// `ctx.step`s (`pgferry_core::workflow::code::examples::three_steps`), on its own queue.
async fn code_three_step(
    config: &Config,
    wf: &Workflows,
    opts: &BenchOpts,
) -> anyhow::Result<Value> {
    let machine = pgferry_core::workflow::code::examples::three_steps().machine();
    let names = ("code_three", "bench_code", "wf_code_3_step");
    steps_phase(config, wf, opts, names, machine).await
}

/// Instances of a 3-step `machine` (kind, queue, progress label) started while workers run
/// them for the bench's duration.
pub(crate) async fn steps_phase(
    config: &Config,
    wf: &Workflows,
    opts: &BenchOpts,
    (kind, queue, label): (&'static str, &'static str, &str),
    machine: Machine,
) -> anyhow::Result<Value> {
    let admin = measure::connect(config, "admin").await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let counters = Arc::new(Counters::default());
    // As many producers as the cycle of the same run has (`--producers`), each starting
    // batches of `--enqueue-batch` within one depth (PGFERRY_BENCH_WORKFLOW_PRODUCERS
    // overrides the count for comparisons; it was one until 2026-11-29).
    let producers: Vec<_> = (0..phase_producers(opts))
        .map(|_| load::producer(config.clone(), counters.clone(), kind, queue, opts))
        .collect();
    let producer = tokio::spawn(async move {
        for p in producers {
            p.await??;
        }
        Ok(())
    });
    let (workers, stats) = spawn_workers(wf, opts, queue, &[machine], &stop_rx);
    // Cumulative statistics reach pg_stat_user_tables within a second; the phase's cost is
    // the difference of two settled readings.
    let (before, upd0) = (table_stats(&admin).await?, instance_updates(&admin).await?);
    let report = load::window(label, config, &counters, &stats, opts, producer).await?;
    let _ = stop_tx.send(true);
    for w in workers {
        w.await??;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = table_stats(&admin).await?;
    let upd1 = instance_updates(&admin).await?;
    let steps = applied(&stats);
    let per_100k = |x: i64| x as f64 * 100_000.0 / steps.max(1) as f64;
    Ok(json!({
        "steps": report.jobs,
        "producers": phase_producers(opts),
        "duration_s": report.duration_s,
        "steps_per_s": report.jobs_per_s,
        "instances_started_per_s": report.enqueued_per_s,
        "cpu_per_step": report.cpu_per_step,
        "all_steps_of_the_phase": steps,
        "dead_tuples_per_100k_steps": per_100k(after.0 - before.0),
        "rows_updated_or_deleted_per_100k_steps": per_100k(after.1 - before.1),
        "instance_updates_hot_fraction": if upd1 > upd0 { (after.2 - before.2) as f64 / (upd1 - upd0) as f64 } else { f64::NAN },
    }))
}

async fn signal_round_trip(
    config: &Config,
    wf: &Workflows,
    opts: &BenchOpts,
    rate: f64,
) -> anyhow::Result<Value> {
    // Per measured instance: (sent, resumed handler) in ms since the epoch; the senders
    // add when their signal was acknowledged, and the step history when its claim began.
    let lat = Arc::new(Mutex::new(Vec::<(i64, f64, f64)>::new()));
    let acked = Arc::new(Mutex::new(std::collections::HashMap::<i64, f64>::new()));
    let measuring = Arc::new(AtomicBool::new(false));
    let (lat2, m2) = (lat.clone(), measuring.clone());
    let machine = Machine::new("ping")
        .with_inbox()
        .step("start", |_s: ClaimedStep| async move {
            Outcome::await_signals(&["ping"], "pong", None)
        })
        .step("pong", move |s: ClaimedStep| {
            let (lat, measuring) = (lat2.clone(), m2.clone());
            async move {
                let sent = s
                    .inbox
                    .as_ref()
                    .and_then(|i| i.first())
                    .and_then(|g| g.payload.as_f64());
                if let (Some(sent), true) = (sent, measuring.load(Ordering::Relaxed)) {
                    lat.lock().unwrap().push((s.id, sent, load::now_ms()));
                }
                Outcome::done(json!(1))
            }
        });
    let admin = measure::connect(config, "admin").await?;
    let total = (rate * (opts.duration + opts.warmup).as_secs_f64() * 1.2) as i64 + 100;
    load::start_bulk(&admin, "ping", "signal", total).await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (workers, _stats) = spawn_workers(wf, opts, "signal", &[machine], &stop_rx);
    // Every instance parked on its await before signals start.
    load::wait_for(
        &admin,
        "SELECT count(*) FROM pgferry.wf_instances WHERE queue = 'signal' AND status <> 'awaiting'",
        0,
    )
    .await?;
    let ids: Vec<i64> = admin
        .query(
            "SELECT id FROM pgferry.wf_instances WHERE queue = 'signal' ORDER BY id",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get("id"))
        .collect();
    let sent = Arc::new(AtomicU64::new(0));
    // Open loop: each signal is sent at its time on its own task, from a pool of its own
    // (an application sending signals), so a slow commit delays only its own round trip
    // and the rate holds. Sequential senders fell behind the rate by up to 8x.
    let senders = Workflows::new(db::pool(config, "bench-wf-signal", 32));
    let t0 = Instant::now();
    let end = opts.warmup + opts.duration;
    let schedule = {
        let (ids, sent, acked) = (ids.clone(), sent.clone(), acked.clone());
        tokio::spawn(async move {
            let mut tasks = tokio::task::JoinSet::new();
            for (n, id) in ids.into_iter().enumerate() {
                let due = Duration::from_secs_f64(n as f64 / rate);
                if due > end {
                    break;
                }
                if let Some(wait) = due.checked_sub(t0.elapsed()) {
                    tokio::time::sleep(wait).await;
                }
                let (wf, sent, acked) = (senders.clone(), sent.clone(), acked.clone());
                tasks.spawn(async move {
                    wf.signal(&Target::Id(id), "ping", &json!(load::now_ms()))
                        .await?;
                    acked.lock().unwrap().insert(id, load::now_ms());
                    sent.fetch_add(1, Ordering::Relaxed);
                    anyhow::Ok(())
                });
            }
            while let Some(r) = tasks.join_next().await {
                r??;
            }
            anyhow::Ok(())
        })
    };
    tokio::time::sleep(opts.warmup).await;
    measuring.store(true, Ordering::SeqCst);
    tokio::time::sleep(opts.duration).await;
    measuring.store(false, Ordering::SeqCst);
    schedule.await??;
    let _ = stop_tx.send(true);
    for w in workers {
        w.await??;
    }
    let measured = lat.lock().unwrap().clone();
    let claimed = claim_starts(&admin).await?;
    let acked = acked.lock().unwrap().clone();
    // Where the round trip goes: the signal's statement and commit (sent → acknowledged),
    // the wait for a worker's claim to begin (acknowledged → the claim's now()), and the
    // claim's statement, commit and answer (its now() → the resumed handler).
    // The "signal resume" is the resume after the signal is delivered: its
    // commit acknowledged → the resumed handler (`resume_after_commit`, per signal).
    let (mut total, mut signal, mut wait, mut claim) = (vec![], vec![], vec![], vec![]);
    let mut resume = vec![];
    for (id, sent, resumed) in &measured {
        total.push(resumed - sent);
        if let Some(ack) = acked.get(id) {
            resume.push(resumed - ack);
        }
        if let (Some(ack), Some(began)) = (acked.get(id), claimed.get(id)) {
            signal.push(ack - sent);
            wait.push(began - ack);
            claim.push(resumed - began);
        }
    }
    let summary = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        let pct = |p: f64| {
            if v.is_empty() {
                f64::NAN
            } else {
                v[((v.len() - 1) as f64 * p).round() as usize]
            }
        };
        json!({"p50_ms": pct(0.5), "p99_ms": pct(0.99), "max_ms": pct(1.0)})
    };
    let t = summary(&mut total);
    Ok(json!({
        "rate_per_s": rate,
        "signals_sent": sent.load(Ordering::Relaxed),
        "round_trips_measured": measured.len(),
        "p50_ms": t["p50_ms"],
        "p99_ms": t["p99_ms"],
        "max_ms": t["max_ms"],
        "resume_after_commit": summary(&mut resume),
        "breakdown": {
            "signal_statement_and_commit": summary(&mut signal),
            "wait_for_a_claim": summary(&mut wait),
            "claim_statement_commit_and_answer": summary(&mut claim),
        },
    }))
}

/// When the claim of each resumed `pong` step began (its `now()`, in ms since the epoch).
async fn claim_starts(admin: &Client) -> anyhow::Result<std::collections::HashMap<i64, f64>> {
    let rows = admin
        .query(
            "SELECT s.instance_id, (extract(epoch FROM s.started_at) * 1000)::float8 AS began
               FROM pgferry.wf_steps s JOIN pgferry.wf_instances i ON i.id = s.instance_id
              WHERE i.queue = 'signal' AND s.step = 'pong'",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get("instance_id"), r.get("began")))
        .collect())
}

async fn fan_out(_config: &Config, wf: &Workflows, opts: &BenchOpts) -> anyhow::Result<Value> {
    let parent = Machine::new("fan")
        .with_children()
        .step("start", |_s: ClaimedStep| async move {
            let kids = (0..100).map(|i| Child::new("leaf", json!(i))).collect();
            Outcome::spawn(kids, "joined", Join::All)
        })
        .step("joined", |s: ClaimedStep| async move {
            let n = s.children.map(|c| c.len()).unwrap_or(0);
            Outcome::done(json!(n))
        });
    let leaf =
        Machine::new("leaf").step(
            "start",
            |s: ClaimedStep| async move { Outcome::done(s.input) },
        );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (workers, _stats) = spawn_workers(wf, opts, "fan", &[parent, leaf], &stop_rx);
    let rounds = 20;
    let mut times = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let id = wf
            .start(&pgferry_core::workflow::Start::new("fan", "fan", json!({})))
            .await?
            .id;
        loop {
            let info = wf.get(id).await?;
            if info.status == "done" {
                anyhow::ensure!(
                    info.result == Some(json!(100)),
                    "parent saw {:?}",
                    info.result
                );
                break;
            }
            anyhow::ensure!(info.status != "failed", "fan-out failed: {:?}", info.error);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let _ = stop_tx.send(true);
    for w in workers {
        w.await??;
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    Ok(json!({
        "children": 100,
        "rounds": rounds,
        "p50_ms": times[times.len() / 2],
        "max_ms": times[times.len() - 1],
        "mean_ms": mean,
        "children_per_s": 100.0 * 1000.0 / mean,
    }))
}

/// Other keys' steps/s without and with a hot key, in alternating rounds: `hot_key_pairs`
/// A/B pairs in ABBA order (paired.rs). A single pair on this shared machine moves by more
/// than the 10% the target allows; each pair's ratio cancels the machine's drift, and the
/// pairs' interval says what the run resolves. Each round has its own queue and its own
/// 1000 keys and is drained before the next starts; the hot key's 20,000 instances (limit
/// 1, so all but one wait outside the picker) are started before the first B round, on the
/// B queue, and each B round runs some of them.
async fn hot_key(config: &Config, wf: &Workflows, opts: &BenchOpts) -> anyhow::Result<Value> {
    let admin = measure::connect(config, "admin").await?;
    let mut rounds = Vec::new();
    let mut runs: Vec<(bool, f64)> = Vec::new();
    let mut hot_started = false;
    for round in 0..2 * opts.hot_key_pairs.max(1) {
        let hot = crate::paired::is_b(round);
        if hot && !hot_started {
            load::start_bulk_keyed(&admin, "three", "hot_b", 20_000, "hot")
                .await
                .context("starting the hot key's instances")?;
            hot_started = true;
        }
        let queue = if hot { "hot_b" } else { "hot_a" };
        let prefix = format!("{}{round}-key-", if hot { "b" } else { "a" });
        let r = hot_key_round(config, wf, opts, queue, prefix)
            .await
            .with_context(|| format!("hot key round {round}"))?;
        runs.push((hot, r["steps_per_s"].as_f64().unwrap_or(0.0)));
        rounds.push(json!({"round": round, "hot_key": hot, "queue": queue, "result": r}));
    }
    let of = |hot: bool| -> Vec<f64> { runs.iter().filter(|r| r.0 == hot).map(|r| r.1).collect() };
    let (without, with) = (of(false), of(true));
    let hot_left: i64 = admin
        .query_one(
            "SELECT count(*) FROM pgferry.wf_key_waiters WHERE key = 'hot'",
            &[],
        )
        .await?
        .get("count");
    Ok(json!({
        "order": "A: without the hot key's activity, B: with it",
        "rounds": rounds,
        "pairs": crate::paired::report(&runs),
        "without_hot_key": {"steps_per_s": crate::paired::mean(&without), "runs": without},
        "with_hot_key": {"steps_per_s": crate::paired::mean(&with), "runs": with, "hot_waiters_at_start": 19_999, "hot_waiters_at_end": hot_left},
    }))
}

/// One round: instances on 1000 keys `<prefix><n>` (limit 1) started while fewer than
/// `max_depth` of their steps wait, run by the workers of `queue` (which also run the hot
/// key's instances, if the queue has them); counts other keys' steps in the window, then
/// drains them.
async fn hot_key_round(
    config: &Config,
    wf: &Workflows,
    opts: &BenchOpts,
    queue: &'static str,
    prefix: String,
) -> anyhow::Result<Value> {
    let counters = Arc::new(Counters::default());
    let other = Arc::new(AtomicU64::new(0));
    let measuring = Arc::new(AtomicBool::new(false));
    let (o2, m2, c2) = (other.clone(), measuring.clone(), counters.clone());
    let count = move |s: &ClaimedStep| {
        if s.input.get("hot").is_none() {
            c2.add_finished(1);
            if m2.load(Ordering::Relaxed) {
                o2.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    let (k1, k2, k3) = (count.clone(), count.clone(), count);
    let machine = Machine::new("three")
        .step("start", move |s: ClaimedStep| {
            k1(&s);
            async move { Outcome::next("two", json!({})) }
        })
        .step("two", move |s: ClaimedStep| {
            k2(&s);
            async move { Outcome::next("three", json!({})) }
        })
        .step("three", move |s: ClaimedStep| {
            k3(&s);
            async move { Outcome::done(json!(1)) }
        });
    let producer = load::keyed_producer(config.clone(), counters.clone(), queue, prefix, opts);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (workers, _stats) = spawn_workers(wf, opts, queue, &[machine], &stop_rx);
    tokio::time::sleep(opts.warmup).await;
    measuring.store(true, Ordering::SeqCst);
    let t = Instant::now();
    tokio::time::sleep(opts.duration).await;
    measuring.store(false, Ordering::SeqCst);
    let secs = t.elapsed().as_secs_f64();
    counters.stop.store(true, Ordering::SeqCst);
    producer.await?.context("the keyed producer")?;
    // Drain this round's steps, so that the next round starts from the same backlog.
    let drain = Instant::now();
    while counters.depth() > 0 && drain.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop_tx.send(true);
    for w in workers {
        w.await?.context("a worker")?;
    }
    let n = other.load(Ordering::SeqCst);
    Ok(
        json!({"other_key_steps": n, "steps_per_s": n as f64 / secs, "drained_in_s": drain.elapsed().as_secs_f64(), "left_undrained": counters.depth()}),
    )
}
