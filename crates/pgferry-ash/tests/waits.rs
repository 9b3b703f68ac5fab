//! Real waits (a lock held while others queue on it, pg_sleep, idle in transaction) are
//! sampled and reported by every reader, with pgferry's roles for its own backends.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use pgferry_ash::read::{self, Dimension};

#[tokio::test]
async fn lock_waits_sleep_and_idle_in_transaction_are_reported() {
    let db = setup().await;
    let control = db.connect().await;
    control
        .batch_execute("CREATE TABLE t (id int); INSERT INTO t VALUES (1)")
        .await
        .unwrap();
    let start = SystemTime::now() - Duration::from_millis(10);

    // The holder: locks the table and stays idle in its transaction.
    let holder = pgferry_conn(&db, "leader").await;
    holder
        .batch_execute("BEGIN; LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let holder_pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    // Two claimers queue on the lock.
    let mut waiters = Vec::new();
    for _ in 0..2 {
        let c = pgferry_conn(&db, "claimer").await;
        waiters.push(tokio::spawn(async move {
            let r = c.query("SELECT count(*) FROM t", &[]).await;
            (c, r)
        }));
    }
    // A completer sleeps.
    let sleeper = pgferry_conn(&db, "completer").await;
    let sleeping = tokio::spawn(async move {
        let _ = sleeper.query("SELECT pg_sleep(60)", &[]).await;
    });
    wait_until(
        &control,
        "SELECT count(*) FILTER (WHERE wait_event_type = 'Lock') = 2
            AND count(*) FILTER (WHERE wait_event = 'PgSleep') = 1
            AND count(*) FILTER (WHERE state = 'idle in transaction') = 1
         FROM pg_stat_activity WHERE datname = current_database()",
    )
    .await;

    let mut sampler = sampler(&db).await;
    for _ in 0..3 {
        let r = sampler.run_once().await.unwrap();
        assert_eq!(r.sampled, 4, "2 lock waiters, a sleeper, the idle holder");
        assert_eq!(r.in_lock_chains, 3, "2 waiters and their blocker");
    }
    let moment = SystemTime::now();
    let w = window_from(start);

    let waits = read::top_waits(&control, w, 10).await.unwrap();
    let find = |t: &str, e: &str| {
        waits
            .iter()
            .find(|x| x.wait_type == t && x.wait_event == e)
            .unwrap_or_else(|| panic!("{t}:{e} missing from {waits:?}"))
            .clone()
    };
    // 3 samples of 1 s each: 2 waiters = 6 session-seconds, AAS 2.
    let lock = find("Lock", "relation");
    assert_eq!((lock.seconds, lock.aas), (6.0, Some(2.0)));
    assert_eq!(find("Timeout", "PgSleep").aas, Some(1.0));
    assert_eq!(find("IdleTx", "idle in transaction").aas, Some(1.0));
    assert_eq!(waits[0].wait_type, "Lock", "largest first");
    assert!((lock.db_time_pct.unwrap() - 50.0).abs() < 1e-9);

    let roles = read::aas_by(&control, Dimension::PgferryRole, w)
        .await
        .unwrap();
    let role = |k: &str| roles.iter().find(|s| s.key == k).and_then(|s| s.aas);
    assert_eq!(role("claimer"), Some(2.0));
    assert_eq!(role("completer"), Some(1.0));
    assert_eq!(role("leader"), Some(1.0));
    let dbs = read::aas_by(&control, Dimension::Database, w)
        .await
        .unwrap();
    assert_eq!(dbs.len(), 1);
    assert_eq!(
        (dbs[0].key.as_str(), dbs[0].aas),
        (db.name.as_str(), Some(4.0))
    );

    let split = read::cpu_vs_waiting(&control, w).await.unwrap();
    assert_eq!(split.covered_seconds, 3.0);
    assert_eq!(split.waiting, Some(3.0));
    assert_eq!(split.idle_in_transaction, Some(1.0));
    assert_eq!(split.cpu, Some(0.0));

    // Lock waiters queue while their statement is parsed, before Postgres computes its
    // query id: they are the "no query id" row. Without pg_stat_statements in the
    // database, the sleeper's text comes from pg_stat_activity at first sight.
    let queries = read::top_queries(&control, w, 10).await.unwrap();
    let q = &queries[0];
    assert_eq!((q.query_id, q.aas), (None, Some(2.0)));
    assert_eq!(q.top_wait.as_deref(), Some("Lock:relation"));
    let sleep = queries
        .iter()
        .find(|q| q.top_wait.as_deref() == Some("Timeout:PgSleep"))
        .unwrap();
    assert!(sleep.query_id.is_some());
    assert_eq!(sleep.query_text.as_deref(), Some("SELECT pg_sleep(60)"));

    let now = read::activity_at(&control, moment).await.unwrap();
    let locked = now.iter().find(|a| a.wait_type == "Lock").unwrap();
    assert_eq!(locked.sessions, 2);
    assert_eq!(locked.pgferry_role.as_deref(), Some("claimer"));

    // The holder is a root; the two claimers queue behind it with the same combo, so
    // they are one group of two.
    let chains = read::blocking_at(&control, moment).await.unwrap();
    assert_eq!(chains.len(), 2, "{chains:?}");
    let root = chains.iter().find(|c| c.pid == Some(holder_pid)).unwrap();
    assert_eq!((root.depth, root.root_pid), (Some(0), Some(holder_pid)));
    assert_eq!(root.pgferry_role.as_deref(), Some("leader"));
    let queued = chains.iter().find(|c| c.pid.is_none()).unwrap();
    assert_eq!(queued.sessions, 2);
    assert_eq!(queued.blocked_by, vec![holder_pid]);
    assert_eq!((queued.depth, queued.root_pid), (Some(1), Some(holder_pid)));
    assert_eq!(queued.wait_event.as_deref(), Some("relation"));
    assert_eq!(queued.pgferry_role.as_deref(), Some("claimer"));

    // Timeline: one bucket holding the three samples, stacked by wait type.
    let tl = read::timeline(&control, w, Duration::from_secs(3600))
        .await
        .unwrap();
    let lock_pt = tl
        .iter()
        .find(|p| p.wait_type.as_deref() == Some("Lock"))
        .unwrap();
    assert_eq!(lock_pt.aas, 2.0);

    holder.batch_execute("ROLLBACK").await.unwrap();
    for w in waiters {
        let (_, r) = w.await.unwrap();
        r.unwrap();
    }
    sleeping.abort();
    control
        .execute(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn idle_ticks_are_heartbeats_and_gaps_are_the_sampler_down() {
    let db = setup().await;
    let control = db.connect().await;
    let before = SystemTime::now() - Duration::from_secs(20);
    let mut sampler = sampler(&db).await;
    for _ in 0..2 {
        let r = sampler.run_once().await.unwrap();
        assert_eq!((r.sampled, r.data_len), (0, 0));
    }
    let w = window_from(before);
    let split = read::cpu_vs_waiting(&control, w).await.unwrap();
    assert_eq!(split.covered_seconds, 2.0, "both idle ticks were recorded");
    assert_eq!(split.cpu, Some(0.0));
    let tl = read::timeline(&control, w, Duration::from_secs(1))
        .await
        .unwrap();
    let covered: Vec<_> = tl.iter().filter(|p| p.coverage > 0.0).collect();
    assert!(
        !covered.is_empty()
            && covered
                .iter()
                .all(|p| p.wait_type.is_none() && p.aas == 0.0)
    );
    // Before the sampler ran: buckets with no coverage at all (down, not idle).
    assert_eq!(tl[0].coverage, 0.0);
    assert!(tl.len() >= 20);
}

#[tokio::test]
async fn query_text_from_pg_stat_statements_and_no_query_id_degrade() {
    let db = setup().await;
    let control = db.connect().await;
    control
        .batch_execute("CREATE EXTENSION pg_stat_statements")
        .await
        .unwrap();
    let start = SystemTime::now() - Duration::from_millis(10);
    let a = pgferry_conn(&db, "api").await;
    let with_id = tokio::spawn(async move { a.query("SELECT pg_sleep(60)", &[]).await });
    // No query id: this session computes none (as without pg_stat_statements loaded).
    let b = pgferry_conn(&db, "api").await;
    b.batch_execute("SET compute_query_id = off").await.unwrap();
    let without = tokio::spawn(async move { b.query("SELECT pg_sleep(61)", &[]).await });
    wait_until(
        &control,
        "SELECT count(*) = 2 FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()",
    )
    .await;
    // pg_stat_statements records a statement when it finishes: run one like it first
    // (same parse tree: an integer constant).
    control.execute("SELECT pg_sleep(0)", &[]).await.unwrap();
    let mut sampler = sampler(&db).await;
    sampler.run_once().await.unwrap();
    let q = read::top_queries(&control, window_from(start), 10)
        .await
        .unwrap();
    assert_eq!(q.len(), 2, "{q:?}");
    let normalised = q.iter().find(|x| x.query_id.is_some()).unwrap();
    assert_eq!(
        normalised.query_text.as_deref(),
        Some("SELECT pg_sleep($1)")
    );
    let none = q.iter().find(|x| x.query_id.is_none()).unwrap();
    assert_eq!((none.query_text.as_deref(), none.aas), (None, Some(1.0)));
    control
        .execute(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap();
    let _ = with_id.await;
    let _ = without.await;
}

#[tokio::test]
async fn a_chain_two_deep_reports_each_level() {
    let db = setup().await;
    let control = db.connect().await;
    control
        .batch_execute("CREATE TABLE t1 (id int); CREATE TABLE t2 (id int)")
        .await
        .unwrap();
    // a holds t1; b holds t2 and waits for t1; c waits for t2 (behind b, behind a).
    let a = pgferry_conn(&db, "leader").await;
    a.batch_execute("BEGIN; LOCK TABLE t1").await.unwrap();
    let b = pgferry_conn(&db, "api").await;
    b.batch_execute("BEGIN; LOCK TABLE t2").await.unwrap();
    let b_pid: i32 = b
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let b_task = tokio::spawn(async move {
        let r = b.batch_execute("LOCK TABLE t1").await;
        (b, r)
    });
    let c = pgferry_conn(&db, "claimer").await;
    let c_task = tokio::spawn(async move { c.query("SELECT count(*) FROM t2", &[]).await });
    wait_until(
        &control,
        "SELECT count(*) = 2 FROM pg_stat_activity
         WHERE wait_event_type = 'Lock' AND datname = current_database()",
    )
    .await;
    let mut s = sampler(&db).await;
    assert_eq!(s.run_once().await.unwrap().in_lock_chains, 3);
    let chains = read::blocking_at(&control, SystemTime::now())
        .await
        .unwrap();
    let depth_of = |role: &str| {
        chains
            .iter()
            .find(|c| c.pgferry_role.as_deref() == Some(role))
            .and_then(|c| c.depth)
    };
    assert_eq!(depth_of("leader"), Some(0), "{chains:?}");
    assert_eq!(depth_of("api"), Some(1), "{chains:?}");
    assert_eq!(depth_of("claimer"), Some(2), "{chains:?}");
    let c_row = chains
        .iter()
        .find(|c| c.pgferry_role.as_deref() == Some("claimer"))
        .unwrap();
    assert_eq!((c_row.pid, c_row.blocked_by.clone()), (None, vec![b_pid]));
    a.batch_execute("ROLLBACK").await.unwrap();
    let (b, r) = b_task.await.unwrap();
    r.unwrap();
    b.batch_execute("ROLLBACK").await.unwrap();
    c_task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_queue_for_one_lock_points_at_its_holder() {
    let db = setup().await;
    let control = db.connect().await;
    // The holder takes an exclusive advisory lock; five sessions queue for it. Postgres
    // names the waiters ahead in the queue as blockers too; the sample keeps the holder.
    let holder = pgferry_conn(&db, "leader").await;
    holder
        .batch_execute("BEGIN; SELECT pg_advisory_xact_lock(7)")
        .await
        .unwrap();
    let holder_pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let mut tasks = Vec::new();
    for i in 0..5 {
        let c = pgferry_conn(&db, "claimer").await;
        tasks.push(tokio::spawn(async move {
            c.query("SELECT pg_advisory_xact_lock(7)", &[])
                .await
                .unwrap();
            c
        }));
        wait_until(
            &control,
            &format!(
                "SELECT count(*) = {} FROM pg_stat_activity
                 WHERE wait_event = 'advisory' AND datname = current_database()",
                i + 1
            ),
        )
        .await;
    }
    let raw: i64 = control
        .query_one(
            "SELECT sum(cardinality(pg_blocking_pids(pid))) FROM pg_stat_activity
             WHERE wait_event = 'advisory' AND datname = current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(raw > 5, "the queue names waiters ahead as blockers: {raw}");
    let mut s = sampler(&db).await;
    assert_eq!(s.run_once().await.unwrap().in_lock_chains, 6);
    let chains = read::blocking_at(&control, SystemTime::now())
        .await
        .unwrap();
    assert_eq!(
        chains.len(),
        2,
        "the holder and one group of five: {chains:?}"
    );
    let group = chains.iter().find(|c| c.pid.is_none()).unwrap();
    assert_eq!(
        (group.sessions, group.blocked_by.clone()),
        (5, vec![holder_pid])
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    for t in tasks {
        let c = t.await.unwrap();
        drop(c);
    }
}
