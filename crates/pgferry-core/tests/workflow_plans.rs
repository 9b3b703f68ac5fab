//! Hot workflow statements: EXPLAIN plans on a seeded dataset shaped like gen_durable's (at
//! a tenth of its size so the test stays fast: 100k instances, 70k terminal, 29.5k
//! runnable of which 8k on distinct concurrency keys and 1.5k on one hot key, 500 running
//! with 5k signals, 5k sleeping; the full-size seed and its timings are in `pgferry bench workflow`, workflow_seed.rs),
//! and statement counts: a claim of a batch is 1 statement, every outcome is 1 statement,
//! a plain `next` costs no extra round trip.

mod common;

use std::time::{Duration, Instant};

use pgferry_core::workflow::{
    Child, ClaimedStep, Join, Machine, Outcome, Start, Target, Workflows,
};
use serde_json::json;

const LEASE: Duration = Duration::from_secs(30);

/// The workflow tables; a Seq Scan on any of them in a hot statement fails the test.
const WF_TABLES: [&str; 7] = [
    "wf_instances",
    "wf_ready",
    "wf_signals",
    "wf_key_waiters",
    "wf_steps",
    "wf_keys",
    "wf_buckets",
];

const SEED: &str = "
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, active, finished_at, result)
SELECT g, 'k', 'q', 'end', 'done', false, now() - interval '1 hour', '1'
  FROM generate_series(1, 70000) g;
-- 20k plain runnable steps, due
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status)
SELECT g, 'k', 'q', 'start', 'runnable' FROM generate_series(70001, 90000) g;
INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
SELECT g, 'q', 0, now() - interval '1 minute' + g * interval '1 microsecond'
  FROM generate_series(70001, 90000) g;
-- 8k runnable with distinct concurrency keys, each holding its key's slot
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, concurrency_key, has_slot)
SELECT g, 'k', 'q', 'start', 'runnable', 'key-' || g, true FROM generate_series(90001, 98000) g;
INSERT INTO pgferry.wf_keys (key, max, running)
SELECT 'key-' || g, 1, 1 FROM generate_series(90001, 98000) g;
INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
SELECT g, 'q', 0, now() - interval '1 minute' + g * interval '1 microsecond'
  FROM generate_series(90001, 98000) g;
-- 1.5k on one hot key (limit 1): one running, the rest waiting outside the picker
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, concurrency_key, has_slot)
SELECT g, 'k', 'q', 'start', CASE WHEN g = 98001 THEN 'running' ELSE 'queued' END, 'hot',
       g = 98001
  FROM generate_series(98001, 99500) g;
INSERT INTO pgferry.wf_keys (key, max, running) VALUES ('hot', 1, 1);
INSERT INTO pgferry.wf_key_waiters (key, instance_id)
SELECT 'hot', g FROM generate_series(98002, 99500) g;
INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
VALUES (98001, 'q', 0, now() + interval '1 hour');
-- 500 running under a lease, with 10 unconsumed signals each
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, step_seq)
SELECT g, 'k', 'q', 'start', 'running', 1 FROM generate_series(99501, 100000) g;
INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
SELECT g, 'q', 0, now() + interval '1 hour' FROM generate_series(99501, 100000) g;
INSERT INTO pgferry.wf_signals (instance_id, name, payload)
SELECT 99501 + g % 500, 'n' || g % 5, '{}' FROM generate_series(1, 5000) g;
-- 5k sleeping until later
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status)
SELECT g, 'k', 'q', 'later', 'sleeping' FROM generate_series(100001, 105000) g;
INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
SELECT g, 'q', 0, now() + interval '1 hour' FROM generate_series(100001, 105000) g;
SELECT setval('pgferry.wf_instance_ids', 200000);
ANALYZE;
";

fn assert_no_seq_scan(plan: &str) {
    for line in plan.lines() {
        for t in WF_TABLES {
            assert!(
                !line.contains(&format!("Seq Scan on {t} ")),
                "Seq Scan on {t}:\n{plan}"
            );
        }
    }
}

/// The plans logged since the last drain, each checked for Seq Scans; returns them.
fn checked(notices: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> Vec<String> {
    let plans = common::drain(notices);
    for p in &plans {
        assert_no_seq_scan(p);
    }
    plans
}

/// The "actual rows" of the first plan line naming `needle`.
fn actual_rows(plan: &str, needle: &str) -> u64 {
    let line = plan
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no {needle} in:\n{plan}"));
    let rest = &line[line.find("actual rows=").expect("analyze") + "actual rows=".len()..];
    rest.chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn hot_statement_plans_on_a_seeded_dataset() {
    let s = common::setup().await;
    let admin = s.db.connect().await;
    admin.batch_execute(SEED).await.unwrap();
    let (client, mut notices) = common::connect_with_notices(&s.db).await;
    common::enable_auto_explain(&client).await;
    // One connection, explained: the API's statements as the engine runs them.
    let wf = Workflows::of(&s.engine);
    let claim_sql = "SELECT * FROM pgferry.wf_claim('q', 50, 'w', 30000)";

    // Picker: batch of 50 out of 28k due rows, past 5.5k rows not yet due and 1.5k waiters.
    common::drain(&mut notices);
    let t = Instant::now();
    let rows = client.query(claim_sql, &[]).await.unwrap();
    let picker_time = t.elapsed();
    assert_eq!(rows.len(), 50);
    let plans = checked(&mut notices);
    let pick = plans
        .iter()
        .find(|p| p.contains("generate_series"))
        .expect("picker plan");
    assert!(pick.contains("Index Scan using wf_ready_pick"), "{pick}");
    assert!(
        actual_rows(pick, "Index Scan using wf_ready_pick") <= 50,
        "the picker read past its batch:\n{pick}"
    );
    let ret = plans
        .iter()
        .find(|p| p.contains("wf_kinds"))
        .expect("claim's update plan");
    // A plain kind (no capability flags): the inbox and children reads never run.
    assert!(
        ret.matches("never executed").count() >= 2,
        "inbox/children loaded for a plain kind:\n{ret}"
    );
    let claimed: Vec<ClaimedStep> = wf.claim("q", 50, "w", LEASE).await.unwrap();
    assert_eq!(claimed.len(), 50);

    // Every outcome kind, on the explained connection: one call each.
    let apply = |id: i64, seq: i32, o: Outcome| serde_json::Value::Array(vec![o.to_wire(id, seq)]);
    let rows: Vec<(i64, i32)> = rows
        .iter()
        .map(|r| (r.get("id"), r.get("step_seq")))
        .collect();
    let kinds = [
        Outcome::next("two", json!({"a": 1})),
        Outcome::retry(Duration::from_secs(1), "later"),
        Outcome::sleep_for(Duration::from_secs(60), "woke"),
        Outcome::await_signals(&["n1"], "got", Some(Duration::from_secs(60))),
        Outcome::spawn(vec![Child::new("kid", json!(1))], "joined", Join::All),
        Outcome::done(json!(1)),
        Outcome::fail("x"),
    ];
    for (i, o) in kinds.iter().enumerate() {
        let (id, seq) = rows[i];
        common::drain(&mut notices);
        let r = client
            .query_one(
                "SELECT applied FROM pgferry.wf_finish($1)",
                &[&apply(id, seq, o.clone())],
            )
            .await
            .unwrap();
        assert!(r.get::<_, bool>(0), "{o:?}");
        checked(&mut notices);
    }

    // A plain `next` that continues (continued steps) and renews its lease: its next step
    // comes back from the same statement; the instance is reached through its primary key
    // by the update alone (no read and no lock before it: ADR 0016, "The update is the
    // lock"), the picker row through its primary key only.
    let (id, seq) = rows[kinds.len()];
    let mut item = Outcome::next("two", json!({})).to_wire(id, seq);
    item["continue_lease_ms"] = json!(30_000);
    item["renew_lease"] = json!(true);
    common::drain(&mut notices);
    let r = client
        .query_one(common::WF_FINISH, &[&serde_json::Value::Array(vec![item])])
        .await
        .unwrap();
    assert!(r.get::<_, bool>("applied"));
    let cont: serde_json::Value = r.get("continued");
    assert_eq!(
        (cont["id"].as_i64(), cont["step_seq"].as_i64()),
        (Some(id), Some(i64::from(seq) + 1))
    );
    let plans = checked(&mut notices);
    let fin = plans
        .iter()
        .find(|p| p.contains("renewed AS"))
        .expect("the outcome statement's plan");
    assert!(
        fin.contains("Conflict Arbiter Indexes: wf_ready_pkey"),
        "{fin}"
    );
    assert!(fin.contains("Index Scan using wf_instances_pkey"), "{fin}");
    assert!(!fin.contains("LockRows"), "{fin}");
    assert_eq!(
        fin.matches("on wf_instances").count(),
        2,
        "the update and its scan only: {fin}"
    );

    // A child's `done` with its parent's join, and a signal delivered to an awaiting
    // instance, and a start deduplicated by correlation key.
    wf.start(&Start::new("parent", "pq", json!({})))
        .await
        .unwrap();
    let p = wf.claim("pq", 1, "w", LEASE).await.unwrap().remove(0);
    let kids = vec![Child::new("kid", json!(1)), Child::new("kid", json!(2))];
    wf.finish(&[(p.reference(), Outcome::spawn(kids, "joined", Join::All))])
        .await
        .unwrap();
    let kids = wf.claim("pq", 2, "w", LEASE).await.unwrap();
    common::drain(&mut notices);
    let t = Instant::now();
    client
        .query_one(
            "SELECT applied FROM pgferry.wf_finish($1)",
            &[&apply(kids[0].id, kids[0].seq, Outcome::done(json!(1)))],
        )
        .await
        .unwrap();
    let child_done_time = t.elapsed();
    checked(&mut notices);
    client
        .query_one(
            "SELECT applied FROM pgferry.wf_finish($1)",
            &[&apply(kids[1].id, kids[1].seq, Outcome::done(json!(2)))],
        )
        .await
        .unwrap();
    let plans = checked(&mut notices);
    assert!(plans
        .iter()
        .any(|p| p.contains("wf_emit") || p.contains("wf_ready")));
    let parent = wf.get(p.id).await.unwrap();
    assert_eq!(
        parent.status, "runnable",
        "the last child's done resumed the parent"
    );

    wf.start(&Start::new("k", "sq", json!({}))).await.unwrap();
    let a = wf.claim("sq", 1, "w", LEASE).await.unwrap().remove(0);
    wf.finish(&[(a.reference(), Outcome::await_signals(&["go"], "went", None))])
        .await
        .unwrap();
    common::drain(&mut notices);
    let t = Instant::now();
    let r = client
        .query_one(
            "SELECT delivered FROM pgferry.wf_signal($1, NULL, NULL, 'go', '1')",
            &[&a.id],
        )
        .await
        .unwrap();
    let signal_time = t.elapsed();
    assert!(r.get::<_, bool>(0));
    checked(&mut notices);

    let mut st = Start::new("k", "q", json!({}));
    st.correlation_key = Some("order-1".into());
    for dup in [false, true] {
        common::drain(&mut notices);
        let got = Workflows::start_tx(&client, &st).await.unwrap();
        assert_eq!(got.duplicate, dup);
        checked(&mut notices);
    }
    // A start on the hot key (1.5k instances, its slot held) with cancel_in_progress: the
    // oldest holder is found through wf_instances_key and cancelled (its slot passes to the
    // oldest waiter, which the next turn cancels too, until the new start holds the slot),
    // and a cancel_newest start on a full key: neither walks the key's instances.
    let mut hot = Start::new("k", "q", json!({}));
    hot.concurrency_key = Some("hot".into());
    hot.concurrency_strategy = Some(pgferry_core::workflow::ConcurrencyStrategy::CancelNewest);
    common::drain(&mut notices);
    let newest = Workflows::start_tx(&client, &hot).await.unwrap();
    checked(&mut notices);
    assert_eq!(wf.get(newest.id).await.unwrap().status, "cancelled");
    hot.concurrency_strategy = Some(pgferry_core::workflow::ConcurrencyStrategy::CancelInProgress);
    common::drain(&mut notices);
    let newer = Workflows::start_tx(&client, &hot).await.unwrap();
    let plans = checked(&mut notices);
    assert_eq!(wf.get(newer.id).await.unwrap().status, "runnable");
    assert_eq!(wf.get(98001).await.unwrap().status, "cancelled");
    assert!(
        plans.iter().any(|p| p.contains("wf_instances_key")),
        "the holder lookup uses wf_instances_key:\n{}",
        plans.join("\n")
    );
    // Retention (off the hot path): 70k ended an hour ago, none due under a day's
    // retention; one queue's own retention of a minute removes a batch of them. The
    // instances are found through wf_instances_finished, never by a Seq Scan. (Their
    // signals and history rows are deleted by instance id; on this small seed the
    // planner rightly reads the 5k signals whole, so those are not checked here.)
    let retention = pgferry_core::workflow::retention::prune;
    for (queue_retention, removed) in [(None, 0), (Some(Duration::from_secs(60)), 500)] {
        if let Some(r) = queue_retention {
            wf.set_retention("q", Some(r)).await.unwrap();
        }
        common::drain(&mut notices);
        assert_eq!(
            retention(&client, Duration::from_secs(86400), 500)
                .await
                .unwrap(),
            removed
        );
        let plans = common::drain(&mut notices);
        let prune = plans
            .iter()
            .find(|p| p.contains("wf_queue_retention"))
            .expect("the prune's plan");
        assert!(
            prune.contains("Index Scan using wf_instances_finished"),
            "{prune}"
        );
        assert!(!prune.contains("Seq Scan on wf_instances "), "{prune}");
    }
    // Lease reaping and timer promotion are the picker itself (a leased, sleeping or
    // deadline row comes due): after the hour passes, the same plan picks them.
    admin
        .batch_execute("UPDATE pgferry.wf_ready SET visible_at = now() - interval '1 second' WHERE visible_at > now() + interval '30 minutes'; ANALYZE pgferry.wf_ready;")
        .await
        .unwrap();
    common::drain(&mut notices);
    let rows = client.query(claim_sql, &[]).await.unwrap();
    assert_eq!(rows.len(), 50);
    checked(&mut notices);
    eprintln!(
        "timings (wall, explained connection): picker batch 50 {picker_time:?}, child done with join {child_done_time:?}, deliver signal {signal_time:?}"
    );
}

async fn top_level_calls(admin: &tokio_postgres::Client) -> (i64, Vec<(String, i64)>) {
    let all = common::statements(admin).await;
    (all.iter().map(|(_, c)| c).sum(), all)
}

#[tokio::test]
async fn one_statement_per_claim_and_per_outcome() {
    let s = common::setup().await;
    let admin = s.db.connect().await;
    let wf = Workflows::of(&s.engine);
    wf.register(&[&Machine::new("rich").with_inbox().with_children()])
        .await
        .unwrap();
    // Warm the pool's connections and prepared statements: steady state is counted.
    for _ in 0..3 {
        let id = wf.start(&Start::new("k", "q", json!({}))).await.unwrap().id;
        let c = wf.claim("q", 10, "w", LEASE).await.unwrap();
        wf.finish(&[(c[0].reference(), Outcome::done(json!(id)))])
            .await
            .unwrap();
    }
    let count = |label: &'static str| {
        let admin = &admin;
        async move {
            let (n, all) = top_level_calls(admin).await;
            assert_eq!(n, 1, "{label}: {all:?}");
            common::reset_statements(admin).await;
        }
    };
    for i in 0..50 {
        wf.start(&Start::new("k", "q", json!(i))).await.unwrap();
    }
    common::reset_statements(&admin).await;
    wf.start(&Start::new("k", "q", json!(50))).await.unwrap();
    count("start").await;
    let batch = wf.claim("q", 51, "w", LEASE).await.unwrap();
    assert_eq!(batch.len(), 51);
    count("claim of 51").await;
    // A plain `next` for the whole batch: one statement, and the next claim loads nothing
    // more (the claim is still one statement).
    let outs: Vec<_> = batch
        .iter()
        .map(|c| (c.reference(), Outcome::next("two", json!({}))))
        .collect();
    assert!(wf.finish(&outs).await.unwrap().iter().all(|a| *a));
    count("finish of 51 next").await;
    let batch = wf.claim("q", 51, "w", LEASE).await.unwrap();
    assert_eq!(batch.len(), 51);
    count("claim after next").await;
    let kinds = [
        Outcome::retry(Duration::ZERO, "r"),
        Outcome::sleep_for(Duration::from_secs(60), "s"),
        Outcome::await_signals(&["go"], "a", None),
        Outcome::spawn(vec![Child::new("kid", json!(1)); 3], "j", Join::All),
        Outcome::done(json!(1)),
        Outcome::fail("f"),
    ];
    for (i, o) in kinds.iter().enumerate() {
        wf.finish(&[(batch[i].reference(), o.clone())])
            .await
            .unwrap();
        count("one outcome").await;
    }
    let awaiting = batch[2].id;
    wf.signal(&Target::Id(awaiting), "go", &json!(1))
        .await
        .unwrap();
    count("signal").await;
    wf.cancel(batch[3].id, None).await.unwrap();
    count("cancel with its children").await;
    // A rich machine's resumed step: inbox and children come with the same claim statement.
    let id = wf
        .start(&Start::new("rich", "r", json!({})))
        .await
        .unwrap()
        .id;
    let c = wf.claim("r", 1, "w", LEASE).await.unwrap();
    wf.finish(&[(c[0].reference(), Outcome::await_signals(&["go"], "a", None))])
        .await
        .unwrap();
    wf.signal(&Target::Id(id), "go", &json!("payload"))
        .await
        .unwrap();
    common::reset_statements(&admin).await;
    let c = wf.claim("r", 1, "w", LEASE).await.unwrap();
    assert_eq!(c[0].inbox.as_ref().unwrap()[0].payload, json!("payload"));
    count("claim with inbox").await;
}
