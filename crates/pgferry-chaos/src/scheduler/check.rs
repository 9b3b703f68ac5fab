//! The balance of a scheduler run: what the clients were told ([`Told`]) and what the
//! target received ([`Received`]) against what the server reports over its API afterwards.
//! Every shortfall is a violation; duplicates of at-least-once deliveries are counted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, UNIX_EPOCH};

use futures_util::StreamExt;
use reqwest::Method;
use serde_json::{json, Value};

use super::drivers::{Api, Told};
use super::target::Received;
use super::{SchedulerReport, CONTROL, GRACE_MS, INTERVAL_MS, PERIOD_MS, SCHEDULES, SCHED_QUEUE};
use crate::ChaosError;

/// A job's state and its last attempt's outcome.
type JobEnd = (String, String);

/// How long the check waits for every acknowledged job to be completed or dead.
const FINAL_WITHIN: Duration = Duration::from_secs(60);
/// The pings the server keeps per monitor: more acknowledged than this cannot be checked.
const PINGS_KEPT: usize = 100;

async fn get(api: &Api, path: &str) -> Result<Value, ChaosError> {
    // The server was just restarted, or Postgres: a read may meet a reconnecting pool.
    let mut last = String::new();
    for _ in 0..20 {
        match api.call(Method::GET, path, None).await {
            Ok((200, v)) => return Ok(v),
            r => last = format!("{r:?}"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(ChaosError::setup(format!("GET {path}"), last))
}

pub async fn balance(
    api: &Api,
    told: &Told,
    got: &Received,
    r: &mut SchedulerReport,
) -> Result<(), ChaosError> {
    jobs(api, told, got, r).await?;
    events(api, told, got, r).await?;
    monitors(api, told, got, r).await?;
    schedules(api, r).await?;
    r.details.insert("client_errors".into(), json!(told.errors));
    r.details.insert("given_up".into(), json!(told.given_up));
    if got.unreadable > 0 {
        r.violations.push(format!(
            "{} requests the target could not read",
            got.unreadable
        ));
    }
    Ok(())
}

/// Every acknowledged HTTP job was sent at least once, ended completed (or dead when meant
/// to fail), and its callback arrived with that outcome.
async fn jobs(
    api: &Api,
    told: &Told,
    got: &Received,
    r: &mut SchedulerReport,
) -> Result<(), ChaosError> {
    r.jobs_acknowledged = told.jobs.len() as u64;
    // A callback is enqueued before its job's outcome is written, so it can arrive first:
    // the states are read until every job is final or [`FINAL_WITHIN`] passed.
    let mut state: HashMap<i64, JobEnd> = HashMap::new();
    let started = std::time::Instant::now();
    loop {
        let open: Vec<_> = told
            .jobs
            .iter()
            .filter(|j| {
                !state
                    .get(&j.id)
                    .is_some_and(|(s, _)| s == "completed" || s == "dead")
            })
            .collect();
        if open.is_empty() || started.elapsed() > FINAL_WITHIN {
            break;
        }
        if !state.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let states: Vec<Result<(i64, JobEnd), ChaosError>> =
            futures_util::stream::iter(open.into_iter().map(|j| async move {
                let v = get(api, &format!("/v1/jobs/{}", j.id)).await?;
                let last = v["attempts"]
                    .as_array()
                    .and_then(|a| a.last())
                    .and_then(|a| a["outcome"].as_str())
                    .unwrap_or("")
                    .to_owned();
                Ok((j.id, (v["state"].as_str().unwrap_or("?").to_owned(), last)))
            }))
            .buffer_unordered(16)
            .collect()
            .await;
        for s in states {
            let (id, st) = s?;
            state.insert(id, st);
        }
    }
    r.details.insert(
        "jobs_final_after_drain_s".into(),
        json!(started.elapsed().as_secs_f64()),
    );
    let mut unfinished = BTreeMap::<String, u64>::new();
    let mut wrong_callbacks = 0u64;
    let mut examples = Vec::new();
    for j in &told.jobs {
        let sent = got.jobs.get(&j.n).copied().unwrap_or(0);
        let cbs = got.callbacks.get(&j.id).map_or(0, Vec::len);
        let (st, last) = state
            .get(&j.id)
            .map_or(("unread", ""), |(s, l)| (s.as_str(), l.as_str()));
        // Its only attempt's lease lapsed (the server was killed holding it): dead by its
        // policy and possibly never sent; its callback comes from the HTTP service's sweep of
        // rescued jobs (pgferry-http-jobs rescued.rs), and is required like any other.
        let dead_by_lease = j.meant_to_fail && st == "dead" && last == "rescued";
        if dead_by_lease {
            r.jobs_dead_by_lease += 1;
        }
        let final_ = st == "completed" || st == "dead";
        if (sent == 0 || cbs == 0 || !final_) && examples.len() < 4 {
            // What the server says of it, for the report.
            let mut v = get(api, &format!("/v1/jobs/{}", j.id)).await?;
            v["chaos"] = json!({"n": j.n, "requests": sent, "callbacks": cbs});
            examples.push(v);
        }
        if sent == 0 && !dead_by_lease {
            r.jobs_lost += 1;
        }
        r.job_duplicate_deliveries += u64::from(sent.saturating_sub(1));
        let (want_state, want_cb) = if j.meant_to_fail {
            ("dead", "failed")
        } else {
            ("completed", "succeeded")
        };
        match st {
            "completed" if !j.meant_to_fail => r.jobs_completed += 1,
            "dead" if j.meant_to_fail => r.jobs_dead += 1,
            other => {
                *unfinished
                    .entry(format!("{other} (wanted {want_state})"))
                    .or_default() += 1
            }
        }
        match got.callbacks.get(&j.id) {
            None => {
                r.callbacks_missing += 1;
                if dead_by_lease {
                    r.callbacks_missing_dead_by_lease += 1;
                }
            }
            Some(cbs) => {
                r.callback_duplicates += cbs.len() as u64 - 1;
                wrong_callbacks += cbs.iter().filter(|s| *s != want_cb).count() as u64;
            }
        }
    }
    r.details.insert("job_examples".into(), json!(examples));
    let acked: HashSet<u64> = told.jobs.iter().map(|j| j.n).collect();
    r.details.insert(
        "jobs_delivered_unacknowledged".into(),
        json!(got.jobs.keys().filter(|n| !acked.contains(n)).count()),
    );
    r.details.insert("jobs_sent".into(), json!(told.jobs_sent));
    r.details
        .insert("jobs_replayed_by_key".into(), json!(told.jobs_replayed));
    if r.jobs_lost > 0 {
        r.violations.push(format!(
            "{} acknowledged HTTP jobs never reached the target",
            r.jobs_lost
        ));
    }
    if !unfinished.is_empty() {
        r.violations
            .push(format!("HTTP jobs not ended as meant: {unfinished:?}"));
    }
    if r.callbacks_missing > 0 {
        r.violations.push(format!(
            "{} completion callbacks never arrived",
            r.callbacks_missing
        ));
    }
    if wrong_callbacks > 0 {
        r.violations
            .push(format!("{wrong_callbacks} callbacks with the wrong status"));
    }
    if r.jobs_acknowledged == 0 {
        r.violations.push("no HTTP job was acknowledged".into());
    }
    Ok(())
}

/// Every event answered 2xx is stored once (per provider id) and reached both targets.
async fn events(
    api: &Api,
    told: &Told,
    got: &Received,
    r: &mut SchedulerReport,
) -> Result<(), ChaosError> {
    r.events_acknowledged = told.events.len() as u64;
    let mut stored: HashMap<String, Vec<i64>> = HashMap::new();
    let mut after = 0i64;
    loop {
        let page = get(
            api,
            &format!("/v1/webhook-endpoints/chaos/events?limit=1000&after={after}"),
        )
        .await?;
        for e in page["events"].as_array().into_iter().flatten() {
            let provider = e["headers"]["x-event-id"].as_str().unwrap_or("");
            stored
                .entry(provider.to_owned())
                .or_default()
                .push(e["id"].as_i64().unwrap_or(0));
        }
        match page["next"].as_i64() {
            Some(n) => after = n,
            None => break,
        }
    }
    for (provider, event) in &told.events {
        if !stored.get(provider).is_some_and(|ids| ids.contains(event)) {
            r.events_not_stored += 1;
        }
        for to in ["a", "b"] {
            match got.fanout.get(&(to.to_owned(), provider.clone())) {
                None => r.fanout_missing += 1,
                Some(n) => r.fanout_duplicates += u64::from(n - 1),
            }
        }
    }
    r.events_stored_twice = stored.values().filter(|ids| ids.len() > 1).count() as u64;
    r.details
        .insert("events_sent".into(), json!(told.events_sent));
    r.details.insert(
        "events_deduplicated_on_resend".into(),
        json!(told.events_deduplicated),
    );
    for (n, what) in [
        (r.events_not_stored, "acknowledged events not stored"),
        (
            r.events_stored_twice,
            "provider event ids stored more than once",
        ),
        (r.fanout_missing, "fan-out deliveries never arrived"),
    ] {
        if n > 0 {
            r.violations.push(format!("{n} {what}"));
        }
    }
    if r.events_acknowledged == 0 {
        r.violations
            .push("no inbound event was acknowledged".into());
    }
    Ok(())
}

/// Every acknowledged ping is recorded; no late alert while pings kept arriving within
/// period + grace; the control monitor did go late; every alert was notified.
async fn monitors(
    api: &Api,
    told: &Told,
    got: &Received,
    r: &mut SchedulerReport,
) -> Result<(), ChaosError> {
    let window_us = (PERIOD_MS + GRACE_MS) * 1000;
    let mut gaps = BTreeMap::new();
    for (name, acked) in &told.pings {
        r.pings_acknowledged += acked.len() as u64;
        if acked.len() >= PINGS_KEPT {
            r.violations.push(format!(
                "{name}: {} pings acknowledged, more than the {PINGS_KEPT} kept (shorten the run)",
                acked.len()
            ));
        }
        let recorded: HashSet<String> = get(api, &format!("/v1/monitors/{name}/pings?limit=1000"))
            .await?["pings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["body"].as_str().map(str::to_owned))
            .collect();
        r.pings_not_recorded += acked.iter().filter(|(b, _)| !recorded.contains(b)).count() as u64;
        let gap = acked.windows(2).map(|w| w[1].1 - w[0].1).max().unwrap_or(0);
        gaps.insert(name.clone(), gap as f64 / 1e6);
        let lates = alert_kinds(api, name)
            .await?
            .iter()
            .filter(|k| *k == "late")
            .count() as u64;
        if gap >= window_us {
            r.expected_late_alerts += lates;
        } else {
            r.false_late_alerts += lates;
        }
    }
    r.details.insert("ping_gap_max_s".into(), json!(gaps));
    r.details
        .insert("pings_sent".into(), json!(told.pings_sent));
    // Every alert stored is notified to the target (at least once).
    let mut notified: HashMap<(String, String), usize> = HashMap::new();
    for a in &got.alerts {
        *notified.entry(a.clone()).or_default() += 1;
    }
    let mut names: Vec<String> = told.pings.keys().cloned().collect();
    names.push(CONTROL.to_owned());
    let mut stored: HashMap<(String, String), usize> = HashMap::new();
    for name in &names {
        for k in alert_kinds(api, name).await? {
            *stored
                .entry((format!("monitor.{k}"), name.clone()))
                .or_default() += 1;
        }
    }
    r.alerts_not_notified = stored
        .iter()
        .map(|(k, n)| n.saturating_sub(notified.get(k).copied().unwrap_or(0)) as u64)
        .sum();
    if !stored.contains_key(&("monitor.late".to_owned(), CONTROL.to_owned())) {
        r.violations.push(format!(
            "the control monitor {CONTROL}, silent after one ping, never went late"
        ));
    }
    for (n, what) in [
        (r.pings_not_recorded, "acknowledged pings not recorded"),
        (
            r.false_late_alerts,
            "late alerts while pings kept arriving within period + grace",
        ),
        (r.alerts_not_notified, "alerts never notified to the target"),
    ] {
        if n > 0 {
            r.violations.push(format!("{n} {what}"));
        }
    }
    if r.pings_acknowledged == 0 {
        r.violations.push("no ping was acknowledged".into());
    }
    Ok(())
}

async fn alert_kinds(api: &Api, name: &str) -> Result<Vec<String>, ChaosError> {
    let v = get(
        api,
        &format!("/v1/alerts?type=monitor&subject={name}&limit=1000"),
    )
    .await?;
    Ok(v["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["kind"].as_str().map(str::to_owned))
        .collect())
}

/// Each schedule's fires are every interval from its first to its last, each fired with
/// exactly one job on the queue carrying that fire time, and no job without a fire.
async fn schedules(api: &Api, r: &mut SchedulerReport) -> Result<(), ChaosError> {
    // (schedule, fire_at) → job ids, from the jobs themselves.
    let mut jobs: HashMap<(String, String), Vec<i64>> = HashMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/jobs?queue={SCHED_QUEUE}&state=pending&limit=100");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={}", encode(c)));
        }
        let page = get(api, &path).await?;
        for j in page["jobs"].as_array().into_iter().flatten() {
            let s = &j["meta"]["schedule"];
            let key = (
                s["name"].as_str().unwrap_or("").to_owned(),
                s["fire_at"].as_str().unwrap_or("").to_owned(),
            );
            jobs.entry(key)
                .or_default()
                .push(j["id"].as_i64().unwrap_or(0));
        }
        match page["next_cursor"].as_str() {
            Some(c) if page["has_more"].as_bool().unwrap_or(false) => cursor = Some(c.to_owned()),
            _ => break,
        }
    }
    let mut outcomes = BTreeMap::<String, u64>::new();
    let mut seen = HashSet::new();
    let mut unlisted = Vec::new();
    for i in 0..SCHEDULES {
        let name = format!("tick-{i}");
        let v = get(api, &format!("/v1/schedules/{name}/fires?limit=1000")).await?;
        let mut times = Vec::new();
        for f in v["fires"].as_array().into_iter().flatten() {
            let at = f["fire_at"].as_str().unwrap_or("").to_owned();
            let outcome = f["outcome"].as_str().unwrap_or("?").to_owned();
            *outcomes.entry(outcome.clone()).or_default() += 1;
            r.fires += 1;
            let key = (name.clone(), at.clone());
            if outcome == "fired" {
                let ids = jobs.get(&key).cloned().unwrap_or_default();
                let job_id = f["job_id"].as_i64();
                if let (true, Some(id)) = (ids.is_empty(), job_id) {
                    // Not in the pending listing: the job itself tells a lost job from a
                    // listing that missed it or a job in another state.
                    let found = job_of_fire(api, &key, id).await?;
                    match found["found"].as_str() {
                        Some("pending") => r.listing_missed += 1,
                        Some("scheduled") => {}
                        _ => r.fires_without_one_job += 1,
                    }
                    unlisted.push(found);
                } else if ids.len() != 1 || Some(ids[0]) != job_id {
                    r.fires_without_one_job += 1;
                }
            } else if jobs.contains_key(&key) {
                r.fires_without_one_job += 1;
            }
            seen.insert(key);
            let t = pgferry_schedules::schedule::parse_time("fire_at", &at)
                .map_err(|e| ChaosError::setup("a fire's time", e))?;
            times.push(t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64);
        }
        times.sort_unstable();
        r.fire_gaps += times
            .windows(2)
            .filter(|w| w[1] - w[0] != INTERVAL_MS)
            .count() as u64;
    }
    r.jobs_without_fire = jobs
        .iter()
        .filter(|(k, _)| !seen.contains(*k))
        .map(|(_, ids)| ids.len() as u64)
        .sum();
    r.details.insert("fire_outcomes".into(), json!(outcomes));
    r.details.insert("schedule_jobs".into(), json!(jobs.len()));
    r.details
        .insert("fired_jobs_not_listed".into(), json!(unlisted));
    for (n, what) in [
        (
            r.fires_without_one_job,
            "fires without exactly one job of theirs",
        ),
        (
            r.listing_missed,
            "pending jobs of fires that the pending listing did not return",
        ),
        (r.jobs_without_fire, "scheduled jobs without a fire"),
        (r.fire_gaps, "gaps between consecutive fire times"),
    ] {
        if n > 0 {
            r.violations.push(format!("{n} {what}"));
        }
    }
    if r.fires == 0 {
        r.violations.push("no schedule fired".into());
    }
    Ok(())
}

/// What became of a fired fire's job that the pending listing did not return: `found` is
/// its state when the job exists and carries this fire (`scheduled`: its run_at has not come
/// yet, which the pending listing rightly leaves out), `missing` when there is no such job,
/// `other_fire` when the job carries another fire's meta.
async fn job_of_fire(api: &Api, fire: &(String, String), id: i64) -> Result<Value, ChaosError> {
    let mut out = json!({"schedule": fire.0, "fire_at": fire.1, "job_id": id});
    let (status, v) = api
        .call(Method::GET, &format!("/v1/jobs/{id}"), None)
        .await
        .map_err(|e| ChaosError::setup(format!("GET /v1/jobs/{id}"), e))?;
    out["found"] = match status {
        200 => {
            let s = &v["meta"]["schedule"];
            if s["name"].as_str() == Some(&fire.0) && s["fire_at"].as_str() == Some(&fire.1) {
                v["state"].clone()
            } else {
                json!("other_fire")
            }
        }
        404 => json!("missing"),
        other => return Err(ChaosError::setup(format!("GET /v1/jobs/{id}"), other)),
    };
    Ok(out)
}

/// Percent-encodes everything but unreserved characters (a cursor in a query string).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
