//! The pg_cron mode: `pgferry_ash.take_sample()` writes what the server's sampler writes for
//! the same real waits, and pg_cron, scheduled by `cron::enable`, samples on its own.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use pgferry_ash::read;
use tokio_postgres::Client;

/// The decoded data and locks of the sample written at `at_rank` (1: the newest).
async fn decoded(c: &Client, at_rank: i64) -> (Vec<(i32, i32)>, Vec<(i32, i32, i32, Vec<i32>)>) {
    let data = c
        .query(
            "SELECT d.combo, d.n FROM (SELECT data FROM pgferry_ash.sample
                                        ORDER BY at DESC OFFSET $1::bigint - 1 LIMIT 1) s,
                    pgferry_ash.decode(s.data) d ORDER BY 1, 2",
            &[&at_rank],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let locks = c
        .query(
            "SELECT coalesce(l.pid, 0), l.sessions, l.combo,
                    ARRAY(SELECT unnest(l.blocked_by) ORDER BY 1)
             FROM (SELECT locks FROM pgferry_ash.sample ORDER BY at DESC OFFSET $1::bigint - 1 LIMIT 1) s,
                  pgferry_ash.decode_locks(s.locks) l ORDER BY 1, 2, 3, 4",
            &[&at_rank],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    (data, locks)
}

#[tokio::test]
async fn take_sample_in_sql_writes_what_the_server_sampler_writes() {
    let db = setup().await;
    let control = db.connect().await;
    control
        .batch_execute("CREATE TABLE t (id int); INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    let holder = pgferry_conn(&db, "leader").await;
    holder
        .batch_execute("BEGIN; LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let c = pgferry_conn(&db, "claimer").await;
        waiters.push(tokio::spawn(async move {
            let r = c.query("SELECT count(*) FROM t", &[]).await;
            (c, r)
        }));
    }
    let sleeper = pgferry_conn(&db, "completer").await;
    let sleeping = tokio::spawn(async move {
        let _ = sleeper.query("SELECT pg_sleep(60)", &[]).await;
    });
    wait_until(
        &control,
        "SELECT count(*) FILTER (WHERE wait_event_type = 'Lock') = 3
            AND count(*) FILTER (WHERE wait_event = 'PgSleep') = 1
         FROM pg_stat_activity WHERE datname = current_database()",
    )
    .await;

    // The server's sampler, then the SQL one, on the same waits. `control` is idle between
    // statements, so neither sees the other's session as busy.
    let start = SystemTime::now() - Duration::from_millis(10);
    let mut sampler = sampler(&db).await;
    let r = sampler.run_once().await.unwrap();
    assert_eq!(r.sampled, 5);
    let sampled: i32 = control
        .query_one(
            "SELECT pgferry_ash.take_sample(1000, ARRAY[current_database()]) AS n",
            &[],
        )
        .await
        .unwrap()
        .get("n");
    // take_sample's own session is the caller (`control`, excluded); the server sampler's
    // session is idle now, so both see the same 5 backends.
    assert_eq!(sampled, 5);
    let by_sql = decoded(&control, 1).await;
    let by_rust = decoded(&control, 2).await;
    assert_eq!(by_sql, by_rust, "SQL vs Rust sample");
    assert_eq!(by_sql.0.iter().map(|x| x.1).sum::<i32>(), 5);
    // The holder is one group (a root), the three waiters one group of three.
    assert_eq!(by_sql.1.len(), 2, "{:?}", by_sql.1);

    // The readers count both samples: 2 s of 3 lock waiters.
    let waits = read::top_waits(&control, window_from(start), 10)
        .await
        .unwrap();
    let lock = waits.iter().find(|w| w.wait_type == "Lock").unwrap();
    assert_eq!((lock.seconds, lock.aas), (6.0, Some(3.0)));

    holder.batch_execute("ROLLBACK").await.unwrap();
    for w in waiters {
        w.await.unwrap().1.unwrap();
    }
    control
        .execute(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap();
    let _ = sleeping.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_cron_runs_the_sampler_when_enabled() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = pgferry_pgcluster::ClusterOptions::new(dir.path().join("pg"));
    // pg_cron runs each job over a libpq connection to cron.host.
    opts.listen_tcp = true;
    opts.settings = vec![
        ("shared_preload_libraries".into(), "pg_cron".into()),
        ("cron.database_name".into(), "postgres".into()),
        ("cron.host".into(), "127.0.0.1".into()),
    ];
    let cluster = tokio::task::spawn_blocking(move || pgferry_pgcluster::Cluster::start(opts))
        .await
        .unwrap()
        .expect("a cluster with pg_cron (scripts/setup.sh installs postgresql-NN-cron)");
    let config: tokio_postgres::Config = cluster.conn_string("postgres").parse().unwrap();
    let mut c = pgferry_core::db::connect(&config, "test").await.unwrap();
    pgferry_ash::migrate::up(&mut c).await.unwrap();

    // Without the extension: a typed error naming pg_cron.
    match pgferry_ash::cron::enable(&c, Duration::from_secs(1), None).await {
        Err(pgferry_ash::AshError::InvalidArgument { field, .. }) => assert_eq!(field, "pg_cron"),
        other => panic!("{other:?}"),
    }
    c.batch_execute("CREATE EXTENSION pg_cron").await.unwrap();
    match pgferry_ash::cron::enable(&c, Duration::from_millis(10), None).await {
        Err(pgferry_ash::AshError::InvalidArgument { field, .. }) => {
            assert_eq!(field, "ash interval")
        }
        other => panic!("{other:?}"),
    }
    let dbs = vec!["postgres".to_string()];
    let job = pgferry_ash::cron::enable(&c, Duration::from_millis(500), Some(&dbs))
        .await
        .unwrap();
    let again = pgferry_ash::cron::enable(&c, Duration::from_millis(500), Some(&dbs))
        .await
        .unwrap();
    assert_eq!(job, again, "enabling twice keeps one job");

    // A pgferry backend sleeps while pg_cron's job samples (the first run starts at the
    // next minute boundary).
    let sleeper = pgferry_core::db::connect(&config, "completer")
        .await
        .unwrap();
    let sleeping = tokio::spawn(async move {
        let _ = sleeper.query("SELECT pg_sleep(120)", &[]).await;
    });
    let start = SystemTime::now() - Duration::from_millis(10);
    let mut samples = 0i64;
    for _ in 0..(90 * 4) {
        samples = c
            .query_one("SELECT count(*) FROM pgferry_ash.sample", &[])
            .await
            .unwrap()
            .get(0);
        if samples >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if samples < 4 {
        let runs: Vec<String> = c
            .query(
                "SELECT status || ': ' || coalesce(return_message, '') FROM cron.job_run_details",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        panic!("pg_cron took {samples} samples in 90 s; runs: {runs:?}");
    }
    let cadence: Vec<i32> = c
        .query("SELECT DISTINCT interval_ms FROM pgferry_ash.sample", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(cadence, vec![500], "the cadence is stored with the data");
    let roles = read::aas_by(&c, read::Dimension::PgferryRole, window_from(start))
        .await
        .unwrap();
    let completer = roles.iter().find(|s| s.key == "completer").unwrap();
    assert_eq!(completer.aas, Some(1.0), "{roles:?}");

    assert!(pgferry_ash::cron::disable(&c).await.unwrap());
    assert!(
        !pgferry_ash::cron::disable(&c).await.unwrap(),
        "already gone"
    );
    let jobs: i64 = c
        .query_one(
            "SELECT count(*) FROM cron.job WHERE jobname = 'pgferry-ash'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(jobs, 0);
    sleeping.abort();
    drop(c);
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .unwrap()
        .unwrap();
}
