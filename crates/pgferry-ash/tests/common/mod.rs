//! Helpers of the ash tests (real clusters from pgferry-testkit).
#![allow(dead_code)]

use std::time::{Duration, SystemTime};

use pgferry_ash::{migrate, Sampler, SamplerConfig, Window};
use pgferry_testkit::TestDb;
use tokio_postgres::Client;

/// A fresh database with the ash schema.
pub async fn setup() -> TestDb {
    let db = pgferry_testkit::test_db().await;
    let mut client = db.connect().await;
    migrate::up(&mut client).await.expect("ash migrate");
    db
}

/// A sampler of this test's database only (the cluster is shared by parallel tests).
pub async fn sampler(db: &TestDb) -> Sampler {
    Sampler::connect(
        &db.config,
        SamplerConfig {
            databases: Some(vec![db.name.clone()]),
            ..Default::default()
        },
    )
    .await
    .expect("sampler")
}

/// A connection named like pgferry's own (`pgferry-<role>`).
pub async fn pgferry_conn(db: &TestDb, role: &str) -> Client {
    pgferry_core::db::connect(&db.config, role)
        .await
        .expect("connect")
}

/// Waits until `sql` (returning one bool) is true, polling; panics after 20 s.
pub async fn wait_until(client: &Client, sql: &str) {
    for _ in 0..400 {
        let ok: bool = client.query_one(sql, &[]).await.unwrap().get(0);
        if ok {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {sql}");
}

/// The window from `since` to a second from now.
pub fn window_from(since: SystemTime) -> Window {
    Window::from_ms(
        pgferry_ash::read::ms(since),
        pgferry_ash::read::ms(SystemTime::now() + Duration::from_secs(1)),
    )
    .unwrap()
}
