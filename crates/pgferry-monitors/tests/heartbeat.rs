//! Heartbeat monitors through the Rust API, time driven by the duty's injected `now`:
//! late after period + grace, recovered on the next ping, down after N failures, a start
//! without a finish, one alert per transition with two duties at once.

mod common;

use std::time::SystemTime;

use common::{secs, setup, TENANT};
use pgferry_monitors::{Monitors, NewMonitor, PingKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_after_period_and_grace_then_recovered_by_a_ping() {
    let s = setup().await;
    let monitors = Monitors::new(s.engine.clone());
    let m = monitors
        .create(TENANT, &NewMonitor::every("nightly", 60_000, 10_000))
        .await
        .unwrap();
    assert_eq!(m.state, "new");
    // Never pinged: nothing expected, never late.
    assert_eq!(s.pass(SystemTime::now() + secs(3600)).await.late, 0);

    // Whole seconds: the database keeps microseconds.
    let t0 = SystemTime::UNIX_EPOCH
        + secs(
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_secs(),
        );
    let up = monitors
        .ping_at(&m.token, PingKind::Success, Some("ok"), t0)
        .await
        .unwrap();
    assert_eq!(up.state, "up");
    assert_eq!(up.due_at, Some(t0 + secs(70)));
    // Within period + grace: not late.
    assert_eq!(s.pass(t0 + secs(69)).await.late, 0);
    let r = s.pass(t0 + secs(71)).await;
    assert_eq!((r.due, r.late), (1, 1));
    assert_eq!(monitors.get(TENANT, "nightly").await.unwrap().state, "late");
    // Judged once: later passes find nothing.
    assert_eq!(s.pass(t0 + secs(500)).await.due, 0);

    monitors
        .ping_at(&m.token, PingKind::Success, None, t0 + secs(600))
        .await
        .unwrap();
    let alerts = s.alerts("monitor", "nightly").await;
    let kinds: Vec<&str> = alerts.iter().map(|a| a.0.as_str()).collect();
    assert_eq!(kinds, ["late", "recovered"]);
    assert!(alerts[0].1.contains("no ping since"), "{alerts:?}");
    // Each alert notified the tenant's target, in its transaction.
    let sent = s.notifications_n(2).await;
    let sent_kinds: Vec<&str> = sent.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(sent_kinds, ["monitor.late", "monitor.recovered"]);
    assert_eq!(sent[0]["subject"], "nightly");
    assert!(sent[0]["reason"]
        .as_str()
        .unwrap()
        .contains("no ping since"));
    assert!(sent[0]["time"].is_string() && sent[0]["details"]["due_at"].is_string());
    // History is kept, newest first.
    let pings = monitors.pings(TENANT, "nightly", 10).await.unwrap();
    assert_eq!(pings.len(), 2);
    assert_eq!(pings[1].body.as_deref(), Some("ok"));
    // Another tenant sees none of it.
    assert!(monitors.get(TENANT + 1, "nightly").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn down_only_after_n_consecutive_failures() {
    let s = setup().await;
    let monitors = Monitors::new(s.engine.clone());
    let mut spec = NewMonitor::every("flaky", 60_000, 10_000);
    spec.failure_threshold = 3;
    let m = monitors.create(TENANT, &spec).await.unwrap();
    let t0 = SystemTime::now();
    let ping = |k, at| monitors.ping_at(&m.token, k, None, at);
    ping(PingKind::Fail, t0).await.unwrap();
    ping(PingKind::Fail, t0 + secs(60)).await.unwrap();
    // A success between resets the count.
    ping(PingKind::Success, t0 + secs(120)).await.unwrap();
    ping(PingKind::Fail, t0 + secs(180)).await.unwrap();
    let two = ping(PingKind::Fail, t0 + secs(240)).await.unwrap();
    assert_eq!((two.state.as_str(), two.consecutive_failures), ("up", 2));
    assert!(s.alerts("monitor", "flaky").await.is_empty());
    let three = ping(PingKind::Fail, t0 + secs(300)).await.unwrap();
    assert_eq!(three.state, "down");
    // A fourth failure is still the same outage: no second alert.
    ping(PingKind::Fail, t0 + secs(360)).await.unwrap();
    ping(PingKind::Success, t0 + secs(420)).await.unwrap();
    let alerts = s.alerts("monitor", "flaky").await;
    let kinds: Vec<&str> = alerts.iter().map(|a| a.0.as_str()).collect();
    assert_eq!(kinds, ["failed", "recovered"]);
    assert!(
        alerts[0].1.contains("3 consecutive failed runs"),
        "{alerts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_without_a_finish_within_the_grace_is_late() {
    let s = setup().await;
    let monitors = Monitors::new(s.engine.clone());
    let m = monitors
        .create(TENANT, &NewMonitor::every("backup", 3_600_000, 30_000))
        .await
        .unwrap();
    let t0 = SystemTime::now();
    monitors
        .ping_at(&m.token, PingKind::Start, None, t0)
        .await
        .unwrap();
    assert_eq!(s.pass(t0 + secs(29)).await.late, 0);
    assert_eq!(s.pass(t0 + secs(31)).await.late, 1);
    let alerts = s.alerts("monitor", "backup").await;
    assert_eq!(alerts.len(), 1);
    assert!(
        alerts[0].1.contains("not finished within its grace"),
        "{alerts:?}"
    );
    // A run that finishes in time is not late.
    monitors
        .ping_at(&m.token, PingKind::Start, None, t0 + secs(100))
        .await
        .unwrap();
    let done = monitors
        .ping_at(&m.token, PingKind::Success, None, t0 + secs(110))
        .await
        .unwrap();
    assert_eq!(done.state, "up");
    assert_eq!(s.pass(t0 + secs(200)).await.due, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_monitors_expect_the_next_cron_time_in_their_zone() {
    let s = setup().await;
    let monitors = Monitors::new(s.engine.clone());
    let spec = NewMonitor {
        name: "daily".into(),
        period_ms: None,
        cron: Some("0 3 * * *".into()),
        timezone: "Europe/Berlin".into(),
        grace_ms: 600_000,
        failure_threshold: 1,
        targets: None,
        realert_ms: None,
    };
    let m = monitors.create(TENANT, &spec).await.unwrap();
    // Pinged 2026-01-10 03:00:05 Berlin (02:00:05 UTC): next due 2026-01-11 02:00 UTC + 10 min.
    let at: jiff::Timestamp = "2026-01-10T02:00:05Z".parse().unwrap();
    let up = monitors
        .ping_at(&m.token, PingKind::Success, None, SystemTime::from(at))
        .await
        .unwrap();
    let due: jiff::Timestamp = "2026-01-11T02:10:00Z".parse().unwrap();
    assert_eq!(up.due_at, Some(SystemTime::from(due)));
    // Bad definitions name their field.
    let mut bad = spec.clone();
    bad.timezone = "Mars/Olympus".into();
    let e = monitors.create(TENANT, &bad).await.unwrap_err().to_string();
    assert!(e.contains("timezone"), "{e}");
    bad = NewMonitor::every("x", 10, 0);
    let e = monitors.create(TENANT, &bad).await.unwrap_err().to_string();
    assert!(e.contains("period_ms"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_duties_at_once_raise_one_alert_per_transition() {
    let s = setup().await;
    let monitors = Monitors::new(s.engine.clone());
    let t0 = SystemTime::now();
    for i in 0..50 {
        let m = monitors
            .create(TENANT, &NewMonitor::every(format!("m{i}"), 60_000, 0))
            .await
            .unwrap();
        monitors
            .ping_at(&m.token, PingKind::Success, None, t0)
            .await
            .unwrap();
    }
    let now = t0 + secs(61);
    let (a, b) = tokio::join!(s.pass(now), s.pass(now));
    assert_eq!(a.late + b.late, 50, "{a:?} {b:?}");
    let c = s.db.connect().await;
    let n: i64 = c
        .query_one(
            "SELECT count(*) AS n FROM pgferry_mon.alerts WHERE kind = 'late'",
            &[],
        )
        .await
        .unwrap()
        .get("n");
    assert_eq!(n, 50);
    assert_eq!(s.notifications_n(50).await.len(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_monitors_are_never_late_and_resume_from_now() {
    let s = setup().await;
    let monitors = Monitors::new(s.engine.clone());
    let m = monitors
        .create(TENANT, &NewMonitor::every("p", 60_000, 0))
        .await
        .unwrap();
    let t0 = SystemTime::now();
    monitors
        .ping_at(&m.token, PingKind::Success, None, t0)
        .await
        .unwrap();
    assert_eq!(
        monitors.set_paused(TENANT, "p", true).await.unwrap().state,
        "paused"
    );
    assert_eq!(s.pass(t0 + secs(3600)).await.due, 0);
    // Pings while paused are recorded but change nothing.
    let still = monitors
        .ping_at(&m.token, PingKind::Fail, None, t0 + secs(10))
        .await
        .unwrap();
    assert_eq!(still.state, "paused");
    let resumed = monitors.set_paused(TENANT, "p", false).await.unwrap();
    assert_eq!(resumed.state, "up");
    assert!(resumed.due_at.unwrap() > SystemTime::now() + secs(50));
    assert!(s.alerts("monitor", "p").await.is_empty());
    monitors.delete(TENANT, "p").await.unwrap();
    assert!(monitors.get(TENANT, "p").await.is_err());
    assert!(monitors
        .ping(&m.token, PingKind::Success, None)
        .await
        .is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_duty_finds_due_monitors_with_an_index_scan() {
    let s = setup().await;
    let c = s.db.connect().await;
    // 20,000 monitors, a few due: the scan must not read them all.
    c.batch_execute(
        "INSERT INTO pgferry_mon.monitors (tenant_id, name, token, period_ms, grace_ms, state, due_at)
         SELECT 7, 'm' || i, md5(i::text) || md5((i + 1)::text), 60000, 0, 'up',
                now() + make_interval(secs => i)
         FROM generate_series(1, 20000) AS i;
         ANALYZE pgferry_mon.monitors;",
    )
    .await
    .unwrap();
    let due = include_str!("../sql/monitors_due.sql");
    let now = SystemTime::now() + secs(5);
    let plan: Vec<String> = c
        .query(&format!("EXPLAIN {due}"), &[&now, &1000i64])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    let plan = plan.join("\n");
    assert!(plan.contains("Index Scan using monitors_due"), "{plan}");
    assert!(!plan.contains("Seq Scan"), "{plan}");
}
