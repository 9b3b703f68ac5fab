//! `pgferry workflow replay --kind K` against the test kit's cluster: records of an older
//! version of a built-in code-first workflow (a renamed first step) are reported as
//! divergences with exit status 3; records the current code follows are not.

mod common;

use common::{pgferry, run};
use serde_json::{json, Value};

const START: &str = "SELECT id FROM pgferry.wf_start('example_order', 'shop', 'start', $1::jsonb,
    $2::jsonb, NULL, NULL, NULL, NULL, 0::smallint, NULL, NULL)";

fn replay(url: &str, kind: &str) -> common::Proc {
    let mut cmd = pgferry();
    cmd.args(["workflow", "replay", "--kind", kind, "--database-url", url]);
    run(cmd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_reports_the_records_of_an_older_version_as_divergent() {
    let db = pgferry_testkit::test_db().await;
    let url = db.url();
    let mut migrate = pgferry();
    migrate.args(["migrate", "up", "--database-url", &url]);
    let m = run(migrate);
    assert!(m.status().success(), "{}", m.diag());

    let client = db.connect().await;
    let input = json!({"order_id": "o-1", "amount": 30});
    // Recorded by the current code: reserved, then parked on the payment signal.
    let current = json!({"journal": [
        {"t": "step", "name": "reserve", "ok": true},
        {"t": "signal", "names": ["paid"], "done": false}]});
    // Recorded by an older version whose first step had another name.
    let older = json!({"journal": [
        {"t": "step", "name": "hold_stock", "ok": true},
        {"t": "signal", "names": ["paid"], "done": false}]});
    let ok_id: i64 = client
        .query_one(START, &[&input, &current])
        .await
        .unwrap()
        .get(0);
    let old_id: i64 = client
        .query_one(START, &[&input, &older])
        .await
        .unwrap()
        .get(0);

    let p = replay(&url, "example_order");
    assert_eq!(p.status().code(), Some(3), "{}", p.diag());
    let report: Value =
        serde_json::from_str(&p.stdout()).unwrap_or_else(|e| panic!("{e}: {}", p.diag()));
    assert_eq!(report["instances"], json!(2), "{report}");
    assert_eq!(report["consistent"], json!(1), "{report}");
    let divergent = report["divergent"].as_array().unwrap();
    assert_eq!(divergent.len(), 1, "{report}");
    assert_eq!(divergent[0]["id"], json!(old_id));
    assert_eq!(divergent[0]["verdict"], json!("diverged"));
    assert_eq!(divergent[0]["position"], json!(0));
    assert_eq!(divergent[0]["recorded"], json!("step \"hold_stock\""));
    assert_eq!(divergent[0]["found"], json!("step \"reserve\""));
    assert_ne!(ok_id, old_id);

    // The replay wrote nothing: both still wait for their signal.
    let awaiting: i64 = client
        .query_one(
            "SELECT count(*) FROM pgferry.wf_instances WHERE kind = 'example_order' AND state->'journal'->1->>'done' = 'false'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(awaiting, 2);

    // --list needs no database.
    let mut list = pgferry();
    list.args(["workflow", "replay", "--list"]);
    list.env_remove("PGFERRY_DATABASE_URL");
    let p = run(list);
    assert!(p.status().success(), "{}", p.diag());
    let kinds: Value = serde_json::from_str(&p.stdout()).unwrap();
    assert_eq!(
        kinds["kinds"],
        json!(["code_three", "example_order", "example_shipping"])
    );

    // A kind without divergent records passes; an unknown kind is an error naming it.
    let p = replay(&url, "code_three");
    assert!(p.status().success(), "{}", p.diag());
    let p = replay(&url, "no_such_kind");
    assert_eq!(p.status().code(), Some(1), "{}", p.diag());
    assert!(p.stderr().contains("no_such_kind"), "{}", p.diag());
}
