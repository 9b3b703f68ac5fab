//! The admin CLI (issue 27) against a real `pgferry dev`: every command, tables and `--json`,
//! and the exit codes scripts rely on.

mod common;

use std::process::Command;

use common::{dev, http, pgferry, run, DataDir, Proc};
use serde_json::{json, Value};

struct Env {
    url: String,
    key: String,
}

impl Env {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = pgferry();
        c.args(args)
            .env("PGFERRY_HTTP_URL", &self.url)
            .env("PGFERRY_API_KEY", &self.key);
        c
    }

    /// Runs and returns (exit code, stdout, stderr).
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let mut p = run(self.cmd(args));
        let code = p.wait(common::COMMAND_TIMEOUT).code().unwrap_or(-1);
        (code, p.stdout(), p.stderr())
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let (code, out, err) = self.run(&all);
        assert_eq!(code, 0, "{args:?}: {err}");
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_command_against_a_real_server() {
    let dir = DataDir::new();
    let mut server = Proc::spawn(dev(&dir));
    let key = server.wait_for_line("pgferry: dev api key=", common::START_TIMEOUT);
    let url = server.wait_listening();
    let env = Env {
        url: url.clone(),
        key: key.clone(),
    };
    let client = http();

    // Seed: jobs in "mail", one of which dies at once (max_attempts 1, failed by a worker).
    let batch = json!({"jobs": [
        {"queue": "mail", "kind": "send", "args": {"to": "a"}},
        {"queue": "mail", "kind": "send", "args": {"to": "b"}},
        {"queue": "mail", "kind": "bounce", "args": {}, "max_attempts": 1},
    ]});
    let r: Value = client
        .post(format!("{url}/v1/jobs/batch"))
        .bearer_auth(&key)
        .json(&batch)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<i64> = r["job_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();

    // queue list / show (table and JSON)
    let (code, table, _) = env.run(&["queue", "list"]);
    assert_eq!(code, 0);
    assert!(
        table.starts_with("QUEUE") && table.contains("mail"),
        "{table}"
    );
    let q = env.json(&["queue", "show", "mail"]);
    assert_eq!(q["name"], "mail");
    // queue set / pause / resume
    let s = env.json(&[
        "queue",
        "set",
        "mail",
        "--max-attempts",
        "7",
        "--durability",
        "sync",
    ]);
    assert_eq!(s["settings"]["max_attempts"], 7, "{s}");
    env.json(&["queue", "pause", "mail"]);
    assert_eq!(env.json(&["queue", "show", "mail"])["paused"], true);
    env.json(&["queue", "resume", "mail"]);
    assert_eq!(env.json(&["queue", "show", "mail"])["paused"], false);
    // A refused setting: exit 3, the field named, nothing changed.
    let (code, _, err) = env.run(&["queue", "set", "mail", "--durability", "fast"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("durability"), "{err}");

    // job get / list
    let j = env.json(&["job", "get", &ids[0].to_string()]);
    assert_eq!(
        (j["id"].as_i64(), j["state"].as_str()),
        (Some(ids[0]), Some("pending"))
    );
    let (code, table, _) = env.run(&["job", "get", &ids[0].to_string()]);
    assert_eq!(code, 0);
    assert!(
        table.contains("pending") && table.contains("ATTEMPT"),
        "{table}"
    );
    let listed = env.json(&["job", "list", "--queue", "mail", "--limit", "2"]);
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 2);
    assert_eq!(listed["has_more"], true);
    // Unknown job: exit 4.
    let (code, _, err) = env.run(&["job", "get", "999999999"]);
    assert_eq!(code, 4, "{err}");

    // Kill the third job through an HTTP worker, then the dead-letter commands.
    let claimed: Value = client
        .post(format!("{url}/v1/workers/claim"))
        .bearer_auth(&key)
        .json(&json!({"queue": "mail", "max": 10, "worker": "t", "wait_ms": 5000}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let results: Vec<Value> = claimed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|job| {
            if job["kind"] == "bounce" {
                json!({"token": job["token"], "error": {"message": "mailbox full", "retryable": true}})
            } else {
                json!({"token": job["token"], "result": {"ok": true}})
            }
        })
        .collect();
    client
        .post(format!("{url}/v1/workers/complete"))
        .bearer_auth(&key)
        .json(&json!({ "results": results }))
        .send()
        .await
        .unwrap();
    let dead = env.json(&["dead", "list", "--error-contains", "mailbox"]);
    assert_eq!(dead["jobs"][0]["id"].as_i64(), Some(ids[2]), "{dead}");
    // Retry without a target is refused (exit 3), with --id it works.
    let (code, _, err) = env.run(&["dead", "retry"]);
    assert_eq!(code, 3, "{err}");
    let retried = env.json(&["dead", "retry", "--id", &ids[2].to_string()]);
    assert_eq!(retried["count"], 1);
    // job retry of a job that is not dead: conflict, exit 5.
    let (code, _, err) = env.run(&["job", "retry", &ids[0].to_string()]);
    assert_eq!(code, 5, "{err}");
    // job cancel of the retried one, then queue cancel of whatever is left.
    env.json(&["job", "cancel", &ids[2].to_string()]);
    let cancelled = env.json(&["queue", "cancel", "mail"]);
    assert!(cancelled["cancelled"].is_object(), "{cancelled}");
    // dead purge --all works (nothing left to purge is still success).
    assert!(env.json(&["dead", "purge", "--all"])["count"].is_number());

    // Auth: a wrong key exits 6; no server exits 7.
    let bad = Env {
        url: url.clone(),
        key: "pgf_000000000000_nope".into(),
    };
    assert_eq!(bad.run(&["queue", "list"]).0, 6);
    let down = Env {
        url: "http://127.0.0.1:9".into(),
        key,
    };
    assert_eq!(down.run(&["queue", "list"]).0, 7);

    // Completions are generated for the shells.
    let (code, script, _) = env.run(&["completions", "bash"]);
    assert_eq!(code, 0);
    assert!(
        script.contains("pgferry") && script.contains("queue"),
        "{}",
        &script[..200.min(script.len())]
    );

    server.signal(libc::SIGINT);
    assert!(
        server.wait(common::STOP_TIMEOUT).success(),
        "{}",
        server.diag()
    );
}
