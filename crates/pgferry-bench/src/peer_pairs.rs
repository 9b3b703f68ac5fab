//! Issue 21's "over gRPC ≥ 0.8× in process", read as A/B pairs: the worker runtime (A)
//! against one gRPC worker of 64 slots (B) in the peer shape, in ABBA order, each pair's
//! B ÷ A ratio and a 95% interval of their mean ([`crate::paired`]). One run of each, minutes
//! apart inside `compare`, read this ratio between 0.77 and 1.05 for one build
//! (docs/performance.md); a pair cancels the machine's drift. With `cpu_hogs`, the same
//! pairs beside busy loops ([`crate::hogs`]): whether gRPC degrades no worse than the
//! runtime under CPU contention.

use serde_json::{json, Value};
use tokio_postgres::Config;

use crate::peer::one_worker;
use crate::{paired, run, BenchOpts, Variant};

/// `opts.peer_pairs` pairs of runtime (A) and gRPC one worker (B) runs, `opts` as given
/// (the caller applies the peer shape and sets `cpu_hogs`).
pub async fn run_pairs(base: &Config, opts: &BenchOpts) -> anyhow::Result<Value> {
    let pairs = opts.peer_pairs.max(1);
    let mut jobs_per_s = Vec::with_capacity(2 * pairs);
    let mut runs = Vec::with_capacity(2 * pairs);
    for i in 0..2 * pairs {
        let grpc = paired::is_b(i);
        let report = if grpc {
            run(
                Variant::CycleGrpc,
                base,
                "bench_cycle_grpc",
                &one_worker(opts),
            )
            .await?
        } else {
            run(Variant::CycleRuntime, base, "bench_cycle_runtime", opts).await?
        };
        jobs_per_s.push((grpc, report.jobs_per_s));
        runs.push(json!({
            "variant": if grpc { "grpc_one_worker" } else { "runtime" },
            "jobs_per_s": report.jobs_per_s,
            "p50_ms": report.p50_ms,
            "p99_ms": report.p99_ms,
            "enqueue_ack_p50_ms": report.enqueue_ack_p50_ms,
            "cpu_per_job": report.cpu_per_job,
        }));
    }
    let of = |b: bool| -> Vec<f64> {
        jobs_per_s
            .iter()
            .filter(|r| r.0 == b)
            .map(|r| r.1)
            .collect()
    };
    Ok(json!({
        "cpu_hogs": opts.cpu_hogs,
        "a": "runtime",
        "b": "grpc_one_worker",
        "pairs": paired::report(&jobs_per_s),
        "runtime_jobs_per_s": paired::stats(&of(false)),
        "grpc_one_worker_jobs_per_s": paired::stats(&of(true)),
        "runs": runs,
    }))
}

/// The pairs quiet and beside `hogs` busy loops, and how much each path kept under
/// contention.
pub async fn quiet_and_contended(
    base: &Config,
    opts: &BenchOpts,
    hogs: usize,
) -> anyhow::Result<Value> {
    let quiet = run_pairs(
        base,
        &BenchOpts {
            cpu_hogs: 0,
            ..opts.clone()
        },
    )
    .await?;
    let contended = run_pairs(
        base,
        &BenchOpts {
            cpu_hogs: hogs,
            ..opts.clone()
        },
    )
    .await?;
    let mean = |v: &Value, k: &str| v[k]["mean"].as_f64().unwrap_or(f64::NAN);
    let kept = |k: &str| mean(&contended, k) / mean(&quiet, k);
    Ok(json!({
        "quiet": quiet,
        "contended": contended,
        // Each path's mean jobs/s beside the loops ÷ quiet: ≥ the runtime's means gRPC
        // degraded no worse.
        "runtime_kept_under_contention": kept("runtime_jobs_per_s"),
        "grpc_one_worker_kept_under_contention": kept("grpc_one_worker_jobs_per_s"),
    }))
}
