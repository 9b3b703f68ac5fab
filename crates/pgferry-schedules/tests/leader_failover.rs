//! Exactly once across a killed leader: real leaders with the firer duty, real time.

mod common;

use std::time::{Duration, SystemTime};

use common::*;
use pgferry_core::{Engine, EngineConfig, Leader, LeaderConfig};
use pgferry_schedules::{FirerConfig, Missed};

fn leader(s: &Setup) -> Leader {
    let engine = Engine::new(s.db.pool(8), EngineConfig::default());
    Leader::new(engine.clone(), s.db.config.clone(), LeaderConfig::default()).with_duty(
        pgferry_schedules::leader_duty(
            engine,
            FirerConfig {
                interval: Duration::from_millis(20),
                ..FirerConfig::default()
            },
        ),
    )
}

async fn fired(s: &Setup) -> usize {
    fires(s, "f").await.len()
}

async fn wait_for(s: &Setup, n: usize) {
    for _ in 0..600 {
        if fired(s).await >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("fewer than {n} fires after 30 s: {:?}", fires(s, "f").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_neither_loses_nor_repeats_a_fire() {
    let s = setup().await;
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(secs + 2);
    let mut spec = every("f", 1, start, "fq");
    spec.missed = Missed::RunAll;
    spec.catchup_max = 1000;
    spec.grace_ms = 60_000;
    spec.catchup_window_ms = 600_000;
    s.schedules.create(0, &spec).await.unwrap();

    // Leader A on its own runtime, killed outright (connections dropped mid-whatever).
    let a = leader(&s);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (_stop_a, rx_a) = tokio::sync::watch::channel(false);
    runtime.spawn(a.run(rx_a));
    wait_for(&s, 3).await;
    runtime.shutdown_background();
    let at_kill = fired(&s).await;

    // Leader B takes over (the lock's session died with A).
    let (stop_b, rx_b) = tokio::sync::watch::channel(false);
    let b = tokio::spawn(leader(&s).run(rx_b));
    wait_for(&s, at_kill + 3).await;
    stop_b.send(true).unwrap();
    b.await.unwrap();

    let f = fires(&s, "f").await;
    for (i, (t, outcome, job)) in f.iter().enumerate() {
        assert_eq!(*t, start + Duration::from_secs(i as u64), "fire {i}: {f:?}");
        assert_eq!(outcome, "fired", "fire {i}: {f:?}");
        assert!(job.is_some());
    }
    let mut jobs: Vec<i64> = f.iter().filter_map(|x| x.2).collect();
    jobs.dedup();
    assert_eq!(jobs.len(), f.len());
    assert_eq!(drain(&s, "fq").await, f.len(), "one job per fire");
}
