//! Defects a new user met (issue 18), each asserted through the real HTTP API.

mod http_common;

use http_common::{error_of, TestServer};
use serde_json::json;

#[tokio::test]
async fn wrong_methods_answer_the_json_error_body() {
    let s = TestServer::start(Default::default()).await;
    let key = s.key("acme", &["admin"]).await;
    let (status, body, _) = s.call("DELETE", "/v1/jobs/1", Some(&key), None).await;
    assert_eq!(status, 405, "{body}");
    let (code, _) = error_of(&body);
    assert_eq!(code, "method_not_allowed");
}

#[tokio::test]
async fn errors_name_the_users_queue_never_the_engine_name() {
    let s = TestServer::start(Default::default()).await;
    let key = s.key("acme", &["admin"]).await;
    for (method, path) in [
        ("POST", "/v1/queues/nosuch/pause"),
        ("POST", "/v1/queues/nosuch/resume"),
        ("GET", "/v1/queues/nosuch"),
    ] {
        let (status, body, _) = s.call(method, path, Some(&key), Some(json!({}))).await;
        assert_eq!(status, 404, "{method} {path}: {body}");
        let message = body["error"]["message"].as_str().unwrap().to_string();
        assert!(
            !message.contains("t1.") && !message.contains(".nosuch"),
            "{method} {path}: {message}"
        );
    }
}

#[tokio::test]
async fn queue_name_limits_are_stated_as_enforced() {
    let s = TestServer::start(Default::default()).await;
    let key = s.key("acme", &["admin"]).await;
    for name in ["", &"q".repeat(49)] {
        let (status, body, _) = s
            .call(
                "POST",
                "/v1/jobs",
                Some(&key),
                Some(json!({"queue": name, "kind": "k", "args": {}})),
            )
            .await;
        assert_eq!(status, 400, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("1 to 48"), "{name:?}: {message}");
    }
}

#[tokio::test]
async fn the_http_claim_answers_lease_queue_and_priority() {
    let s = TestServer::start(Default::default()).await;
    let key = s.key("acme", &["admin"]).await;
    let (status, body, _) = s
        .call(
            "POST",
            "/v1/jobs",
            Some(&key),
            Some(json!({"queue": "mail", "kind": "k", "args": {}, "priority": 2})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let jobs = s.claim_n(&key, "mail", 1).await;
    let job = &jobs[0];
    assert_eq!(job["queue"], "mail", "{job}");
    assert_eq!(job["priority"], 2, "{job}");
    assert!(
        job["lease_until_unix_ms"].as_u64().is_some_and(|t| t > 0),
        "{job}"
    );
    // The enqueue time in microseconds too, the same instant as the milliseconds.
    let us = job["enqueued_at_unix_us"]
        .as_u64()
        .expect("enqueued_at_unix_us");
    assert_eq!(
        us / 1000,
        job["enqueued_at_unix_ms"].as_u64().unwrap(),
        "{job}"
    );
}

#[tokio::test]
async fn a_job_answers_the_result_it_returned() {
    let s = TestServer::start(Default::default()).await;
    let key = s.key("acme", &["admin"]).await;
    let (_, body, _) = s
        .call(
            "POST",
            "/v1/jobs",
            Some(&key),
            Some(json!({"queue": "calc", "kind": "add", "args": {"a": 1}})),
        )
        .await;
    let id = body["job_id"].as_i64().unwrap();
    let jobs = s.claim_n(&key, "calc", 1).await;
    let (status, body, _) = s
        .call(
            "POST",
            "/v1/workers/complete",
            Some(&key),
            Some(json!({"results": [{"token": jobs[0]["token"], "result": {"sum": 42}}]})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, job, _) = s
        .call("GET", &format!("/v1/jobs/{id}"), Some(&key), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(job["state"], "completed", "{job}");
    assert_eq!(job["result"], json!({"sum": 42}), "{job}");
}
