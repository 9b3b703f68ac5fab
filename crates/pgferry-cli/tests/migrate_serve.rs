//! End-to-end tests of `pgferry migrate` and `pgferry serve` against the test kit's
//! cluster (one fresh database per test).

mod common;

use common::{get_json, http, pgferry, run, Proc, STOP_TIMEOUT};
use serde_json::Value;

fn migrate(action: &str, url: &str) -> std::process::Command {
    let mut cmd = pgferry();
    // The documented form: `pgferry migrate up|status --database-url …`.
    cmd.args(["migrate", action, "--database-url", url]);
    cmd
}

/// Runs `pgferry migrate <action>`, asserts success and parses its JSON output.
fn migrate_json(action: &str, url: &str) -> Value {
    let proc = run(migrate(action, url));
    parse_success(&proc)
}

fn parse_success(proc: &Proc) -> Value {
    assert!(proc.status().success(), "{}", proc.diag());
    serde_json::from_str(&proc.stdout())
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e})\n{}", proc.diag()))
}

/// `(component, version or function name, state)` of every step in a `migrate status` report.
fn states(status: &Value) -> Vec<(String, String, String)> {
    let list = status
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {status}"));
    assert!(!list.is_empty(), "no migrations listed: {status}");
    list.iter()
        .map(|m| {
            let component = m["component"].as_str().unwrap_or_else(|| panic!("{m}"));
            let state = m["state"].as_str().unwrap_or_else(|| panic!("{m}"));
            let name = m["name"].as_str().unwrap_or_else(|| panic!("{m}"));
            // A versioned migration is a file; a repeatable function is named by its function.
            let step = match m["version"].as_i64() {
                Some(v) => {
                    assert!(name.ends_with(".sql"), "{m}");
                    v.to_string()
                }
                None => name.to_owned(),
            };
            (component.to_owned(), step, state.to_owned())
        })
        .collect()
}

/// How many migrations and functions a `migrate up` report says it applied.
fn applied_counts(report: &Value) -> (usize, usize) {
    let count = |field: &str| {
        report[field]
            .as_array()
            .unwrap_or_else(|| panic!("no {field} list: {report}"))
            .len()
    };
    (count("applied"), count("functions"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_status_then_concurrent_up() {
    let db = pgferry_testkit::test_db().await;
    let url = db.url();

    let before = states(&migrate_json("status", &url));
    assert!(
        before.iter().all(|(_, _, state)| state == "pending"),
        "fresh database: {before:?}"
    );
    for component in ["engine", "server", "ash"] {
        assert!(
            before.iter().any(|(c, _, _)| c == component),
            "{component} missing: {before:?}"
        );
    }
    let versions = before
        .iter()
        .filter(|(_, s, _)| s.parse::<i64>().is_ok())
        .count();
    let functions = before.len() - versions;
    assert!(
        functions >= 10,
        "the engine's functions are listed: {before:?}"
    );

    // Two at once: the migration lock makes exactly one of them do the work.
    let mut a = Proc::spawn(migrate("up", &url));
    let mut b = Proc::spawn(migrate("up", &url));
    a.wait(common::COMMAND_TIMEOUT);
    b.wait(common::COMMAND_TIMEOUT);
    let mut reports = [
        applied_counts(&parse_success(&a)),
        applied_counts(&parse_success(&b)),
    ];
    reports.sort();
    assert_eq!(
        reports,
        [(0, 0), (versions, functions)],
        "one run applies everything, the other nothing\n{}\n{}",
        a.diag(),
        b.diag()
    );

    let after = states(&migrate_json("status", &url));
    assert_eq!(
        after,
        before
            .iter()
            .map(|(c, s, _)| (c.clone(), s.clone(), "applied".to_owned()))
            .collect::<Vec<_>>()
    );
    assert_eq!(applied_counts(&migrate_json("up", &url)), (0, 0));
}

#[test]
fn migrate_accepts_the_url_before_the_action_too() {
    // Nothing listens there: the command gets as far as connecting, i.e. it parsed.
    let url = format!("postgres://postgres@127.0.0.1:{}/nowhere", closed_port());
    let proc = run({
        let mut cmd = pgferry();
        cmd.args(["migrate", "--database-url", &url, "status"]);
        cmd
    });
    assert_eq!(proc.status().code(), Some(1), "{}", proc.diag());
    assert!(proc.stderr().contains("pgferry: error:"), "{}", proc.diag());
}

#[test]
fn migrate_without_a_url_is_a_usage_error() {
    let proc = run({
        let mut cmd = pgferry();
        cmd.args(["migrate", "status"]);
        cmd
    });
    assert_eq!(proc.status().code(), Some(2), "{}", proc.diag());
    assert!(proc.stderr().contains("--database-url"), "{}", proc.diag());
    assert!(
        proc.stderr().contains("PGFERRY_DATABASE_URL"),
        "{}",
        proc.diag()
    );
}

/// A loopback port nobody listens on (bound, noted, released).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

fn serve(url: &str) -> std::process::Command {
    let mut cmd = pgferry();
    cmd.args(["serve", "--database-url", url])
        .args(["--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"])
        .arg("--no-migrate");
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_is_not_ready_until_migrated() {
    let db = pgferry_testkit::test_db().await;
    let url = db.url();
    let mut proc = Proc::spawn(serve(&url));
    let base = proc.wait_listening();
    let client = http();

    let (status, body) = get_json(&client, &base, "/healthz").await;
    assert_eq!((status, body), (200, serde_json::json!({ "status": "ok" })));
    let (status, body) = get_json(&client, &base, "/readyz").await;
    assert_eq!(status, 503, "/readyz on an unmigrated db: {body}");
    assert_eq!(body["error"]["code"], "schema_not_current", "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");

    // Readiness follows the database, not the state at start.
    applied_counts(&migrate_json("up", &url));
    let (status, body) = get_json(&client, &base, "/readyz").await;
    assert_eq!(status, 200, "/readyz after migrate up: {body}");

    proc.signal(libc::SIGTERM);
    let status = proc.wait(STOP_TIMEOUT);
    assert!(status.success(), "exit status {status}\n{}", proc.diag());
    // Logs go to stderr, which is a pipe here: plain text, no colour codes.
    assert!(
        !proc.stderr().contains('\x1b'),
        "ANSI escapes in logs\n{}",
        proc.diag()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_without_a_database_is_not_ready_and_still_stops() {
    let url = format!("postgres://postgres@127.0.0.1:{}/nowhere", closed_port());

    // Migrating on start needs the database: a clear error, not a hang.
    let proc = run({
        let mut cmd = pgferry();
        cmd.args([
            "serve",
            "--database-url",
            &url,
            "--http-addr",
            "127.0.0.1:0",
            "--grpc-addr",
            "127.0.0.1:0",
        ]);
        cmd
    });
    assert!(!proc.status().success(), "{}", proc.diag());
    assert!(proc.stderr().contains("pgferry: error:"), "{}", proc.diag());

    let mut proc = Proc::spawn(serve(&url));
    let base = proc.wait_listening();
    let (status, body) = get_json(&http(), &base, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "database_unreachable", "{body}");
    proc.signal(libc::SIGINT);
    let status = proc.wait(STOP_TIMEOUT);
    assert!(status.success(), "exit status {status}\n{}", proc.diag());
}
