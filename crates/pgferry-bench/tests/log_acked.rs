//! The `log_acked` reference does what it claims: every batch read has its receipt in the
//! read's commit and exactly one ack, and jobs count only once acked.

use std::time::Duration;

use pgferry_bench::{BenchOpts, Variant};

#[tokio::test]
async fn every_read_batch_has_one_receipt_and_one_ack() {
    let db = pgferry_testkit::test_db().await;
    let name = format!("{}_acked", db.name);
    let opts = BenchOpts {
        duration: Duration::from_secs(1),
        warmup: Duration::ZERO,
        producers: 2,
        workers: 2,
        max_depth: 2_000,
        ..BenchOpts::default()
    };
    let report = pgferry_bench::run(Variant::LogAcked, &db.config, &name, &opts)
        .await
        .expect("log_acked run");
    assert_eq!(report.variant, "log_acked");
    assert!(report.jobs > 0, "nothing was read and acked: {report:?}");
    assert_eq!(report.dead_tuples, 0);

    let client = db.connect_other(&name).await;
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM ref_log.receipts),
                    (SELECT count(*) FROM ref_log.acks),
                    (SELECT count(DISTINCT receipt_id) FROM ref_log.acks),
                    (SELECT count(*) FROM ref_log.acks a
                       JOIN ref_log.receipts r USING (receipt_id) WHERE a.ids = r.ids),
                    (SELECT count(*) FROM ref_log.receipts WHERE cardinality(ids) = 0),
                    (SELECT coalesce(sum(cardinality(ids)), 0) FROM ref_log.acks)",
            &[],
        )
        .await
        .unwrap();
    let (receipts, acks, distinct, matching, empty, acked): (i64, i64, i64, i64, i64, i64) = (
        row.get(0),
        row.get(1),
        row.get(2),
        row.get(3),
        row.get(4),
        row.get(5),
    );
    // A reader stops between its read and its ack at most once (when the run ends).
    assert!(
        receipts - acks <= opts.workers as i64,
        "{receipts} receipts, {acks} acks"
    );
    assert_eq!(acks, distinct, "a receipt acked twice");
    assert_eq!(acks, matching, "an ack whose ids are not its receipt's");
    assert_eq!(empty, 0, "an empty read wrote a receipt");
    assert!(
        acked as u64 >= report.jobs,
        "counted {} but acked {acked}",
        report.jobs
    );
}
