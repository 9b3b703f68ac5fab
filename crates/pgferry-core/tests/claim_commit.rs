//! Claims commit asynchronously (ADR 0019): a claim acknowledges nothing to anyone, so it
//! need not wait for a WAL flush. A claim lost in a Postgres crash is a lease that was never
//! taken: its jobs are claimed again, and of the two attempts' outcomes the first wins.
//!
//! Runs its own durable cluster (the test kit's shared one runs with fsync and
//! synchronous_commit off, where every commit is asynchronous). The WAL writer is slowed to
//! its 10 s maximum so that nothing but a synchronous commit flushes a claim before the
//! crash; autovacuum is off so that no other transaction commits in between.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use pgferry_core::{db, leader, migrate, Engine, EngineConfig, NewJob, QueueOptions};
use pgferry_pgcluster::{Cluster, ClusterOptions};
use serde_json::json;
use tokio_postgres::NoTls;

async fn start(opts: ClusterOptions) -> Cluster {
    tokio::task::spawn_blocking(move || Cluster::start(opts))
        .await
        .unwrap()
        .expect("postgres")
}

fn engine(cluster: &Cluster, async_claims: bool) -> Arc<Engine> {
    let config: tokio_postgres::Config = cluster.conn_string("postgres").parse().unwrap();
    Engine::new(
        db::pool(&config, "test", 4),
        EngineConfig {
            async_claims,
            counter_flush: Duration::from_secs(3600),
            ..EngineConfig::default()
        },
    )
}

async fn connect(cluster: &Cluster) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&cluster.conn_string("postgres"), NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    client
}

/// Enqueues three jobs, ticks, claims them, crashes Postgres (SIGQUIT: no checkpoint, no
/// WAL write) at once and starts it again. Returns the ids claimed before the crash and
/// those a new claim gets after it.
async fn claim_then_crash(async_claims: bool) -> (Vec<i64>, Vec<i64>) {
    let dir = tempfile::Builder::new()
        .prefix("pgferry-claim-commit-")
        .tempdir_in("/tmp")
        .unwrap();
    // Postgres runs as its own user when the tests run as root: it must traverse this.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let opts = ClusterOptions {
        fsync: true,
        settings: vec![
            ("wal_writer_delay".into(), "10s".into()),
            ("autovacuum".into(), "off".into()),
        ],
        ..ClusterOptions::new(dir.path().join("pg"))
    };
    let cluster = start(opts.clone()).await;
    let port = cluster.port();
    let mut client = connect(&cluster).await;
    migrate::up(&mut client).await.expect("migrate");
    let before = engine(&cluster, async_claims);
    before
        .upsert_queue("q", &QueueOptions::default())
        .await
        .unwrap();
    let jobs: Vec<_> = (0..3)
        .map(|i| NewJob::new("q", "k", json!({ "i": i })))
        .collect();
    // Both commit synchronously: the jobs and the tick survive any crash after this.
    let mut enqueued = before.enqueue(&jobs).await.expect("enqueue");
    leader::ticker::tick(&client).await.expect("tick");
    let claimed = before.claim("q", 10, "w1").await.expect("claim");
    let pid = cluster.postmaster_pid();
    // SAFETY: kill(2) with a pid and a signal number has no memory effects.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGQUIT) }, 0);
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .unwrap()
        .expect("reap");
    before.close();

    let cluster = start(ClusterOptions {
        port: Some(port),
        ..opts
    })
    .await;
    let after = engine(&cluster, async_claims);
    let again = after.claim("q", 10, "w2").await.expect("claim after");
    // Of the two attempts' outcomes the first recorded wins; the other is stale.
    let first: Vec<_> = again.iter().map(|j| j.completed(None)).collect();
    let won = after.complete(&first).await.expect("complete");
    assert!(won.iter().all(|c| !c.stale), "{won:?}");
    let late: Vec<_> = claimed.iter().map(|j| j.completed(None)).collect();
    let late = after.complete(&late).await.expect("late complete");
    if !again.is_empty() {
        assert!(late.iter().all(|c| c.stale), "{late:?}");
    }
    after.close();
    drop(cluster);

    let mut before_ids: Vec<i64> = claimed.iter().map(|j| j.job_id).collect();
    let mut after_ids: Vec<i64> = again.iter().map(|j| j.job_id).collect();
    before_ids.sort_unstable();
    after_ids.sort_unstable();
    enqueued.sort_unstable();
    assert_eq!(
        before_ids, enqueued,
        "the claim before the crash got every job"
    );
    (before_ids, after_ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_claim_lost_in_a_crash_is_claimed_again() {
    let (before, after) = claim_then_crash(true).await;
    assert_eq!(
        after, before,
        "the claim was not flushed, so after the crash its jobs are claimable again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synchronous_claim_survives_a_crash() {
    let (_, after) = claim_then_crash(false).await;
    assert!(
        after.is_empty(),
        "a flushed claim holds its jobs' leases across the crash: {after:?}"
    );
}
