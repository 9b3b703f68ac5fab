//! Per-monitor routing of alerts (a monitor naming its notification targets; default: all
//! of the tenant's) and repeated alerts while an outage lasts (`realert_ms`; none by
//! default), time driven by the duty's injected `now`.

mod common;

use std::time::SystemTime;

use common::{secs, setup, Setup, TENANT};
use pgferry_monitors::{Monitors, NewMonitor, NewTarget, PingKind, Targets};
use serde_json::Value;

const PAGER: &str = "http://127.0.0.1:9/pager";

/// Takes notification jobs until at least `n` arrived and none is left: (url, subject,
/// kind) of each, sorted.
async fn sent(s: &Setup, n: usize) -> Vec<(String, String, String)> {
    let mut out: Vec<_> = s
        .notification_jobs(n)
        .await
        .into_iter()
        .map(|j| {
            let body: Value = serde_json::from_str(j.args["body"].as_str().unwrap()).unwrap();
            (
                j.args["url"].as_str().unwrap().to_string(),
                body["subject"].as_str().unwrap().to_string(),
                body["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn whole_seconds_now() -> SystemTime {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    SystemTime::UNIX_EPOCH + secs(now)
}

fn n(url: &str, subject: &str, kind: &str) -> (String, String, String) {
    (url.into(), subject.into(), kind.into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_naming_targets_alerts_only_them_others_alert_all() {
    let s = setup().await;
    // setup() made "ops" (every event, /hook); a second target, "pager".
    Targets::new(s.engine.clone())
        .create(
            TENANT,
            &NewTarget {
                name: "pager".into(),
                url: PAGER.into(),
                events: vec![],
                enabled: true,
            },
        )
        .await
        .unwrap();
    let monitors = Monitors::new(s.engine.clone());
    let mut routed = NewMonitor::every("routed", 60_000, 10_000);
    routed.targets = Some(vec!["pager".into()]);
    let routed = monitors.create(TENANT, &routed).await.unwrap();
    let everyone = monitors
        .create(TENANT, &NewMonitor::every("everyone", 60_000, 10_000))
        .await
        .unwrap();
    let t0 = whole_seconds_now();
    for m in [&routed, &everyone] {
        monitors
            .ping_at(&m.token, PingKind::Success, None, t0)
            .await
            .unwrap();
    }
    assert_eq!(s.pass(t0 + secs(71)).await.late, 2);
    // The routed monitor's recovery goes the same way as its late alert.
    monitors
        .ping_at(&routed.token, PingKind::Success, None, t0 + secs(80))
        .await
        .unwrap();
    let hook = "http://127.0.0.1:9/hook";
    assert_eq!(
        sent(&s, 4).await,
        vec![
            n(hook, "everyone", "monitor.late"),
            n(PAGER, "everyone", "monitor.late"),
            n(PAGER, "routed", "monitor.late"),
            n(PAGER, "routed", "monitor.recovered"),
        ]
    );
    let got = monitors.get(TENANT, "routed").await.unwrap();
    assert_eq!(got.spec.targets, Some(vec!["pager".to_string()]));

    // Invalid routing is refused naming the field.
    for bad in [
        vec![],
        vec!["pager".to_string(), "pager".to_string()],
        vec!["Not A Name".to_string()],
    ] {
        let mut spec = NewMonitor::every("bad", 60_000, 0);
        spec.targets = Some(bad);
        let e = monitors.create(TENANT, &spec).await.unwrap_err();
        assert!(e.to_string().contains("targets"), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_alerted_again_every_realert_interval_until_it_recovers() {
    let s = setup().await;
    let monitors = Monitors::new(s.engine.clone());
    let mut spec = NewMonitor::every("nagging", 60_000, 10_000);
    spec.realert_ms = Some(60_000);
    let m = monitors.create(TENANT, &spec).await.unwrap();
    // Repeats off (the default): one alert per outage, as before.
    let quiet = monitors
        .create(TENANT, &NewMonitor::every("quiet", 60_000, 10_000))
        .await
        .unwrap();
    let t0 = whole_seconds_now();
    for x in [&m, &quiet] {
        monitors
            .ping_at(&x.token, PingKind::Success, None, t0)
            .await
            .unwrap();
    }
    assert_eq!(s.pass(t0 + secs(71)).await.late, 2);
    // Not yet: the first repeat is due a minute after the alert.
    assert_eq!(s.pass(t0 + secs(130)).await.repeats, 0);
    assert_eq!(s.pass(t0 + secs(131)).await.repeats, 1);
    assert_eq!(s.pass(t0 + secs(140)).await.repeats, 0);
    assert_eq!(s.pass(t0 + secs(191)).await.repeats, 1);
    let kinds: Vec<String> = s
        .alerts("monitor", "nagging")
        .await
        .into_iter()
        .map(|a| a.0)
        .collect();
    assert_eq!(kinds, ["late", "late", "late"]);
    let again = s.alerts("monitor", "nagging").await;
    assert!(again[1].1.starts_with("still late"), "{again:?}");
    assert_eq!(s.alerts("monitor", "quiet").await.len(), 1);
    let hook = "http://127.0.0.1:9/hook";
    assert_eq!(
        sent(&s, 4).await,
        vec![
            n(hook, "nagging", "monitor.late"),
            n(hook, "nagging", "monitor.late"),
            n(hook, "nagging", "monitor.late"),
            n(hook, "quiet", "monitor.late"),
        ]
    );

    // Recovered: the repeats stop.
    monitors
        .ping_at(&m.token, PingKind::Success, None, t0 + secs(200))
        .await
        .unwrap();
    assert_eq!(s.pass(t0 + secs(265)).await.repeats, 0);

    // Down by failed runs repeats as failed; a pause ends the repeats.
    let down = monitors
        .ping_at(&m.token, PingKind::Fail, None, t0 + secs(300))
        .await
        .unwrap();
    assert_eq!(down.state, "down");
    assert_eq!(s.pass(t0 + secs(361)).await.repeats, 1);
    let last = s.alerts("monitor", "nagging").await.pop().unwrap();
    assert_eq!(last.0, "failed");
    monitors.set_paused(TENANT, "nagging", true).await.unwrap();
    assert_eq!(s.pass(t0 + secs(3600)).await.repeats, 0);

    // A repeat interval under a minute is refused naming the field.
    let mut fast = NewMonitor::every("fast", 60_000, 0);
    fast.realert_ms = Some(1000);
    let e = monitors.create(TENANT, &fast).await.unwrap_err();
    assert!(e.to_string().contains("realert_ms"), "{e}");
}
