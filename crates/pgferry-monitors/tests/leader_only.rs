//! Two servers, each with the monitors duty on its leader: only the leader runs it, so a
//! monitor that turns late in real time gets exactly one alert.

mod common;

use std::time::{Duration, SystemTime};

use common::{setup_with, TENANT};
use pgferry_core::{Leader, LeaderConfig};
use pgferry_monitors::{DutyConfig, Monitors, NewMonitor, PingKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_duties_alert_once() {
    let s = setup_with(false).await;
    let (stop, rx) = tokio::sync::watch::channel(false);
    let config = DutyConfig {
        interval: Duration::from_millis(100),
        ..DutyConfig::default()
    };
    // Both compete for the leader lock; the one that leads runs the duty.
    for _ in 0..2 {
        let leader = Leader::new(
            s.engine.clone(),
            s.db.config.clone(),
            LeaderConfig::default(),
        )
        .with_duty(pgferry_monitors::leader_duty(
            s.engine.clone(),
            config.clone(),
        ));
        tokio::spawn(leader.run(rx.clone()));
    }
    let monitors = Monitors::new(s.engine.clone());
    let m = monitors
        .create(TENANT, &NewMonitor::every("beat", 1000, 0))
        .await
        .unwrap();
    monitors
        .ping_at(&m.token, PingKind::Success, None, SystemTime::now())
        .await
        .unwrap();
    // The leading server's duty finds it late in real time.
    let mut state = String::new();
    for _ in 0..150 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        state = monitors.get(TENANT, "beat").await.unwrap().state;
        if state == "late" {
            break;
        }
    }
    assert_eq!(state, "late");
    // Passes keep running (and a direct one too): still one alert.
    tokio::time::sleep(Duration::from_millis(500)).await;
    s.pass(SystemTime::now()).await;
    let alerts = s.alerts("monitor", "beat").await;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0].0, "late");
    let _ = stop.send(true);
}
