//! EXPLAIN plan tests for every hot statement: index scans, LIMIT respected, no Seq Scan on
//! log tables, no Sort over a whole range. Plans are captured with auto_explain from the
//! real statements (including those inside pgferry.claim), on a log with realistic data.

mod common;

use std::time::Duration;

use pgferry_core::leader::{promoter, rescuer, rotator, ticker, LeaderConfig};
use pgferry_core::NewJob;
use serde_json::json;

const LOG_TABLES: [&str; 4] = ["ready_", "receipts_", "completions_", "ticks_"];

/// Does the plan line scan a partition `<table>NN` (e.g. `ready_03`)?
fn on_partition(line: &str, table: &str) -> bool {
    line.match_indices(&format!(" on {table}")).any(|(i, m)| {
        let rest = &line[i + m.len()..];
        rest.len() >= 2 && rest[..2].chars().all(|c| c.is_ascii_digit())
    })
}

/// A Seq Scan on a log partition that read rows is a failure. (An empty partition, e.g.
/// one just truncated, may be "scanned" for zero rows; that costs nothing.)
fn assert_no_seq_scan_on_log(plan: &str) {
    let lines: Vec<&str> = plan.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if !line.contains("Seq Scan on") || !LOG_TABLES.iter().any(|t| on_partition(line, t)) {
            continue;
        }
        let produced = !line.contains("actual rows=0 ") && !line.contains("never executed");
        let filtered = lines[i + 1..]
            .iter()
            .take_while(|l| !l.contains("->"))
            .any(|l| l.contains("Rows Removed by Filter"));
        assert!(
            !produced && !filtered,
            "Seq Scan reading a log table:\n{plan}"
        );
    }
}

#[tokio::test]
async fn hot_statement_plans() {
    let s = common::setup().await;
    // A log with history: 40k jobs, half completed, in two segments (both attached: only
    // segments in use are, ADR 0009).
    let rot = s.db.connect().await;
    for i in 0..40 {
        if i == 20 {
            assert!(rotator::advance(&rot, Duration::ZERO).await.unwrap());
            s.engine.observe_segment(1);
        }
        let batch: Vec<_> = (0..1000)
            .map(|j| NewJob::new("q", "k", json!({ "i": i * 1000 + j })))
            .collect();
        s.engine.enqueue(&batch).await.unwrap();
    }
    s.tick().await;
    for _ in 0..20 {
        let c = s.engine.claim("q", 1000, "w").await.unwrap();
        let outcomes: Vec<_> = c.iter().map(|j| j.completed(None)).collect();
        s.engine.complete(&outcomes).await.unwrap();
    }
    let admin = s.db.connect().await;
    // A segment's worth of tick history (the ticker writes one every few ms under load).
    admin
        .batch_execute(
            "INSERT INTO pgferry.ticks (segment, tick_id, snap, seq_hi)
             SELECT 0, -g, pg_current_snapshot(), 0 FROM generate_series(1, 5000) g;
             -- Other queues' receipts: a real receipts table holds many lanes.
             INSERT INTO pgferry.receipts (segment, receipt_id, lane, lo_snap, hi_snap, hi_tick,
                                           last_xid, last_seq, exhausted, job_ids, attempts,
                                           job_segments, lease_until)
             SELECT 0, -g, 1000 + g % 50, pg_current_snapshot(), pg_current_snapshot(), 0, '0', 0,
                    true, '{}', '{}', '{}', now()
               FROM generate_series(1, 5000) g;
             ANALYZE;",
        )
        .await
        .unwrap();

    let (mut client, mut notices) = common::connect_with_notices(&s.db).await;
    common::enable_auto_explain(&client).await;

    // enqueue: one binary COPY (it has no plan to show). What matters is that it reads
    // nothing: no scan of any log table or index, only the 100 inserted rows. Counted in one
    // transaction with pg_stat_xact_* (exact, unlike the delayed cumulative views).
    let batch: Vec<_> = (0..100)
        .map(|j| NewJob::new("q", "k", json!({ "j": j })))
        .collect();
    let tx = client.transaction().await.unwrap();
    s.engine.enqueue_tx(&tx, &batch).await.unwrap();
    let row = tx
        .query_one(
            "SELECT coalesce(sum(seq_scan), 0)::bigint, coalesce(sum(idx_scan), 0)::bigint,
                    coalesce(sum(n_tup_ins) FILTER (WHERE relname LIKE 'ready%'), 0)::bigint
               FROM pg_stat_xact_user_tables
              WHERE schemaname = 'pgferry'
                AND relname ~ '^(ready|receipts|completions|results|ticks)_[0-9]+$'",
            &[],
        )
        .await
        .unwrap();
    let (seq, idx, ins): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(
        (seq, idx, ins),
        (0, 0, 100),
        "enqueue read the log or wrote other rows"
    );
    tx.commit().await.unwrap();

    // tick
    common::drain(&mut notices);
    ticker::tick(&client).await.unwrap().expect("tick");
    let plans = common::drain(&mut notices);
    let tick = common::plans_with(&plans, "pg_current_snapshot");
    assert_eq!(tick.len(), 1);
    assert!(
        tick[0].contains("Merge Append") && tick[0].contains("Index Scan using ticks_"),
        "{}",
        tick[0]
    );
    assert_no_seq_scan_on_log(tick[0]);

    // claim: cursor probe, latest tick, range step as Merge Append under Limit without Sort.
    let lane: i32 = admin
        .query_one("SELECT min(lane) FROM pgferry.lanes", &[])
        .await
        .unwrap()
        .get(0);
    common::drain(&mut notices);
    let rows = client
        .query(
            "SELECT job_id FROM pgferry.claim($1, 500, 'w', 60000)",
            &[&lane],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 500);
    let plans = common::drain(&mut notices);
    let cursor = common::plans_with(&plans, "FROM pgferry.receipts r");
    assert!(
        cursor[0].contains("Limit") && cursor[0].contains("lane_receipt_id_idx"),
        "{}",
        cursor[0]
    );
    // The claim's one data statement (reads, receipt, closed cancellations).
    let range = common::plans_with(&plans, "INSERT INTO pgferry.receipts");
    assert_eq!(range.len(), 1, "{plans:#?}");
    let range = range[0];
    assert!(
        range.contains("Limit") && range.contains("Merge Append"),
        "{range}"
    );
    // Every read of the log is keyed by lane AND xid: no scan keyed by the lane alone, which
    // would walk the lane's whole history (the generic-plan hazard of ADR 0002 §5).
    assert!(range.contains("Index Cond: ((lane = "), "{range}");
    assert!(
        !range.lines().any(|l| {
            let l = l.trim();
            l.starts_with("Index Cond: (lane = ") && !l.contains("xid")
        }),
        "a log scan keyed by lane only:\n{range}"
    );
    // It stopped at the batch: no sort of the whole range, no reading past LIMIT.
    assert!(common::rows_read(range, "ready") <= 501, "{range}");
    for p in &plans {
        assert_no_seq_scan_on_log(p);
    }

    // complete: one statement; the join to the attempt probes one partition's job index.
    let claimed = s.engine.claim("q", 200, "w").await.unwrap();
    let outcomes: Vec<_> = claimed
        .iter()
        .enumerate()
        .map(|(i, j)| {
            if i % 10 == 0 {
                j.failed("x", Duration::ZERO)
            } else {
                j.completed(None)
            }
        })
        .collect();
    let complete_sql = include_str!("../src/sql/complete.sql");
    common::drain(&mut notices);
    // Run the engine's exact statement on the observed connection.
    let stmt = client.prepare(complete_sql).await.unwrap();
    let ids: Vec<i64> = outcomes.iter().map(|o| o.job_id).collect();
    let atts: Vec<i32> = outcomes.iter().map(|o| o.attempt).collect();
    let segs: Vec<i16> = outcomes.iter().map(|o| o.segment).collect();
    let rids: Vec<i64> = outcomes.iter().map(|o| o.receipt_id).collect();
    let lanes: Vec<i32> = outcomes.iter().map(|o| o.lane).collect();
    let rsegs: Vec<i16> = outcomes.iter().map(|o| o.receipt_segment).collect();
    let codes: Vec<i16> = outcomes.iter().map(|o| o.kind.code()).collect();
    let errs: Vec<Option<String>> = outcomes.iter().map(|o| o.error.clone()).collect();
    let delays: Vec<Option<i64>> = outcomes.iter().map(|_| Some(0)).collect();
    let results: Vec<Option<serde_json::Value>> = outcomes.iter().map(|_| None).collect();
    let durs: Vec<Option<i32>> = outcomes.iter().map(|_| None).collect();
    let r = client
        .query(
            &stmt,
            &[
                &ids, &atts, &segs, &rids, &lanes, &rsegs, &codes, &errs, &delays, &results, &durs,
            ],
        )
        .await
        .unwrap();
    assert_eq!(r.len(), 200);
    let plans = common::drain(&mut notices);
    let comp = common::plans_with(&plans, "INSERT INTO pgferry.completions");
    assert_eq!(comp.len(), 1, "{plans:#?}");
    let comp = comp[0];
    // The receipt: one probe of its lane cursor index in one partition.
    assert!(comp.contains("Index Scan using receipts_"), "{comp}");
    // Closed attempts of the receipt: completions_receipt.
    assert!(
        comp.contains("Index Scan using completions_")
            || comp.contains("Bitmap Index Scan on completions_"),
        "{comp}"
    );
    assert!(
        comp.contains("Subplans Removed") || comp.contains("never executed"),
        "expected run-time partition pruning:\n{comp}"
    );
    assert_no_seq_scan_on_log(comp);
    // The job rows are read only for the 20 failures (retry needs kind and args), through
    // ready_rows(): the block's anchor, then the job's own row — two rows per failure.
    assert!(common::rows_read(comp, "ready") <= 40, "{comp}");
    assert!(common::rows_read(comp, "receipts") <= 1, "{comp}");

    // complete, whole receipts (the common report: a worker's whole batch, all successes):
    // one completion row per receipt, proved by array equality against the receipt — one
    // probe of its lane cursor index, nothing read from the ready log, no per-outcome work.
    let whole = s.engine.claim("q", 300, "w").await.unwrap();
    assert!(!whole.is_empty());
    // Described by runs, one per receipt, as the engine sends them (completion.rs).
    let mut rids: Vec<i64> = Vec::new();
    let (mut rlanes, mut rsegs, mut lo, mut hi) = (vec![], vec![], vec![], vec![]);
    for (i, j) in whole.iter().enumerate() {
        let pos = i as i32 + 1;
        if rids.last() == Some(&j.receipt_id) {
            *hi.last_mut().unwrap() = pos;
        } else {
            rids.push(j.receipt_id);
            rlanes.push(j.lane);
            rsegs.push(j.receipt_segment);
            lo.push(pos);
            hi.push(pos);
        }
    }
    let wids: Vec<i64> = whole.iter().map(|j| j.job_id).collect();
    let watts: Vec<i32> = whole.iter().map(|j| j.attempt).collect();
    let wseg: i16 = whole[0].segment;
    assert!(whole.iter().all(|j| j.segment == wseg));
    let none_d: Option<Vec<Option<i32>>> = None;
    let whole_stmt = client
        .prepare(include_str!("../src/sql/complete_whole.sql"))
        .await
        .unwrap();
    common::drain(&mut notices);
    let r = client
        .query(
            &whole_stmt,
            &[
                &rids, &rlanes, &rsegs, &lo, &hi, &wids, &watts, &wseg, &none_d,
            ],
        )
        .await
        .unwrap();
    // One row answers for the whole batch.
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].get::<_, i64>(0), r[0].get::<_, bool>(1)), (0, true));
    let plans = common::drain(&mut notices);
    let wp = common::plans_with(&plans, "INSERT INTO pgferry.completions");
    // Only complete_whole's insert ran: pgferry.complete() was never entered.
    assert_eq!(wp.len(), 1, "{plans:#?}");
    assert!(wp[0].contains("p_job_ids[w.lo:w.hi]"), "{}", wp[0]);
    assert!(wp[0].contains("Index Scan using receipts_"), "{}", wp[0]);
    assert_no_seq_scan_on_log(wp[0]);
    assert_eq!(common::rows_read(wp[0], "ready"), 0, "{}", wp[0]);
    assert!(
        common::rows_read(wp[0], "receipts") <= rids.len() as u64,
        "{}",
        wp[0]
    );

    // heartbeat: the receipt probe and closed-attempt lookup of complete(), one upsert into
    // long_leases per held attempt; nothing read from the ready log.
    let held = s.engine.claim("q", 50, "w").await.unwrap();
    let hb_sql = include_str!("../src/sql/heartbeat.sql");
    let hb = client.prepare(hb_sql).await.unwrap();
    let col = |f: fn(&pgferry_core::ClaimedJob) -> i64| held.iter().map(f).collect::<Vec<i64>>();
    let (hids, hrids) = (col(|j| j.job_id), col(|j| j.receipt_id));
    let hatts: Vec<i32> = held.iter().map(|j| j.attempt).collect();
    let hsegs: Vec<i16> = held.iter().map(|j| j.segment).collect();
    let hlanes: Vec<i32> = held.iter().map(|j| j.lane).collect();
    let hrsegs: Vec<i16> = held.iter().map(|j| j.receipt_segment).collect();
    common::drain(&mut notices);
    let beats = client
        .query(
            &hb,
            &[
                &hids, &hatts, &hsegs, &hrids, &hlanes, &hrsegs, &60_000i32, &"w",
            ],
        )
        .await
        .unwrap();
    assert_eq!(beats.len(), held.len());
    let plans = common::drain(&mut notices);
    let hb_plan = common::plans_with(&plans, "INSERT INTO pgferry.long_leases");
    assert_eq!(hb_plan.len(), 1, "{plans:#?}");
    assert!(
        hb_plan[0].contains("Index Scan using receipts_"),
        "{}",
        hb_plan[0]
    );
    assert_no_seq_scan_on_log(hb_plan[0]);
    assert_eq!(common::rows_read(hb_plan[0], "ready"), 0, "{}", hb_plan[0]);

    // Leader statements: promote, rescue, rotate checks. The rescue mark trails the head of
    // the receipts by the lease window in steady state; start it there, not at 0.
    admin
        .batch_execute(
            "UPDATE pgferry.leader_state SET rescue_mark = (SELECT max(receipt_id) - 3 FROM pgferry.receipts)",
        )
        .await
        .unwrap();
    common::drain(&mut notices);
    promoter::promote(&client, 1000).await.unwrap();
    rescuer::rescue(&mut client, Duration::from_secs(60))
        .await
        .unwrap();
    let mut rot = s.db.connect().await;
    // Rotation's checks run on their own connection; observe them through the same queries.
    rotator::rotate(&mut rot, &LeaderConfig::default())
        .await
        .unwrap();
    let plans = common::drain(&mut notices);
    for p in &plans {
        assert_no_seq_scan_on_log(p);
    }
    let open_jobs = include_str!("../src/sql/segment_open_jobs.sql");
    common::drain(&mut notices);
    client.query_one(open_jobs, &[&0i16]).await.unwrap();
    let plans = common::drain(&mut notices);
    let p = &plans[plans.len() - 1];
    // The leader's closure check counts one segment: both scans pruned to its partitions.
    assert!(
        p.contains("completions_00") && !p.contains("completions_01"),
        "not pruned:\n{p}"
    );
    assert!(
        p.contains("ready_00") && !p.contains("ready_01"),
        "not pruned:\n{p}"
    );
}
