//! Structured logs: with `PGFERRY_LOG_FORMAT=json` every line pgferry writes to stderr is
//! one JSON object, and a request's log lines carry its span (method, path and the trace
//! id of the `traceparent` it was sent with).

mod common;

use common::{http, pgferry, Proc, STOP_TIMEOUT};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line_with_the_request_span() {
    let db = pgferry_testkit::test_db().await;
    let mut cmd = pgferry();
    cmd.args(["serve", "--database-url", &db.url()])
        .args(["--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"])
        .env("PGFERRY_LOG_FORMAT", "json")
        // Each answered request is logged at DEBUG by the HTTP layer.
        .env("PGFERRY_LOG", "info,tower_http=debug");
    let mut proc = Proc::spawn(cmd);
    let base = proc.wait_listening();
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let resp = http()
        .get(format!("{base}/v1/queues"))
        .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    proc.signal(libc::SIGTERM);
    let status = proc.wait(STOP_TIMEOUT);
    assert!(status.success(), "exit status {status}\n{}", proc.diag());

    let lines: Vec<Value> = proc
        .stderr()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .all(|l| l["level"].is_string() && l["timestamp"].is_string()),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "shutdown requested"),
        "{lines:#?}"
    );
    let request = lines
        .iter()
        .find(|l| l["span"]["trace_id"] == trace && l["fields"]["status"].is_number())
        .unwrap_or_else(|| panic!("no line of the request: {lines:#?}"));
    assert_eq!(request["span"]["path"], "/v1/queues", "{request}");
    assert_eq!(request["span"]["method"], "GET", "{request}");
    assert_eq!(request["fields"]["status"], 401, "{request}");
}
