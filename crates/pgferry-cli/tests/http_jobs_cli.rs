//! HTTP jobs in a real `pgferry dev` (loopback allowed with --http-jobs-allow): a job posted
//! to the tenant's `http` queue is executed by the server against a loopback target, and a
//! schedule whose target is an HTTP job calls the target on each fire.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::post;
use axum::Router;
use common::{dev, http, DataDir, Proc};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_runs_http_jobs_and_scheduled_http_calls() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s2 = seen.clone();
    let app = Router::new().route(
        "/hook",
        post(move |body: String| {
            let seen = s2.clone();
            async move {
                seen.lock().unwrap().push(body);
                "thanks"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let dir = DataDir::new();
    let mut cmd = dev(&dir);
    cmd.args(["--http-jobs-allow", "loopback"]);
    let mut server = Proc::spawn(cmd);
    let key = server.wait_for_line("pgferry: dev api key=", common::START_TIMEOUT);
    let url = server.wait_listening();
    let client = http();

    let (status, job): (u16, Value) = {
        let r = client
            .post(format!("{url}/v1/jobs"))
            .bearer_auth(&key)
            .json(&json!({"queue": "http", "kind": "http", "args": {
                "method": "POST", "url": hook, "body": "one", "expect_body": "thanks"}}))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    };
    assert_eq!(status, 201, "{job}");
    let id = job["id"]
        .as_i64()
        .or(job["job_id"].as_i64())
        .expect("job id");
    let mut last = Value::Null;
    for _ in 0..150 {
        last = client
            .get(format!("{url}/v1/jobs/{id}"))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if last["state"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(last["state"], "completed", "{last}");
    assert_eq!(seen.lock().unwrap().as_slice(), ["one"]);

    // A schedule whose fires are HTTP jobs: the target hears from each fire.
    let r = client
        .post(format!("{url}/v1/schedules"))
        .bearer_auth(&key)
        .json(
            &json!({"name": "ping-hook", "interval_ms": 1000, "target": {
            "type": "job", "queue": "http", "kind": "http",
            "args": {"method": "POST", "url": hook, "body": "scheduled"}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    for _ in 0..100 {
        if seen
            .lock()
            .unwrap()
            .iter()
            .filter(|b| *b == "scheduled")
            .count()
            >= 2
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let n = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|b| *b == "scheduled")
        .count();
    assert!(n >= 2, "{:?}", seen.lock().unwrap());
}
