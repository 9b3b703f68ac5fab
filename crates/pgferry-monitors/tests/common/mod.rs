//! Helpers of the monitors tests (real clusters from pgferry-testkit).
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use pgferry_core::{migrate, ClaimedJob, Engine, EngineConfig, Leader, LeaderConfig};
use pgferry_monitors::{DutyConfig, DutyReport, NewTarget, Targets};
use pgferry_testkit::TestDb;
use serde_json::Value;

pub const TENANT: i64 = 7;

pub struct Setup {
    pub db: TestDb,
    pub engine: Arc<Engine>,
    /// Stops the leader (ticks make enqueued jobs claimable) when dropped.
    _stop: tokio::sync::watch::Sender<bool>,
}

/// A database with the engine's, the schedules' and the monitors' schemas, an engine on
/// it, and a notification target of [`TENANT`] for every event.
pub async fn setup() -> Setup {
    setup_with(true).await
}

/// [`setup`], with or without a leader of its own.
pub async fn setup_with(leader: bool) -> Setup {
    let db = pgferry_testkit::test_db().await;
    let mut client = db.connect().await;
    migrate::up_components(
        &mut client,
        &[
            migrate::ENGINE,
            pgferry_schedules::migrate::COMPONENT,
            pgferry_monitors::migrate::COMPONENT,
        ],
    )
    .await
    .expect("migrate");
    let engine = Engine::new(db.pool(16), EngineConfig::default());
    Targets::new(engine.clone())
        .create(
            TENANT,
            &NewTarget {
                name: "ops".into(),
                url: "http://127.0.0.1:9/hook".into(),
                events: vec![],
                enabled: true,
            },
        )
        .await
        .unwrap();
    let (stop, rx) = tokio::sync::watch::channel(false);
    if leader {
        let leader = Leader::new(engine.clone(), db.config.clone(), LeaderConfig::default());
        tokio::spawn(leader.run(rx));
    }
    Setup {
        db,
        engine,
        _stop: stop,
    }
}

impl Setup {
    /// One duty pass at `now` on a fresh connection.
    pub async fn pass(&self, now: SystemTime) -> DutyReport {
        let mut c = self.db.connect().await;
        pgferry_monitors::run_once(&self.engine, &mut c, now, &DutyConfig::default())
            .await
            .expect("duty pass")
    }

    /// Alerts of a subject: (kind, reason), oldest first.
    pub async fn alerts(&self, subject_type: &str, subject: &str) -> Vec<(String, String)> {
        let c = self.db.connect().await;
        let mut v: Vec<(String, String)> =
            pgferry_monitors::alerts::list(&c, TENANT, subject_type, subject, i64::MAX, 1000)
                .await
                .unwrap()
                .into_iter()
                .map(|a| (a.kind, a.reason))
                .collect();
        v.reverse();
        v
    }

    /// Takes the notification jobs enqueued so far: their event bodies.
    pub async fn notifications(&self) -> Vec<Value> {
        self.notifications_n(0).await
    }

    /// Takes notification jobs until at least `n` arrived (claims may see jobs of
    /// concurrent transactions a moment late) and none is left; the bodies of those sent to
    /// the one target the tests register.
    pub async fn notifications_n(&self, n: usize) -> Vec<Value> {
        let mut out = Vec::new();
        for j in self.notification_jobs(n).await {
            assert_eq!(j.kind, "http");
            assert_eq!(j.args["method"], "POST");
            assert_eq!(j.args["url"], "http://127.0.0.1:9/hook");
            let body: Value = serde_json::from_str(j.args["body"].as_str().unwrap()).unwrap();
            out.push(body);
        }
        out
    }

    /// The notification jobs (completed as they are claimed) until at least `n` arrived
    /// and none is left.
    pub async fn notification_jobs(&self, n: usize) -> Vec<ClaimedJob> {
        let queue = pgferry_monitors::http_queue(TENANT);
        let mut out = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let jobs: Vec<ClaimedJob> = self.engine.claim(&queue, 100, "test").await.unwrap();
            if jobs.is_empty() {
                if out.len() >= n || std::time::Instant::now() > deadline {
                    return out;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            let done: Vec<_> = jobs.iter().map(|j| j.completed(None)).collect();
            self.engine.complete(&done).await.unwrap();
            out.extend(jobs);
        }
    }
}

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
