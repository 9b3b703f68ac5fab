//! pgferry's own backends are attributed to what they were serving when sampled: the role,
//! the engine queue (and so the tenant) and the job kind — from the engine's real operations
//! blocked on a real lock, and from a pooled connection left idle in its transaction.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use pgferry_ash::read::{self, Dimension};
use pgferry_core::{db, Engine, NewJob};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_backends_are_attributed_to_their_queue_kind_and_tenant() {
    let db = setup().await;
    let mut control = db.connect().await;
    pgferry_core::migrate::up(&mut control)
        .await
        .expect("engine migrate");
    let engine = Engine::new(db::pool(&db.config, "api", 4), Default::default());
    // Create the lanes and warm the enqueue lane cache, so the operations below wait in their
    // main statement.
    engine.ensure_queue("t7.emails").await.unwrap();
    engine.ensure_queue("t9.images").await.unwrap();
    engine
        .enqueue(&[
            NewJob::new("t7.emails", "send_welcome", json!({})),
            NewJob::new("t9.images", "resize", json!({})),
        ])
        .await
        .unwrap();
    let start = SystemTime::now() - Duration::from_millis(10);

    // The holder: an outside session locks the ready log and the claim receipts and stays idle in its transaction.
    let holder = db.connect().await;
    holder
        .batch_execute("BEGIN; LOCK TABLE pgferry.ready, pgferry.receipts IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let e = engine.clone();
    let enqueue = tokio::spawn(async move {
        e.enqueue(&[NewJob::new("t7.emails", "send_welcome", json!({}))])
            .await
    });
    let e = engine.clone();
    let claim = tokio::spawn(async move { e.claim("t9.images", 10, "w").await });
    wait_until(
        &control,
        "SELECT count(*) FILTER (WHERE wait_event_type = 'Lock'
                                 AND application_name = 'pgferry-api') = 2
         FROM pg_stat_activity WHERE datname = current_database()",
    )
    .await;

    // A pooled pgferry connection marked as serving a queue, left idle in its transaction.
    let pool = db::pool(&db.config, "api", 1);
    let idle = pool.get().await.unwrap();
    let _serving = pgferry_core::serving::serve(&idle, "completer", "t7.reports", "render");
    idle.batch_execute("BEGIN; SELECT 1").await.unwrap();

    let mut sampler = sampler(&db).await;
    for _ in 0..2 {
        let r = sampler.run_once().await.unwrap();
        assert_eq!(r.sampled, 4, "2 lock waiters, 2 idle in transaction");
    }
    let w = window_from(start);
    let moment = SystemTime::now();

    let aas = |by| {
        let control = &control;
        async move {
            read::aas_by(control, by, w)
                .await
                .unwrap()
                .into_iter()
                .map(|s| (s.key, s.aas.unwrap()))
                .collect::<Vec<_>>()
        }
    };
    let mut queues = aas(Dimension::Queue).await;
    queues.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        queues,
        vec![
            (String::new(), 1.0), // the outside holder: not pgferry's
            ("t7.emails".into(), 1.0),
            ("t7.reports".into(), 1.0),
            ("t9.images".into(), 1.0),
        ]
    );
    let mut tenants = aas(Dimension::Tenant).await;
    tenants.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        tenants,
        vec![(String::new(), 1.0), ("7".into(), 2.0), ("9".into(), 1.0)]
    );
    let mut kinds = aas(Dimension::JobKind).await;
    kinds.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        kinds,
        vec![
            (String::new(), 2.0), // the claim serves no single kind; the holder is not ours
            ("render".into(), 1.0),
            ("send_welcome".into(), 1.0),
        ]
    );
    let mut roles = aas(Dimension::PgferryRole).await;
    roles.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        roles,
        vec![
            (String::new(), 1.0),
            ("claimer".into(), 1.0),
            ("completer".into(), 1.0),
            ("enqueuer".into(), 1.0),
        ]
    );

    // As tenant 7 may see it: its own queues, kinds and id by name; tenant 9's claim is
    // '(other tenants)'; unattributed load ('') stays as it is.
    let scoped = |by, tenant| {
        let control = &control;
        async move {
            let mut v = read::aas_by_tenant(control, by, w, tenant)
                .await
                .unwrap()
                .into_iter()
                .map(|s| (s.key, s.aas.unwrap()))
                .collect::<Vec<_>>();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        }
    };
    let other = read::OTHER_TENANTS.to_string();
    assert_eq!(
        scoped(Dimension::Queue, 7).await,
        vec![
            (String::new(), 1.0),
            (other.clone(), 1.0),
            ("t7.emails".into(), 1.0),
            ("t7.reports".into(), 1.0),
        ]
    );
    assert_eq!(
        scoped(Dimension::Tenant, 9).await,
        vec![
            (String::new(), 1.0),
            (other.clone(), 2.0),
            ("9".into(), 1.0)
        ]
    );
    // Tenant 9's claim serves no single kind (''); tenant 7's kinds are not tenant 9's to see.
    assert_eq!(
        scoped(Dimension::JobKind, 9).await,
        vec![(String::new(), 2.0), (other.clone(), 2.0)]
    );
    // Dimensions that name no tenant's objects are the same in every view.
    assert_eq!(scoped(Dimension::PgferryRole, 9).await, roles);

    // What was running: each lock waiter with its role and queue; the idle one too.
    let now = read::activity_at(&control, moment).await.unwrap();
    let find = |role: &str| {
        now.iter()
            .find(|a| a.pgferry_role.as_deref() == Some(role))
            .unwrap_or_else(|| panic!("{role} missing from {now:?}"))
    };
    let enq = find("enqueuer");
    assert_eq!(
        (enq.wait_type.as_str(), enq.wait_event.as_str()),
        ("Lock", "relation")
    );
    assert_eq!(enq.queue.as_deref(), Some("t7.emails"));
    assert_eq!(enq.job_kind.as_deref(), Some("send_welcome"));
    let cl = find("claimer");
    assert_eq!(cl.wait_type, "Lock");
    assert_eq!(cl.queue.as_deref(), Some("t9.images"));
    let idle_row = find("completer");
    assert_eq!(idle_row.wait_type, "IdleTx");
    assert_eq!(idle_row.queue.as_deref(), Some("t7.reports"));

    holder.batch_execute("ROLLBACK").await.unwrap();
    enqueue.await.unwrap().unwrap();
    claim.await.unwrap().unwrap();
    idle.batch_execute("ROLLBACK").await.unwrap();

    // Once the operations are over their connections serve nothing: a later sample of the
    // same pooled backend doing other work is not attributed to the old queue.
    assert!(
        pgferry_core::serving::snapshot()
            .values()
            .all(|s| s.queue != "t7.emails" && s.queue != "t9.images"),
        "guards cleared"
    );
}
