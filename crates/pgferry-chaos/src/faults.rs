//! The fault injectors. Each runs for the fault window while jobs flow and returns the
//! fault events (when each began and was over) plus what it measured. They act only on
//! processes and clusters of the run's [`Env`], on loopback.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_postgres::Client;

use crate::check::Event;
use crate::env::Env;
use crate::ledger::{now_us, LedgerTail, WorkerEntry};
use crate::producers::Flow;
use crate::{ChaosError, Fault};

const TERMINATE: &str = include_str!("sql/terminate_backends.sql");
const LEADER_HELD: &str = include_str!("sql/leader_held.sql");
const LOG_TABLE_STATS: &str = include_str!("sql/log_table_stats.sql");
const HOLD_XID: &str = include_str!("sql/hold_xid.sql");
const FREE_SLOTS: &str = include_str!("sql/free_slots.sql");
const STAT_FLUSH: &str = include_str!("sql/stat_flush.sql");

/// The leader's session advisory lock key (pgferry-core's `LEADER_LOCK`).
pub const LEADER_LOCK: i64 = 0x7067_6665_7272_7902;
/// A worker process is SIGKILLed this often.
const WORKER_KILL_EVERY: Duration = Duration::from_millis(1500);
/// How long a kill waits for the worker to be mid-job.
const MID_JOB_WAIT: Duration = Duration::from_millis(500);
/// How long a takeover or a promotion may take before the run gives up.
const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(60);

pub type Details = BTreeMap<String, serde_json::Value>;

/// Cumulative statistics of the log tables.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogStats {
    pub dead: i64,
    pub upd_del: i64,
    pub ready_read: i64,
}

pub async fn log_stats(client: &Client) -> Result<LogStats, ChaosError> {
    client
        .execute(STAT_FLUSH, &[])
        .await
        .map_err(ChaosError::db("clearing the stats snapshot"))?;
    let row = client
        .query_one(LOG_TABLE_STATS, &[])
        .await
        .map_err(ChaosError::db("reading log table statistics"))?;
    Ok(LogStats {
        dead: row.get("dead"),
        upd_del: row.get("upd_del"),
        ready_read: row.get("ready_read"),
    })
}

pub async fn leader_held(client: &Client) -> Result<bool, ChaosError> {
    let row = client
        .query_one(LEADER_HELD, &[&LEADER_LOCK])
        .await
        .map_err(ChaosError::db("reading pg_locks"))?;
    Ok(row.get::<_, i64>("holders") > 0)
}

/// Waits until some session holds the leader lock.
pub async fn wait_leader(env: &Env) -> Result<Duration, ChaosError> {
    let started = Instant::now();
    loop {
        // A fresh session each time: Postgres may have been replaced (failover).
        if let Ok(client) = env.connect("chaos-admin").await {
            if leader_held(&client).await.unwrap_or(false) {
                return Ok(started.elapsed());
            }
        }
        if started.elapsed() > TAKEOVER_TIMEOUT {
            return Err(ChaosError::Inject {
                fault: "leader",
                detail: format!("no server took the leader lock within {TAKEOVER_TIMEOUT:?}"),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn event_now() -> Event {
    let t = now_us();
    Event { start: t, end: t }
}

/// Waits (up to [`MID_JOB_WAIT`]) until a job worker's ledger shows an execution start not
/// yet acknowledged, so that its SIGKILL lands mid-job; returns whether one did. A kill timed
/// by the clock alone can fall between two of the producers' batches, when every job the
/// worker had is done (seen in CI: five kills, none mid-job, no job ran twice).
async fn until_mid_job(ledger: &std::path::Path) -> bool {
    let mut tail = LedgerTail::default();
    // From the end: what is read each millisecond is what the worker did in it, so a start
    // seen is killed within about a millisecond (reading the whole file first took long
    // enough, in a debug build, for the jobs seen in flight to finish).
    tail.watch_from_end(ledger.to_path_buf());
    let deadline = Instant::now() + MID_JOB_WAIT;
    // Executions started and not yet acknowledged, by (job, attempt).
    let mut open = std::collections::HashSet::new();
    loop {
        let new = tail.poll();
        for e in &tail.entries[tail.entries.len() - new..] {
            match e {
                WorkerEntry::Start { id, attempt, .. } => open.insert((*id, *attempt)),
                WorkerEntry::Ack { id, attempt, .. } => open.remove(&(*id, *attempt)),
            };
        }
        if !open.is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        tokio::time::sleep(deadline - now).await;
    }
}

/// Injects `fault` for `window`.
pub async fn inject(
    fault: Fault,
    env: &mut Env,
    window: Duration,
    flow: &Arc<Flow>,
    details: &mut Details,
) -> Result<Vec<Event>, ChaosError> {
    let until = Instant::now() + window;
    let name = fault.name();
    let inj = |e: ChaosError| ChaosError::Inject {
        fault: name,
        detail: e.to_string(),
    };
    let mut events = Vec::new();
    match fault {
        Fault::WorkerKill => {
            let (mut i, mut mid_job) = (0, 0);
            while Instant::now() + WORKER_KILL_EVERY <= until {
                tokio::time::sleep(WORKER_KILL_EVERY).await;
                let n = env.workers.len();
                if !env.workflow_workers && until_mid_job(&env.workers[i % n].0.ledger).await {
                    mid_job += 1;
                }
                events.push(event_now());
                env.kill_and_replace_worker(i % n).map_err(inj)?;
                i += 1;
            }
            sleep_until(until).await;
            details.insert("workers_killed".into(), json!(i));
            details.insert("workers_killed_mid_job".into(), json!(mid_job));
        }
        Fault::Terminate2 | Fault::Terminate10 => {
            let every = if fault == Fault::Terminate2 {
                Duration::from_millis(500)
            } else {
                Duration::from_millis(100)
            };
            let client = env.connect("chaos-terminator").await.map_err(inj)?;
            let (mut rounds, mut terminated) = (0u64, 0i64);
            let mut next = Instant::now();
            while next < until {
                sleep_until(next).await;
                next += every;
                let t = now_us();
                let row = client
                    .query_one(TERMINATE, &[])
                    .await
                    .map_err(ChaosError::db("pg_terminate_backend"))
                    .map_err(inj)?;
                let n: i64 = row.get("terminated");
                rounds += 1;
                terminated += n;
                if n > 0 {
                    events.push(Event {
                        start: t,
                        end: now_us(),
                    });
                }
            }
            details.insert("rounds".into(), json!(rounds));
            details.insert("backends_terminated".into(), json!(terminated));
        }
        Fault::PgRestart | Fault::PgCrash => {
            let start = now_us();
            let t0 = Instant::now();
            let pg = env.owned(name)?;
            if fault == Fault::PgRestart {
                pg.stop_primary().await.map_err(inj)?;
            } else {
                pg.crash_primary().await.map_err(inj)?;
            }
            pg.start_primary().await.map_err(inj)?;
            events.push(Event {
                start,
                end: now_us(),
            });
            details.insert("downtime_s".into(), json!(t0.elapsed().as_secs_f64()));
            sleep_until(until).await;
        }
        Fault::ServerKill => {
            let start = now_us();
            let t0 = Instant::now();
            env.kill_server(0);
            env.start_server(0).await.map_err(inj)?;
            events.push(Event {
                start,
                end: now_us(),
            });
            details.insert("restart_s".into(), json!(t0.elapsed().as_secs_f64()));
            sleep_until(until).await;
        }
        Fault::LeaderTakeover => {
            // Server 0 was started first and took the lock; workers are on server 1.
            let start = now_us();
            env.kill_server(0);
            let took = wait_leader(env).await.map_err(inj)?;
            events.push(Event {
                start,
                end: now_us(),
            });
            details.insert("takeover_s".into(), json!(took.as_secs_f64()));
            sleep_until(until).await;
        }
        Fault::XidHold => {
            let mut client = env.connect("chaos-xid").await.map_err(inj)?;
            let stats = env.connect("chaos-stats").await.map_err(inj)?;
            let (s0, c0) = (
                log_stats(&stats).await?,
                flow.completed.load(Ordering::SeqCst),
            );
            let tx = client
                .transaction()
                .await
                .map_err(ChaosError::db("BEGIN"))
                .map_err(inj)?;
            let row = tx
                .query_one(HOLD_XID, &[])
                .await
                .map_err(ChaosError::db("taking an xid"))
                .map_err(inj)?;
            let xid: String = row.get("xid");
            let start = now_us();
            sleep_until(until).await;
            let (s1, c1) = (
                log_stats(&stats).await?,
                flow.completed.load(Ordering::SeqCst),
            );
            tx.rollback()
                .await
                .map_err(ChaosError::db("ROLLBACK"))
                .map_err(inj)?;
            events.push(Event {
                start,
                end: now_us(),
            });
            details.insert("held_xid".into(), json!(xid));
            details.insert(
                "ready_tuples_read_per_job_during".into(),
                json!(per_job(s1.ready_read - s0.ready_read, c1 - c0)),
            );
            details.insert("jobs_completed_during".into(), json!(c1 - c0));
        }
        Fault::FailoverSync | Fault::FailoverAsync => {
            let start = now_us();
            let t0 = Instant::now();
            let pg = env.owned(name)?;
            pg.crash_primary().await.map_err(inj)?;
            let standby = pg.standby.take().ok_or_else(|| ChaosError::Inject {
                fault: name,
                detail: "no standby".into(),
            })?;
            let standby = tokio::task::spawn_blocking(move || standby.promote().map(|()| standby))
                .await
                .map_err(|e| ChaosError::setup("promoting", e))??;
            pg.standby = Some(standby);
            events.push(Event {
                start,
                end: now_us(),
            });
            details.insert("promotion_s".into(), json!(t0.elapsed().as_secs_f64()));
            sleep_until(until).await;
        }
        Fault::PoolExhaustion => {
            let probe = env.connect("chaos-hog").await.map_err(inj)?;
            let free: i32 = probe
                .query_one(FREE_SLOTS, &[])
                .await
                .map_err(ChaosError::db("counting free slots"))
                .map_err(inj)?
                .get("free");
            let mut hogs = vec![probe];
            let mut refusal = String::new();
            let start = now_us();
            // Take every slot left, superuser-reserved ones included.
            while hogs.len() < 10_000 {
                match env.connect("chaos-hog").await {
                    Ok(c) => hogs.push(c),
                    Err(e) => {
                        refusal = e.to_string();
                        break;
                    }
                }
            }
            events.push(Event {
                start,
                end: now_us(),
            });
            // The servers' pools are full already; sessions they lose now cannot be
            // replaced until the slots are free again.
            let killed = hogs[0]
                .query_one(TERMINATE, &[])
                .await
                .map_err(ChaosError::db("pg_terminate_backend"))
                .map_err(inj)?
                .get::<_, i64>("terminated");
            details.insert("backends_terminated".into(), json!(killed));
            details.insert("free_slots_before".into(), json!(free));
            // Keep taking every slot that frees up (a terminated session's), racing the
            // servers' reconnects, for the whole window.
            let filled = hogs.len();
            while Instant::now() < until {
                match env.connect("chaos-hog").await {
                    Ok(c) => hogs.push(c),
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
            details.insert("connections_held".into(), json!(hogs.len()));
            details.insert(
                "connections_taken_after_terminating".into(),
                json!(hogs.len() - filled),
            );
            details.insert("refused_with".into(), json!(refusal));
            drop(hogs);
            if let Some(ev) = events.last_mut() {
                ev.end = now_us();
            }
        }
    }
    Ok(events)
}

pub fn per_job(read: i64, jobs: u64) -> Option<f64> {
    (jobs > 0).then(|| read as f64 / jobs as f64)
}
