//! `pgferry schedule …` against a real `pgferry dev`: the served leader fires the schedule
//! (migrations and the firer duty wired into `serve`), the CLI shows and changes it.

mod common;

use std::time::Duration;

use common::{dev, http, DataDir, Proc};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_leader_fires_what_the_cli_schedules() {
    let dir = DataDir::new();
    let mut server = Proc::spawn(dev(&dir));
    let key = server.wait_for_line("pgferry: dev api key=", common::START_TIMEOUT);
    let url = server.wait_listening();
    let env = common::CliApi {
        group: "schedule",
        url: url.clone(),
        key,
    };

    let created = env.json(&[
        "create",
        "beat",
        "--every-ms",
        "1000",
        "--queue",
        "beats",
        "--kind",
        "beat",
        "--args",
        r#"{"x": 1}"#,
        "--overlap",
        "allow",
    ]);
    assert_eq!(created["interval_ms"], 1000);
    assert_eq!(created["target"]["queue"], "beats");

    // The leader of `pgferry dev` fires it every second.
    let mut fired = Vec::new();
    for _ in 0..100 {
        let f = env.json(&["fires", "beat"]);
        fired = f["fires"].as_array().cloned().unwrap_or_default();
        if fired.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(fired.len() >= 3, "{fired:?}");
    assert!(fired
        .iter()
        .all(|f| f["outcome"] == "fired" && f["job_id"].is_i64()));

    let preview = env.json(&["preview", "beat", "--n", "5"]);
    assert_eq!(preview["fires"].as_array().unwrap().len(), 5);
    assert_eq!(env.json(&["pause", "beat"])["paused"], true);
    assert_eq!(env.json(&["list"])["schedules"][0]["name"], "beat");

    let metrics = http()
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("pgferry_schedule_fires_total{outcome=\"fired\"}"))
        .expect("fires metric");
    let n: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(n >= 3, "{line}");

    // Bad input: exit 3 and the field named; unknown: exit 4.
    let (code, _, err) = env.run(&[
        "create",
        "bad",
        "--cron",
        "61 * * * *",
        "--queue",
        "q",
        "--kind",
        "k",
    ]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("field cron"), "{err}");
    assert_eq!(env.run(&["show", "nope"]).0, 4);
    assert_eq!(env.json(&["delete", "beat"])["deleted"], "beat");
    assert_eq!(env.run(&["show", "beat"]).0, 4);
}
