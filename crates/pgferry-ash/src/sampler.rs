//! The sampler: one read of pg_stat_activity and one INSERT per tick, plus the ring's
//! rotation and the rollups when their time comes.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, Statement};

use crate::config::SamplerConfig;
use crate::dict::{Backend, Dict, Serving};
use crate::encode::{encode_data, encode_locks, LockEntry};
use crate::error::{AshError, Result};

const READ_ACTIVITY: &str = include_str!("../sql/read_activity.sql");
const INSERT_SAMPLE: &str = include_str!("../sql/insert_sample.sql");
const SESSION: &str = include_str!("../sql/session.sql");
const HAS_STATEMENTS: &str = include_str!("../sql/has_statements.sql");
const SET_LOCK_TIMEOUT: &str = include_str!("../sql/set_lock_timeout.sql");
const ROTATE: &str = include_str!("../sql/rotate.sql");
const ROLL_UP: &str = include_str!("../sql/roll_up.sql");
const PRUNE_MINUTES: &str = include_str!("../sql/prune_minutes.sql");
const PRUNE_HOURS: &str = include_str!("../sql/prune_hours.sql");
const MATCH_PUBLISHED: &str = include_str!("../sql/publish/match.sql");
const PRUNE_PUBLISHED: &str = include_str!("../sql/publish/prune.sql");

/// Rollup retention is enforced this often.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// What one sample did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SampleReport {
    /// Backends counted in the sample (active, idle in transaction, busy background).
    pub sampled: usize,
    /// Backends in the locks array (lock waiters and their blockers).
    pub in_lock_chains: usize,
    /// Integers in the sample's data array.
    pub data_len: usize,
    /// When the sample was written (database clock, seconds since the epoch).
    pub at_epoch: f64,
    /// The ring was rotated (a slot emptied) by this call.
    pub rotated: bool,
    /// Rollup rows written by this call (minutes and hours).
    pub rollup_rows: i64,
    /// Backends attributed to a queue / kind from this process's own registry.
    pub attributed_here: usize,
    /// Backends attributed from what other servers published.
    pub attributed_published: usize,
}

pub struct Sampler {
    client: Client,
    config: SamplerConfig,
    dict: Dict,
    read: Statement,
    insert: Statement,
    statements: bool,
    /// Epoch second from which the next minute rollup is due.
    next_rollup: f64,
    last_prune: Option<Instant>,
    last_published_prune: Option<Instant>,
}

impl Sampler {
    /// Validates `config` and opens the sampler's own connection (`pgferry-ash`).
    pub async fn connect(pg: &Config, config: SamplerConfig) -> Result<Sampler> {
        config.validate()?;
        let client = pgferry_core::db::connect(pg, "ash").await?;
        Sampler::with_client(client, config).await
    }

    /// A sampler on an existing connection (benchmarks).
    pub async fn with_client(client: Client, config: SamplerConfig) -> Result<Sampler> {
        config.validate()?;
        client.batch_execute(SESSION).await?;
        let statements: bool = client.query_one(HAS_STATEMENTS, &[]).await?.get("present");
        let read = client.prepare(READ_ACTIVITY).await?;
        let insert = client
            .prepare(INSERT_SAMPLE)
            .await
            .map_err(AshError::from_db)?;
        Ok(Sampler {
            client,
            config,
            dict: Dict::default(),
            read,
            insert,
            statements,
            next_rollup: 0.0,
            last_prune: None,
            last_published_prune: None,
        })
    }

    pub fn config(&self) -> &SamplerConfig {
        &self.config
    }

    /// Distinct combos this sampler has seen (cardinality of what it stores).
    pub fn combos(&self) -> usize {
        self.dict.combos()
    }

    /// Takes one sample; rotates and rolls up when due.
    #[tracing::instrument(name = "ash.sample", skip_all, fields(sampled, rotated))]
    pub async fn run_once(&mut self) -> Result<SampleReport> {
        let rows = self
            .client
            .query(&self.read, &[&self.config.databases])
            .await?;
        // What this process's pooled connections serve, read right after the activity (an
        // operation that started in between is attributed by role only).
        let mut serving = pgferry_core::serving::snapshot();
        let mut backends: Vec<Backend> = rows
            .iter()
            .map(|r| Backend {
                pid: r.get("pid"),
                database: r.get("datname"),
                user: r.get("usename"),
                application: r.get("application_name"),
                backend_type: r.get("backend_type"),
                state: r.get("state"),
                wait_type: r.get("wait_event_type"),
                wait_event: r.get("wait_event"),
                query_id: r.get("query_id"),
                query_start: r.get("query_start"),
                leader_pid: r.get("leader_pid"),
                blockers: r.get::<_, Option<Vec<i32>>>("blockers").unwrap_or_default(),
                sampled: r.get("sampled"),
                serving: serving.remove(&r.get::<_, i32>("pid")).map(Into::into),
            })
            .collect();
        let attributed_here = backends.iter().filter(|b| b.serving.is_some()).count();
        let attributed_published = self.attribute_published(&mut backends).await?;
        inherit_from_leaders(&mut backends);
        reduce_blockers(&mut backends);
        let combos = self
            .dict
            .resolve(&self.client, &backends, self.statements)
            .await?;
        let mut sampled: Vec<i32> = backends
            .iter()
            .zip(&combos)
            .filter(|(b, _)| b.sampled)
            .map(|(_, c)| *c)
            .collect();
        let count = sampled.len();
        let data = encode_data(&mut sampled);
        let blockers: HashSet<i32> = backends
            .iter()
            .flat_map(|b| b.blockers.iter().copied())
            .collect();
        let entries: Vec<LockEntry> = backends
            .iter()
            .zip(&combos)
            .filter(|(b, _)| !b.blockers.is_empty() || blockers.contains(&b.pid))
            .map(|(b, c)| LockEntry {
                pid: b.pid,
                combo: *c,
                blocked_by: b.blockers.clone(),
            })
            .collect();
        let locks = (!entries.is_empty()).then(|| encode_locks(&entries));
        let interval_ms = self.config.interval.as_millis() as i32;
        let row = self
            .client
            .query_one(&self.insert, &[&interval_ms, &data, &locks])
            .await?;
        let period: i64 = row.get("period_no");
        let rotated_to: Option<i64> = row.get("rotated");
        let at_epoch: f64 = row.get("at_epoch");
        let rotated = match rotated_to {
            Some(r) if r >= period => false,
            _ => self.rotate(period).await?,
        };
        let mut rollup_rows = 0;
        if at_epoch >= self.next_rollup {
            rollup_rows = self.roll_up().await?;
            self.next_rollup = (at_epoch / 60.0).floor() * 60.0 + 60.0;
        }
        let prune_due = match self.last_prune {
            None => true,
            Some(t) => t.elapsed() >= PRUNE_EVERY,
        };
        if prune_due {
            self.prune().await?;
            self.last_prune = Some(Instant::now());
        }
        let span = tracing::Span::current();
        span.record("sampled", count);
        span.record("rotated", rotated);
        Ok(SampleReport {
            sampled: count,
            in_lock_chains: entries.len(),
            data_len: data.len(),
            at_epoch,
            rotated,
            rollup_rows,
            attributed_here,
            attributed_published,
        })
    }

    /// Attributes pgferry backends this process does not serve from what the other servers
    /// published at this tick (they publish at the same aligned instant: the sampler gives
    /// their writes `publish_grace` to land). Returns how many were attributed.
    async fn attribute_published(&mut self, backends: &mut [Backend]) -> Result<usize> {
        let due = match self.last_published_prune {
            None => true,
            Some(t) => t.elapsed() >= self.config.ttl() / 2,
        };
        if due {
            let ttl = self.config.ttl().as_secs_f64();
            self.client.execute(PRUNE_PUBLISHED, &[&ttl]).await?;
            self.last_published_prune = Some(Instant::now());
        }
        let (pids, starts): (Vec<i32>, Vec<f64>) = backends
            .iter()
            .filter(|b| b.serving.is_none() && b.application.starts_with("pgferry-"))
            .filter_map(|b| b.query_start.map(|q| (b.pid, q)))
            .unzip();
        if pids.is_empty() {
            return Ok(0);
        }
        tokio::time::sleep(self.config.publish_grace).await;
        let rows = self
            .client
            .query(
                MATCH_PUBLISHED,
                &[&pids, &starts, &crate::publish::server_id()],
            )
            .await?;
        let mut found: HashMap<i32, Serving> = rows
            .iter()
            .map(|r| {
                (
                    r.get("pid"),
                    Serving {
                        role: r.get("role"),
                        queue: r.get("queue"),
                        kind: r.get("kind"),
                    },
                )
            })
            .collect();
        let mut n = 0;
        for b in backends.iter_mut().filter(|b| b.serving.is_none()) {
            if let Some(s) = found.remove(&b.pid) {
                b.serving = Some(s);
                n += 1;
            }
        }
        Ok(n)
    }

    /// Empties the slot two periods old. Gives up after the lock timeout when readers hold
    /// the partition (false: try again next tick).
    async fn rotate(&mut self, period: i64) -> Result<bool> {
        let timeout = format!("{}ms", self.config.rotate_lock_timeout.as_millis());
        let tx = self.client.transaction().await?;
        tx.query_one(SET_LOCK_TIMEOUT, &[&timeout]).await?;
        match tx.execute(ROTATE, &[&period]).await {
            Ok(_) => {
                tx.commit().await?;
                tracing::info!(period, "ash: ring rotated");
                Ok(true)
            }
            Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                tracing::warn!(
                    period,
                    "ash: rotation waited past its lock timeout; retrying next tick"
                );
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Rolls complete minutes, then complete hours. Returns rows written.
    pub async fn roll_up(&mut self) -> Result<i64> {
        Ok(self.client.query_one(ROLL_UP, &[]).await?.get("rows"))
    }

    async fn prune(&mut self) -> Result<()> {
        let minutes = format!("{} seconds", self.config.minute_retention.as_secs());
        let hours = format!("{} seconds", self.config.hour_retention.as_secs());
        self.client.execute(PRUNE_MINUTES, &[&minutes]).await?;
        self.client.execute(PRUNE_HOURS, &[&hours]).await?;
        Ok(())
    }

    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }
}

/// A parallel worker works for its leader's query: it takes the leader's pgferry attribution
/// (queue, kind, role) and, when it has none of its own, the leader's application name and
/// query id, so its time counts where the leader's does. Its backend type stays
/// `parallel worker`, so the readers can still tell the two apart.
fn inherit_from_leaders(backends: &mut [Backend]) {
    let leaders: HashMap<i32, (Option<Serving>, String, Option<i64>)> = backends
        .iter()
        .filter(|b| b.leader_pid.is_none())
        .map(|b| {
            (
                b.pid,
                (b.serving.clone(), b.application.clone(), b.query_id),
            )
        })
        .collect();
    for b in backends.iter_mut() {
        let Some((serving, app, query_id)) = b.leader_pid.and_then(|l| leaders.get(&l)) else {
            continue;
        };
        if b.serving.is_none() {
            b.serving = serving.clone();
        }
        if b.application.is_empty() {
            b.application = app.clone();
        }
        if b.query_id.is_none() {
            b.query_id = *query_id;
        }
    }
}

/// Keeps, of each lock waiter's blockers, those that are not themselves queued behind
/// another of its blockers. `pg_blocking_pids` also names the waiters ahead in a lock's
/// queue (100 waiters for one exclusive lock name 1 + 2 + … + 99 pids, all "blockers"), so
/// without this a queue of n is n² pids and no two waiters can be merged. After it, every
/// waiter of the queue points at the holder, and a real chain (b holds t2 and waits for a;
/// c waits for b) keeps b, since c does not also wait for a.
fn reduce_blockers(backends: &mut [Backend]) {
    let sets: HashMap<i32, HashSet<i32>> = backends
        .iter()
        .filter(|b| !b.blockers.is_empty())
        .map(|b| (b.pid, b.blockers.iter().copied().collect()))
        .collect();
    for b in backends.iter_mut().filter(|b| b.blockers.len() > 1) {
        let mine = &sets[&b.pid];
        b.blockers.retain(|x| match sets.get(x) {
            Some(theirs) => !theirs.iter().any(|c| mine.contains(c)),
            None => true,
        });
    }
}

/// Samples every `config.interval` forever, reconnecting after errors. The leader runs
/// this as one of its duties, so it stops when leadership is lost.
pub async fn run(pg: Config, config: SamplerConfig) {
    if let Err(e) = config.validate() {
        tracing::error!(error = %e, "ash sampler not started");
        return;
    }
    loop {
        let mut sampler = match Sampler::connect(&pg, config.clone()).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "ash sampler cannot start; retrying");
                tokio::time::sleep(config.interval.max(Duration::from_secs(1))).await;
                continue;
            }
        };
        loop {
            // On the wall clock's multiples of the interval, as every server's publisher.
            tokio::time::sleep(crate::publish::until_aligned_tick(config.interval)).await;
            match sampler.run_once().await {
                Ok(r) => tracing::trace!(sampled = r.sampled, "ash sample"),
                Err(e) => {
                    tracing::warn!(error = %e, "ash sample failed");
                    if sampler.is_closed() {
                        break;
                    }
                }
            }
        }
    }
}

/// The sampler as a leader duty: it samples only while this process leads, so one
/// server samples the database however many serve it (ADR 0012).
pub fn leader_duty(config: SamplerConfig) -> pgferry_core::leader::ExtraDuty {
    std::sync::Arc::new(move |pg| Box::pin(run(pg, config.clone())))
}
