//! Server time of the dashboard's list pages over a large job history (docs/performance.md).
//!
//! Seeds one tenant queue with `--jobs` finished jobs through the engine (enqueue, claim,
//! complete in batches of 1000; one in `--dead-every` dead-lettered with one of 50 error
//! texts), leaves `--pending` jobs waiting, then times each list request the pages make,
//! in process through the server's router (`/ui/api/...`, session cookie and all: exactly
//! the path a browser's request takes, minus the network), `--samples` times each.
//! Prints one JSON object per request with p50/p95/max in milliseconds.
//!
//! With `--workflows N`, also starts N workflow instances in another queue (through the
//! engine's `pgferry.wf_start`, 10,000 per statement) and times the workflow pages' reads.
//!
//!     cargo run --release -p pgferry-dashboard --example list_timings -- --jobs 1000000
//!
//! `--hold 1` keeps the seeded database after the timings (until SIGINT) and prints its
//! connection string; `--reuse <connection string>` times such a database without seeding
//! (two builds, one dataset); `--round-rows N` sets the listing's per-statement budget.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{header, Request};
use pgferry_core::{db, Engine, EngineConfig, Leader, LeaderConfig, NewJob};
use pgferry_server::auth::{admin, Scopes};
use pgferry_server::{AppState, ServerConfig};
use serde_json::{json, Value};
use tower::ServiceExt;

/// The job lookup statement before and after issue 24's rework, timed on the same database.
/// Since the listing-path change (ADR 0024's second addendum) the outcomes of claimed
/// attempts are a second statement, `jobs_outcomes.sql`, run only for pages with claimed
/// attempts; "after" here times `jobs_detail.sql` alone, so it leaves that part out.
const DETAIL_BEFORE: &str = include_str!("sql/jobs_detail_overlap.sql");
const DETAIL_AFTER: &str = include_str!("../../pgferry-core/src/sql/jobs_detail.sql");
/// The workflow list statements: the general one, and the two of migration 0017.
const WF_LIST: &str = include_str!("../../pgferry-core/src/sql/workflow/list.sql");
const WF_LIST_ENDED: &str = include_str!("../../pgferry-core/src/sql/workflow/list_ended.sql");
const WF_LIST_CORRELATED: &str =
    include_str!("../../pgferry-core/src/sql/workflow/list_correlated.sql");

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number"))
        })
        .unwrap_or(default)
}

struct Ui {
    router: axum::Router,
    cookie: String,
    csrf: String,
}

impl Ui {
    async fn send(&self, method: &str, uri: &str, body: Option<Value>) -> (u16, Value, Duration) {
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::HOST, "127.0.0.1")
            .header(header::COOKIE, &self.cookie)
            .header("x-csrf-token", &self.csrf);
        if body.is_some() {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(body.map_or(Body::empty(), |b| Body::from(b.to_string())))
            .unwrap();
        let started = Instant::now();
        let res = self.router.clone().oneshot(req).await.unwrap();
        let status = res.status().as_u16();
        let bytes = axum::body::to_bytes(res.into_body(), 64 << 20)
            .await
            .unwrap();
        let took = started.elapsed();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            took,
        )
    }
}

async fn seed(engine: &Engine, queue: &str, jobs: u64, dead_every: u64, worker: usize) {
    let mut done = 0u64;
    let mut last_report = Instant::now();
    while done < jobs {
        let n = 1000.min(jobs - done) as usize;
        let batch: Vec<NewJob> = (0..n)
            .map(|i| {
                let k = (done as usize + i) % 10;
                let mut j = NewJob::new(
                    queue,
                    format!("kind{k}"),
                    json!({ "n": done as usize + i, "w": worker }),
                );
                j.max_attempts = Some(1);
                j
            })
            .collect();
        engine.enqueue(&batch).await.expect("enqueue");
        let mut left = n;
        while left > 0 {
            let claimed = engine.claim(queue, left, "seeder").await.expect("claim");
            if claimed.is_empty() {
                tokio::time::sleep(Duration::from_millis(2)).await;
                continue;
            }
            let outcomes: Vec<_> = claimed
                .iter()
                .map(|c| {
                    if (c.job_id as u64).is_multiple_of(dead_every) {
                        c.fail(format!(
                            "upstream error {}: request {} refused",
                            (c.job_id as u64 / dead_every) % 50,
                            c.job_id
                        ))
                    } else {
                        c.completed(None)
                    }
                })
                .collect();
            engine.complete(&outcomes).await.expect("complete");
            left -= claimed.len();
        }
        done += n as u64;
        if worker == 0 && last_report.elapsed() > Duration::from_secs(10) {
            eprintln!("seeder 0: {done} jobs");
            last_report = Instant::now();
        }
    }
}

const SEED_WORKFLOWS: &str = include_str!("sql/seed_workflows.sql");
const CANCEL_WORKFLOWS: &str = include_str!("sql/cancel_workflows.sql");

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let jobs = arg("--jobs", 100_000);
    let pending = arg("--pending", 10_000);
    let dead_every = arg("--dead-every", 100);
    let samples = arg("--samples", 50) as usize;
    let seeders = arg("--seeders", 4) as usize;
    let workflows = arg("--workflows", 0) as i64;
    let ended_every = arg("--ended-every", 2) as i64;
    // Schedules for the schedules page (its list is keyset-paged by name).
    let schedules = arg("--schedules", 1000);
    // `--hold 1`: after the timings, keep the database (and this process) until SIGINT, so
    // plans can be read with psql on the same data (prints the connection string).
    let hold = arg("--hold", 0) == 1;

    // `--reuse <connection string>`: time a database another run seeded and held (the same
    // data for two builds: before/after); nothing is seeded.
    let args: Vec<String> = std::env::args().collect();
    let reuse = args
        .iter()
        .position(|a| a == "--reuse")
        .and_then(|i| args.get(i + 1).cloned());
    let (conn_string, _db) = match &reuse {
        Some(c) => (c.clone(), None),
        None => {
            let db = pgferry_testkit::test_db().await;
            (db.conn_string.clone(), Some(db))
        }
    };
    let config: tokio_postgres::Config = conn_string.parse().expect("connection string");
    let (mut client, conn) = config
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    // The server's migrations: the engine's plus auth, schedules and ASH.
    pgferry_server::migrate::up(&mut client)
        .await
        .expect("migrate");
    // `--round-rows N`: the listing's per-statement budget (EngineConfig::list_round_rows).
    let round_rows = arg(
        "--round-rows",
        EngineConfig::default().list_round_rows as u64,
    ) as i64;
    let engine = Engine::new(
        db::pool(&config, "api", 16),
        EngineConfig {
            list_round_rows: round_rows,
            ..EngineConfig::default()
        },
    );
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(Leader::new(engine.clone(), config.clone(), LeaderConfig::default()).run(stop_rx));
    let state = AppState::new(Arc::clone(&engine), ServerConfig::default())
        .await
        .expect("state");
    if reuse.is_none() {
        admin::create_tenant(&mut client, "perf").await.unwrap();
    }
    let (_, key) = admin::create_key(&mut client, "perf", Scopes::all(), None)
        .await
        .unwrap();
    let router = pgferry_server::router(state);

    // Sign in like the browser does.
    let res = router
        .clone()
        .oneshot(
            Request::post("/ui/api/session")
                .header(header::HOST, "127.0.0.1")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(json!({ "api_key": key.expose() }).to_string()))
                .unwrap(),
        )
        .await
        .unwrap();
    let cookie = res.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let body: Value = serde_json::from_slice(
        &axum::body::to_bytes(res.into_body(), 1 << 20)
            .await
            .unwrap(),
    )
    .unwrap();
    let ui = Ui {
        router,
        cookie,
        csrf: body["csrf_token"].as_str().unwrap().to_string(),
    };

    // History is kept (7 days): nothing is truncated while we measure.
    let (st, b, _) = ui
        .send(
            "PATCH",
            "/ui/api/v1/queues/history",
            Some(json!({ "retention_ms": 604_800_000u64, "max_attempts": 1 })),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let queue = "t1.history";
    let started = Instant::now();
    let mut tasks = Vec::new();
    // With --reuse, --jobs and --workflows describe the database; nothing is added.
    let seeding = reuse.is_none();
    for w in (0..seeders).filter(|_| seeding) {
        let engine = engine.clone();
        let share = jobs / seeders as u64 + u64::from((w as u64) < jobs % seeders as u64);
        tasks.push(tokio::spawn(async move {
            seed(&engine, queue, share, dead_every, w).await
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let seed_secs = started.elapsed().as_secs_f64();
    let waiting: Vec<NewJob> = (0..if seeding { pending } else { 0 })
        .map(|i| NewJob::new(queue, "waiting", json!({ "n": i })))
        .collect();
    for chunk in waiting.chunks(1000) {
        engine.enqueue(chunk).await.unwrap();
    }
    let wf_started = Instant::now();
    let mut from = 1i64;
    while seeding && from <= workflows {
        let n = 10_000.min(workflows - from + 1);
        let row = client
            .query_one(SEED_WORKFLOWS, &[&"t1.flows", &from, &n])
            .await
            .unwrap();
        assert_eq!(row.get::<_, i64>("started"), n);
        // Every `--ended-every`-th instance ended (cancelled): the list has both kinds.
        if ended_every > 0 {
            client
                .query_one(CANCEL_WORKFLOWS, &[&"t1.flows", &from, &ended_every])
                .await
                .unwrap();
        }
        from += n;
        if (from - 1) % 100_000 == 0 {
            eprintln!("workflow instances: {}", from - 1);
        }
    }
    let wf_secs = wf_started.elapsed().as_secs_f64();
    for i in 0..if seeding { schedules } else { 0 } {
        let (st, b, _) = ui
            .send(
                "POST",
                "/ui/api/v1/schedules",
                Some(json!({
                    "name": format!("schedule-{i:05}"),
                    "interval_ms": 600_000 + i,
                    "target": { "type": "job", "queue": "cron", "kind": "tick" }
                })),
            )
            .await;
        assert_eq!(st, 201, "{b}");
    }
    if reuse.is_none() {
        client.batch_execute("VACUUM ANALYZE").await.unwrap();
    }
    if hold {
        eprintln!("database: {conn_string}");
    }
    eprintln!("seeded {jobs} finished jobs in {seed_secs:.0} s (+{pending} pending), {workflows} workflow instances in {wf_secs:.0} s");

    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        - 60_000;
    // Page 2 and 10 of the unfiltered listing: follow the cursors once.
    let mut deep = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 1..=10 {
        let uri = match &cursor {
            Some(c) => format!("/ui/api/v1/jobs?queue=history&limit=50&cursor={c}"),
            None => "/ui/api/v1/jobs?queue=history&limit=50".to_string(),
        };
        if page == 2 || page == 10 {
            deep.push((format!("jobs page {page}"), uri.clone()));
        }
        let (st, b, _) = ui.send("GET", &uri, None).await;
        assert_eq!(st, 200, "{b}");
        cursor = b["next_cursor"].as_str().map(str::to_string);
        if cursor.is_none() {
            break;
        }
    }
    let mut requests: Vec<(String, String)> = vec![
        ("queues".into(), "/ui/api/v1/queues".into()),
        (
            "jobs newest".into(),
            "/ui/api/v1/jobs?queue=history&limit=50".into(),
        ),
        (
            "jobs state=completed".into(),
            "/ui/api/v1/jobs?queue=history&state=completed&limit=50".into(),
        ),
        (
            "jobs state=dead".into(),
            "/ui/api/v1/jobs?queue=history&state=dead&limit=50".into(),
        ),
        (
            "jobs state=pending".into(),
            "/ui/api/v1/jobs?queue=history&state=pending&limit=50".into(),
        ),
        (
            "jobs kind=kind3".into(),
            "/ui/api/v1/jobs?queue=history&kind=kind3&limit=50".into(),
        ),
        (
            "jobs since=1 min ago".into(),
            format!("/ui/api/v1/jobs?queue=history&since_unix_ms={since}&limit=50"),
        ),
        (
            "dead newest 1000 (dead page)".into(),
            "/ui/api/v1/dead?limit=1000".into(),
        ),
        (
            "dead error_contains common (jobs page)".into(),
            "/ui/api/v1/dead?queue=history&error_contains=upstream%20error%207:&limit=50".into(),
        ),
        (
            "dead error_contains matching nothing (scans every dead job)".into(),
            "/ui/api/v1/dead?queue=history&error_contains=no%20such%20text&limit=50".into(),
        ),
        (
            "search args text, 1 job in 4 (jobs: text search)".into(),
            "/ui/api/jobs/search?queue=history&contains=%22w%22%3A%203&limit=50".into(),
        ),
        (
            "search args text matching nothing (one bounded window)".into(),
            "/ui/api/jobs/search?queue=history&contains=no%20such%20text&limit=50".into(),
        ),
        (
            "search dead error text (jobs: error search)".into(),
            "/ui/api/jobs/search?queue=history&state=dead&error_contains=upstream%20error%207:&limit=50"
                .into(),
        ),
        (
            "search dead error text matching nothing (one bounded window)".into(),
            "/ui/api/jobs/search?queue=history&state=dead&error_contains=no%20such%20text&limit=50"
                .into(),
        ),
        (
            "jobs state=running".into(),
            "/ui/api/v1/jobs?queue=history&state=running&limit=50".into(),
        ),
        (
            "jobs state=scheduled".into(),
            "/ui/api/v1/jobs?queue=history&state=scheduled&limit=50".into(),
        ),
        (
            "jobs state=completed kind=kind3".into(),
            "/ui/api/v1/jobs?queue=history&state=completed&kind=kind3&limit=50".into(),
        ),
        (
            "jobs kind matching nothing (one bounded window)".into(),
            "/ui/api/v1/jobs?queue=history&kind=nothing&limit=50".into(),
        ),
        (
            "schedules first 100 (schedules)".into(),
            "/ui/api/v1/schedules?limit=100".into(),
        ),
        (
            "webhook endpoints (webhooks)".into(),
            "/ui/api/v1/webhook-endpoints?limit=100".into(),
        ),
        ("keys".into(), "/ui/api/keys".into()),
        ("audit".into(), "/ui/api/audit?limit=50".into()),
    ];
    requests.extend(deep);
    let (st, b, _) = ui.send("GET", "/ui/api/v1/schedules?limit=100", None).await;
    assert_eq!(st, 200, "{b}");
    if let Some(next) = b["next"].as_str() {
        requests.push((
            "schedules page 2".into(),
            format!("/ui/api/v1/schedules?limit=100&after={next}"),
        ));
    }
    if workflows > 0 {
        let (st, b, _) = ui
            .send("GET", "/ui/api/v1/workflows?queue=flows&limit=50", None)
            .await;
        assert_eq!(st, 200, "{b}");
        let next = b["next"].as_str().unwrap().to_string();
        let newest = b["instances"][0]["id"].as_i64().unwrap();
        let middle = newest - workflows / 2;
        requests.extend([
            (
                "workflows newest 50 (workflows)".to_string(),
                "/ui/api/v1/workflows?queue=flows&limit=50".to_string(),
            ),
            (
                "workflows page 2".into(),
                format!("/ui/api/v1/workflows?queue=flows&limit=50&before={next}"),
            ),
            (
                "workflows kind=kind3".into(),
                "/ui/api/v1/workflows?queue=flows&kind=kind3&limit=50".into(),
            ),
            (
                "workflows status=cancelled (ended)".into(),
                "/ui/api/v1/workflows?queue=flows&status=cancelled&limit=50".into(),
            ),
            (
                "workflows status=runnable".into(),
                "/ui/api/v1/workflows?queue=flows&status=runnable&limit=50".into(),
            ),
            (
                "workflows status=failed (matches nothing: scans the queue)".into(),
                "/ui/api/v1/workflows?queue=flows&status=failed&limit=50".into(),
            ),
            (
                "workflows correlation_key (middle of history)".into(),
                format!(
                    "/ui/api/v1/workflows?queue=flows&correlation_key=order-{}&limit=50",
                    workflows / 2
                ),
            ),
            (
                "workflow detail (workflow)".into(),
                format!("/ui/api/v1/workflows/{middle}"),
            ),
            (
                "workflow queues (workflows)".into(),
                "/ui/api/workflow-queues".into(),
            ),
            (
                "workflow children (workflow)".into(),
                format!("/ui/api/workflows/{middle}/children"),
            ),
        ]);
    }
    // Statement A/B on this database (before/after issue 24): the job lookup over 50 of the
    // newest and 50 of the oldest finished jobs, prepared as lookup.rs prepares it.
    let newest: Vec<i64> = client
        .query(
            "SELECT u.id FROM pgferry.completions c, unnest(c.job_ids) u(id)
              ORDER BY c.receipt_id DESC LIMIT 50",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let oldest: Vec<i64> = client
        .query(
            "SELECT u.id FROM pgferry.completions c, unnest(c.job_ids) u(id)
              ORDER BY c.receipt_id LIMIT 50",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // `--detail-ab 0` skips the before/after lookup timings (the "before" statement takes
    // seconds per call at 10M jobs).
    let detail_ab: &[(&str, &str)] = if arg("--detail-ab", 1) == 1 {
        &[
            ("before (overlap)", DETAIL_BEFORE),
            ("after (jobs_detail.sql only)", DETAIL_AFTER),
        ]
    } else {
        &[]
    };
    for &(label, sql) in detail_ab {
        let stmt = client.prepare(sql).await.unwrap();
        for (which, ids) in [("newest 50", &newest), ("oldest 50", &oldest)] {
            let mut ms = Vec::with_capacity(samples);
            for _ in 0..samples {
                let t = Instant::now();
                client.query(&stmt, &[ids]).await.unwrap();
                ms.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
            println!(
                "{}",
                json!({
                    "statement": format!("jobs_detail {label}, {which}"), "jobs": jobs,
                    "samples": samples,
                    "p50_ms": (pct(&ms, 0.5) * 100.0).round() / 100.0,
                    "p95_ms": (pct(&ms, 0.95) * 100.0).round() / 100.0,
                })
            );
        }
    }
    if workflows > 0 {
        let key = format!("order-{}", workflows / 2);
        let none: Option<String> = None;
        let cases: [(&str, &str, Option<&str>, Option<&str>); 4] = [
            (
                "status=failed via list.sql (before)",
                WF_LIST,
                Some("failed"),
                None,
            ),
            (
                "status=failed via list_ended.sql (after)",
                WF_LIST_ENDED,
                Some("failed"),
                None,
            ),
            (
                "correlation_key via list.sql (before)",
                WF_LIST,
                None,
                Some(key.as_str()),
            ),
            (
                "correlation_key via list_correlated.sql (after)",
                WF_LIST_CORRELATED,
                None,
                Some(key.as_str()),
            ),
        ];
        for (label, sql, status, key) in cases {
            let mut ms = Vec::with_capacity(samples);
            for _ in 0..samples {
                let t = Instant::now();
                client
                    .query(
                        sql,
                        &[
                            &"t1.flows",
                            &none,
                            &status,
                            &key,
                            &None::<SystemTime>,
                            &None::<i64>,
                            &51i32,
                        ],
                    )
                    .await
                    .unwrap();
                ms.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
            println!(
                "{}",
                json!({
                    "statement": format!("workflow {label}"), "workflows": workflows,
                    "samples": samples,
                    "p50_ms": (pct(&ms, 0.5) * 100.0).round() / 100.0,
                    "p95_ms": (pct(&ms, 0.95) * 100.0).round() / 100.0,
                })
            );
        }
    }
    for (name, uri) in requests {
        let mut ms = Vec::with_capacity(samples);
        let mut rows = 0;
        for _ in 0..samples {
            let (st, b, took) = ui.send("GET", &uri, None).await;
            assert_eq!(st, 200, "{name}: {b}");
            rows = b["jobs"]
                .as_array()
                .or(b["queues"].as_array())
                .or(b["keys"].as_array())
                .or(b["entries"].as_array())
                .or(b["instances"].as_array())
                .or(b["children"].as_array())
                .or(b["schedules"].as_array())
                .or(b["endpoints"].as_array())
                .map_or(0, Vec::len);
            ms.push(took.as_secs_f64() * 1000.0);
        }
        ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "{}",
            json!({
                "request": name, "jobs": jobs, "rows": rows, "samples": samples,
                "p50_ms": (pct(&ms, 0.5) * 100.0).round() / 100.0,
                "p95_ms": (pct(&ms, 0.95) * 100.0).round() / 100.0,
                "max_ms": (pct(&ms, 1.0) * 100.0).round() / 100.0,
            })
        );
    }
    if hold {
        eprintln!("holding the database until SIGINT: {conn_string}");
        tokio::signal::ctrl_c().await.expect("ctrl_c");
    }
}
