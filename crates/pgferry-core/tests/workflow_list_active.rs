//! The workflow list by an active status (list_active.sql, migration 0020): it reads the
//! queue's active instances only (index wf_instances_active), never its ended history, and
//! at most ACTIVE_SCAN_ROWS of them per call; a rare status is found by paging on from the
//! last instance read. Step updates stay HOT with the index: see workflow_list.rs
//! (`step_updates_stay_hot_with_the_ended_status_indexed` runs with every migration).

mod common;

use pgferry_core::workflow::{InstanceFilter, Workflows};

/// `ACTIVE_SCAN_ROWS` of workflow/inspect.rs (not exported): the pages asserted below
/// follow from it, so a change there fails here.
const ACTIVE_SCAN_ROWS: i32 = 5000;

/// 60k ended instances; 18k active ones (60001..=78000), runnable but for nine awaiting
/// (every 2000th) and one sleeping, the oldest active one.
const SEED: &str = "
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, active, finished_at)
SELECT g, 'k', 'q', 'end', 'done', false, now() - interval '1 hour'
  FROM generate_series(1, 60000) g;
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status)
SELECT g, 'k', 'q', 'start',
       CASE WHEN g % 2000 = 0 THEN 'awaiting' WHEN g = 60001 THEN 'sleeping' ELSE 'runnable' END
  FROM generate_series(60001, 78000) g;
SELECT setval('pgferry.wf_instance_ids', 100000);
ANALYZE pgferry.wf_instances;
";

fn filter(status: &str, limit: usize, before: Option<i64>) -> InstanceFilter {
    InstanceFilter {
        queue: "q".into(),
        status: Some(status.into()),
        limit,
        before,
        ..InstanceFilter::default()
    }
}

/// The analyzed plan of a list statement for `status`, planned for the values given (as
/// `Workflows::list` runs it: prepared for the call, never cached). `extra` is the
/// parameter after the page size (list_active.sql's scan bound), if the statement has one.
async fn plan(
    client: &tokio_postgres::Client,
    sql: &str,
    queue: &str,
    status: &str,
    extra: Option<i32>,
) -> String {
    client
        .batch_execute("SET plan_cache_mode = force_custom_plan; DEALLOCATE ALL;")
        .await
        .unwrap();
    let (types, args) = match extra {
        Some(n) => (", int", format!(", {n}")),
        None => ("", String::new()),
    };
    client
        .execute(
            &format!("PREPARE l(text, text, text, text, timestamptz, bigint, int{types}) AS {sql}"),
            &[],
        )
        .await
        .unwrap();
    let rows = client
        .query(
            &format!(
                "EXPLAIN (ANALYZE, TIMING OFF) EXECUTE l('{queue}', NULL, '{status}', NULL, NULL, NULL, 51{args})"
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

fn ids(page: &pgferry_core::workflow::InstancePage) -> Vec<i64> {
    page.instances.iter().map(|i| i.id).collect()
}

#[tokio::test]
async fn an_active_status_reads_active_instances_only_and_boundedly() {
    let s = common::setup().await;
    let admin = s.db.connect().await;
    admin.batch_execute(SEED).await.unwrap();
    let wf = Workflows::of(&s.engine);

    // A frequent status: a full page of the newest.
    let p = wf.list(&filter("runnable", 3, None)).await.unwrap();
    assert_eq!(ids(&p), vec![77999, 77998, 77997]);
    assert_eq!((p.has_more, p.next), (true, Some(77997)));

    // A rare one, in pages of 2: each call reads at most 5000 active instances, so a page
    // may be short; it goes on below the last match shown or, when the read stopped at its
    // bound first, below the last instance read. Every match comes, in order, once.
    let (mut seen, mut sizes, mut more) = (Vec::new(), Vec::new(), Vec::new());
    let mut before = None;
    loop {
        let p = wf.list(&filter("awaiting", 2, before)).await.unwrap();
        assert!(p.instances.iter().all(|i| i.status == "awaiting"));
        seen.extend(ids(&p));
        sizes.push(p.instances.len());
        more.push(p.has_more);
        if !p.has_more {
            assert_eq!(p.next, None);
            break;
        }
        before = p.next;
    }
    let want: Vec<i64> = (31..=39).rev().map(|n| n * 2000).collect();
    assert_eq!(seen, want);
    assert_eq!(sizes, vec![2, 2, 2, 2, 1]);
    assert_eq!(more, vec![true, true, true, true, false]);
    // The second page: 74000 and 72000 among 75999..71000, the read's bound reached.
    let p2 = wf.list(&filter("awaiting", 2, Some(76000))).await.unwrap();
    assert_eq!(ids(&p2), vec![74000, 72000]);
    assert_eq!((p2.has_more, p2.next), (true, Some(71000)));

    // The oldest active instance is found by paging on through empty pages: four calls
    // of at most 5000 active instances each (the last reads 3000), never the ended ones.
    let mut before = None;
    let mut calls = 0;
    let found = loop {
        calls += 1;
        let p = wf.list(&filter("sleeping", 50, before)).await.unwrap();
        if !p.instances.is_empty() {
            break (ids(&p), p.has_more);
        }
        assert!(p.has_more, "call {calls} found nothing and ended the list");
        before = p.next;
    };
    assert_eq!(found, (vec![60001], false));
    assert_eq!(calls, 4);
    // A status nothing has: pages that end.
    let mut before = None;
    for _ in 0..4 {
        let p = wf.list(&filter("queued", 50, before)).await.unwrap();
        assert!(p.instances.is_empty());
        before = p.next;
    }
    assert_eq!(before, None);

    // The plans: the active index, at most the bound read, no sort of what was read;
    // list.sql's walk of the queue read all 78k instances for the same answer.
    let active = include_str!("../src/sql/workflow/list_active.sql");
    let walk = include_str!("../src/sql/workflow/list.sql");
    let p = plan(&admin, active, "q", "queued", Some(ACTIVE_SCAN_ROWS)).await;
    assert!(p.contains("wf_instances_active"), "{p}");
    assert!(!p.contains("Sort"), "{p}");
    let read = rows_read(&p);
    assert!(
        read <= ACTIVE_SCAN_ROWS as u64 + 1,
        "read {read} rows for a status nothing has:\n{p}"
    );
    let p = plan(&admin, active, "q", "runnable", Some(ACTIVE_SCAN_ROWS)).await;
    assert!(rows_read(&p) <= 53, "read {}:\n{p}", rows_read(&p));
    let p = plan(&admin, walk, "q", "queued", None).await;
    assert!(rows_read(&p) >= 78_000, "read {}:\n{p}", rows_read(&p));

    // Old active instances under a newer ended history (long sleepers, short runs that
    // ended): ordered by id alone, the planner walked the primary key newest first through
    // every ended instance; ordered by the active index's key, it reads active ones only.
    admin
        .batch_execute(
            "INSERT INTO pgferry.wf_instances (id, kind, queue, step, status)
             SELECT g, 'k', 'old', 'nap', 'sleeping' FROM generate_series(100001, 118000) g;
             INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, active, finished_at)
             SELECT g, 'k', 'old', 'end', 'done', false, now()
               FROM generate_series(118001, 178000) g;
             ANALYZE pgferry.wf_instances;",
        )
        .await
        .unwrap();
    let p = plan(&admin, active, "old", "queued", Some(ACTIVE_SCAN_ROWS)).await;
    assert!(p.contains("wf_instances_active"), "{p}");
    let read = rows_read(&p);
    assert!(read <= ACTIVE_SCAN_ROWS as u64 + 1, "read {read}:\n{p}");
    let page = wf
        .list(&InstanceFilter {
            queue: "old".into(),
            status: Some("sleeping".into()),
            limit: 2,
            ..InstanceFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&page), vec![118000, 117999]);
}
