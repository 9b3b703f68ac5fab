//! Backends of *other* pgferry servers are attributed from what those servers published
//! (`pgferry_ash.published`), by the server's sampler and by `take_sample()` (pg_cron mode)
//! alike — and only when the statement a backend runs began inside the published operation
//! and before the snapshot. Parallel workers take their leader's attribution. The two-process
//! version (two real `pgferry serve`) is `pgferry-cli`'s `ash_serve` test.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use common::*;
use pgferry_ash::publish::{Published, Publisher};
use pgferry_ash::read;
use pgferry_core::serving::Serving;
use tokio_postgres::Client;

fn serving(role: &'static str, queue: &str, kind: &str) -> Serving {
    Serving {
        role,
        queue: queue.into(),
        kind: kind.into(),
    }
}

async fn pid(c: &Client) -> i32 {
    c.query_one("SELECT pg_backend_pid() AS pid", &[])
        .await
        .unwrap()
        .get("pid")
}

async fn wait_lock_waiters(control: &Client, n: i64) {
    wait_until(
        control,
        &format!(
            "SELECT count(*) = {n} FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ),
    )
    .await;
}

/// Rows of the last sample, by queue (None: not attributed to a queue).
async fn sessions_by_queue(control: &Client) -> HashMap<Option<String>, Vec<read::Activity>> {
    let mut out: HashMap<Option<String>, Vec<read::Activity>> = HashMap::new();
    for a in read::activity_at(control, SystemTime::now() + Duration::from_millis(100))
        .await
        .unwrap()
    {
        out.entry(a.queue.clone()).or_default().push(a);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_servers_backends_are_attributed_only_inside_their_published_operation() {
    let db = setup().await;
    let control = db.connect().await;
    control
        .batch_execute("CREATE TABLE t (id int)")
        .await
        .unwrap();
    let holder = db.connect().await;
    holder
        .batch_execute("BEGIN; LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let wait_on_t =
        |c: Client| tokio::spawn(async move { c.query("SELECT count(*) FROM t", &[]).await });

    // w1: its operation began before its statement, and the snapshot saw it afterwards.
    let (w1, w2, w3) = (
        pgferry_conn(&db, "api").await,
        pgferry_conn(&db, "api").await,
        pgferry_conn(&db, "api").await,
    );
    let (p1, p2, p3) = (pid(&w1).await, pid(&w2).await, pid(&w3).await);
    let since1 = Instant::now();
    let j1 = wait_on_t(w1);
    wait_lock_waiters(&control, 1).await;
    // w2: the published operation began after the statement it runs (the backend moved on
    // to another operation the snapshot knows nothing of).
    let j2 = wait_on_t(w2);
    wait_lock_waiters(&control, 2).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let since2 = Instant::now();
    let taken = Instant::now();
    // w3: its statement began after the snapshot was taken.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let j3 = wait_on_t(w3);
    wait_lock_waiters(&control, 3).await;

    let mut other = Publisher::named(db.connect().await, "other-server".into())
        .await
        .unwrap();
    let snapshot = HashMap::from([
        (p1, (serving("claimer", "t4.videos", "transcode"), since1)),
        (p2, (serving("claimer", "t4.stale", ""), since2)),
        (p3, (serving("enqueuer", "t4.late", ""), since1)),
    ]);
    assert_eq!(
        other.publish_snapshot(snapshot, taken).await.unwrap(),
        Published::Wrote(3)
    );

    // The server's sampler.
    let mut sampler = sampler(&db).await;
    let r = sampler.run_once().await.unwrap();
    assert_eq!(
        r.sampled, 4,
        "3 lock waiters and the idle-in-transaction holder"
    );
    assert_eq!((r.attributed_here, r.attributed_published), (0, 1));
    let check = |rows: HashMap<Option<String>, Vec<read::Activity>>, mode: &str| {
        let videos = &rows[&Some("t4.videos".to_string())];
        assert_eq!(videos.len(), 1, "{mode}: {rows:?}");
        let v = &videos[0];
        assert_eq!(v.sessions, 1, "{mode}");
        assert_eq!(v.pgferry_role.as_deref(), Some("claimer"), "{mode}");
        assert_eq!(v.job_kind.as_deref(), Some("transcode"), "{mode}");
        assert_eq!(
            (v.wait_type.as_str(), v.wait_event.as_str()),
            ("Lock", "relation")
        );
        // w2 and w3 keep their role from application_name, and no queue.
        let rest: i32 = rows[&None]
            .iter()
            .filter(|a| a.pgferry_role.as_deref() == Some("api"))
            .map(|a| a.sessions)
            .sum();
        assert_eq!(rest, 2, "{mode}: {rows:?}");
        assert_eq!(rows.len(), 2, "{mode}: no other queue: {rows:?}");
    };
    check(sessions_by_queue(&control).await, "server sampler");

    // The pg_cron mode's sampler joins the same table.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let n: i32 = control
        .query_one(
            "SELECT pgferry_ash.take_sample(1000, ARRAY[current_database()]) AS n",
            &[],
        )
        .await
        .unwrap()
        .get("n");
    assert_eq!(n, 4);
    check(sessions_by_queue(&control).await, "take_sample");

    // Publishing again what is unchanged and idle costs nothing; a server that becomes idle
    // writes once.
    assert_eq!(
        other
            .publish_snapshot(HashMap::new(), Instant::now())
            .await
            .unwrap(),
        Published::Wrote(0)
    );
    assert_eq!(
        other
            .publish_snapshot(HashMap::new(), Instant::now())
            .await
            .unwrap(),
        Published::Skipped
    );

    // A snapshot past the TTL (its server died) is pruned by the sampler.
    control
        .batch_execute(
            "UPDATE pgferry_ash.published SET at = at - interval '1 hour';
             INSERT INTO pgferry_ash.published VALUES
                 ('live', now(), '{}', '{}', '{}', '{}', '{}')",
        )
        .await
        .unwrap();
    let mut sampler = common::sampler(&db).await;
    sampler.run_once().await.unwrap();
    let left: Vec<String> = control
        .query("SELECT server FROM pgferry_ash.published", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get("server"))
        .collect();
    assert_eq!(left, vec!["live".to_string()]);

    holder.batch_execute("ROLLBACK").await.unwrap();
    for j in [j1, j2, j3] {
        j.await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_workers_count_under_their_leaders_queue() {
    let db = setup().await;
    let control = db.connect().await;
    control
        .batch_execute(
            "CREATE TABLE big AS SELECT g AS id FROM generate_series(1, 20000) g;
             ANALYZE big;
             CREATE FUNCTION slow(int) RETURNS bool LANGUAGE sql PARALLEL SAFE COST 100000
                 AS 'SELECT pg_sleep(0.001) IS NOT NULL'",
        )
        .await
        .unwrap();
    let leader = pgferry_conn(&db, "api").await;
    leader
        .batch_execute(
            "SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0;
             SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0",
        )
        .await
        .unwrap();
    let plan: String = leader
        .query("EXPLAIN SELECT count(*) FROM big WHERE slow(id)", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0) + "\n")
        .collect();
    assert!(plan.contains("Gather"), "{plan}");
    let leader_pid = pid(&leader).await;
    let since = Instant::now();
    let cancel = leader.cancel_token();
    let running = tokio::spawn(async move {
        leader
            .query("SELECT count(*) FROM big WHERE slow(id)", &[])
            .await
    });
    wait_until(
        &control,
        &format!(
            "SELECT count(*) >= 1 FROM pg_stat_activity
             WHERE leader_pid = {leader_pid} AND pid <> {leader_pid}
               AND backend_type = 'parallel worker'"
        ),
    )
    .await;
    // max_parallel_workers_per_gather
    let workers = 2;
    let mut other = Publisher::named(db.connect().await, "other-server".into())
        .await
        .unwrap();
    other
        .publish_snapshot(
            HashMap::from([(
                leader_pid,
                (serving("claimer", "t5.reports", "monthly"), since),
            )]),
            Instant::now(),
        )
        .await
        .unwrap();

    let mut sampler = sampler(&db).await;
    let r = sampler.run_once().await.unwrap();
    assert_eq!(r.attributed_published, 1, "the leader itself");
    let check = |rows: HashMap<Option<String>, Vec<read::Activity>>, mode: &str| {
        let reports = &rows[&Some("t5.reports".to_string())];
        let by_type = |t: &str| -> i32 {
            reports
                .iter()
                .filter(|a| a.backend_type == t)
                .map(|a| a.sessions)
                .sum()
        };
        assert_eq!(by_type("client backend"), 1, "{mode}: {rows:?}");
        assert!(
            i64::from(by_type("parallel worker")) >= 1
                && i64::from(by_type("parallel worker")) <= workers,
            "{mode}: {workers} workers: {rows:?}"
        );
        assert!(
            reports
                .iter()
                .all(|a| a.job_kind.as_deref() == Some("monthly")
                    && a.pgferry_role.as_deref() == Some("claimer")),
            "{mode}: {rows:?}"
        );
        assert!(
            !rows
                .get(&None)
                .map(|r| r.iter().any(|a| a.backend_type == "parallel worker"))
                .unwrap_or(false),
            "{mode}: a worker left unattributed: {rows:?}"
        );
    };
    check(sessions_by_queue(&control).await, "server sampler");
    control
        .query_one(
            "SELECT pgferry_ash.take_sample(1000, ARRAY[current_database()])",
            &[],
        )
        .await
        .unwrap();
    check(sessions_by_queue(&control).await, "take_sample");

    cancel.cancel_query(tokio_postgres::NoTls).await.unwrap();
    assert!(running.await.unwrap().is_err(), "cancelled");
}
