//! The overview's database-load panel in a real headless Chromium: the real ASH sampler
//! (pgferry-ash, as the leader runs it) samples a test database on which sessions sleep,
//! and the panel draws their load by wait type with the vCPU line and names the
//! application and the tenant's queue that carried it (another tenant's queue only as
//! "(other tenants)"). A read-only key gets no panel, and the API refuses it the data (ASH
//! is database-wide: admin only).

mod common;

use std::time::Duration;

use common::*;
use fantoccini::Locator;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overview_shows_database_load_by_wait_type_for_admins_only() {
    let s = TestServer::start().await;
    let admin = s.key("acme", &["admin"]).await;
    let read = s.key("acme", &["read"]).await;

    let sampler = tokio::spawn(pgferry_ash::sampler::run(
        s.db.config.clone(),
        pgferry_ash::SamplerConfig {
            interval: Duration::from_millis(200),
            ..Default::default()
        },
    ));
    // Two sessions of an application sleeping (wait type Timeout) while sampled.
    let mut sleepers = Vec::new();
    for _ in 0..2 {
        let mut cfg = s.db.config.clone();
        cfg.application_name("nightly-report");
        let (client, conn) = cfg.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        sleepers.push(tokio::spawn(async move {
            client.simple_query("SELECT pg_sleep(4)").await.unwrap();
        }));
    }
    // Two pgferry connections sleeping as they serve queues: acme's `reports`, and another
    // tenant's `payroll`, whose name acme's admin must not see.
    let control = s.db.connect().await;
    let acme = pgferry_server::auth::admin::tenant_id(&control, "acme")
        .await
        .unwrap()
        .unwrap();
    let pool = pgferry_core::db::pool(&s.db.config, "api", 2);
    for queue in [format!("t{acme}.reports"), format!("t{}.payroll", acme + 1)] {
        let conn = pool.get().await.unwrap();
        sleepers.push(tokio::spawn(async move {
            let _serving = pgferry_core::serving::serve(&conn, "completer", &queue, "render");
            conn.simple_query("SELECT pg_sleep(4)").await.unwrap();
        }));
    }
    for t in sleepers {
        t.await.unwrap();
    }

    let (_driver, c) = browser().await;
    sign_in(&c, &s.base, &admin).await;
    wait_text(&c, "#ash-legend", |t| {
        t.contains("Timeout") && t.contains("vCPU")
    })
    .await;
    let carriers = wait_text(&c, "#ash-carriers", |t| {
        t.contains("nightly-report") && t.contains("reports") && t.contains("(other tenants)")
    })
    .await;
    assert!(
        !carriers.contains("payroll") && !carriers.contains(&format!("t{acme}.")),
        "queues by the tenant's names only: {carriers}"
    );
    let label = c
        .find(Locator::Css("#chart-ash"))
        .await
        .unwrap()
        .attr("aria-label")
        .await
        .unwrap()
        .unwrap_or_default();
    assert!(
        label.contains("Timeout") && label.contains("vCPU line"),
        "chart label: {label}"
    );
    // The peak is the two sleepers (within sampling error), not zero.
    let note = wait_text(&c, "#ash-note", |t| t.starts_with("Peak")).await;
    let peak: f64 = note
        .trim_start_matches("Peak ")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(peak > 0.5, "{note}");
    c.execute("document.getElementById('ash').scrollIntoView()", vec![])
        .await
        .unwrap();
    screenshot(&c, "overview-ash").await;
    close(c).await;

    let (_driver2, c) = browser().await;
    sign_in(&c, &s.base, &read).await;
    wait_for(&c, "#overview-stats").await;
    assert_eq!(
        count(&c, "#ash").await,
        0,
        "no load panel for a read-only key"
    );
    let r = page_fetch(&c, "GET", "/ui/api/v1/ash/timeline", false, json!(null)).await;
    assert_eq!(r["status"], json!(403), "{r}");
    close(c).await;
    sampler.abort();
}
