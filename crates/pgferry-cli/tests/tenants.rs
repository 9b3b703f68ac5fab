//! End-to-end tests of `pgferry tenant …` and `pgferry key …` against a test kit database,
//! and of the key `pgferry dev` prints.

mod common;

use common::{dev, pgferry, run, DataDir, Proc};
use pgferry_server::auth::{admin, ApiKey};
use serde_json::Value;

fn cmd(url: &str, args: &[&str]) -> Proc {
    let mut c = pgferry();
    c.args(args).env("PGFERRY_DATABASE_URL", url);
    run(c)
}

fn ok_json(p: &Proc) -> Value {
    assert!(p.status().success(), "{}", p.diag());
    serde_json::from_str(p.stdout().trim())
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e})\n{}", p.diag()))
}

fn fails_with(p: &Proc, needle: &str) {
    assert!(!p.status().success(), "expected failure\n{}", p.diag());
    assert!(p.stderr().contains(needle), "no {needle:?}\n{}", p.diag());
}

#[tokio::test]
async fn tenant_and_key_lifecycle_with_audit_log() {
    let db = pgferry_testkit::test_db().await;
    let url = db.url();
    ok_json(&cmd(&url, &["migrate", "up"]));

    let t = ok_json(&cmd(&url, &["tenant", "create", "acme"]));
    assert_eq!(t["name"], "acme");
    fails_with(&cmd(&url, &["tenant", "create", "acme"]), "already exists");
    fails_with(
        &cmd(&url, &["tenant", "create", "Not Valid"]),
        "invalid tenant name",
    );
    fails_with(
        &cmd(&url, &["key", "create", "--tenant", "nope"]),
        "no tenant named",
    );
    fails_with(
        &cmd(
            &url,
            &["key", "create", "--tenant", "acme", "--scopes", "read,root"],
        ),
        "unknown scope \"root\"",
    );

    let k = ok_json(&cmd(
        &url,
        &[
            "key",
            "create",
            "--tenant",
            "acme",
            "--scopes",
            "produce,read",
        ],
    ));
    assert_eq!(k["scopes"], serde_json::json!(["produce", "read"]));
    let key = ApiKey::parse(k["key"].as_str().expect("key")).expect("well-formed key");
    assert_eq!(k["prefix"], key.prefix.as_str());

    let client = db.connect().await;
    let tenant_id = t["tenant_id"].as_i64().unwrap();
    assert_eq!(
        admin::verify_key(&client, &key).await.unwrap(),
        Some(tenant_id)
    );
    // Only the hash is stored.
    let stored: String = client
        .query_one(
            "SELECT secret_sha256 FROM pgferry.api_keys WHERE prefix = $1",
            &[&key.prefix],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, key.secret_hash());
    assert_ne!(stored, key.secret);

    let listed = ok_json(&cmd(&url, &["tenant", "list"]));
    assert_eq!(listed[0]["name"], "acme");
    assert_eq!(listed[0]["active_keys"], 1);

    ok_json(&cmd(&url, &["key", "revoke", &key.prefix]));
    assert_eq!(admin::verify_key(&client, &key).await.unwrap(), None);
    fails_with(&cmd(&url, &["key", "revoke", &key.prefix]), "no active key");

    let actions: Vec<String> = client
        .query(
            "SELECT action FROM pgferry.audit_log ORDER BY audit_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(actions, ["tenant.create", "key.create", "key.revoke"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_prints_a_working_admin_key_and_the_same_one_after_restart() {
    let dir = DataDir::new();
    let mut first = Proc::spawn(dev(&dir));
    let key = first.wait_for_line("pgferry: dev api key=", common::START_TIMEOUT);
    first.wait_listening();
    let parsed = ApiKey::parse(&key).unwrap_or_else(|| panic!("bad key {key:?}"));
    {
        let db = dir.connect("pgferry").await;
        let tenant = admin::verify_key(&db, &parsed).await.unwrap();
        assert_eq!(tenant, admin::tenant_id(&db, "dev").await.unwrap());
        assert!(tenant.is_some());
        let scopes: Vec<String> = db
            .query_one(
                "SELECT scopes FROM pgferry.api_keys WHERE prefix = $1",
                &[&parsed.prefix],
            )
            .await
            .unwrap()
            .get(0);
        assert!(scopes.contains(&"admin".to_string()), "{scopes:?}");
    }
    first.signal(libc::SIGINT);
    assert!(
        first.wait(common::STOP_TIMEOUT).success(),
        "{}",
        first.diag()
    );

    let mut second = Proc::spawn(dev(&dir));
    let again = second.wait_for_line("pgferry: dev api key=", common::START_TIMEOUT);
    assert_eq!(again, key);
    second.wait_listening();
    second.signal(libc::SIGINT);
    assert!(
        second.wait(common::STOP_TIMEOUT).success(),
        "{}",
        second.diag()
    );
}
