//! Receipts and completions keep their per-job arrays inline and lz4-compressed (migration
//! 0009): compressed from a batch of a few dozen jobs on, never moved out of line into the
//! TOAST table for the batch sizes the engine allows (an extra heap row and index entry per
//! batch), and read back intact.

mod common;

use pgferry_core::NewJob;
use serde_json::json;

#[tokio::test]
async fn batch_rows_are_compressed_inline() {
    let s = common::setup().await;
    for n in [200usize, 1000] {
        let batch: Vec<_> = (0..n)
            .map(|i| NewJob::new("q", "k", json!({ "i": i })))
            .collect();
        let ids = s.engine.enqueue(&batch).await.unwrap();
        s.tick().await;
        let c = s.engine.claim("q", n, "w").await.unwrap();
        assert_eq!(c.iter().map(|j| j.job_id).collect::<Vec<_>>(), ids);
        let outcomes: Vec<_> = c.iter().map(|j| j.completed(None)).collect();
        let won = s.engine.complete(&outcomes).await.unwrap();
        assert_eq!(won.len(), n);
    }
    let admin = s.db.connect().await;
    // Both batches: one receipt and one completion row each, arrays compressed with lz4.
    let rows = admin
        .query(
            "SELECT cardinality(r.job_ids), pg_column_compression(r.job_ids),
                    pg_column_compression(c.job_ids), c.job_ids = r.job_ids
               FROM pgferry.receipts r JOIN pgferry.completions c USING (receipt_id)
              ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let got: Vec<(i32, Option<String>, Option<String>, bool)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let lz4 = Some("lz4".to_string());
    assert_eq!(
        got,
        [
            (200, lz4.clone(), lz4.clone(), true),
            (1000, lz4.clone(), lz4, true)
        ]
    );
    // Nothing went out of line: the TOAST tables of every receipts and completions
    // partition are empty.
    let toast_tables: Vec<String> = admin
        .query(
            "SELECT t.reltoastrelid::regclass::text
               FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace
              WHERE n.nspname = 'pgferry' AND t.relname ~ '^(receipts|completions)_[0-9]+$'
                AND t.reltoastrelid <> 0",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(toast_tables.len(), 32);
    for t in toast_tables {
        // Names come from the catalog, not from input.
        let n: i64 = admin
            .query_one(&format!("SELECT count(*) FROM {t}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 0, "{t} holds out-of-line values");
    }
}
