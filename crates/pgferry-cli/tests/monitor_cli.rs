//! `pgferry monitor …` against a real `pgferry dev`: the CLI creates, pings, pauses and
//! deletes a monitor over the HTTP API, and the served leader's duty marks it late.

mod common;

use std::time::Duration;

use common::{dev, DataDir, Proc};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_leader_marks_late_what_the_cli_created_and_pinged() {
    let dir = DataDir::new();
    let mut server = Proc::spawn(dev(&dir));
    let key = server.wait_for_line("pgferry: dev api key=", common::START_TIMEOUT);
    let url = server.wait_listening();
    let env = common::CliApi {
        group: "monitor",
        url,
        key,
    };

    let created = env.json(&[
        "create",
        "beat",
        "--period-ms",
        "1000",
        "--grace-ms",
        "0",
        "--failure-threshold",
        "2",
    ]);
    assert_eq!(created["state"], "new");
    assert_eq!(created["failure_threshold"], 2);
    assert_eq!(env.json(&["ping", "beat"])["state"], "up");
    // The leader of `pgferry dev` finds it late within a few seconds of the missed ping.
    let mut state = String::new();
    for _ in 0..100 {
        state = env.json(&["get", "beat"])["state"]
            .as_str()
            .unwrap()
            .to_string();
        if state == "late" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(state, "late");
    let alerts = env.json(&["alerts", "beat"]);
    assert_eq!(alerts["alerts"][0]["kind"], "late", "{alerts}");
    assert_eq!(env.json(&["ping", "beat", "--start"])["state"], "late");
    assert_eq!(env.json(&["ping", "beat"])["state"], "up");
    assert_eq!(env.json(&["ping", "beat", "--fail"])["state"], "up");
    assert_eq!(
        env.json(&["pings", "beat"])["pings"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    assert_eq!(env.json(&["pause", "beat"])["state"], "paused");
    assert_eq!(env.json(&["resume", "beat"])["state"], "up");
    assert_eq!(env.json(&["list"])["monitors"][0]["name"], "beat");

    // Bad input: exit 3 and the field named; unknown: exit 4.
    let (code, _, err) = env.run(&["create", "bad", "--cron", "61 * * * *"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("field cron"), "{err}");
    assert_eq!(env.run(&["get", "nope"]).0, 4);
    assert_eq!(env.json(&["delete", "beat"])["deleted"], "beat");
    assert_eq!(env.run(&["get", "beat"]).0, 4);
}
