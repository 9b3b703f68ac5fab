//! The rescuer at scale (issue 24): a pass over expired receipts whose attempts all have an
//! outcome must not unnest and match their attempts one by one. Under load almost every
//! expired receipt is such a one (its jobs completed long before the lease ran out), and
//! with claims of 1,000 jobs a pass of 500 receipts meant 500,000 attempts matched against
//! as many outcomes; seeding 10M jobs collapsed at 5.2M with the rescue statement running
//! for minutes. Plans are captured with auto_explain from the real pass.

mod common;

use std::time::Duration;

use pgferry_core::leader::rescuer;
use pgferry_core::NewJob;
use serde_json::json;

const BATCHES: usize = 40;
const BATCH: usize = 1000;
const LEFT_OPEN: usize = 10;

/// Rows a plan node produced (`actual ... rows=N`) for every node whose line contains `what`.
fn node_rows(plan: &str, what: &str) -> Vec<u64> {
    plan.lines()
        .filter(|l| l.contains(what) && l.contains("actual"))
        .map(|l| {
            let i = l.find("rows=").expect("rows=") + "rows=".len();
            let digits: String = l[i..].chars().take_while(|c| c.is_ascii_digit()).collect();
            let loops = l
                .find("loops=")
                .map(|j| {
                    l[j + "loops=".len()..]
                        .chars()
                        .take_while(|c| c.is_ascii_digit())
                        .collect::<String>()
                        .parse::<u64>()
                        .unwrap()
                })
                .unwrap_or(1);
            digits.parse::<u64>().unwrap() * loops
        })
        .collect()
}

#[tokio::test]
async fn closed_receipts_are_dismissed_whole() {
    let s = common::setup().await;
    // 40 claims of 1,000 jobs, every attempt completed (one in 100 failed and retried an hour
    // later: two outcome rows for most receipts), except 10 of the last claim's: their worker "died".
    let mut open = Vec::new();
    for b in 0..BATCHES {
        let jobs: Vec<_> = (0..BATCH)
            .map(|i| {
                let mut j = NewJob::new("q", "k", json!({ "i": b * BATCH + i }));
                j.max_attempts = Some(3);
                j
            })
            .collect();
        s.engine.enqueue(&jobs).await.unwrap();
        s.tick().await;
        let claimed = s.engine.claim("q", BATCH, "w").await.unwrap();
        assert_eq!(claimed.len(), BATCH);
        let keep = if b == BATCHES - 1 { LEFT_OPEN } else { 0 };
        let outcomes: Vec<_> = claimed[keep..]
            .iter()
            .map(|c| {
                if c.job_id % 100 == 0 {
                    c.failed("boom", Duration::from_secs(3600))
                } else {
                    c.completed(None)
                }
            })
            .collect();
        s.engine.complete(&outcomes).await.unwrap();
        open.extend(claimed[..keep].iter().map(|c| c.job_id));
    }
    let admin = s.db.connect().await;
    // Every lease ran out long ago (and past the claim settle interval).
    admin
        .batch_execute(
            "UPDATE pgferry.receipts SET lease_until = now() - interval '2 hours',
                                         claimed_at = now() - interval '3 hours';
             ANALYZE;",
        )
        .await
        .unwrap();

    let (mut client, mut notices) = common::connect_with_notices(&s.db).await;
    common::enable_auto_explain(&client).await;
    common::drain(&mut notices);
    let report = rescuer::rescue(&mut client, Duration::from_secs(60))
        .await
        .unwrap();
    let plans = common::drain(&mut notices);

    // Every expired receipt looked at; only the one with open attempts unnested.
    assert_eq!(report.receipts, BATCHES as i64, "{report:?}");
    assert_eq!(report.examined, BATCH as i64, "{report:?}");
    assert_eq!(report.retried, LEFT_OPEN as i64, "{report:?}");
    assert_eq!(report.dead, 0, "{report:?}");

    let rescue = common::plans_with(&plans, "rescue, step 2");
    let rescue = rescue
        .iter()
        .find(|p| p.contains("INSERT INTO pgferry.completions"))
        .unwrap_or_else(|| panic!("no rescue plan in {plans:#?}"));
    // The receipts' attempts: only the live receipt's are unnested; the outcomes likewise
    // (its 990 closed attempts, one row or two), never the 39,000 of the closed receipts.
    let unnested: u64 = node_rows(rescue, "Function Scan on u").iter().sum();
    assert!(
        unnested <= (2 * BATCH) as u64,
        "{unnested} attempts and outcomes unnested:\n{rescue}"
    );
    // Every read of a log table by an index; the ready rows read are the open attempts'.
    assert!(!rescue.contains("Seq Scan on ready_"), "{rescue}");
    assert!(!rescue.contains("Seq Scan on receipts_"), "{rescue}");
    assert!(!rescue.contains("Seq Scan on completions_"), "{rescue}");
    assert!(
        common::rows_read(rescue, "ready") <= (4 * LEFT_OPEN) as u64,
        "{rescue}"
    );

    // The open attempts were retried: their next attempts are claimable.
    s.tick().await;
    let again = s.engine.claim("q", 100, "w").await.unwrap();
    let mut got: Vec<i64> = again.iter().map(|c| c.job_id).collect();
    got.sort_unstable();
    open.sort_unstable();
    assert_eq!(got, open);
    assert!(again.iter().all(|c| c.attempt == 2));

    // A second pass finds nothing more to do.
    let report = rescuer::rescue(&mut client, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        (report.retried, report.dead),
        (0, 0),
        "rescued twice: {report:?}"
    );
}
