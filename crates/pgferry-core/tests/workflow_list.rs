//! The workflow list's rare filters (migration 0017): a terminal status and a correlation
//! key read their own index, so a page costs its matches and not the queue's history; the
//! index on the ended status leaves step updates HOT.

mod common;

use pgferry_core::workflow::{InstanceFilter, Outcome, Start, Workflows};
use serde_json::json;

/// 60k ended instances (every 3000th failed), 20k runnable; correlation keys on all.
const SEED: &str = "
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, active, finished_at,
                                  correlation_key)
SELECT g, 'k', 'q', 'end', CASE WHEN g % 3000 = 0 THEN 'failed' ELSE 'done' END, false,
       now() - interval '1 hour', 'order-' || (g % 30000)
  FROM generate_series(1, 60000) g;
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, correlation_key)
SELECT g, 'k', 'q', 'start', 'runnable', 'order-' || g FROM generate_series(60001, 80000) g;
SELECT setval('pgferry.wf_instance_ids', 100000);
ANALYZE pgferry.wf_instances;
";

fn filter(status: Option<&str>, key: Option<&str>, limit: usize) -> InstanceFilter {
    InstanceFilter {
        queue: "q".into(),
        status: status.map(str::to_string),
        correlation_key: key.map(str::to_string),
        limit,
        ..InstanceFilter::default()
    }
}

/// The plan of a list statement as `Workflows::list` runs it, analyzed: a statement
/// prepared for the call (not cached), so planned for the values given.
async fn custom_plan(
    client: &tokio_postgres::Client,
    sql: &str,
    status: Option<&str>,
    key: Option<&str>,
) -> String {
    client
        .batch_execute("SET plan_cache_mode = force_custom_plan; DEALLOCATE ALL;")
        .await
        .unwrap();
    client
        .execute(
            &format!("PREPARE l(text, text, text, text, timestamptz, bigint, int) AS {sql}"),
            &[],
        )
        .await
        .unwrap();
    let lit = |v: Option<&str>| v.map_or("NULL".to_string(), |v| format!("'{v}'"));
    let rows = client
        .query(
            &format!(
                "EXPLAIN (ANALYZE, TIMING OFF) EXECUTE l('q', NULL, {}, {}, NULL, NULL, 11)",
                lit(status),
                lit(key)
            ),
            &[],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Rows the plan's scans of wf_instances read: actual rows plus rows removed by a filter.
fn rows_read(plan: &str) -> u64 {
    let num = |s: &str| -> u64 {
        s.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap_or(0)
    };
    let mut total = 0;
    let mut in_scan = false;
    for line in plan.lines() {
        let l = line.trim_start().trim_start_matches("->  ");
        if l.contains(" Scan ") || l.starts_with("Seq Scan") || l.starts_with("Index") {
            in_scan = l.contains(" on wf_instances ");
            if in_scan {
                if let Some(p) = l.find("actual rows=") {
                    total += num(&l[p + "actual rows=".len()..]);
                }
            }
        } else if in_scan && l.starts_with("Rows Removed by Filter:") {
            total += num(l["Rows Removed by Filter:".len()..].trim());
        }
    }
    total
}

#[tokio::test]
async fn rare_filters_read_their_matches_not_the_history() {
    let s = common::setup().await;
    let admin = s.db.connect().await;
    admin.batch_execute(SEED).await.unwrap();
    let wf = Workflows::of(&s.engine);

    // A terminal status: the 20 failed instances, newest first, in keyset pages of 15.
    let p1 = wf.list(&filter(Some("failed"), None, 15)).await.unwrap();
    let ids: Vec<i64> = p1.instances.iter().map(|i| i.id).collect();
    let want: Vec<i64> = (1..=20).rev().map(|n| n * 3000).take(15).collect();
    assert_eq!(ids, want);
    assert!(p1.has_more);
    let mut f2 = filter(Some("failed"), None, 15);
    f2.before = p1.next;
    let p2 = wf.list(&f2).await.unwrap();
    let ids: Vec<i64> = p2.instances.iter().map(|i| i.id).collect();
    assert_eq!(ids, vec![15000, 12000, 9000, 6000, 3000]);
    assert!(!p2.has_more);
    assert!(p2.instances.iter().all(|i| i.status == "failed"));
    // A status nothing has: an empty page.
    let none = wf.list(&filter(Some("cancelled"), None, 50)).await.unwrap();
    assert!(none.instances.is_empty() && !none.has_more);
    // An active status lists the queue's active instances (list_active.sql, 0020).
    let run = wf.list(&filter(Some("runnable"), None, 3)).await.unwrap();
    let ids: Vec<i64> = run.instances.iter().map(|i| i.id).collect();
    assert_eq!(ids, vec![80000, 79999, 79998]);

    // A correlation key: every instance of it, ended ones included, newest first.
    let k = wf.list(&filter(None, Some("order-7"), 50)).await.unwrap();
    let ids: Vec<i64> = k.instances.iter().map(|i| i.id).collect();
    assert_eq!(ids, vec![30007, 7]);
    let k = wf
        .list(&filter(None, Some("order-60005"), 50))
        .await
        .unwrap();
    assert_eq!(k.instances.len(), 1);
    assert_eq!(k.instances[0].status, "runnable");
    // Both filters at once: the key's failed instances only.
    let k = wf
        .list(&filter(Some("failed"), Some("order-3000"), 50))
        .await
        .unwrap();
    let ids: Vec<i64> = k.instances.iter().map(|i| i.id).collect();
    assert_eq!(ids, vec![33000, 3000]);

    // The plans: each reads about its page, not the 80k instances of the queue.
    let ended = include_str!("../src/sql/workflow/list_ended.sql");
    let plan = custom_plan(&admin, ended, Some("cancelled"), None).await;
    assert!(plan.contains("wf_instances_ended"), "{plan}");
    assert!(rows_read(&plan) <= 11, "read {}:\n{plan}", rows_read(&plan));
    let plan = custom_plan(&admin, ended, Some("failed"), None).await;
    assert!(rows_read(&plan) <= 11, "read {}:\n{plan}", rows_read(&plan));
    let correlated = include_str!("../src/sql/workflow/list_correlated.sql");
    let plan = custom_plan(&admin, correlated, None, Some("order-7")).await;
    assert!(plan.contains("wf_instances_correlation_all"), "{plan}");
    assert!(rows_read(&plan) <= 2, "read {}:\n{plan}", rows_read(&plan));
}

/// n_tup_upd and n_tup_hot_upd of wf_instances, once the stats of this backend are flushed.
async fn updates(client: &tokio_postgres::Client) -> (i64, i64) {
    client
        .batch_execute("SELECT pg_stat_force_next_flush()")
        .await
        .unwrap();
    let r = client
        .query_one(
            "SELECT pg_stat_clear_snapshot(), n_tup_upd, n_tup_hot_upd
               FROM pg_stat_user_tables
              WHERE schemaname = 'pgferry' AND relname = 'wf_instances'",
            &[],
        )
        .await
        .unwrap();
    (r.get("n_tup_upd"), r.get("n_tup_hot_upd"))
}

#[tokio::test]
async fn step_updates_stay_hot_with_the_ended_status_indexed() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let client = s.db.connect().await;
    let mut st = Start::new("k", "hq", json!({}));
    st.correlation_key = Some("order-1".into());
    Workflows::start_tx(&client, &st).await.unwrap();
    let (upd0, hot0) = updates(&client).await;
    // Claims and `next` outcomes on this connection: every one an update of the instance.
    for step in 0..5 {
        let r = client
            .query_one("SELECT * FROM pgferry.wf_claim('hq', 1, 'w', 30000)", &[])
            .await
            .unwrap();
        let (id, seq): (i64, i32) = (r.get("id"), r.get("step_seq"));
        let o = Outcome::next(format!("s{step}"), json!({ "n": step }));
        let wire = serde_json::Value::Array(vec![o.to_wire(id, seq)]);
        client
            .query_one("SELECT applied FROM pgferry.wf_finish($1)", &[&wire])
            .await
            .unwrap();
    }
    let (upd1, hot1) = updates(&client).await;
    assert!(upd1 - upd0 >= 10, "updates: {upd0} -> {upd1}");
    assert_eq!(
        upd1 - upd0,
        hot1 - hot0,
        "a step update was not HOT ({} of {})",
        hot1 - hot0,
        upd1 - upd0
    );
    // The terminal transition fills ended_status (and is not HOT: `active` flips).
    let r = client
        .query_one("SELECT * FROM pgferry.wf_claim('hq', 1, 'w', 30000)", &[])
        .await
        .unwrap();
    let (id, seq): (i64, i32) = (r.get("id"), r.get("step_seq"));
    let wire = serde_json::Value::Array(vec![Outcome::fail("boom").to_wire(id, seq)]);
    client
        .query_one("SELECT applied FROM pgferry.wf_finish($1)", &[&wire])
        .await
        .unwrap();
    let page = wf.list(&filter_q("hq", "failed")).await.unwrap();
    assert_eq!(page.instances.len(), 1);
    assert_eq!(page.instances[0].id, id);
}

fn filter_q(queue: &str, status: &str) -> InstanceFilter {
    InstanceFilter {
        queue: queue.into(),
        status: Some(status.into()),
        ..InstanceFilter::default()
    }
}
