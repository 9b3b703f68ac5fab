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
    let mut cycle = serde_json::Value::Null;
    if args.cycle_pairs > 0 {
        let sampler_db = pgferry_ash::bench::fresh_database(&base, "bench_ash_sampler").await?;
        let opts = args.cycle.opts();
        let (mut off, mut on, mut duty) = (Vec::new(), Vec::new(), Vec::new());
        for pair in 0..args.cycle_pairs {
            // ABBA order: drift of the machine over the run cancels out of the pair means.
            let order: [bool; 2] = if pair % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for sampler_on in order {
                eprintln!(
                    "[ash] cycle pair {}/{}: sampler {}",
                    pair + 1,
                    args.cycle_pairs,
                    if sampler_on { "on (1 s)" } else { "off" }
                );
                if !sampler_on {
                    let r = pgferry_bench::run(
                        pgferry_bench::Variant::Cycle,
                        &base,
                        "bench_cycle_ash_off",
                        &opts,
                    )
                    .await?;
                    off.push(r.jobs_per_s);
                    continue;
                }
                let (stop, stopped) = tokio::sync::watch::channel(false);
                let db = sampler_db.clone();
                let sampler = tokio::spawn(async move {
                    pgferry_ash::bench::sample_until(
                        &db,
                        pgferry_ash::SamplerConfig::default(),
                        stopped,
                    )
                    .await
                });
                let r = pgferry_bench::run(
                    pgferry_bench::Variant::Cycle,
                    &base,
                    "bench_cycle_ash_on",
                    &opts,
                )
                .await;
                let _ = stop.send(true);
                duty.push(sampler.await??);
                on.push(r?.jobs_per_s);
            }
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        cycle = serde_json::json!({
            "jobs_per_s_sampler_off": off,
            "jobs_per_s_sampler_on": on,
            "on_over_off": mean(&on) / mean(&off),
            "sampler_duty": duty,
        });
    }
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
    if let Some((cluster, dir)) = cluster {
        tokio::task::spawn_blocking(move || cluster.stop()).await??;
        drop(dir);
    }
    Ok(())
}
