//! list_jobs: every state, pages and cursors across phases and lanes, agreement with
//! get_job, and a bounded number of statements per page however little matches.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use pgferry_core::{Engine, EngineConfig, JobFilter, JobState, NewJob, QueueOptions};
use serde_json::json;

/// pg_stat_statements is cluster-wide: the counting tests of this file take turns.
static COUNTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const STATES: [JobState; 6] = [
    JobState::Pending,
    JobState::Scheduled,
    JobState::Running,
    JobState::Completed,
    JobState::Dead,
    JobState::Cancelled,
];

/// Ids of every page of `queue` with `f` (common::walk_jobs).
async fn walk(engine: &Engine, queue: &str, f: &JobFilter, limit: u32) -> Vec<i64> {
    common::walk_jobs(engine, queue, f, limit)
        .await
        .iter()
        .map(|j| j.id)
        .collect()
}

/// Statements of the counted calls that read data: a listing call's transaction control
/// (START TRANSACTION, its settings of generic plans, COMMIT: three round trips that read
/// nothing) is left out, and checked to be no more than that.
async fn reads(admin: &tokio_postgres::Client) -> i64 {
    let all = common::statements(admin).await;
    let control = |q: &str| q == "START TRANSACTION" || q == "COMMIT" || q.contains("set_config");
    for (q, calls) in &all {
        assert!(
            !control(q) || *calls <= 1,
            "{q} ran {calls} times in one listing call"
        );
    }
    all.iter()
        .filter(|(q, _)| !control(q))
        .map(|(_, c)| c)
        .sum()
}

#[tokio::test]
async fn every_state_pages_like_get_job_says() {
    let s = common::setup().await;
    let ids = common::mixed_workload(&s, "mix").await;
    // Another queue's jobs are never listed.
    s.engine
        .enqueue(&[NewJob::new("other", "a", json!({}))])
        .await
        .unwrap();

    let mut truth: Vec<(i64, JobState)> = Vec::new();
    for &id in &ids.all {
        match s.engine.get_job(id).await {
            Ok(j) => truth.push((id, j.state)),
            // A job purged from the DLQ is gone, and never listed (checked below).
            Err(pgferry_core::Error::NotFound { .. }) if ids.purged.contains(&id) => {}
            Err(e) => panic!("job {id}: {e}"),
        }
    }
    assert!(!ids.purged.is_empty());
    for st in STATES {
        assert!(
            truth.iter().any(|(_, t)| *t == st),
            "the workload has a {st:?} job"
        );
    }
    // The tiny budget makes nearly every statement stop at a mark and continue from it.
    let tiny = Engine::new(
        s.db.pool(4),
        EngineConfig {
            list_round_rows: 3,
            ..EngineConfig::default()
        },
    );
    for engine in [&s.engine, &tiny] {
        for limit in [1u32, 2, 5, 100] {
            let all = walk(engine, "mix", &JobFilter::default(), limit).await;
            let unique: BTreeSet<i64> = all.iter().copied().collect();
            assert_eq!(unique.len(), all.len(), "no job twice: {all:?}");
            assert_eq!(
                unique,
                ids.all
                    .iter()
                    .copied()
                    .filter(|id| !ids.purged.contains(id))
                    .collect(),
                "every job of the queue but the purged one (limit {limit})"
            );
            for st in STATES {
                let f = JobFilter {
                    state: Some(st),
                    ..Default::default()
                };
                let got: BTreeSet<i64> = walk(engine, "mix", &f, limit).await.into_iter().collect();
                let want: BTreeSet<i64> = truth
                    .iter()
                    .filter(|(_, t)| *t == st)
                    .map(|(id, _)| *id)
                    .collect();
                assert_eq!(got, want, "{st:?}, limit {limit}");
            }
        }
    }
    // Kind and since narrow further.
    let f = JobFilter {
        kind: Some("b".into()),
        ..Default::default()
    };
    let got: BTreeSet<i64> = walk(&s.engine, "mix", &f, 4).await.into_iter().collect();
    let mut want = BTreeSet::new();
    for &(id, _) in &truth {
        if s.engine.get_job(id).await.unwrap().kind == "b" {
            want.insert(id);
        }
    }
    assert_eq!(got, want);
    let f = JobFilter {
        since: Some(std::time::SystemTime::now() + Duration::from_secs(60)),
        state: Some(JobState::Completed),
        ..Default::default()
    };
    assert!(walk(&s.engine, "mix", &f, 10).await.is_empty());
}

#[tokio::test]
async fn newest_first_within_a_state() {
    let s = common::setup().await;
    let jobs: Vec<_> = (0..12)
        .map(|i| NewJob::new("order", "k", json!({ "i": i })))
        .collect();
    let ids = s.engine.enqueue(&jobs).await.unwrap();
    let pending = JobFilter {
        state: Some(JobState::Pending),
        ..Default::default()
    };
    let mut want = ids.clone();
    want.reverse();
    assert_eq!(walk(&s.engine, "order", &pending, 5).await, want);
    s.tick().await;
    // Two claims: the later receipt's jobs come first.
    let first = s.engine.claim("order", 5, "w").await.unwrap();
    let second = s.engine.claim("order", 7, "w").await.unwrap();
    s.complete_all(&first).await;
    s.complete_all(&second).await;
    let done = JobFilter {
        state: Some(JobState::Completed),
        ..Default::default()
    };
    let got = walk(&s.engine, "order", &done, 5).await;
    let want: Vec<i64> = second
        .iter()
        .rev()
        .chain(first.iter().rev())
        .map(|j| j.job_id)
        .collect();
    assert_eq!(got, want);
}

#[tokio::test]
async fn bad_cursors_and_limits_are_refused() {
    let s = common::setup().await;
    s.run_through("bq", 3).await;
    let all = JobFilter::default();
    for c in [
        "x", "p.1", "r.1", "s.-", "p.-1.2", "q.1", "s.1.2", "r.1.2.3",
    ] {
        let r = s.engine.list_jobs("bq", &all, Some(c), 10).await;
        assert!(
            matches!(
                r,
                Err(pgferry_core::Error::InvalidArgument {
                    field: "cursor",
                    ..
                })
            ),
            "{c}: {r:?}"
        );
    }
    // A cursor of the scheduled phase does not belong to a pending listing.
    let pending = JobFilter {
        state: Some(JobState::Pending),
        ..Default::default()
    };
    assert!(s
        .engine
        .list_jobs("bq", &pending, Some("s.5"), 10)
        .await
        .is_err());
    for limit in [0, 101] {
        assert!(s.engine.list_jobs("bq", &all, None, limit).await.is_err());
    }
    assert!(s.engine.list_jobs("Bad", &all, None, 10).await.is_err());
}

/// A page costs at most MAX_ROUNDS phase statements and three detail statements, however few
/// jobs match; a state whose jobs sit at the lane's cursor (pending) is found without
/// walking the queue's history.
#[tokio::test]
async fn statements_per_page_are_bounded() {
    let _turn = COUNTING.lock().await;
    let s = common::setup_with(common::quiet_counters()).await;
    s.engine
        .upsert_queue(
            "big",
            &QueueOptions {
                shards: 2,
                ..QueueOptions::default()
            },
        )
        .await
        .unwrap();
    let n = 3000;
    let jobs: Vec<_> = (0..n)
        .map(|i| NewJob::new("big", "k", json!({ "i": i })))
        .collect();
    s.engine.enqueue(&jobs).await.unwrap();
    s.tick().await;
    let claimed = s.engine.claim("big", n - 5, "w").await.unwrap();
    s.complete_all(&claimed[2..]).await;
    let small = Engine::new(
        s.db.pool(4),
        EngineConfig {
            list_round_rows: 400,
            ..EngineConfig::default()
        },
    );
    let admin = s.db.connect().await;
    let bound = pgferry_core::listing::MAX_ROUNDS as i64 + 3;

    for engine in [&s.engine, &small] {
        // Warm the statement cache: steady state is what is counted.
        engine
            .list_jobs("big", &JobFilter::default(), None, 1)
            .await
            .unwrap();
        common::reset_statements(&admin).await;
        let f = JobFilter {
            state: Some(JobState::Pending),
            ..Default::default()
        };
        let page = engine.list_jobs("big", &f, None, 100).await.unwrap();
        assert_eq!(page.jobs.len(), 5);
        assert!(!page.has_more);
        assert_eq!(
            reads(&admin).await,
            2,
            "pending: one phase statement and the details (nothing claimed: no outcomes, \
             no extras): {:?}",
            common::statements(&admin).await
        );
        assert!(
            !common::statements(&admin)
                .await
                .iter()
                .any(|(q, _)| q.contains("FROM pgferry.completions")),
            "a page of pending jobs reads no completions: {:?}",
            common::statements(&admin).await
        );

        // Completed jobs: the phase, the details, their outcomes, their claims (extras).
        let f = JobFilter {
            state: Some(JobState::Completed),
            ..Default::default()
        };
        common::reset_statements(&admin).await;
        let page = engine.list_jobs("big", &f, None, 100).await.unwrap();
        assert_eq!(page.jobs.len(), 100);
        assert!(page
            .jobs
            .iter()
            .all(|j| j.attempts[0].outcome == "completed"
                && j.attempts[0].worker.as_deref() == Some("w")));
        assert_eq!(
            reads(&admin).await,
            4,
            "completed: phase, details, outcomes, extras: {:?}",
            common::statements(&admin).await
        );

        // Nothing is dead: one statement on the dead-letter table answers it.
        let f = JobFilter {
            state: Some(JobState::Dead),
            ..Default::default()
        };
        common::reset_statements(&admin).await;
        let page = engine.list_jobs("big", &f, None, 100).await.unwrap();
        assert!(page.jobs.is_empty() && !page.has_more);
        assert_eq!(
            reads(&admin).await,
            1,
            "dead: the dead-letter phase alone: {:?}",
            common::statements(&admin).await
        );

        // No completed job has this kind: the claimed phase is walked in bounded steps.
        let f = JobFilter {
            state: Some(JobState::Completed),
            kind: Some("nothing".into()),
            ..Default::default()
        };
        let mut cursor: Option<String> = None;
        let mut calls = 0;
        loop {
            common::reset_statements(&admin).await;
            let page = engine
                .list_jobs("big", &f, cursor.as_deref(), 100)
                .await
                .unwrap();
            calls += 1;
            let used = reads(&admin).await;
            assert!(page.jobs.is_empty());
            assert!(
                used <= bound,
                "{used} statements: {:?}",
                common::statements(&admin).await
            );
            if !page.has_more {
                break;
            }
            cursor = page.next;
        }
        // A call reads its rounds' budgets (growing from the page's size); of what the two
        // lanes return, the mark keeps what lies above the higher lane's lowest row, about
        // half when the lanes are claimed alternately.
        let per_call: usize =
            pgferry_core::listing::round_budgets(engine.config().list_round_rows, 101)
                .iter()
                .sum::<i64>() as usize;
        assert!(
            calls <= claimed.len() / (per_call / 2) + 2,
            "{calls} calls for {} claimed attempts",
            claimed.len()
        );

        // The two running jobs are answered from the receipts that can hold them.
        let f = JobFilter {
            state: Some(JobState::Running),
            ..Default::default()
        };
        let got = walk(engine, "big", &f, 100).await;
        let mut want: Vec<i64> = claimed[..2].iter().map(|j| j.job_id).collect();
        want.sort();
        let mut got_sorted = got.clone();
        got_sorted.sort();
        assert_eq!(got_sorted, want);
    }
}

/// A job whose transaction commits after a claim passed its position is pending (found in
/// the xip of the cursor's snapshots), is claimed by the next range, and is listed once.
#[tokio::test]
async fn late_commit_is_listed_pending_then_running() {
    let s = common::setup().await;
    let mut client = s.db.connect().await;
    let tx = client.transaction().await.unwrap();
    let late = s
        .engine
        .enqueue_tx(&tx, &[NewJob::new("late", "k", json!({}))])
        .await
        .unwrap()[0];
    let early = s
        .engine
        .enqueue(&[NewJob::new("late", "k", json!({}))])
        .await
        .unwrap()[0];
    s.tick().await;
    let c = s.engine.claim("late", 10, "w").await.unwrap();
    assert_eq!(c.iter().map(|j| j.job_id).collect::<Vec<_>>(), vec![early]);
    tx.commit().await.unwrap();
    let pending = JobFilter {
        state: Some(JobState::Pending),
        ..Default::default()
    };
    let running = JobFilter {
        state: Some(JobState::Running),
        ..Default::default()
    };
    assert_eq!(walk(&s.engine, "late", &pending, 10).await, vec![late]);
    assert_eq!(walk(&s.engine, "late", &running, 10).await, vec![early]);
    s.tick().await;
    let c = s.engine.claim("late", 10, "w").await.unwrap();
    assert_eq!(c.iter().map(|j| j.job_id).collect::<Vec<_>>(), vec![late]);
    assert!(walk(&s.engine, "late", &pending, 10).await.is_empty());
    let mut got = walk(&s.engine, "late", &running, 10).await;
    got.sort();
    assert_eq!(got, vec![late.min(early), late.max(early)]);
}

/// No Seq Scan in `plan` reads rows of the log (ready, receipts); some index is used.
fn assert_log_read_by_index(name: &str, p: &str) {
    let lines: Vec<&str> = p.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let on_log = ["ready_", "receipts_"]
            .iter()
            .any(|t| line.contains(&format!(" on {t}")));
        if !line.contains("Seq Scan") || !on_log {
            continue;
        }
        let read = (!line.contains("actual rows=0 ") && !line.contains("never executed"))
            || lines[i + 1..]
                .iter()
                .take_while(|l| !l.contains("->"))
                .any(|l| l.contains("Rows Removed by Filter"));
        assert!(!read, "{name}: a Seq Scan reads the log:\n{p}");
    }
    assert!(p.contains("Index"), "{name}:\n{p}");
}

/// The listing statements read the log through its indexes on a realistic log (many jobs,
/// other queues, receipts of other lanes): no Seq Scan reads rows of ready or receipts.
#[tokio::test]
async fn listing_statements_use_the_logs_indexes() {
    let s = common::setup().await;
    for i in 0..20 {
        let batch: Vec<_> = (0..1000)
            .map(|j| {
                NewJob::new(
                    if j % 4 == 0 { "q" } else { "other" },
                    "k",
                    json!({ "i": i * 1000 + j }),
                )
            })
            .collect();
        s.engine.enqueue(&batch).await.unwrap();
    }
    s.tick().await;
    for _ in 0..100 {
        for q in ["q", "other"] {
            let c = s.engine.claim(q, 50, "w").await.unwrap();
            s.complete_all(&c).await;
        }
    }
    let admin = s.db.connect().await;
    admin
        .batch_execute(
            "INSERT INTO pgferry.receipts (segment, receipt_id, lane, lo_snap, hi_snap, hi_tick,
                                           last_xid, last_seq, exhausted, job_ids, attempts,
                                           job_segments, lease_until)
             SELECT 0, -g, 1000 + g % 50, pg_current_snapshot(), pg_current_snapshot(), 0, '0',
                    0, true, '{}', '{}', '{}', now()
               FROM generate_series(1, 5000) g;
             -- Other queues' dead letters: state=dead must not read them.
             INSERT INTO pgferry.dead (job_id, lane, attempt, max_attempts, kind, args, error)
             SELECT -g, 1000 + g % 50, 1, 1, 'k', '{}', 'boom'
               FROM generate_series(1, 5000) g;
             ANALYZE",
        )
        .await
        .unwrap();
    let explain = |sql: &str| format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {sql}");
    let none_s: Option<String> = None;
    let none_t: Option<std::time::SystemTime> = None;
    let none_i: Option<i64> = None;
    let plan = |rows: Vec<tokio_postgres::Row>| {
        rows.iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let pending = plan(
        admin
            .query(
                &explain(include_str!("../src/sql/list_pending.sql")),
                &[
                    &"q",
                    &none_s,
                    &none_i,
                    &4000i64,
                    &none_s,
                    &none_t,
                    &Some("pending"),
                    &101i64,
                    &none_s,
                ],
            )
            .await
            .unwrap(),
    );
    let claimed = plan(
        admin
            .query(
                &explain(include_str!("../src/sql/list_claimed.sql")),
                &[
                    &"q",
                    &none_i,
                    &none_i,
                    &4000i64,
                    &none_s,
                    &none_t,
                    &Some("completed"),
                    &101i64,
                    &false,
                    &none_s,
                ],
            )
            .await
            .unwrap(),
    );
    let ids: Vec<i64> = admin
        .query(
            "SELECT job_id FROM pgferry.ready ORDER BY job_id DESC LIMIT 100",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let detail = plan(
        admin
            .query(
                &explain(include_str!("../src/sql/jobs_detail.sql")),
                &[&ids],
            )
            .await
            .unwrap(),
    );
    // The outcomes of 100 completed jobs' attempts, from their details' rows.
    let done_ids: Vec<i64> = admin
        .query(
            "SELECT u.job_id FROM pgferry.completions c, unnest(c.job_ids) AS u(job_id)
              ORDER BY u.job_id DESC LIMIT 100",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let rows = admin
        .query(include_str!("../src/sql/jobs_detail.sql"), &[&done_ids])
        .await
        .unwrap();
    let tried: Vec<_> = rows
        .iter()
        .filter(|r| r.get::<_, Option<bool>>("claimed") == Some(true))
        .collect();
    assert_eq!(tried.len(), 100, "every attempt claimed");
    let col_i64 = |c: &str| tried.iter().map(|r| r.get::<_, i64>(c)).collect::<Vec<_>>();
    let col_i32 = |c: &str| tried.iter().map(|r| r.get::<_, i32>(c)).collect::<Vec<_>>();
    let segs: Vec<i16> = tried.iter().map(|r| r.get("segment")).collect();
    let xids: Vec<String> = tried.iter().map(|r| r.get("xid")).collect();
    let outcomes = plan(
        admin
            .query(
                &explain(include_str!("../src/sql/jobs_outcomes.sql")),
                &[
                    &col_i64("job_id"),
                    &col_i32("attempt"),
                    &col_i32("lane"),
                    &segs,
                    &xids,
                    &col_i64("seq"),
                ],
            )
            .await
            .unwrap(),
    );
    // Extras of 100 completed attempts: receipts by (lane, receipt id), results by job id.
    let done = admin
        .query(
            "SELECT u.job_id, u.attempt, rc.lane, c.receipt_id
               FROM pgferry.completions c
               JOIN pgferry.receipts rc ON rc.receipt_id = c.receipt_id,
                    unnest(c.job_ids, c.attempts) AS u(job_id, attempt)
              ORDER BY u.job_id DESC LIMIT 100",
            &[],
        )
        .await
        .unwrap();
    let col = |i: usize| done.iter().map(|r| r.get::<_, i64>(i)).collect::<Vec<_>>();
    let (ids, receipts) = (col(0), col(3));
    let atts: Vec<i32> = done.iter().map(|r| r.get(1)).collect();
    let lanes: Vec<i32> = done.iter().map(|r| r.get(2)).collect();
    let receipts: Vec<Option<i64>> = receipts.into_iter().map(Some).collect();
    let want = vec![true; ids.len()];
    let extras = plan(
        admin
            .query(
                &explain(include_str!("../src/sql/jobs_extras.sql")),
                &[&ids, &atts, &lanes, &receipts, &want],
            )
            .await
            .unwrap(),
    );
    for (name, p) in [
        ("pending", &pending),
        ("claimed", &claimed),
        ("detail", &detail),
        ("outcomes", &outcomes),
        ("extras", &extras),
    ] {
        assert_log_read_by_index(name, p);
    }
    // list_jobs runs the phase statements with generic plans (listing.rs): the same holds
    // for those, with every filter given (kind, since, text) and without.
    admin
        .batch_execute("SET plan_cache_mode = force_generic_plan")
        .await
        .unwrap();
    let kind = Some("k".to_string());
    let text = Some("\"i\": 1".to_string());
    let since = Some(std::time::SystemTime::now() - std::time::Duration::from_secs(3600));
    for (k, t, s) in [(&none_s, &none_s, &none_t), (&kind, &text, &since)] {
        let pending = plan(
            admin
                .query(
                    &explain(include_str!("../src/sql/list_pending.sql")),
                    &[&"q", &none_s, &none_i, &4000i64, k, s, &none_s, &101i64, t],
                )
                .await
                .unwrap(),
        );
        // A generic plan shows the parameters, not their values.
        assert!(pending.contains("$1"), "not a generic plan:\n{pending}");
        assert_log_read_by_index("pending (generic)", &pending);
        let claimed = plan(
            admin
                .query(
                    &explain(include_str!("../src/sql/list_claimed.sql")),
                    &[
                        &"q", &none_i, &none_i, &4000i64, k, s, &none_s, &101i64, &false, t,
                    ],
                )
                .await
                .unwrap(),
        );
        assert!(claimed.contains("$1"), "not a generic plan:\n{claimed}");
        assert_log_read_by_index("claimed (generic)", &claimed);
        assert!(
            common::rows_read(&claimed, "receipts") <= 4000 / 50 + 16,
            "{claimed}"
        );
    }
    admin.batch_execute("RESET plan_cache_mode").await.unwrap();
    // state=dead reads the dead-letter table by (lane, job id), newest first: only the
    // queue's own rows, never the other queues' 5,000.
    let dead = plan(
        admin
            .query(
                &explain(include_str!("../src/sql/list_dead.sql")),
                &[
                    &"q", &none_i, &4000i64, &none_s, &101i64, &none_t, &none_s, &none_s,
                ],
            )
            .await
            .unwrap(),
    );
    assert!(
        dead.contains("Index Scan Backward using dead_lane"),
        "{dead}"
    );
    assert!(!dead.contains("Seq Scan on dead"), "{dead}");
    // The claimed phase reads receipts in index order and stops at its budget.
    assert!(claimed.contains("Index Scan using receipts_"), "{claimed}");
    assert!(
        common::rows_read(&claimed, "receipts") <= 4000 / 50 + 16,
        "{claimed}"
    );
}

async fn walk_matching(
    engine: &Engine,
    queue: &str,
    f: &JobFilter,
    text: &pgferry_core::TextFilter,
) -> Vec<i64> {
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let page = engine
            .list_jobs_matching(queue, f, text, cursor.as_deref(), 10)
            .await
            .unwrap();
        seen.extend(page.jobs.iter().map(|j| j.id));
        if !page.has_more {
            return seen;
        }
        cursor = page.next;
    }
    panic!("search never ended");
}

/// Text filters (args/meta, dead errors) are tested on the rows a call reads: with a small
/// budget, a match deep in the history comes after short pages with `has_more`, found once
/// by paging on ("search older"); case does not matter; error text needs the dead state.
#[tokio::test]
async fn text_search_is_bounded_and_pages_on() {
    let s = common::setup().await;
    let small = Engine::new(
        s.db.pool(4),
        EngineConfig {
            list_round_rows: 100,
            ..EngineConfig::default()
        },
    );
    let mut first = vec![NewJob::new(
        "txt",
        "k",
        json!({ "customer": "Needle-Corp" }),
    )];
    first[0].meta = Some(json!({ "region": "north" }));
    let needle = s.engine.enqueue(&first).await.unwrap()[0];
    let hay: Vec<_> = (0..2000)
        .map(|i| NewJob::new("txt", "k", json!({ "customer": format!("c{i}") })))
        .collect();
    s.engine.enqueue(&hay).await.unwrap();
    s.tick().await;
    let text = pgferry_core::TextFilter {
        contains: Some("needle-corp".into()),
        ..Default::default()
    };
    let all = JobFilter::default();
    let mut cursor: Option<String> = None;
    let (mut found, mut calls, mut short) = (Vec::new(), 0, 0);
    loop {
        let page = small
            .list_jobs_matching("txt", &all, &text, cursor.as_deref(), 10)
            .await
            .unwrap();
        calls += 1;
        if page.jobs.is_empty() && page.has_more {
            short += 1;
        }
        found.extend(page.jobs.iter().map(|j| j.id));
        if !page.has_more {
            break;
        }
        cursor = page.next;
    }
    assert_eq!(found, vec![needle]);
    assert!(short >= 1, "the needle is below the first call's window");
    assert!(calls < 50, "{calls} calls");
    // The same once every job ran: the claimed phase finds the rows by block.
    let claimed = s.engine.claim("txt", 3000, "w").await.unwrap();
    assert_eq!(claimed.len(), 2001);
    s.complete_all(&claimed).await;
    for engine in [&s.engine, &small] {
        let got = walk_matching(engine, "txt", &all, &text).await;
        assert_eq!(got, vec![needle]);
        let since = JobFilter {
            since: Some(std::time::SystemTime::now() - Duration::from_secs(600)),
            kind: Some("k".into()),
            ..Default::default()
        };
        assert_eq!(
            walk_matching(engine, "txt", &since, &text).await,
            vec![needle]
        );
        let later = JobFilter {
            since: Some(std::time::SystemTime::now() + Duration::from_secs(600)),
            ..Default::default()
        };
        assert!(walk_matching(engine, "txt", &later, &text).await.is_empty());
    }
    // Meta text too, through the default engine in one page.
    let meta = pgferry_core::TextFilter {
        contains: Some("NORTH".into()),
        ..Default::default()
    };
    let page = s
        .engine
        .list_jobs_matching("txt", &all, &meta, None, 10)
        .await
        .unwrap();
    assert_eq!(
        page.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![needle]
    );
    // Error text: only with state dead, and then over the dead jobs' last errors.
    let err = pgferry_core::TextFilter {
        error_contains: Some("boom".into()),
        ..Default::default()
    };
    let e = s
        .engine
        .list_jobs_matching("txt", &all, &err, None, 10)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("error_contains"), "{e}");
    let mut j = NewJob::new("dq", "k", json!({}));
    j.max_attempts = Some(1);
    let mut k = NewJob::new("dq", "k", json!({}));
    k.max_attempts = Some(1);
    let ids = s.engine.enqueue(&[j, k]).await.unwrap();
    s.tick().await;
    let claimed = s.engine.claim("dq", 2, "w").await.unwrap();
    let outcomes: Vec<_> = claimed
        .iter()
        .map(|c| {
            c.fail(if c.job_id == ids[0] {
                "Kaboom at step 3"
            } else {
                "timeout"
            })
        })
        .collect();
    s.engine.complete(&outcomes).await.unwrap();
    let dead = JobFilter {
        state: Some(JobState::Dead),
        ..Default::default()
    };
    let page = s
        .engine
        .list_jobs_matching("dq", &dead, &err, None, 10)
        .await
        .unwrap();
    assert_eq!(
        page.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![ids[0]]
    );
}
