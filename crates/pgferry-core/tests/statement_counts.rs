//! Statement counts of every public operation (pg_stat_statements, top level): enqueue of 1
//! or 1000 jobs, claim, complete of 1 or 1000 outcomes are one statement each.

mod common;

use pgferry_core::NewJob;
use serde_json::json;

fn batch(n: usize) -> Vec<NewJob> {
    (0..n)
        .map(|i| NewJob::new("q", "k", json!({ "i": i })))
        .collect()
}

#[tokio::test]
async fn one_statement_per_operation() {
    let s = common::setup().await;
    let admin = s.db.connect().await;
    // Warm the lane cache and prepared statements: steady state is what is counted.
    s.engine.enqueue(&batch(1)).await.unwrap();
    s.tick().await;
    let warm = s.engine.claim("q", 10, "w").await.unwrap();
    s.engine.complete(&[warm[0].completed(None)]).await.unwrap();

    for n in [1usize, 1000] {
        common::reset_statements(&admin).await;
        let ids = s.engine.enqueue(&batch(n)).await.unwrap();
        assert_eq!(ids.len(), n);
        assert_eq!(
            common::total_calls(&admin).await,
            1,
            "enqueue of {n}: {:?}",
            common::statements(&admin).await
        );
    }
    s.tick().await;
    for n in [1usize, 1000] {
        common::reset_statements(&admin).await;
        let claimed = s.engine.claim("q", n, "w").await.unwrap();
        assert_eq!(claimed.len(), n);
        assert_eq!(
            common::total_calls(&admin).await,
            1,
            "claim of {n}: {:?}",
            common::statements(&admin).await
        );
        let outcomes: Vec<_> = claimed.iter().map(|j| j.completed(None)).collect();
        common::reset_statements(&admin).await;
        let done = s.engine.complete(&outcomes).await.unwrap();
        assert_eq!(done.len(), n);
        assert_eq!(
            common::total_calls(&admin).await,
            1,
            "complete of {n}: {:?}",
            common::statements(&admin).await
        );
    }
}
