//! Scheduler chaos (docs/reliability.md#scheduler): HTTP jobs with completion callbacks,
//! inbound webhook events fanned out to two targets, heartbeat monitors being pinged, and
//! schedules firing every second, all against a real `pgferry serve` whose HTTP jobs go to
//! a real loopback target ([`target`]) that records every request by item, while a fault
//! hits: the server SIGKILLed mid-delivery, backends terminated, Postgres restarted
//! (fast) or crashed (immediate stop).
//!
//! The contract is **at least once** for everything the server sends (HTTP jobs, callbacks,
//! fan-out, notifications): nothing acknowledged is lost, and duplicates — an attempt whose
//! outcome was not recorded before the fault runs again — are counted and reported, not
//! failures. Schedules fire **exactly once** per (schedule, fire time). The per-item
//! balance is in [`check`].

mod check;
mod drivers;
mod target;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use crate::env::{Env, PgPlan};
use crate::faults::{self, Details};
use crate::producers::Flow;
use crate::{ChaosConfig, ChaosError, Fault};
use drivers::Api;

/// Heartbeat monitors pinged throughout, and their expectation.
pub const MONITORS: usize = 3;
pub const PERIOD_MS: u64 = 1000;
pub const GRACE_MS: u64 = 15_000;
/// A monitor pinged once and then never: it must go late (the alert path works, so "no
/// false late alert" is not vacuous).
pub const CONTROL: &str = "hb-control";
/// Schedules firing every [`INTERVAL_MS`] to jobs on [`SCHED_QUEUE`] (nobody runs them: the
/// jobs themselves are what the check counts).
pub const SCHEDULES: usize = 2;
pub const INTERVAL_MS: u64 = 1000;
pub const SCHED_QUEUE: &str = "sched";
/// Lease of the tenant's `http` queue: a killed server's requests run again soon after.
const HTTP_LEASE_MS: u64 = 5000;
/// The drain gives up when nothing new arrived at the target for this long.
const DRAIN_STALL: Duration = Duration::from_secs(30);

/// What a scheduler fault run found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SchedulerReport {
    pub fault: String,
    pub passed: bool,
    pub violations: Vec<String>,
    pub fault_events: usize,
    /// HTTP jobs: acknowledged creates, and how they ended.
    pub jobs_acknowledged: u64,
    pub jobs_completed: u64,
    pub jobs_dead: u64,
    pub jobs_lost: u64,
    /// Requests beyond the first per job (at least once: counted, allowed).
    pub job_duplicate_deliveries: u64,
    pub callbacks_missing: u64,
    /// Jobs meant to die whose one attempt's lease lapsed (the rescuer made them dead),
    /// and how many of them got no callback (also in `callbacks_missing`, a violation: the
    /// HTTP service's sweep of rescued jobs sends theirs).
    pub jobs_dead_by_lease: u64,
    pub callbacks_missing_dead_by_lease: u64,
    pub callback_duplicates: u64,
    /// Inbound events acknowledged with a 2xx, stored, and their fan-out.
    pub events_acknowledged: u64,
    pub events_not_stored: u64,
    pub events_stored_twice: u64,
    pub fanout_missing: u64,
    pub fanout_duplicates: u64,
    /// Acknowledged pings, those not recorded, late alerts while pings kept arriving.
    pub pings_acknowledged: u64,
    pub pings_not_recorded: u64,
    pub false_late_alerts: u64,
    /// Late alerts allowed because the fault kept pings away longer than period + grace.
    pub expected_late_alerts: u64,
    pub alerts_not_notified: u64,
    /// Fires recorded, jobs per fire, gaps in the fire times.
    pub fires: u64,
    pub fires_without_one_job: u64,
    /// Fired fires whose job exists, pending, but the pending listing did not return it.
    pub listing_missed: u64,
    pub jobs_without_fire: u64,
    pub fire_gaps: u64,
    pub details: BTreeMap<String, Value>,
}

/// Runs `fault` (server-kill, terminate-2, pg-restart or pg-crash) against the scheduler
/// features.
pub async fn run_scheduler_fault(
    cfg: &ChaosConfig,
    fault: Fault,
) -> Result<SchedulerReport, ChaosError> {
    if !matches!(
        fault,
        Fault::ServerKill | Fault::Terminate2 | Fault::PgRestart | Fault::PgCrash
    ) {
        return Err(ChaosError::setup(
            "scheduler chaos",
            format!("fault {} is not run against the scheduler", fault.name()),
        ));
    }
    if fault.needs_own_cluster() && cfg.database_url.is_some() {
        return Err(ChaosError::NeedsOwnCluster {
            fault: fault.name(),
        });
    }
    let plan = PgPlan {
        standby: None,
        max_connections: 100,
    };
    let mut env = Env::setup(cfg, plan).await?;
    let result = run_in(&mut env, fault).await;
    if std::env::var_os("PGFERRY_CHAOS_KEEP").is_some() {
        eprintln!("pgferry chaos: keeping {}", env.dir.path().display());
        // Leaking the TempDir keeps the directory.
        std::mem::forget(std::mem::replace(
            &mut env.dir,
            tempfile::tempdir().map_err(|e| ChaosError::setup("temp dir", e))?,
        ));
    }
    let down = env.teardown().await;
    let report = result?;
    down?;
    Ok(report)
}

/// What setup made: the webhook address and each monitor's ping path.
struct Made {
    address: String,
    pings: Vec<(String, String)>,
}

async fn expect(
    api: &Api,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Result<Value, ChaosError> {
    match api.call(method.clone(), path, body).await {
        Ok((s, v)) if (200..300).contains(&s) => Ok(v),
        Ok((s, v)) => Err(ChaosError::setup(
            format!("{method} {path}"),
            format!("{s} {v}"),
        )),
        Err(e) => Err(ChaosError::setup(format!("{method} {path}"), e)),
    }
}

/// Allows loopback for the tenant's HTTP jobs, then creates the target, endpoint, monitors
/// and schedules.
async fn make(api: &Api, target: &str) -> Result<Made, ChaosError> {
    expect(
        api,
        Method::PUT,
        "/v1/http-jobs/allow",
        Some(json!({"ranges": ["loopback"]})),
    )
    .await?;
    expect(
        api,
        Method::PATCH,
        "/v1/queues/http",
        Some(json!({"lease_ms": HTTP_LEASE_MS, "backoff_base_ms": 200, "backoff_cap_ms": 2000})),
    )
    .await?;
    expect(
        api,
        Method::POST,
        "/v1/notification-targets",
        Some(json!({"name": "ops", "url": format!("{target}/alert")})),
    )
    .await?;
    let ep = expect(
        api,
        Method::POST,
        "/v1/webhook-endpoints",
        Some(json!({"slug": "chaos", "event_id_header": "X-Event-Id",
                    "targets": [format!("{target}/fan/a"), format!("{target}/fan/b")]})),
    )
    .await?;
    let address = ep["path"].as_str().unwrap_or_default().to_owned();
    let mut pings = Vec::new();
    for i in 0..=MONITORS {
        let (name, grace) = if i == MONITORS {
            (CONTROL.to_owned(), PERIOD_MS)
        } else {
            (format!("hb-{i}"), GRACE_MS)
        };
        let m = expect(
            api,
            Method::POST,
            "/v1/monitors",
            Some(json!({"name": name, "period_ms": PERIOD_MS, "grace_ms": grace})),
        )
        .await?;
        pings.push((name, m["ping_path"].as_str().unwrap_or_default().to_owned()));
    }
    for i in 0..SCHEDULES {
        expect(
            api,
            Method::POST,
            "/v1/schedules",
            Some(
                json!({"name": format!("tick-{i}"), "interval_ms": INTERVAL_MS,
                        "target": {"type": "job", "queue": SCHED_QUEUE, "kind": "tick"}}),
            ),
        )
        .await?;
    }
    Ok(Made { address, pings })
}

/// Sends `method path` until it is answered 2xx (the server may be coming back); what it
/// got last when it gives up.
async fn insist(api: &Api, method: Method, path: &str) -> Result<(), String> {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        match api.call(method.clone(), path, None).await {
            Ok((s, _)) if (200..300).contains(&s) => return Ok(()),
            r if Instant::now() > until => return Err(format!("{method} {path}: {r:?}")),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn run_in(env: &mut Env, fault: Fault) -> Result<SchedulerReport, ChaosError> {
    let cfg = env.cfg.clone();
    // Pings and events come faster than the default public limit of 10/s per address;
    // notification and fan-out targets are checked against the server's allow list.
    env.server_args = [
        "--public-rate-limit",
        "100000",
        "--public-rate-burst",
        "100000",
        "--http-jobs-allow",
        "loopback",
    ]
    .map(String::from)
    .to_vec();
    env.add_server().await?;
    let (target, received, target_task) = target::start().await?;
    let api = Api {
        http: reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ChaosError::setup("HTTP client", e))?,
        base: env.http_urls()[0].clone(),
        key: env.api_key.clone(),
    };
    let made = make(&api, &target).await?;
    let told = drivers::Book::default();
    let stop = Arc::new(AtomicBool::new(false));
    let rate = cfg.rate.max(1);
    let mut tasks = vec![
        tokio::spawn(drivers::produce_jobs(
            api.clone(),
            target.clone(),
            rate,
            told.clone(),
            stop.clone(),
        )),
        tokio::spawn(drivers::send_events(
            api.clone(),
            made.address.clone(),
            (rate / 2).max(1),
            told.clone(),
            stop.clone(),
        )),
    ];
    // The control monitor: one ping, then silence.
    let (control, pinged) = made.pings.last().cloned().expect("made");
    insist(&api, Method::POST, &pinged)
        .await
        .map_err(|e| ChaosError::setup("pinging the control monitor", e))?;
    let ping_stop = Arc::new(AtomicBool::new(false));
    for (name, path) in made.pings.iter().filter(|(n, _)| *n != control) {
        tasks.push(tokio::spawn(drivers::ping(
            api.clone(),
            name.clone(),
            path.clone(),
            told.clone(),
            ping_stop.clone(),
        )));
    }
    tokio::time::sleep(cfg.warmup).await;
    let mut details = Details::new();
    let flow = Flow::new(usize::MAX);
    let events = faults::inject(fault, env, cfg.duration, &flow, &mut details).await?;
    tokio::time::sleep(cfg.recovery).await;
    // Pingers stop and their monitors are paused at once: from then on nothing is expected
    // of them (a late alert after the last ping would be right, not false).
    ping_stop.store(true, Ordering::SeqCst);
    let mut unanswered = Vec::new();
    for (name, _) in made.pings.iter().filter(|(n, _)| *n != control) {
        let paused = insist(&api, Method::POST, &format!("/v1/monitors/{name}/pause")).await;
        unanswered.extend(paused.err());
    }
    stop.store(true, Ordering::SeqCst);
    for i in 0..SCHEDULES {
        let paused = insist(&api, Method::POST, &format!("/v1/schedules/tick-{i}/pause")).await;
        unanswered.extend(paused.err());
    }
    for t in tasks {
        let _ = t.await;
    }
    let told = std::mem::take(&mut *drivers::lock(&told));
    let drained = drain(&told, &received, cfg.drain_timeout).await;
    details.insert("drain_s".into(), json!(drained.as_secs_f64()));
    let mut r = SchedulerReport {
        fault: fault.name().into(),
        fault_events: events.len(),
        ..SchedulerReport::default()
    };
    let got = target::lock(&received).clone();
    r.violations.extend(unanswered);
    check::balance(&api, &told, &got, &mut r).await?;
    target_task.abort();
    details.append(&mut r.details);
    r.details = details;
    r.passed = r.violations.is_empty();
    Ok(r)
}

/// Waits until the target has every acknowledged item's requests (each job's request and
/// callback, each event at both targets, the control monitor's late alert), or nothing new
/// arrived for [`DRAIN_STALL`], or `timeout`.
async fn drain(told: &drivers::Told, received: &target::Book, timeout: Duration) -> Duration {
    let started = Instant::now();
    let (mut last, mut progress) = (usize::MAX, Instant::now());
    loop {
        let missing = {
            let got = target::lock(received);
            let jobs = told
                .jobs
                .iter()
                .filter(|j| !got.jobs.contains_key(&j.n) || !got.callbacks.contains_key(&j.id))
                .count();
            let events = told
                .events
                .keys()
                .flat_map(|id| ["a", "b"].map(|t| (t.to_owned(), id.clone())))
                .filter(|k| !got.fanout.contains_key(k))
                .count();
            let control = !got
                .alerts
                .iter()
                .any(|(k, s)| k == "monitor.late" && s == CONTROL);
            jobs + events + usize::from(control)
        };
        if missing < last {
            (last, progress) = (missing, Instant::now());
        }
        if missing == 0 || started.elapsed() > timeout || progress.elapsed() > DRAIN_STALL {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
