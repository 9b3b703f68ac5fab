//! The bare-commit reference of `compare --shape peer` (issue 21's acknowledgement target):
//! back to back on an idle cluster, and paced at the open loop's cadence, one commit per gap.

use std::time::Duration;

use pgferry_bench::peer::bare_commit;

#[tokio::test]
async fn paced_commits_keep_their_cadence() {
    let db = pgferry_testkit::test_db().await;
    let window = Duration::from_millis(600);
    let gap = Duration::from_millis(30);
    let paced = bare_commit(&db.config, Some(gap), window).await.unwrap();
    // One commit per gap, the first at once: never more than window / gap + 1, however fast
    // a commit is (back to back, a 600 ms window holds hundreds).
    assert!(
        (1..=21).contains(&paced.commits),
        "paced commits: {paced:?}"
    );
    assert!(
        paced.p50_ms > 0.0 && paced.p99_ms >= paced.p50_ms,
        "{paced:?}"
    );
    let tight = bare_commit(&db.config, None, window).await.unwrap();
    assert!(tight.commits >= 1, "{tight:?}");
}
