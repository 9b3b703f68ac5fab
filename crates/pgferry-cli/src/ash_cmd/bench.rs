//! `pgferry bench ash`: the sample cost, the readers over seeded history, the rotation, and
//! `bench cycle` with the sampler off and on (docs/performance.md).

/// `pgferry bench ash`.
#[derive(clap::Args, Clone)]
pub struct AshBenchArgs {
    /// The cycle's settings (for the sampler on/off comparison); `--json` is implied.
    #[command(flatten)]
    pub cycle: crate::bench_cmd::BenchArgs,
    /// Measured samples per load level.
    #[arg(long, default_value_t = 100)]
    pub samples: usize,
    /// Simulated busy backends, one measurement each.
    #[arg(long, value_delimiter = ',', default_value = "50,500")]
    pub backends: Vec<usize>,
    /// Runs per reader and window.
    #[arg(long, default_value_t = 5)]
    pub reader_runs: usize,
    /// Alternating cycle runs without and with the sampler (pairs).
    #[arg(long, default_value_t = 2)]
    pub cycle_pairs: usize,
    /// Only the throughput comparison: `bench cycle` with ASH off and on (the leader's
    /// sampler and this server's publisher, both every second) in ABBA order, `--cycle-pairs`
    /// pairs (4: ABBAABBA), reported with each pair's ratio and the spread.
    #[arg(long)]
    pub overhead: bool,
    /// Cadence of the sampler and the publisher in the "on" runs. Shorter than the default
    /// second amplifies ASH's cost (100 ms: 10× the samples and publishes), so a cost too
    /// small to resolve at 1 s can be bounded as the amplified cost ÷ the factor.
    #[arg(long, default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub ash_interval_ms: u64,
    /// What runs in the "on" runs: both (what a server runs), only the sampler or only the
    /// publisher (to tell which part a cost comes from), or nothing: an A/A control whose
    /// "cost" is the harness's own bias and noise.
    #[arg(long, value_enum, default_value_t = AshParts::Both)]
    pub ash_parts: AshParts,
}

/// The parts of ASH an "on" run of `bench ash --overhead` runs.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum AshParts {
    Both,
    Sampler,
    Publisher,
    None,
}

pub async fn bench(args: AshBenchArgs) -> anyhow::Result<()> {
    use std::str::FromStr;
    let (base, cluster) = match &args.cycle.database_url {
        Some(url) => (tokio_postgres::Config::from_str(url)?, None),
        None => {
            let dir = tempfile::Builder::new()
                .prefix("pgferry-bench-ash-")
                .tempdir()?;
            let mut opts = pgferry_pgcluster::ClusterOptions::new(dir.path().join("pg"));
            opts.listen_tcp = false;
            opts.settings = vec![
                ("max_connections".into(), "700".into()),
                ("shared_buffers".into(), "512MB".into()),
                ("max_wal_size".into(), "4GB".into()),
                // Query ids without pg_stat_statements (not preloaded here).
                ("compute_query_id".into(), "on".into()),
            ];
            let cluster =
                tokio::task::spawn_blocking(move || pgferry_pgcluster::Cluster::start(opts))
                    .await??;
            (
                tokio_postgres::Config::from_str(&cluster.conn_string("postgres"))?,
                Some((cluster, dir)),
            )
        }
    };
    if args.overhead {
        let report = overhead(&base, &args).await?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        return stop_cluster(cluster).await;
    }
    let mut costs = Vec::new();
    for (i, n) in args.backends.iter().enumerate() {
        eprintln!(
            "[ash {}/{}] sample cost with {n} busy backends",
            i + 1,
            args.backends.len()
        );
        let cfg = pgferry_ash::bench::fresh_database(&base, &format!("bench_ash_load_{i}")).await?;
        costs.push(pgferry_ash::bench::sample_cost(&cfg, *n, args.samples).await?);
    }
    eprintln!("[ash] seeding 30 days of history and timing the readers");
    let cfg = pgferry_ash::bench::fresh_database(&base, "bench_ash_history").await?;
    let history = pgferry_ash::bench::history(&cfg, args.reader_runs).await?;
    let cycle = if args.cycle_pairs > 0 {
        overhead(&base, &args).await?
    } else {
        serde_json::Value::Null
    };
    let out = serde_json::json!({
        "sample_cost": costs,
        "history": history,
        "cycle": cycle,
        "targets": {
            "sample_ms_at_50": 5.0,
            "sample_ms_at_500": 20.0,
            "top_waits_ms": {"1h": 30.0, "24h": 300.0, "30d": 1000.0},
            "bytes_per_row_at_50": 380.0,
            "rotation_ms": 20.0,
            "cycle_cost_max": 0.01,
        },
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    stop_cluster(cluster).await
}

async fn stop_cluster(
    cluster: Option<(pgferry_pgcluster::Cluster, tempfile::TempDir)>,
) -> anyhow::Result<()> {
    if let Some((cluster, dir)) = cluster {
        tokio::task::spawn_blocking(move || cluster.stop()).await??;
        drop(dir);
    }
    Ok(())
}

/// `bench cycle` with ASH off and on, in ABBA order (off-on, on-off, …: a drift of the
/// machine over the run cancels out of each pair of pairs). "On" is what a server runs: the
/// leader's sampler and the publisher of what the engine's backends serve, both every
/// second, in this process, writing to their own database.
async fn overhead(
    base: &tokio_postgres::Config,
    args: &AshBenchArgs,
) -> anyhow::Result<serde_json::Value> {
    let sampler_db = pgferry_ash::bench::fresh_database(base, "bench_ash_sampler").await?;
    let opts = args.cycle.opts();
    let pairs = args.cycle_pairs.max(1);
    let (mut runs, mut duty) = (Vec::new(), Vec::new());
    for pair in 0..pairs {
        let order: [bool; 2] = if pair % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for ash_on in order {
            eprintln!(
                "[ash] cycle pair {}/{pairs}: ASH {}",
                pair + 1,
                if ash_on { "on" } else { "off" }
            );
            if !ash_on {
                let r = pgferry_bench::run(
                    pgferry_bench::Variant::Cycle,
                    base,
                    "bench_cycle_ash_off",
                    &opts,
                )
                .await?;
                runs.push((pair, false, r.jobs_per_s));
                continue;
            }
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let db = sampler_db.clone();
            let every = std::time::Duration::from_millis(args.ash_interval_ms);
            let config = pgferry_ash::SamplerConfig {
                interval: every,
                publish_grace: (every / 4).min(pgferry_ash::SamplerConfig::default().publish_grace),
                ..Default::default()
            };
            let parts = args.ash_parts;
            let sampler = tokio::spawn(async move {
                if matches!(parts, AshParts::Publisher | AshParts::None) {
                    return Ok(None);
                }
                pgferry_ash::bench::sample_until(&db, config, stopped)
                    .await
                    .map(Some)
            });
            let publisher = matches!(parts, AshParts::Both | AshParts::Publisher).then(|| {
                tokio::spawn(pgferry_ash::publish::run(
                    sampler_db.clone(),
                    every,
                    stop.subscribe(),
                ))
            });
            let r = pgferry_bench::run(
                pgferry_bench::Variant::Cycle,
                base,
                "bench_cycle_ash_on",
                &opts,
            )
            .await;
            let _ = stop.send(true);
            duty.extend(sampler.await??);
            if let Some(p) = publisher {
                p.await?;
            }
            runs.push((pair, true, r?.jobs_per_s));
        }
    }
    let mut report = overhead_report(&runs, &duty)?;
    report["ash_interval_ms"] = args.ash_interval_ms.into();
    report["ash_parts"] = format!("{:?}", args.ash_parts).to_lowercase().into();
    Ok(report)
}

/// Means, spread and each pair's on/off ratio of `(pair, ash_on, jobs_per_s)` runs.
fn overhead_report(
    runs: &[(usize, bool, f64)],
    duty: &[pgferry_ash::bench::Duty],
) -> serde_json::Result<serde_json::Value> {
    use pgferry_bench::paired;
    let of = |on: bool| -> Vec<f64> { runs.iter().filter(|r| r.1 == on).map(|r| r.2).collect() };
    let (off, on) = (of(false), of(true));
    let ab: Vec<(bool, f64)> = runs.iter().map(|r| (r.1, r.2)).collect();
    let pairs = paired::report(&ab);
    let ratio_mean = paired::mean(&paired::ratios(&ab));
    let half = paired::half_interval_95(&paired::ratios(&ab));
    Ok(serde_json::json!({
        "order": pairs["order"],
        "runs": runs.iter().map(|(pair, on, jps)| serde_json::json!({
            "pair": pair, "ash": if *on { "on" } else { "off" }, "jobs_per_s": jps,
        })).collect::<Vec<_>>(),
        "jobs_per_s_sampler_off": off,
        "jobs_per_s_sampler_on": on,
        "off": paired::stats(&off),
        "on": paired::stats(&on),
        "on_over_off": paired::mean(&on) / paired::mean(&off),
        "pair_ratios_on_over_off": pairs["pair_ratios"],
        "pair_ratio_mean": ratio_mean,
        "pair_ratio_sd": pairs["pair_ratio_sd"],
        "pair_ratio_95pct_interval": pairs["pair_ratio_95pct_interval"],
        // The cost the throughput shows (1 - mean pair ratio), and whether this run can
        // resolve the 1% target at all: the interval must be narrower than ±1%.
        "cost_pct": (1.0 - ratio_mean) * 100.0,
        "resolves_1pct": half < 0.01,
        "sampler_duty": duty,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_read_in_abba_order_with_their_spread() {
        let runs = [
            (0, false, 100.0),
            (0, true, 99.0),
            (1, true, 98.0),
            (1, false, 100.0),
        ];
        let r = overhead_report(&runs, &[]).unwrap();
        assert_eq!(r["order"], "ABBA");
        assert_eq!(
            r["pair_ratios_on_over_off"],
            serde_json::json!([0.99, 0.98])
        );
        assert!((r["cost_pct"].as_f64().unwrap() - 1.5).abs() < 1e-9);
        assert_eq!(r["off"]["mean"], 100.0);
        assert_eq!(r["on"]["min"], 98.0);
        assert_eq!(r["resolves_1pct"], false, "two pairs: t = 12.7");
    }
}
