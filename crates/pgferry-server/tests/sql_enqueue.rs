//! Transactional enqueue from SQL: `pgferry.enqueue(pgferry.tenant_queue(tenant, queue), ...)`
//! inside an application's own transaction. A rolled-back transaction leaves no job; a
//! committed one is the tenant's job like any other (seen and claimed through the API with
//! the tenant's key, invisible to another tenant); scheduled jobs wait; bad input is an
//! error naming the field and writes nothing.

mod http_common;

use http_common::TestServer;
use pgferry_server::ServerConfig;
use serde_json::json;

const ENQUEUE: &str = "SELECT pgferry.enqueue(pgferry.tenant_queue($1, $2), $3, $4::jsonb, \
                       $5::jsonb, $6, $7, $8) AS id";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_enqueued_in_the_apps_transaction_exists_exactly_when_it_commits() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let a = srv.key("acme", &["produce", "read", "consume"]).await;
    let b = srv.key("other", &["produce", "read", "consume"]).await;
    let mut app = srv.db.connect().await;
    app.batch_execute("CREATE TABLE orders (id int PRIMARY KEY)")
        .await
        .unwrap();
    let none: Option<serde_json::Value> = None;
    let no_time: Option<std::time::SystemTime> = None;

    // Rolled back with the application's own write: neither exists.
    let tx = app.transaction().await.unwrap();
    tx.execute("INSERT INTO orders VALUES (1)", &[])
        .await
        .unwrap();
    let gone: i64 = tx
        .query_one(
            ENQUEUE,
            &[
                &"acme",
                &"mail",
                &"send",
                &json!({"order": 1}),
                &none,
                &0i32,
                &None::<i32>,
                &no_time,
            ],
        )
        .await
        .unwrap()
        .get("id");
    tx.rollback().await.unwrap();
    let (s, _, _) = srv
        .call("GET", &format!("/v1/jobs/{gone}"), Some(&a), None)
        .await;
    assert_eq!(s, 404, "a rolled-back enqueue left a job");

    // Committed with it: the tenant's job, claimed through the API.
    let tx = app.transaction().await.unwrap();
    tx.execute("INSERT INTO orders VALUES (2)", &[])
        .await
        .unwrap();
    let meta = Some(json!({"trace": "t-1"}));
    let id: i64 = tx
        .query_one(
            ENQUEUE,
            &[
                &"acme",
                &"mail",
                &"send",
                &json!({"order": 2}),
                &meta,
                &2i32,
                &Some(3i32),
                &no_time,
            ],
        )
        .await
        .unwrap()
        .get("id");
    tx.commit().await.unwrap();
    let (s, job, _) = srv
        .call("GET", &format!("/v1/jobs/{id}"), Some(&a), None)
        .await;
    assert_eq!(s, 200, "{job}");
    assert_eq!(
        (
            &job["queue"],
            &job["kind"],
            &job["args"],
            &job["priority"],
            &job["max_attempts"]
        ),
        (
            &json!("mail"),
            &json!("send"),
            &json!({"order": 2}),
            &json!(2),
            &json!(3)
        )
    );
    let (s, _, _) = srv
        .call("GET", &format!("/v1/jobs/{id}"), Some(&b), None)
        .await;
    assert_eq!(s, 404, "another tenant sees the job");
    let claimed = srv.claim_n(&a, "mail", 1).await;
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0]["id"], json!(id));

    // Scheduled: waits in `scheduled` until its time.
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    let sched: i64 = app
        .query_one(
            ENQUEUE,
            &[
                &"acme",
                &"mail",
                &"send",
                &json!({}),
                &none,
                &0i32,
                &None::<i32>,
                &Some(later),
            ],
        )
        .await
        .unwrap()
        .get("id");
    let (_, job, _) = srv
        .call("GET", &format!("/v1/jobs/{sched}"), Some(&a), None)
        .await;
    assert_eq!(job["state"], json!("scheduled"), "{job}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_an_error_naming_the_field_and_writes_nothing() {
    let srv = TestServer::start(ServerConfig::default()).await;
    srv.key("acme", &["produce"]).await;
    let app = srv.db.connect().await;
    let none: Option<serde_json::Value> = None;
    let no_time: Option<std::time::SystemTime> = None;
    // (tenant, queue, kind, args, priority, max_attempts, the field the error names)
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        serde_json::Value,
        i32,
        Option<i32>,
        &'static str,
    );
    let cases: [Case; 6] = [
        ("nobody", "mail", "send", json!({}), 0, None, "tenant"),
        ("acme", "Mail!", "send", json!({}), 0, None, "queue"),
        ("acme", "mail", "no spaces", json!({}), 0, None, "kind"),
        ("acme", "mail", "send", json!({}), 4, None, "priority"),
        (
            "acme",
            "mail",
            "send",
            json!({}),
            0,
            Some(0),
            "max_attempts",
        ),
        (
            "acme",
            "mail",
            "send",
            json!({"x": "a".repeat(1 << 20)}),
            0,
            None,
            "args",
        ),
    ];
    for (tenant, queue, kind, args, prio, max, field) in cases {
        let e = app
            .query_one(
                ENQUEUE,
                &[&tenant, &queue, &kind, &args, &none, &prio, &max, &no_time],
            )
            .await
            .expect_err(field);
        let db = e.as_db_error().expect("a database error");
        assert!(
            db.message().starts_with(&format!("{field}:")),
            "{field}: {}",
            db.message()
        );
    }
    let written: i64 = app
        .query_one(
            "SELECT (SELECT count(*) FROM pgferry.ready) + (SELECT count(*) FROM pgferry.scheduled)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(written, 0);
}

/// A workflow started from SQL in the app's transaction: nothing if it rolls back; once
/// committed, the tenant's instance (its keys under the tenant's prefix, shown as given);
/// the correlation key deduplicates; a bad field is an error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_started_in_the_apps_transaction() {
    let srv = TestServer::start(ServerConfig::default()).await;
    let a = srv.key("acme", &["produce", "read", "consume"]).await;
    let b = srv.key("other", &["produce", "read"]).await;
    let mut app = srv.db.connect().await;
    const START: &str = "SELECT id, duplicate FROM pgferry.tenant_wf_start($1, $2, $3, $4::jsonb, \
                         p_correlation_key => $5, p_concurrency_key => $6, p_priority => $7)";
    let input = json!({"order": 7});

    let tx = app.transaction().await.unwrap();
    let gone: i64 = tx
        .query_one(
            START,
            &[&"acme", &"order", &"flows", &input, &"o-7", &"ck", &1i32],
        )
        .await
        .unwrap()
        .get("id");
    tx.rollback().await.unwrap();
    let (s, _, _) = srv
        .call("GET", &format!("/v1/workflows/{gone}"), Some(&a), None)
        .await;
    assert_eq!(s, 404, "a rolled-back start left an instance");

    let tx = app.transaction().await.unwrap();
    let row = tx
        .query_one(
            START,
            &[&"acme", &"order", &"flows", &input, &"o-7", &"ck", &1i32],
        )
        .await
        .unwrap();
    let (id, dup): (i64, bool) = (row.get("id"), row.get("duplicate"));
    assert!(!dup);
    let again = tx
        .query_one(
            START,
            &[&"acme", &"order", &"flows", &input, &"o-7", &"ck", &1i32],
        )
        .await
        .unwrap();
    assert_eq!(
        (again.get::<_, i64>("id"), again.get::<_, bool>("duplicate")),
        (id, true)
    );
    tx.commit().await.unwrap();
    let (s, wf, _) = srv
        .call("GET", &format!("/v1/workflows/{id}"), Some(&a), None)
        .await;
    assert_eq!(s, 200, "{wf}");
    assert_eq!(
        (
            &wf["queue"],
            &wf["kind"],
            &wf["input"],
            &wf["concurrency_key"]
        ),
        (&json!("flows"), &json!("order"), &input, &json!("ck"))
    );
    let stored: String = app
        .query_one(
            "SELECT concurrency_key FROM pgferry.wf_instances WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        stored.starts_with('t') && stored.ends_with(".ck"),
        "{stored}"
    );
    let (s, _, _) = srv
        .call("GET", &format!("/v1/workflows/{id}"), Some(&b), None)
        .await;
    assert_eq!(s, 404, "another tenant sees the instance");

    let e = app
        .query_one(
            START,
            &[&"acme", &"order", &"flows", &input, &"o-8", &"ck", &10i32],
        )
        .await
        .expect_err("priority 10");
    assert!(
        e.as_db_error().unwrap().message().starts_with("priority:"),
        "{e}"
    );
}
