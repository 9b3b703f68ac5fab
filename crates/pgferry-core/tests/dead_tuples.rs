//! The hot path is append-only: after 200k jobs through enqueue, claim and complete, the
//! log partitions have no dead tuples.

mod common;

use pgferry_core::NewJob;
use serde_json::json;

#[tokio::test]
async fn hot_path_leaves_no_dead_tuples() {
    let s = common::setup().await;
    let total = 200_000usize;
    let mut done = 0;
    let mut enqueued = 0;
    while done < total {
        if enqueued < total {
            let batch: Vec<_> = (0..5000)
                .map(|i| NewJob::new("q", "k", json!({ "i": i })))
                .collect();
            enqueued += s.engine.enqueue(&batch).await.unwrap().len();
            s.tick().await;
        }
        loop {
            let c = s.engine.claim("q", 1000, "w").await.unwrap();
            if c.is_empty() {
                break;
            }
            let outcomes: Vec<_> = c.iter().map(|j| j.completed(None)).collect();
            done += s.engine.complete(&outcomes).await.unwrap().len();
        }
    }
    assert_eq!(done, total);
    // Backends flush their table statistics when they exit: close every connection that
    // did work, then wait until the inserts are all accounted for.
    s.engine.pool().close();
    let admin = s.db.connect().await;
    let q = "SELECT coalesce(sum(n_tup_ins), 0)::bigint, coalesce(sum(n_dead_tup), 0)::bigint,
                    coalesce(sum(n_tup_upd + n_tup_del), 0)::bigint
               FROM pg_stat_user_tables
              WHERE schemaname = 'pgferry' AND relname ~ '^(ready|receipts|completions)_[0-9]+$'";
    // Rows the hot path wrote: one ready row per job, one receipt per claim batch, one
    // completion row per (receipt, segment, outcome) of each complete() call.
    let written: i64 = admin
        .query_one(
            "SELECT (SELECT count(*) FROM pgferry.ready) + (SELECT count(*) FROM pgferry.receipts)
                    + (SELECT count(*) FROM pgferry.completions)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(written > total as i64, "{written}");
    let mut polls = 0;
    let (ins, dead, upd_del) = loop {
        polls += 1;
        let r = admin.query_one(q, &[]).await.unwrap();
        let (ins, dead, upd_del): (i64, i64, i64) = (r.get(0), r.get(1), r.get(2));
        if ins >= written || polls > 300 {
            break (ins, dead, upd_del);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(
        ins, written,
        "statistics must account for every row written"
    );
    assert_eq!(dead, 0, "dead tuples on log partitions");
    assert_eq!(upd_del, 0, "updates or deletes on log partitions");
}
