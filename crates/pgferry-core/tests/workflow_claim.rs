//! The picker (`wf_claim`): at most the batch asked for, over all priorities, highest
//! priority first; what it does not take stays due and untouched.

mod common;

use std::time::Duration;

use pgferry_core::workflow::{Start, Workflows};
use serde_json::json;

#[tokio::test]
async fn a_claim_takes_at_most_its_batch_over_all_priorities_highest_first() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    // Five due steps at each of four priorities.
    for p in [0u8, 3, 7, 9] {
        for i in 0..5 {
            let mut st = Start::new("p", "prio", json!({ "i": i }));
            st.priority = p;
            wf.start(&st).await.unwrap();
        }
    }
    let admin = s.db.connect().await;
    let priority = |ids: Vec<i64>| {
        let admin = &admin;
        async move {
            let rows = admin
                .query(
                    "SELECT priority::int AS p FROM pgferry.wf_instances
                      WHERE id = ANY ($1) ORDER BY priority DESC",
                    &[&ids],
                )
                .await
                .unwrap();
            rows.iter().map(|r| r.get("p")).collect::<Vec<i32>>()
        }
    };
    let lease = Duration::from_secs(60);
    let first = wf.claim("prio", 7, "w", lease).await.unwrap();
    assert_eq!(first.len(), 7, "a claim of 7 takes 7, not 7 per priority");
    assert_eq!(
        priority(first.iter().map(|c| c.id).collect()).await,
        vec![9, 9, 9, 9, 9, 7, 7]
    );
    let counts: Vec<(String, i64)> = admin
        .query(
            "SELECT status, count(*) AS n FROM pgferry.wf_instances WHERE queue = 'prio'
              GROUP BY 1 ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("status"), r.get("n")))
        .collect();
    assert_eq!(counts, vec![("runnable".into(), 13), ("running".into(), 7)]);

    let second = wf.claim("prio", 10, "w", lease).await.unwrap();
    assert_eq!(
        priority(second.iter().map(|c| c.id).collect()).await,
        vec![7, 7, 7, 3, 3, 3, 3, 3, 0, 0]
    );
    let rest = wf.claim("prio", 10, "w", lease).await.unwrap();
    assert_eq!(rest.len(), 3);
    assert!(wf.claim("prio", 10, "w", lease).await.unwrap().is_empty());
}
