//! `bench cycle --shape lone-producer` (issue 21's acknowledgement target): every path is
//! sampled once per round, the writes it times are the writes it claims to time, and the
//! refused request writes nothing.

use std::time::Duration;

use pgferry_bench::lone_producer;

#[tokio::test]
async fn each_round_writes_one_job_per_accepting_path_and_keys_where_it_says() {
    let db = pgferry_testkit::test_db().await;
    let gap = Duration::from_millis(1);
    let run = lone_producer::run(&db.config, Some(gap), Duration::from_millis(300), 256)
        .await
        .unwrap();
    for p in [
        &run.bare_commit,
        &run.engine,
        &run.engine_keyed,
        &run.grpc,
        &run.grpc_refused,
        &run.tcp_round_trip,
        &run.unix_round_trip,
    ] {
        assert_eq!(
            p.samples, run.rounds,
            "one sample per path and round: {run:?}"
        );
        assert!(p.p50_ms > 0.0 && p.p99_ms >= p.p50_ms, "{run:?}");
    }
    // Paced: seven requests per round, each after its gap.
    assert!(run.rounds >= 1 && run.rounds <= 300 / 7 + 1, "{run:?}");
    // The floors add a hop to the engine's own acknowledgement.
    for floor in [
        run.engine_plus_tcp_round_trip_p50_vs_bare_commit_p50,
        run.engine_plus_unix_round_trip_p50_vs_bare_commit_p50,
    ] {
        assert!(floor > run.engine_ack_p50_vs_bare_commit_p50, "{run:?}");
    }

    // The run's own database: every round (the warm-up's too) wrote one job in process, one
    // with a key in process and one over gRPC (keyed by the client), and nothing for the
    // refused request.
    let c = db.connect_other("bench_lone_producer").await;
    let count = |sql: &'static str| {
        let c = &c;
        async move { c.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    let commits = count("SELECT count(*) FROM bench_commit").await;
    let jobs = count("SELECT count(*) FROM pgferry.ready").await;
    let keys = count("SELECT count(*) FROM pgferry.idempotency_keys").await;
    assert!(
        commits as usize > run.rounds,
        "warm-up rounds wrote too: {commits}"
    );
    assert_eq!(jobs, 3 * commits, "one job per accepting path and round");
    assert_eq!(
        keys,
        2 * commits,
        "the keyed engine path and gRPC record a key"
    );
}
