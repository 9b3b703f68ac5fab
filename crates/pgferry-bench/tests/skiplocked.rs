//! The row-lock references do what they claim: every job enqueued is either still queued or
//! was taken once (and, under a lease, deleted after its handler), and idle workers poll one
//! at a time instead of each spending the cores on empty claims.

use std::time::{Duration, Instant};

use pgferry_bench::{BenchOpts, Variant};

/// An open loop far below what the workers could take, so they are idle most of the run.
fn light() -> BenchOpts {
    BenchOpts {
        duration: Duration::from_secs(1),
        warmup: Duration::ZERO,
        producers: 1,
        workers: 16,
        enqueue_batch: 1,
        claim_batch: 1,
        rate: Some(100.0),
        ..BenchOpts::default()
    }
}

async fn check(variant: Variant, name: &str) {
    let db = pgferry_testkit::test_db().await;
    let dbname = format!("{}_{name}", db.name);
    let opts = light();
    let started = Instant::now();
    let report = pgferry_bench::run(variant, &db.config, &dbname, &opts)
        .await
        .expect("reference run");
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(report.variant, name);
    assert!(report.jobs > 0, "no job was taken: {report:?}");

    let client = db.connect_other(&dbname).await;
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM ref_skiplocked.jobs),
                    (SELECT count(*) FROM ref_skiplocked.jobs WHERE state = 1),
                    (SELECT last_value FROM ref_skiplocked.jobs_id_seq),
                    (SELECT idx_scan FROM pg_stat_user_indexes
                      WHERE indexrelname = 'jobs_available')",
            &[],
        )
        .await
        .unwrap();
    let (left, leased, ids, claims): (i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    // Ids come from the sequence one per job, so it counts every job enqueued.
    let taken = ids - left;
    assert!(
        taken as u64 >= report.jobs,
        "counted {} jobs but only {taken} left the table",
        report.jobs
    );
    // A lease is released by the DELETE after the handler: at most one claim per worker is
    // between the two when the run stops.
    assert!(leased <= opts.workers as i64, "{leased} jobs still leased");
    // One idle poller, at most one claim a millisecond (with a few claims per job on top, by
    // the poller and by the worker it woke), not 16: polling each on its own, they made
    // ~6,000 claims in this run's time (measured), ~650 with the token.
    let bound = 1_000.0 * elapsed + 4.0 * taken as f64;
    assert!(
        (claims as f64) < bound,
        "{claims} claims in {elapsed:.1} s for {taken} jobs: idle workers poll side by side"
    );
}

#[tokio::test]
async fn lease_takes_each_job_once_and_idle_workers_poll_one_at_a_time() {
    check(Variant::Skiplocked, "skiplocked").await;
}

#[tokio::test]
async fn delete_takes_each_job_once_and_idle_workers_poll_one_at_a_time() {
    check(Variant::SkiplockedDelete, "skiplocked_delete").await;
}
