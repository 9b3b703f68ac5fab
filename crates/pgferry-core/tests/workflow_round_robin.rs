//! The round_robin concurrency strategy against real Postgres (migration 0019,
//! docs/workflows.md "Concurrency strategies"): keys take turns in the picker, so one key's
//! backlog does not starve the others; a claim with room still fills its batch from a busy
//! key; every key keeps its limit; and a ledger under concurrent workers and cancels.
//! Assertions are on claims and counts, never on time.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use pgferry_core::workflow::{
    ClaimedStep, ConcurrencyStrategy, Machine, Outcome, Start, Worker, WorkerConfig, Workflows,
};
use serde_json::json;

const LEASE: Duration = Duration::from_secs(30);

fn keyed(queue: &str, key: &str, limit: i32, strategy: ConcurrencyStrategy, i: i64) -> Start {
    let mut st = Start::new("k", queue, json!(i));
    st.concurrency_key = Some(key.into());
    st.concurrency_limit = Some(limit);
    st.concurrency_strategy = Some(strategy);
    st
}

/// The concurrency key of each claimed step, in the claim's order.
fn keys_of(claimed: &[ClaimedStep], key_of: &HashMap<i64, String>) -> Vec<String> {
    claimed.iter().map(|c| key_of[&c.id].clone()).collect()
}

/// Starts `hot` backlog instances on one key, then one instance on each of four other
/// keys, all with `strategy`; claims batches of 5 until every small key's step has been
/// claimed. Returns the number of claims that took and each claim's keys.
async fn claims_until_small_keys_served(
    wf: &Workflows,
    queue: &str,
    strategy: ConcurrencyStrategy,
    hot: i64,
) -> (usize, Vec<Vec<String>>) {
    let mut key_of = HashMap::new();
    for i in 0..hot {
        let id = wf
            .start(&keyed(queue, "hot", 1000, strategy, i))
            .await
            .unwrap()
            .id;
        key_of.insert(id, "hot".to_string());
    }
    let mut small: HashSet<String> = HashSet::new();
    for k in 1..=4 {
        let key = format!("small-{k}");
        let id = wf
            .start(&keyed(queue, &key, 1000, strategy, 1000 + k))
            .await
            .unwrap()
            .id;
        key_of.insert(id, key.clone());
        small.insert(key);
    }
    let mut claims = Vec::new();
    while !small.is_empty() {
        let c = wf.claim(queue, 5, "w", LEASE).await.unwrap();
        assert!(!c.is_empty(), "nothing claimed with {small:?} not served");
        let keys = keys_of(&c, &key_of);
        for k in &keys {
            small.remove(k);
        }
        claims.push(keys);
    }
    (claims.len(), claims)
}

/// The starvation round_robin fixes, and its bound. With `queue`, four keys started after
/// a key with 60 due steps (limit 1000) wait behind all 60: 13 claims of 5. With
/// `round_robin`, each key has one step in the picker, so the first claim takes one step of
/// each of the five keys: a key is served within ceil(keys with due steps / batch) claims,
/// whatever the other keys' backlogs. Claims with room then fill from the busy key.
#[tokio::test]
async fn a_starving_key_is_served_within_a_bounded_number_of_claims() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);

    let (n, _) = claims_until_small_keys_served(&wf, "fifo", ConcurrencyStrategy::Queue, 60).await;
    assert_eq!(
        n, 13,
        "queue: the small keys wait behind the hot key's 60 steps"
    );

    let (n, claims) =
        claims_until_small_keys_served(&wf, "rr", ConcurrencyStrategy::RoundRobin, 60).await;
    assert_eq!(n, 1, "round_robin: {claims:?}");
    let mut first = claims[0].clone();
    first.sort();
    assert_eq!(
        first,
        ["hot", "small-1", "small-2", "small-3", "small-4"],
        "one step of each key"
    );
    // Only the hot key is left: a claim with room fills its batch from it (the picker holds
    // one of its steps, the claim serves the rest of the batch from its waiters).
    let mut claimed = 1;
    for _ in 0..11 {
        let c = wf.claim("rr", 5, "w", LEASE).await.unwrap();
        assert_eq!(c.len(), 5);
        claimed += c.len();
    }
    assert_eq!(claimed, 56);
    assert_eq!(wf.claim("rr", 5, "w", LEASE).await.unwrap().len(), 4);
    assert!(wf.claim("rr", 5, "w", LEASE).await.unwrap().is_empty());
}

async fn key_row(client: &tokio_postgres::Client, key: &str) -> (i64, i32, i64) {
    let r = client
        .query_one(
            "SELECT (SELECT count(*) FROM pgferry.wf_instances
                      WHERE concurrency_key = $1 AND has_slot) AS holders,
                    (SELECT running FROM pgferry.wf_keys WHERE key = $1) AS running,
                    (SELECT count(*) FROM pgferry.wf_key_waiters WHERE key = $1) AS waiters",
            &[&key],
        )
        .await
        .unwrap();
    (r.get("holders"), r.get("running"), r.get("waiters"))
}

/// Three busy keys (12 steps each, limit 4) and claims of 3: every claim takes one step of
/// each key until each key has its 4 in flight, then nothing. When one key's steps end,
/// its next steps fill whole claims (the others have no free slot), within its limit.
#[tokio::test]
async fn busy_keys_take_turns_and_keep_their_limits() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let client = s.db.connect().await;
    let mut key_of = HashMap::new();
    // Started key by key: with `queue` the first claims would all be key a's.
    for key in ["a", "b", "c"] {
        for i in 0..12 {
            let id = wf
                .start(&keyed("q", key, 4, ConcurrencyStrategy::RoundRobin, i))
                .await
                .unwrap()
                .id;
            key_of.insert(id, key.to_string());
        }
    }
    let mut held: HashMap<String, Vec<ClaimedStep>> = HashMap::new();
    for round in 0..4 {
        let c = wf.claim("q", 3, "w", LEASE).await.unwrap();
        let mut keys = keys_of(&c, &key_of);
        keys.sort();
        assert_eq!(keys, ["a", "b", "c"], "claim {round}");
        for step in c {
            held.entry(key_of[&step.id].clone()).or_default().push(step);
        }
    }
    assert!(wf.claim("q", 3, "w", LEASE).await.unwrap().is_empty());
    for key in ["a", "b", "c"] {
        assert_eq!(key_row(&client, key).await, (4, 4, 8), "key {key}");
    }
    // Key a's four steps end: its slots go to its waiters, in turn.
    let batch: Vec<_> = held["a"]
        .iter()
        .map(|c| (c.reference(), Outcome::done(json!(1))))
        .collect();
    assert_eq!(wf.finish(&batch).await.unwrap(), [true; 4]);
    let c = wf.claim("q", 3, "w", LEASE).await.unwrap();
    assert_eq!(keys_of(&c, &key_of), ["a", "a", "a"]);
    // Three running and the next one in the picker: its limit.
    assert_eq!(key_row(&client, "a").await, (4, 4, 4));
    let c = wf.claim("q", 3, "w", LEASE).await.unwrap();
    assert_eq!(keys_of(&c, &key_of), ["a"]);
    assert!(wf.claim("q", 3, "w", LEASE).await.unwrap().is_empty());
}

/// A cancelled step that was its key's one step in the picker hands the key's turn to the
/// next waiter; a `next` goes behind the key's waiters; a strategy named on a later start
/// changes the key's.
#[tokio::test]
async fn cancel_and_next_keep_one_step_per_key_in_the_picker() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let client = s.db.connect().await;
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(
            wf.start(&keyed("q", "k", 3, ConcurrencyStrategy::RoundRobin, i))
                .await
                .unwrap()
                .id,
        );
    }
    let status = |id: i64| {
        let wf = wf.clone();
        async move { wf.get(id).await.unwrap().status }
    };
    assert_eq!(status(ids[0]).await, "runnable");
    assert_eq!(status(ids[1]).await, "queued");
    wf.cancel(ids[0], None).await.unwrap();
    assert_eq!(status(ids[1]).await, "runnable");
    assert_eq!(key_row(&client, "k").await, (1, 1, 2));
    // A claim of 1 takes ids[1]; ids[2] becomes the key's step in the picker.
    let c = wf.claim("q", 1, "w", LEASE).await.unwrap();
    assert_eq!(c.iter().map(|c| c.id).collect::<Vec<_>>(), [ids[1]]);
    assert_eq!(status(ids[2]).await, "runnable");
    assert_eq!(key_row(&client, "k").await, (2, 2, 1));
    // Its `next` waits behind ids[3].
    assert_eq!(
        wf.finish(&[(c[0].reference(), Outcome::next("two", json!({})))])
            .await
            .unwrap(),
        [true]
    );
    assert_eq!(status(ids[1]).await, "queued");
    let order: Vec<i64> = client
        .query(
            "SELECT instance_id FROM pgferry.wf_key_waiters WHERE key = 'k' ORDER BY seq",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(order, [ids[3], ids[1]]);
    let c = wf.claim("q", 10, "w", LEASE).await.unwrap();
    let mut got: Vec<i64> = c.iter().map(|c| c.id).collect();
    got.sort();
    assert_eq!(got, [ids[1], ids[2], ids[3]]);
    assert_eq!(key_row(&client, "k").await, (3, 3, 0));
    // A later start naming `queue` switches the key back.
    wf.start(&keyed("q", "k", 3, ConcurrencyStrategy::Queue, 9))
        .await
        .unwrap();
    let strategy: String = client
        .query_one("SELECT strategy FROM pgferry.wf_keys WHERE key = 'k'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(strategy, "queue");
}

const TABLES: [&str; 5] = [
    "wf_instances",
    "wf_ready",
    "wf_key_waiters",
    "wf_keys",
    "wf_steps",
];

/// The claim's round-robin statements on a seeded dataset: a round_robin key with 20,000
/// waiters and its one step in the picker, 2,000 other round_robin keys whose slots are all
/// held (each with a waiter), 5,000 plain steps sleeping. A claim of 50 takes the key's step
/// and fills its batch from the key's waiters: index scans only, and the waiters' scan stops
/// at the batch.
#[tokio::test]
async fn the_round_robin_claim_reads_no_more_than_its_batch() {
    let s = common::setup().await;
    let admin = s.db.connect().await;
    admin
        .batch_execute(
            "
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, concurrency_key, has_slot)
SELECT g, 'k', 'q', 'start', CASE WHEN g = 1 THEN 'runnable' ELSE 'queued' END, 'hot', g = 1
  FROM generate_series(1, 20001) g;
INSERT INTO pgferry.wf_keys (key, max, running, strategy, rep) VALUES ('hot', 100000, 1, 'round_robin', 1);
INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at) VALUES (1, 'q', 0, now() - interval '1 minute');
INSERT INTO pgferry.wf_key_waiters (key, instance_id) SELECT 'hot', g FROM generate_series(2, 20001) g;
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, concurrency_key, has_slot)
SELECT g, 'k', 'q', 'start', CASE WHEN g % 2 = 0 THEN 'running' ELSE 'queued' END,
       'key-' || (g / 2), g % 2 = 0
  FROM generate_series(30000, 33999) g;
INSERT INTO pgferry.wf_keys (key, max, running, strategy)
SELECT 'key-' || g, 1, 1, 'round_robin' FROM generate_series(15000, 16999) g;
INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
SELECT g, 'q', 0, now() + interval '1 hour' FROM generate_series(30000, 33999, 2) g;
INSERT INTO pgferry.wf_key_waiters (key, instance_id)
SELECT 'key-' || (g / 2), g FROM generate_series(30001, 33999, 2) g;
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status)
SELECT g, 'k', 'q', 'later', 'sleeping' FROM generate_series(40000, 44999) g;
INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
SELECT g, 'q', 0, now() + interval '1 hour' FROM generate_series(40000, 44999) g;
SELECT setval('pgferry.wf_instance_ids', 100000);
ANALYZE;
",
        )
        .await
        .unwrap();
    let (client, mut notices) = common::connect_with_notices(&s.db).await;
    common::enable_auto_explain(&client).await;
    common::drain(&mut notices);
    let rows = client
        .query("SELECT * FROM pgferry.wf_claim('q', 50, 'w', 30000)", &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), 50);
    let plans = common::drain(&mut notices);
    for p in &plans {
        for line in p.lines() {
            for t in TABLES {
                assert!(
                    !line.contains(&format!("Seq Scan on {t} ")),
                    "Seq Scan on {t}:\n{p}"
                );
            }
        }
    }
    let top_up = plans
        .iter()
        .find(|p| p.contains("least(v_share"))
        .unwrap_or_else(|| panic!("no top-up plan in {plans:#?}"));
    let line = top_up
        .lines()
        .find(|l| l.contains("on wf_key_waiters"))
        .unwrap_or_else(|| panic!("no waiters scan in {top_up}"));
    let rows_read: u64 = line[line.find("actual rows=").unwrap() + 12..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap();
    assert!(
        rows_read <= 50,
        "the top-up read {rows_read} waiters:\n{top_up}"
    );
    let (running, rep): (i32, Option<i64>) = {
        let r = admin
            .query_one(
                "SELECT running, rep FROM pgferry.wf_keys WHERE key = 'hot'",
                &[],
            )
            .await
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(
        (running, rep),
        (51, Some(51)),
        "50 claimed and the next in the picker"
    );
}

/// Ledger under concurrency: 3 workers run 8 round_robin keys (limit 2) of 3-step
/// instances while a task cancels some of them. Every instance ends done or cancelled, no
/// step's outcome is applied twice, a key never holds more than its limit of slots, and
/// every key ends with no slot held, no waiter and no step in the picker.
#[tokio::test]
async fn round_robin_ledger_under_concurrent_workers_and_cancels() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let client = s.db.connect().await;
    let step = |next: Option<&'static str>| {
        move |_s: ClaimedStep| async move {
            tokio::time::sleep(Duration::from_millis(2)).await;
            match next {
                Some(n) => Outcome::next(n, json!({})),
                None => Outcome::done(json!(1)),
            }
        }
    };
    let machine = Machine::new("k")
        .step("start", step(Some("two")))
        .step("two", step(Some("three")))
        .step("three", step(None));
    let mut ids = Vec::new();
    for i in 0..160i64 {
        let key = format!("key-{}", i % 8);
        let mut st = Start::new("k", "q", json!({ "key": key }));
        st.concurrency_key = Some(key);
        st.concurrency_limit = Some(2);
        st.concurrency_strategy = Some(ConcurrencyStrategy::RoundRobin);
        ids.push(wf.start(&st).await.unwrap().id);
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut runs = Vec::new();
    for w in 0..3 {
        let mut cfg = WorkerConfig::new("q");
        cfg.name = format!("w{w}");
        cfg.batch = 5;
        let worker = Worker::new(wf.clone(), cfg).machine(machine.clone());
        runs.push(tokio::spawn(worker.run(stop_rx.clone())));
    }
    // The most slots any key held at once, and the most its count said.
    let watcher = {
        let client = s.db.connect().await;
        let stop = stop_rx.clone();
        tokio::spawn(async move {
            let mut max = (0i64, 0i32);
            while !*stop.borrow() {
                let r = client
                    .query_one(
                        "SELECT coalesce(max(n), 0) AS holders,
                                (SELECT coalesce(max(running), 0) FROM pgferry.wf_keys) AS running
                           FROM (SELECT count(*) AS n FROM pgferry.wf_instances
                                  WHERE has_slot GROUP BY concurrency_key) h",
                        &[],
                    )
                    .await
                    .unwrap();
                max.0 = max.0.max(r.get("holders"));
                max.1 = max.1.max(r.get("running"));
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            max
        })
    };
    let mut cancelled = HashSet::new();
    for id in ids.iter().step_by(7) {
        wf.cancel(*id, None).await.unwrap();
        cancelled.insert(*id);
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    for id in &ids {
        for _ in 0..4000 {
            let st = wf.get(*id).await.unwrap().status;
            if ["done", "failed", "cancelled"].contains(&st.as_str()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let _ = stop_tx.send(true);
    for r in runs {
        r.await.unwrap().unwrap();
    }
    let (holders, running) = watcher.await.unwrap();
    assert!(holders <= 2, "{holders} slots of a key with limit 2 held");
    assert!(running <= 2, "a key with limit 2 counted {running}");
    for id in &ids {
        let info = wf.get(*id).await.unwrap();
        let applied: Vec<_> = info
            .history
            .iter()
            .filter(|h| h.outcome != "cancelled")
            .map(|h| h.step_seq)
            .collect();
        let unique: HashSet<_> = applied.iter().collect();
        assert_eq!(
            unique.len(),
            applied.len(),
            "an outcome applied twice: {info:?}"
        );
        if info.status == "cancelled" {
            assert!(cancelled.contains(id), "{info:?}");
        } else {
            assert_eq!(info.status, "done", "{info:?}");
            assert_eq!(applied.len(), 3, "{info:?}");
        }
    }
    let rows = client
        .query(
            "SELECT key, running, rep,
                    (SELECT count(*) FROM pgferry.wf_key_waiters w WHERE w.key = k.key) AS waiters
               FROM pgferry.wf_keys k",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 8);
    for r in rows {
        let key: String = r.get("key");
        assert_eq!(r.get::<_, i32>("running"), 0, "{key}");
        assert_eq!(r.get::<_, Option<i64>>("rep"), None, "{key}");
        assert_eq!(r.get::<_, i64>("waiters"), 0, "{key}");
    }
}

/// A slot given back while a signal holds the key's only waiter is not lost. wf_signal
/// locks the instance it signals; a waiter locked by someone else is skipped by the slot's
/// hand-over (it never waits), so the slot went free and the waiter waited for good (no
/// holder left to give a slot back). The signal now passes such a slot on before it
/// commits. Both strategies, the lock taken first and the outcome committed in between.
#[tokio::test]
async fn a_slot_given_back_while_a_signal_holds_the_only_waiter_is_passed_on() {
    let s = common::setup().await;
    let wf = Workflows::of(&s.engine);
    let mut signaller = s.db.connect().await;
    let admin = s.db.connect().await;
    for strategy in [ConcurrencyStrategy::Queue, ConcurrencyStrategy::RoundRobin] {
        let key = format!("sig-{}", strategy.as_str());
        let holder = wf
            .start(&keyed("q", &key, 1, strategy, 0))
            .await
            .unwrap()
            .id;
        let waiter = wf
            .start(&keyed("q", &key, 1, strategy, 1))
            .await
            .unwrap()
            .id;
        let c = wf.claim("q", 10, "w", LEASE).await.unwrap();
        assert_eq!(c.iter().map(|c| c.id).collect::<Vec<_>>(), [holder]);
        assert_eq!(wf.get(waiter).await.unwrap().status, "queued");
        let tx = signaller.transaction().await.unwrap();
        // What wf_signal's first statement does: lock the signalled instance.
        tx.execute(
            "SELECT 1 FROM pgferry.wf_instances WHERE id = $1 FOR UPDATE",
            &[&waiter],
        )
        .await
        .unwrap();
        // The holder ends meanwhile: its slot's hand-over skips the locked waiter.
        assert_eq!(
            wf.finish(&[(c[0].reference(), Outcome::done(json!(1)))])
                .await
                .unwrap(),
            [true]
        );
        tx.query(
            "SELECT * FROM pgferry.wf_signal($1, NULL, NULL, 'poke', '{}'::jsonb)",
            &[&waiter],
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(
            wf.get(waiter).await.unwrap().status,
            "runnable",
            "{strategy:?}: the waiter got the slot"
        );
        assert_eq!(key_row(&admin, &key).await, (1, 1, 0), "{strategy:?}");
        let c = wf.claim("q", 10, "w", LEASE).await.unwrap();
        assert_eq!(c.iter().map(|c| c.id).collect::<Vec<_>>(), [waiter]);
    }
}
