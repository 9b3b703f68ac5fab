//! The admin CLI (issue 27) against a real `pgferry dev`, and against a database URL with no
//! server running: every command, tables and `--json`, and the exit codes scripts rely on.

mod common;

use std::process::Command;

use common::{dev, http, pgferry, run, DataDir, Proc};
use serde_json::{json, Value};

struct Env {
    url: String,
    key: String,
    /// Set: the commands go to this database (`PGFERRY_DATABASE_URL`, `PGFERRY_TENANT` =
    /// `key`) instead of a server.
    database: bool,
}

impl Env {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = pgferry();
        c.args(args)
            .env_remove("PGFERRY_HTTP_URL")
            .env_remove("PGFERRY_DATABASE_URL");
        if self.database {
            c.env("PGFERRY_DATABASE_URL", &self.url)
                .env("PGFERRY_TENANT", &self.key);
        } else {
            c.env("PGFERRY_HTTP_URL", &self.url)
                .env("PGFERRY_API_KEY", &self.key);
        }
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
        database: false,
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
        database: false,
    };
    assert_eq!(bad.run(&["queue", "list"]).0, 6);
    let down = Env {
        url: "http://127.0.0.1:9".into(),
        key,
        database: false,
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

/// POSTs `body` with `key`; returns the JSON answer.
async fn post(url: &str, key: &str, path: &str, body: Value) -> Value {
    let resp = http()
        .post(format!("{url}{path}"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{path}: {}", resp.status());
    resp.json().await.unwrap()
}

/// `--database-url` mode: the same commands with no server running, through the server's
/// API run in the CLI's own process for a tenant (`PGFERRY_TENANT`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_command_against_a_database_url() {
    let db = pgferry_testkit::test_db().await;
    let mut cmd = pgferry();
    cmd.args(["serve", "--database-url", &db.url()])
        .args(["--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"])
        .args(["--ash-interval-ms", "0"]);
    let mut server = Proc::spawn(cmd);
    let url = server.wait_listening();
    let key = {
        let mut c = db.connect().await;
        for tenant in ["acme", "other"] {
            pgferry_server::auth::admin::create_tenant(&mut c, tenant)
                .await
                .unwrap();
        }
        let (_, key) = pgferry_server::auth::admin::create_key(
            &mut c,
            "acme",
            pgferry_server::auth::Scopes::all(),
            Some("seed"),
        )
        .await
        .unwrap();
        key.expose().to_string()
    };
    // Seed through the server: one job dead-lettered by a worker, then two pending ones.
    let bounce = post(
        &url,
        &key,
        "/v1/jobs/batch",
        json!({"jobs": [{"queue": "mail", "kind": "bounce", "args": {}, "max_attempts": 1}]}),
    )
    .await["job_ids"][0]
        .as_i64()
        .unwrap();
    let claimed = post(
        &url,
        &key,
        "/v1/workers/claim",
        json!({"queue": "mail", "max": 10, "worker": "t", "wait_ms": 5000}),
    )
    .await;
    let token = claimed["jobs"][0]["token"].clone();
    post(
        &url,
        &key,
        "/v1/workers/complete",
        json!({"results": [{"token": token, "error": {"message": "mailbox full", "retryable": true}}]}),
    )
    .await;
    let r = post(
        &url,
        &key,
        "/v1/jobs/batch",
        json!({"jobs": [
            {"queue": "mail", "kind": "send", "args": {"to": "a"}},
            {"queue": "mail", "kind": "send", "args": {"to": "b"}},
        ]}),
    )
    .await;
    let pending: Vec<i64> = r["job_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    // No server from here on.
    server.signal(libc::SIGTERM);
    assert!(
        server.wait(common::STOP_TIMEOUT).success(),
        "{}",
        server.diag()
    );

    let env = Env {
        url: db.url(),
        key: "acme".into(),
        database: true,
    };
    let (code, table, err) = env.run(&["queue", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        table.starts_with("QUEUE") && table.contains("mail"),
        "{table}"
    );
    assert_eq!(env.json(&["queue", "show", "mail"])["name"], "mail");
    let s = env.json(&["queue", "set", "mail", "--max-attempts", "7"]);
    assert_eq!(s["settings"]["max_attempts"], 7, "{s}");
    let (code, _, err) = env.run(&["queue", "set", "mail", "--durability", "fast"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("durability"), "{err}");
    env.json(&["queue", "pause", "mail"]);
    assert_eq!(env.json(&["queue", "show", "mail"])["paused"], true);
    env.json(&["queue", "resume", "mail"]);
    assert_eq!(env.json(&["queue", "show", "mail"])["paused"], false);

    let j = env.json(&["job", "get", &pending[0].to_string()]);
    assert_eq!(j["state"], "pending", "{j}");
    let listed = env.json(&["job", "list", "--queue", "mail", "--limit", "1"]);
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["has_more"], true);
    assert_eq!(env.run(&["job", "get", "999999999"]).0, 4);

    let dead = env.json(&["dead", "list", "--error-contains", "mailbox"]);
    assert_eq!(dead["jobs"][0]["id"].as_i64(), Some(bounce), "{dead}");
    assert_eq!(env.run(&["dead", "retry"]).0, 3);
    assert_eq!(
        env.json(&["dead", "retry", "--id", &bounce.to_string()])["count"],
        1
    );
    assert_eq!(
        env.json(&["job", "get", &bounce.to_string()])["state"],
        "pending"
    );
    assert_eq!(env.run(&["job", "retry", &pending[0].to_string()]).0, 5);
    env.json(&["job", "cancel", &pending[0].to_string()]);
    let cancelled = env.json(&["queue", "cancel", "mail"]);
    assert!(cancelled["cancelled"].is_object(), "{cancelled}");
    assert!(env.json(&["dead", "purge", "--all"])["count"].is_number());

    // Another tenant sees none of acme's queues; an unknown tenant exits 4; two tenants
    // and no --tenant exits 3; an unreachable database exits 7.
    let other = Env {
        url: db.url(),
        key: "other".into(),
        database: true,
    };
    let queues = other.json(&["queue", "list"]);
    assert_eq!(
        queues["queues"].as_array().map(Vec::len),
        Some(0),
        "{queues}"
    );
    let nobody = Env {
        url: db.url(),
        key: "nobody".into(),
        database: true,
    };
    assert_eq!(nobody.run(&["queue", "list"]).0, 4);
    let mut c = pgferry();
    c.args(["queue", "list", "--database-url", &db.url()])
        .env_remove("PGFERRY_HTTP_URL")
        .env_remove("PGFERRY_TENANT");
    let mut p = run(c);
    assert_eq!(
        p.wait(common::COMMAND_TIMEOUT).code(),
        Some(3),
        "{}",
        p.diag()
    );
    let down = Env {
        url: "postgres://pgferry@127.0.0.1:9/none".into(),
        key: "acme".into(),
        database: true,
    };
    assert_eq!(down.run(&["queue", "list"]).0, 7);
}
