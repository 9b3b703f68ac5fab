//! A job made dead by the leader's rescuer (its last attempt's lease lapsed: the server
//! holding it died) still sends its completion callback, once (`rescued.rs`). Found by the
//! `chaos_scheduler` suite: only the worker's outcome path enqueued callbacks.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::routing::post;
use axum::Router;
use pgferry_core::{JobState, NewJob};
use pgferry_http_jobs::rescued;
use pgferry_http_jobs::worker::{WorkerConfig, KIND};
use serde_json::{json, Value};
use tokio::sync::watch;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_dead_of_a_lapsed_lease_sends_its_callback_once() {
    let (db, engine) = common::migrated().await;
    let mut client = db.connect().await;
    engine
        .upsert_queue(
            "http",
            &pgferry_core::QueueOptions {
                lease: Duration::from_millis(500),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let callbacks: Arc<Mutex<Vec<Value>>> = Arc::default();
    let app = {
        let callbacks = callbacks.clone();
        Router::new().route(
            "/cb",
            post(move |body: String| {
                let callbacks = callbacks.clone();
                async move {
                    callbacks
                        .lock()
                        .unwrap()
                        .push(serde_json::from_str(&body).unwrap());
                    "ok"
                }
            }),
        )
    };
    let base = common::serve(app).await;

    let id = engine
        .enqueue(&[NewJob::new(
            "http",
            KIND,
            json!({"method": "POST", "url": format!("{base}/never"),
                   "callback_url": format!("{base}/cb")}),
        )
        .max_attempts(1)])
        .await
        .unwrap()[0];
    // A server claims it and dies: nobody reports, the lease lapses, the rescuer makes the
    // job dead (its only attempt used).
    let tick = db.connect().await;
    pgferry_core::leader::ticker::tick(&tick).await.unwrap();
    let held = engine.claim("http", 1, "a-server-that-dies").await.unwrap();
    assert_eq!(held.len(), 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    while engine.get_job(id).await.unwrap().state != JobState::Dead {
        assert!(Instant::now() < deadline, "the rescuer made the job dead");
        pgferry_core::leader::rescuer::rescue(&mut client, Duration::ZERO)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The service's sweep enqueues the callback and the pipeline sends it.
    let (stop_tx, stop_rx) = watch::channel(false);
    let ticker = common::ticker(&db, stop_rx.clone());
    let service = common::service(
        &engine,
        WorkerConfig {
            rescued_sweep: Duration::from_millis(100),
            ..Default::default()
        },
        stop_rx,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while callbacks.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no callback arrived");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // More sweeps over the same window (the service's own, every 100 ms, and one here
    // from an hour back): still one callback.
    let again = rescued::sweep_once(&engine, "http", SystemTime::now() - rescued::LOOKBACK)
        .await
        .unwrap();
    assert_eq!(again, 1, "the sweep found the job again");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _ = stop_tx.send(true);
    service.await.unwrap();
    ticker.await.unwrap();

    let got = callbacks.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "one callback: {got:?}");
    assert_eq!(got[0]["job_id"], json!(id));
    assert_eq!(got[0]["status"], json!("failed"));
    assert_eq!(got[0]["error"], json!("lease expired"));
    assert_eq!(got[0]["attempts"], json!(1));
}
