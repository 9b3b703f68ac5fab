//! The write cost of migration 0017 (or, with `--migration 20`, 0020) on the workflow
//! engine's hot path (docs/performance.md, "Workflow pages at 1M instances" and "Active
//! statuses"): the same SQL workload on fresh databases with the migration's column and
//! indexes, and with them dropped, alternating.
//!
//! Workload per run: `--instances` instances started through `pgferry.wf_start` with a
//! correlation key each (10,000 per statement), then every instance driven through a
//! 3-step machine (`next`, `next`, `done`) by one connection: `wf_claim` batches of 200
//! and one `wf_finish` per batch. Prints one JSON object per run: start and step rates.
//!
//!     cargo run -p pgferry-dashboard --example wf_write_cost -- --instances 20000 --runs 3
//!     cargo run -p pgferry-dashboard --example wf_write_cost -- --migration 20 --runs 3

use std::time::Instant;

use pgferry_core::workflow::Outcome;
use serde_json::{json, Value};

const SEED_WORKFLOWS: &str = include_str!("sql/seed_workflows.sql");
/// Back to the schema before 0017 (the migration's objects only).
const WITHOUT_0017: &str = "DROP INDEX pgferry.wf_instances_ended;
DROP INDEX pgferry.wf_instances_correlation_all;
ALTER TABLE pgferry.wf_instances DROP COLUMN ended_status;";
/// Back to the schema before 0020.
const WITHOUT_0020: &str = "DROP INDEX pgferry.wf_instances_active;";

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number"))
        })
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let n = arg("--instances", 20_000) as i64;
    let runs = arg("--runs", 3);
    let migration = arg("--migration", 17);
    let without = match migration {
        17 => WITHOUT_0017,
        20 => WITHOUT_0020,
        m => panic!("--migration takes 17 or 20, not {m}"),
    };
    for run in 0..runs {
        for with in [true, false] {
            let db = pgferry_testkit::test_db().await;
            let mut client = db.connect().await;
            pgferry_core::migrate::up(&mut client)
                .await
                .expect("migrate");
            if !with {
                client.batch_execute(without).await.unwrap();
            }
            let t = Instant::now();
            let mut from = 1i64;
            while from <= n {
                let k = 10_000.min(n - from + 1);
                client
                    .query_one(SEED_WORKFLOWS, &[&"flows", &from, &k])
                    .await
                    .unwrap();
                from += k;
            }
            let start_s = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let mut steps = 0i64;
            loop {
                let rows = client
                    .query(
                        "SELECT * FROM pgferry.wf_claim('flows', 200, 'w', 30000)",
                        &[],
                    )
                    .await
                    .unwrap();
                if rows.is_empty() {
                    break;
                }
                let outcomes: Vec<Value> = rows
                    .iter()
                    .map(|r| {
                        let (id, seq, step): (i64, i32, String) =
                            (r.get("id"), r.get("step_seq"), r.get("step"));
                        let o = match step.as_str() {
                            "start" => Outcome::next("b", json!({})),
                            "b" => Outcome::next("c", json!({})),
                            _ => Outcome::done(json!(1)),
                        };
                        o.to_wire(id, seq)
                    })
                    .collect();
                client
                    .query(
                        "SELECT applied FROM pgferry.wf_finish($1)",
                        &[&Value::Array(outcomes)],
                    )
                    .await
                    .unwrap();
                steps += rows.len() as i64;
            }
            let step_s = t.elapsed().as_secs_f64();
            assert_eq!(steps, 3 * n, "every instance ran its three steps");
            println!(
                "{}",
                json!({
                    "run": run, "migration": migration, "with": with, "instances": n,
                    "starts_per_s": (n as f64 / start_s).round(),
                    "steps_per_s": (steps as f64 / step_s).round(),
                })
            );
        }
    }
}
