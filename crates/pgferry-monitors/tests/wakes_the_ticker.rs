//! Jobs enqueued inside the monitors' own transactions (`enqueue_tx`: webhook fan-outs,
//! alert notifications) wake the leader's ticker after their COMMIT. Here the ticker's idle
//! interval is an hour, so without that word no tick would make the jobs claimable.

mod common;

use std::time::{Duration, SystemTime};

use common::{secs, setup_with, Setup, TENANT};
use pgferry_core::{Leader, LeaderConfig};
use pgferry_monitors::{Monitors, NewEndpoint, NewMonitor, PingKind, Webhooks};

/// Starts a leader whose ticker idles for an hour and waits until it is idle; returns the
/// last tick seen and the leader's stop.
async fn idle_leader(s: &Setup) -> (i64, tokio::sync::watch::Sender<bool>) {
    let (stop, rx) = tokio::sync::watch::channel(false);
    let config = LeaderConfig {
        idle_tick_interval: Duration::from_secs(3600),
        ..LeaderConfig::default()
    };
    tokio::spawn(Leader::new(s.engine.clone(), s.db.config.clone(), config).run(rx));
    for _ in 0..200 {
        if s.engine.signals().growth().ticking() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(s.engine.signals().growth().ticking(), "the leader runs");
    (until_idle(s).await, stop)
}

/// Waits until the ticker is idle (no tick for a while, bounded); returns the last tick.
async fn until_idle(s: &Setup) -> i64 {
    let mut seen = s.engine.signals().latest_tick();
    for _ in 0..100 {
        let now = s
            .engine
            .signals()
            .wait_for_tick(seen, Duration::from_millis(300))
            .await;
        if now == seen {
            break;
        }
        seen = now;
    }
    seen
}

async fn ticked_after(s: &Setup, seen: i64) -> bool {
    let after = s
        .engine
        .signals()
        .wait_for_tick(seen, Duration::from_secs(30))
        .await;
    after > seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_fan_out_wakes_the_idle_ticker() {
    let s = setup_with(false).await;
    let hooks = Webhooks::new(s.engine.clone());
    let ep = hooks
        .create(
            TENANT,
            &NewEndpoint {
                slug: "stripe".into(),
                signature: None,
                event_id_header: None,
                targets: vec!["http://127.0.0.1:9/in".into()],
            },
        )
        .await
        .unwrap();
    let (seen, _stop) = idle_leader(&s).await;
    let got = hooks
        .receive(
            &ep.address,
            &[("content-type".into(), "application/json".into())],
            b"{}",
        )
        .await
        .unwrap();
    assert_eq!(got.deliveries, 1);
    assert!(ticked_after(&s, seen).await, "no tick after the fan-out");
    assert_eq!(s.notification_jobs(1).await.len(), 1, "the fan-out job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_notification_wakes_the_idle_ticker() {
    let s = setup_with(false).await;
    let monitors = Monitors::new(s.engine.clone());
    let m = monitors
        .create(TENANT, &NewMonitor::every("nightly", 60_000, 10_000))
        .await
        .unwrap();
    let t0 = SystemTime::now();
    monitors
        .ping_at(&m.token, PingKind::Success, None, t0)
        .await
        .unwrap();
    let (seen, _stop) = idle_leader(&s).await;
    // The duty's pass finds the monitor late and notifies the tenant's target.
    assert_eq!(s.pass(t0 + secs(71)).await.late, 1);
    assert!(ticked_after(&s, seen).await, "no tick after the late alert");
    s.notifications_n(1).await;
    let seen = until_idle(&s).await;
    // The ping that recovers it notifies too.
    monitors
        .ping_at(&m.token, PingKind::Success, None, t0 + secs(80))
        .await
        .unwrap();
    assert!(ticked_after(&s, seen).await, "no tick after the recovery");
}
