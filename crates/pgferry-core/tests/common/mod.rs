//! Helpers shared by the engine's integration tests (all against real Postgres).
#![allow(dead_code)]

use std::sync::Arc;

use futures_util::StreamExt;
use pgferry_core::workflow::{Child, ClaimedStep, Join, Outcome, Start, Workflows};
use pgferry_core::{leader, migrate, ClaimedJob, Engine, EngineConfig, NewJob};
use pgferry_testkit::TestDb;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, NoTls};

/// A migrated database and an engine on it.
pub struct Setup {
    pub db: TestDb,
    pub engine: Arc<Engine>,
}

pub async fn setup() -> Setup {
    setup_with(EngineConfig::default()).await
}

pub async fn setup_with(config: EngineConfig) -> Setup {
    let db = pgferry_testkit::test_db().await;
    let mut client = db.connect().await;
    migrate::up(&mut client).await.expect("migrate");
    let engine = Engine::new(db.pool(16), config);
    Setup { db, engine }
}

/// An engine whose counter flushes never come on their own (tests that count statements
/// flush explicitly, if at all).
pub fn quiet_counters() -> EngineConfig {
    EngineConfig {
        counter_flush: std::time::Duration::from_secs(3600),
        ..EngineConfig::default()
    }
}

impl Setup {
    /// Writes a tick now (what the leader's ticker does on its timer).
    pub async fn tick(&self) -> Option<i64> {
        let client = self.db.connect().await;
        leader::ticker::tick(&client).await.expect("tick")
    }

    /// Reports success for every job in `jobs`.
    pub async fn complete_all(&self, jobs: &[ClaimedJob]) {
        let outcomes: Vec<_> = jobs.iter().map(|j| j.completed(None)).collect();
        self.engine.complete(&outcomes).await.expect("complete");
    }

    /// Enqueues `n` jobs on `queue`, ticks, claims and completes them all; returns their ids.
    pub async fn run_through(&self, queue: &str, n: usize) -> Vec<i64> {
        let jobs: Vec<_> = (0..n)
            .map(|i| NewJob::new(queue, "k", json!({ "i": i })))
            .collect();
        let ids = self.engine.enqueue(&jobs).await.expect("enqueue");
        self.tick().await;
        let claimed = self.engine.claim(queue, n, "w").await.expect("claim");
        assert_eq!(claimed.len(), n, "claimed what was enqueued");
        self.complete_all(&claimed).await;
        ids
    }
}

/// A connection whose server messages (NOTICE/LOG) are collected, for auto_explain.
pub async fn connect_with_notices(db: &TestDb) -> (Client, mpsc::UnboundedReceiver<String>) {
    let (client, mut conn) = db.config.connect(NoTls).await.expect("connect");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(msg) = stream.next().await {
            match msg {
                Ok(AsyncMessage::Notice(n)) => {
                    let _ = tx.send(n.message().to_string());
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    (client, rx)
}

/// Turns on auto_explain for every statement, nested ones included (the statements inside
/// pgferry.claim), with actual row counts, delivered to this client as LOG notices.
pub async fn enable_auto_explain(client: &Client) {
    client
        .batch_execute(
            "LOAD 'auto_explain';
             SET auto_explain.log_min_duration = 0;
             SET auto_explain.log_nested_statements = on;
             SET auto_explain.log_analyze = on;
             SET auto_explain.log_timing = off;
             SET client_min_messages = log;",
        )
        .await
        .expect("auto_explain");
}

pub fn drain(rx: &mut mpsc::UnboundedReceiver<String>) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(m) = rx.try_recv() {
        out.push(m);
    }
    out
}

/// Plans of statements whose text contains `needle`.
pub fn plans_with<'a>(plans: &'a [String], needle: &str) -> Vec<&'a String> {
    plans.iter().filter(|p| p.contains(needle)).collect()
}

/// Number of rows a plan read from scans of `table`'s partitions: actual rows plus rows
/// removed by filters, summed over every scan node.
pub fn rows_read(plan: &str, table: &str) -> u64 {
    let mut total = 0;
    let mut in_scan = false;
    for line in plan.lines() {
        let l = line.trim_start().trim_start_matches("->  ");
        if l.contains(" Scan ") || l.starts_with("Seq Scan") || l.starts_with("Index") {
            in_scan = l.contains(&format!(" on {table}_"));
            if in_scan {
                total += field(l, "rows=", "actual");
            }
        } else if in_scan && l.starts_with("Rows Removed by Filter:") {
            total += l["Rows Removed by Filter:".len()..]
                .trim()
                .parse::<u64>()
                .unwrap_or(0);
        }
    }
    total
}

/// The value of `key` in the "(actual ... key=N ...)" part of a plan line.
fn field(line: &str, key: &str, after: &str) -> u64 {
    let Some(pos) = line.find(after) else {
        return 0;
    };
    let rest = &line[pos..];
    let Some(k) = rest.find(key) else { return 0 };
    rest[k + key.len()..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap_or(0)
}

/// pg_stat_statements must be preloaded by the test cluster; counts top-level statements.
pub async fn reset_statements(client: &Client) {
    client
        .batch_execute(
            "CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset();",
        )
        .await
        .expect("pg_stat_statements");
}

/// Statements executed in this database since the reset, excluding the counting itself.
pub async fn statements(client: &Client) -> Vec<(String, i64)> {
    client
        .query(
            "SELECT query, calls FROM pg_stat_statements
              WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                AND query NOT ILIKE '%pg_stat_statements%'
              ORDER BY query",
            &[],
        )
        .await
        .expect("read pg_stat_statements")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

pub async fn total_calls(client: &Client) -> i64 {
    statements(client).await.iter().map(|(_, c)| c).sum()
}

/// Job ids of [`mixed_workload`], by what happened to them.
#[derive(Debug, Default)]
pub struct Mixed {
    pub all: Vec<i64>,
    pub pending: Vec<i64>,
    pub running: Vec<i64>,
    pub completed: Vec<i64>,
    pub scheduled: Vec<i64>,
    pub dead: Vec<i64>,
    pub cancelled: Vec<i64>,
    /// Dead-lettered, then purged from the DLQ: gone (`NotFound`).
    pub purged: Vec<i64>,
}

/// A queue with jobs in every state, over two priorities and two shards: pending (first
/// attempts, retried at once, retried from the DLQ), running (one with a cancel request),
/// completed, scheduled (first runs, delayed retries, a snooze), dead (one purged),
/// cancelled (pending, running-then-reported, scheduled first run).
pub async fn mixed_workload(s: &Setup, queue: &str) -> Mixed {
    use pgferry_core::{DeadFilter, QueueOptions};
    use std::time::{Duration, SystemTime};

    let e = &s.engine;
    e.upsert_queue(
        queue,
        &QueueOptions {
            shards: 2,
            max_attempts: 3,
            ..QueueOptions::default()
        },
    )
    .await
    .expect("queue");
    let jobs: Vec<_> = (0..24)
        .map(|i| {
            NewJob::new(queue, if i % 3 == 0 { "b" } else { "a" }, json!({ "i": i }))
                .priority(if i % 2 == 0 { 0 } else { 2 })
        })
        .collect();
    let first = e.enqueue(&jobs).await.expect("enqueue");
    let hour = Duration::from_secs(3600);
    let later = SystemTime::now() + hour;
    let sched: Vec<_> = (0..3)
        .map(|i| NewJob::new(queue, "a", json!({ "s": i })).run_at(later))
        .collect();
    let sched = e.enqueue(&sched).await.expect("enqueue scheduled");
    s.tick().await;
    let c = e.claim(queue, 15, "w").await.expect("claim");
    assert_eq!(c.len(), 15);
    let mut m = Mixed::default();
    m.all.extend(&first);
    m.all.extend(&sched);
    let outcomes = vec![
        c[0].completed(Some(json!({ "ok": 1 }))),
        c[1].completed(None),
        c[2].completed(None),
        c[3].completed(None),
        c[4].failed("boom", Duration::ZERO),
        c[5].failed("boom", Duration::ZERO),
        c[6].failed("later", hour),
        c[7].failed("later", hour),
        c[8].snooze(hour),
        c[9].discarded("bad"),
        c[10].discarded("bad"),
        c[11].discarded("bad"),
        c[12].cancelled("stopped"),
    ];
    e.complete(&outcomes).await.expect("complete");
    m.completed.extend(c[..4].iter().map(|j| j.job_id));
    m.pending.extend(c[4..6].iter().map(|j| j.job_id));
    m.scheduled.extend(c[6..9].iter().map(|j| j.job_id));
    m.cancelled.push(c[12].job_id);
    m.running.extend(c[13..15].iter().map(|j| j.job_id));
    e.cancel(c[14].job_id, Some("please"))
        .await
        .expect("cancel running");
    // DLQ: one retried (pending again, attempt 2), one purged, one stays.
    let one = |id: i64| DeadFilter {
        ids: Some(vec![id]),
        ..DeadFilter::default()
    };
    assert_eq!(e.retry_dead(&one(c[9].job_id), 10).await.expect("retry"), 1);
    assert_eq!(e.purge_dead(&one(c[10].job_id)).await.expect("purge"), 1);
    m.pending.push(c[9].job_id);
    m.dead.push(c[11].job_id);
    m.purged.push(c[10].job_id);
    // Unclaimed: one cancelled while pending, the rest pending.
    let claimed: Vec<i64> = c.iter().map(|j| j.job_id).collect();
    let unclaimed: Vec<i64> = first
        .iter()
        .copied()
        .filter(|id| !claimed.contains(id))
        .collect();
    e.cancel(unclaimed[0], None).await.expect("cancel pending");
    m.cancelled.push(unclaimed[0]);
    m.pending.extend(&unclaimed[1..]);
    // Scheduled: one cancelled before it ever ran.
    e.cancel(sched[0], None).await.expect("cancel scheduled");
    m.cancelled.push(sched[0]);
    m.scheduled.extend(&sched[1..]);
    m
}

/// Every page of `queue` with `f`, `limit` at a time, until `has_more` is false; checks that
/// each page holds at most `limit` jobs, all in the filter's state, and that `has_more`
/// comes with a cursor.
pub async fn walk_jobs(
    engine: &Engine,
    queue: &str,
    f: &pgferry_core::JobFilter,
    limit: u32,
) -> Vec<pgferry_core::JobInfo> {
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10_000 {
        let page = engine
            .list_jobs(queue, f, cursor.as_deref(), limit)
            .await
            .unwrap();
        assert!(page.jobs.len() <= limit as usize);
        for j in &page.jobs {
            if let Some(s) = f.state {
                assert_eq!(j.state, s, "job {} listed under {s:?}", j.id);
            }
        }
        seen.extend(page.jobs);
        if !page.has_more {
            return seen;
        }
        cursor = page.next;
        assert!(cursor.is_some(), "has_more without a cursor");
    }
    panic!("listing never ended");
}

/// wf_finish's answers, a continued step's `cont_*` columns as one object (migration 0026).
pub const WF_FINISH: &str = "SELECT id, applied,
        CASE WHEN cont_step_seq IS NOT NULL THEN
            jsonb_build_object('id', id, 'kind', cont_kind, 'step', cont_step,
                               'state', cont_state, 'input', cont_input,
                               'attempt', cont_attempt, 'step_seq', cont_step_seq)
        END AS continued
   FROM pgferry.wf_finish($1::jsonb)";

/// Waits until a backend of this test's database waits for a lock (the statement under test
/// is blocked). Other tests' databases on the shared cluster are not counted.
pub async fn until_a_lock_is_awaited(admin: &Client) {
    for _ in 0..2000 {
        let n: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = current_database() AND wait_event_type = 'Lock'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if n > 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("no backend ever waited for a lock");
}

/// A `parent` instance (queue `p`) that spawned one `kid` (queue `c`, joined by all), and
/// the kid claimed: the parent's id and the kid's claim.
pub async fn parent_with_a_claimed_kid(wf: &Workflows) -> (i64, ClaimedStep) {
    const LEASE: std::time::Duration = std::time::Duration::from_secs(30);
    let parent = wf
        .start(&Start::new("parent", "p", json!(0)))
        .await
        .unwrap()
        .id;
    let p = wf.claim("p", 1, "w", LEASE).await.unwrap().remove(0);
    let mut kid = Child::new("kid", json!(1));
    kid.queue = Some("c".into());
    let spawned = wf
        .finish(&[(
            p.reference(),
            Outcome::spawn(vec![kid], "joined", Join::All),
        )])
        .await
        .unwrap();
    assert!(spawned[0]);
    let kid = wf.claim("c", 1, "w", LEASE).await.unwrap().remove(0);
    (parent, kid)
}
