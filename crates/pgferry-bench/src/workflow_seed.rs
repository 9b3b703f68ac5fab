//! The hot workflow statements on gen_durable's dataset shape, at full size: 1,000,000
//! instances (700k ended; 295k runnable, of which 80k on distinct concurrency keys and 15k
//! on one hot key; 5k running) and 50k signals, plus 20k sleeping. Each statement runs
//! inside a transaction that is rolled back, so every repetition sees the same data; the
//! figures are the statement's round trip on a local socket (mean and p50 of `REPS`).

use std::time::Instant;

use serde_json::{json, Value};
use tokio_postgres::Client;

const REPS: usize = 30;

const SEED: &str = "
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, active, finished_at, result)
SELECT g, 'k', 'q', 'end', 'done', false, now() - interval '1 hour', '1'
  FROM generate_series(1, 700000) g;
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status)
SELECT g, 'k', 'q', 'start', 'runnable' FROM generate_series(700001, 900000) g;
INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
SELECT g, 'q', 0, now() - interval '1 hour' + g * interval '1 microsecond'
  FROM generate_series(700001, 900000) g;
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, concurrency_key, has_slot)
SELECT g, 'k', 'q', 'start', 'runnable', 'key-' || g, true FROM generate_series(900001, 980000) g;
INSERT INTO pgferry.wf_keys (key, max, running)
SELECT 'key-' || g, 1, 1 FROM generate_series(900001, 980000) g;
INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
SELECT g, 'q', 0, now() - interval '1 hour' + g * interval '1 microsecond'
  FROM generate_series(900001, 980000) g;
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, concurrency_key, has_slot)
SELECT g, 'k', 'q', 'start', CASE WHEN g = 980001 THEN 'running' ELSE 'queued' END, 'hot',
       g = 980001
  FROM generate_series(980001, 995000) g;
INSERT INTO pgferry.wf_keys (key, max, running) VALUES ('hot', 1, 1);
INSERT INTO pgferry.wf_key_waiters (key, instance_id)
SELECT 'hot', g FROM generate_series(980002, 995000) g;
INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
VALUES (980001, 'q', 0, now() + interval '1 hour');
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, step_seq)
SELECT g, 'k', 'q', 'start', 'running', 1 FROM generate_series(995001, 1000000) g;
INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
SELECT g, 'q', 0, now() + interval '1 hour' FROM generate_series(995001, 1000000) g;
INSERT INTO pgferry.wf_signals (instance_id, name, payload)
SELECT 995001 + g % 5000, 'n' || g % 5, '{}' FROM generate_series(1, 50000) g;
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status)
SELECT g, 'k', 'q', 'later', 'sleeping' FROM generate_series(1000001, 1020000) g;
INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
SELECT g, 'q', 0, now() + interval '1 hour' FROM generate_series(1000001, 1020000) g;
-- A parent waiting for two children, one of them running: its `done` is the join.
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, step_seq, join_mode, join_gen,
                                  children_pending, child_failure)
VALUES (1020001, 'k', 'q', 'joined', 'waiting_children', 1, 'all', 1, 1, 'fail_parent');
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, step_seq, parent_id, parent_gen)
VALUES (1020002, 'k', 'q', 'start', 'running', 1, 1020001, 1),
       (1020003, 'k', 'q', 'start', 'done', 1, 1020001, 1);
UPDATE pgferry.wf_instances SET active = false WHERE id = 1020003;
INSERT INTO pgferry.wf_ready (instance_id, queue, priority, visible_at)
VALUES (1020002, 'q', 0, now() + interval '1 hour');
-- An instance awaiting 'go'.
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, step_seq, awaits, await_gen)
VALUES (1020004, 'k', 'q', 'went', 'awaiting', 1, '{go}', 1);
INSERT INTO pgferry.wf_instances (id, kind, queue, step, status, correlation_key)
VALUES (1020005, 'k', 'q', 'start', 'runnable', 'order-1');
SELECT setval('pgferry.wf_instance_ids', 2000000);
";

/// The statements measured, each run in a rolled-back transaction.
const STATEMENTS: [(&str, &str); 6] = [
    ("picker_batch_50", "SELECT count(*) FROM pgferry.wf_claim('q', 50, 'w', 30000)"),
    ("picker_batch_1", "SELECT count(*) FROM pgferry.wf_claim('q', 1, 'w', 30000)"),
    (
        "child_done_with_parent_join",
        "SELECT applied FROM pgferry.wf_finish('[{\"id\": 1020002, \"seq\": 1, \"outcome\": \"done\", \"result\": 1}]')",
    ),
    (
        "next_outcome",
        "SELECT applied FROM pgferry.wf_finish('[{\"id\": 995001, \"seq\": 1, \"outcome\": \"next\", \"step\": \"two\"}]')",
    ),
    (
        "deliver_signal",
        "SELECT delivered FROM pgferry.wf_signal(1020004, NULL, NULL, 'go', '1')",
    ),
    (
        "start_correlation_duplicate",
        "SELECT duplicate FROM pgferry.wf_start('k', 'q', 'start', '{}', NULL, 'order-1', NULL, NULL, NULL, 0::smallint, NULL, NULL)",
    ),
];

/// Seeds the dataset into a migrated database and times each hot statement.
pub async fn run(c: &Client) -> anyhow::Result<Value> {
    let t = Instant::now();
    c.batch_execute(SEED).await?;
    // Its own call: a multi-statement string is one transaction, which VACUUM refuses.
    c.batch_execute("VACUUM ANALYZE").await?;
    let seeded_s = t.elapsed().as_secs_f64();
    let mut out = serde_json::Map::new();
    for (name, sql) in STATEMENTS {
        let mut ms = Vec::with_capacity(REPS);
        for _ in 0..REPS {
            c.batch_execute("BEGIN").await?;
            let t = Instant::now();
            c.query(sql, &[]).await?;
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
            c.batch_execute("ROLLBACK").await?;
        }
        ms.sort_by(|a, b| a.total_cmp(b));
        let mean = ms.iter().sum::<f64>() / ms.len() as f64;
        out.insert(
            name.into(),
            json!({"mean_ms": mean, "p50_ms": ms[ms.len() / 2], "max_ms": ms[ms.len() - 1]}),
        );
    }
    Ok(json!({"instances": 1_020_005, "signals": 50_000, "seed_s": seeded_s, "statements": out}))
}
