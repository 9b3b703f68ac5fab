//! list_jobs keeps its index walks whatever the statistics said when a connection made its
//! generic plan: the plans are made in the listing's transaction, with its settings
//! (list_generic_plans.sql), and kept until the next invalidation — a fresh database's
//! tables grow by thousands of rows before the first ANALYZE (issue 22's benchmark: the
//! scheduled phase read every delayed job of the queue, and sorted them, for each page).

mod common;

use std::time::Duration;

use pgferry_core::{JobFilter, JobState, NewJob};
use serde_json::json;

const SETTINGS: &str = include_str!("../src/sql/list_generic_plans.sql");
const LIST_SCHEDULED: &str = include_str!("../src/sql/list_scheduled.sql");
const LIST_DEAD: &str = include_str!("../src/sql/list_dead.sql");
const LIST_SCHEDULED_LANES: &str = include_str!("../src/sql/list_scheduled_lanes.sql");

/// Rows the scan nodes on `table` (not partitioned) returned or filtered out.
fn rows_read(plan: &str, table: &str) -> u64 {
    let mut total = 0;
    let mut in_scan = false;
    for line in plan.lines() {
        let l = line.trim_start().trim_start_matches("->  ");
        if l.contains("Scan") {
            in_scan = l.contains(&format!(" on {table} "));
            if in_scan {
                total += l
                    .split("rows=")
                    .nth(1)
                    .and_then(|r| r.split(' ').next())
                    .and_then(|r| r.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        } else if in_scan && l.starts_with("Rows Removed by") {
            total += l
                .rsplit(':')
                .next()
                .and_then(|n| n.trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    total
}

/// Prepares `sql` as `name` and runs it once inside a listing transaction, as list_jobs does
/// on a pooled connection: the generic plan is made now, from the statistics of now.
async fn prepare_as_listing(
    c: &mut tokio_postgres::Client,
    name: &str,
    types: &str,
    sql: &str,
    args: &str,
) {
    let tx = c.transaction().await.unwrap();
    tx.batch_execute(SETTINGS).await.unwrap();
    tx.batch_execute(&format!("PREPARE {name}({types}) AS\n{sql}"))
        .await
        .unwrap();
    tx.batch_execute(&format!("EXECUTE {name}({args})"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

/// The kept plan of `name`, run with actual row counts inside a listing transaction.
async fn kept_plan(c: &mut tokio_postgres::Client, name: &str, args: &str) -> String {
    let tx = c.transaction().await.unwrap();
    tx.batch_execute(SETTINGS).await.unwrap();
    let rows = tx
        .query(
            &format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE {name}({args})"),
            &[],
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    rows.iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn phases_walk_their_indexes_with_plans_made_on_an_empty_table() {
    let s = common::setup().await;
    let delayed =
        |i: i64| NewJob::new("q", "k", json!({ "i": i })).delay(Duration::from_secs(3600));
    s.engine.enqueue(&[delayed(0)]).await.unwrap();
    let mut admin = s.db.connect().await;
    // No ANALYZE may replace the plan under test while the table grows (a fresh database:
    // autovacuum has not got to it yet).
    admin
        .batch_execute(
            "ALTER TABLE pgferry.scheduled SET (autovacuum_enabled = false);
             ALTER TABLE pgferry.dead SET (autovacuum_enabled = false);",
        )
        .await
        .unwrap();
    let sched_args = "'q', NULL, 51, NULL, 51, NULL";
    prepare_as_listing(
        &mut admin,
        "sched",
        "text, bigint, bigint, text, bigint, text",
        LIST_SCHEDULED,
        sched_args,
    )
    .await;
    let lanes_args = "'q', NULL, 51";
    prepare_as_listing(
        &mut admin,
        "lanes",
        "text, bigint, bigint",
        LIST_SCHEDULED_LANES,
        lanes_args,
    )
    .await;
    let dead_args = "'q', NULL, 51, NULL, 51, NULL, NULL, NULL";
    prepare_as_listing(
        &mut admin,
        "dead",
        "text, bigint, bigint, text, bigint, timestamptz, text, text",
        LIST_DEAD,
        dead_args,
    )
    .await;

    // Then the queue grows: 3,000 delayed jobs, 3,000 dead letters on its lane.
    for b in 0..3 {
        let batch: Vec<_> = (0..1000).map(|i| delayed(1 + b * 1000 + i)).collect();
        s.engine.enqueue(&batch).await.unwrap();
    }
    admin
        .batch_execute(
            "INSERT INTO pgferry.dead (job_id, lane, attempt, max_attempts, kind, args, error)
             SELECT -g, (SELECT l.lane FROM pgferry.lanes l
                           JOIN pgferry.queues q ON q.queue_id = l.queue_id
                          WHERE q.name = 'q' LIMIT 1), 1, 1, 'k', '{}', 'boom'
               FROM generate_series(1, 3000) g",
        )
        .await
        .unwrap();

    // A page of 50 (51 wanted) reads about that many rows, newest first by the index.
    let plan = kept_plan(&mut admin, "sched", sched_args).await;
    assert!(plan.contains("$1"), "not a generic plan:\n{plan}");
    assert!(
        plan.contains("Index Scan Backward using scheduled_lane"),
        "{plan}"
    );
    assert!(rows_read(&plan, "scheduled") <= 2 * 51, "{plan}");
    let plan = kept_plan(&mut admin, "lanes", lanes_args).await;
    assert!(plan.contains("$1"), "not a generic plan:\n{plan}");
    assert!(
        plan.contains("Index Scan Backward using scheduled_lane"),
        "{plan}"
    );
    assert!(rows_read(&plan, "scheduled") <= 51, "{plan}");
    let plan = kept_plan(&mut admin, "dead", dead_args).await;
    assert!(
        plan.contains("Index Scan Backward using dead_lane"),
        "{plan}"
    );
    assert!(rows_read(&plan, "dead") <= 2 * 51, "{plan}");

    // A page deep in the lane (a cursor 2,000 rows down) starts at the cursor: the index
    // scan does not read, and filter out, the 2,000 rows above it.
    let deep: i64 = admin
        .query_one(
            "SELECT job_id FROM pgferry.scheduled ORDER BY job_id DESC OFFSET 2000 LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let plan = kept_plan(
        &mut admin,
        "sched",
        &format!("'q', {deep}, 51, NULL, 51, NULL"),
    )
    .await;
    assert!(rows_read(&plan, "scheduled") <= 2 * 51, "{plan}");
    let plan = kept_plan(&mut admin, "lanes", &format!("'q', {deep}, 51")).await;
    // The cursor's own row is read and filtered out (`job_id < $2`).
    assert!(rows_read(&plan, "scheduled") <= 52, "{plan}");
    let plan = kept_plan(
        &mut admin,
        "dead",
        "'q', -2000, 51, NULL, 51, NULL, NULL, NULL",
    )
    .await;
    assert!(rows_read(&plan, "dead") <= 2 * 51, "{plan}");

    // And the listing itself answers the newest delayed jobs.
    let f = JobFilter {
        state: Some(JobState::Scheduled),
        ..JobFilter::default()
    };
    let page = s.engine.list_jobs("q", &f, None, 50).await.unwrap();
    assert_eq!(page.jobs.len(), 50);
    assert!(page.has_more);
    let ids: Vec<i64> = page.jobs.iter().map(|j| j.id).collect();
    let mut newest = ids.clone();
    newest.sort_by(|a, b| b.cmp(a));
    assert_eq!(ids, newest, "newest first");
}
