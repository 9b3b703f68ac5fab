//! CPU per workflow outcome with the batch sent as one JSON array of objects, as the engine
//! sent it before "Outcomes in arrays" (docs/performance.md), against the aligned arrays it
//! sends now (`Workflows::finish_continuing`). The JSON side runs `wf_finish` as it was
//! defined at `--base` (read with `git show`, installed as `pgferry.wf_finish_json`), so the
//! two differ only in the encoding and in what the statement does to read it. The JSON side
//! also does the engine's client work of before (validation that collected each state to
//! measure it, the wire objects), so the client's CPU compares the engine before and after.
//!
//! Each round starts 200 instances of a 3-step machine and claims them on a third
//! connection, then records their outcomes on the measured connection: two continued
//! `next`s and a `done`. Passes alternate (json, arrays, arrays, json, ...). Reported per
//! pass: the measured backend's CPU (`/proc/<pid>/stat`, which counts the Bind's parse of
//! the parameters, unlike `pg_stat_statements`) and this thread's CPU (encoding, decoding,
//! the socket), in µs per outcome.
//!
//!     cargo run --release -p pgferry-bench --example wf_finish_encoding -- --rounds 40 --passes 8

use std::time::{Duration, Instant};

use pgferry_core::workflow::{Outcome, StepRef, Workflows};
use serde_json::{json, Value};

const BATCH: i64 = 200;

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

/// CPU seconds of a process (user + system).
fn proc_cpu_s(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc stat");
    // Fields after the command's closing parenthesis; utime and stime are the 14th and 15th.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// CPU seconds of this thread.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn outcome(k: usize) -> Outcome {
    let state = json!({"k": k, "payload": "0123456789012345678901234567890123456789"});
    match k {
        1 => Outcome::next("two", state),
        2 => Outcome::next("three", state),
        _ => Outcome::done(json!({"ok": true})),
    }
}

async fn backend_pid(c: &tokio_postgres::Client) -> i32 {
    c.query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

/// Starts and claims a batch on `admin`; the claimed steps' references.
async fn started(admin: &tokio_postgres::Client) -> Vec<StepRef> {
    admin
        .execute(
            "SELECT pgferry.wf_start('three', 'enc', 'one', jsonb_build_object('i', g), NULL, NULL,
                                     NULL, NULL, NULL, 0::smallint, NULL, NULL)
               FROM generate_series(1, $1::int) g",
            &[&(BATCH as i32)],
        )
        .await
        .unwrap();
    let rows = admin
        .query(
            "SELECT id, step_seq FROM pgferry.wf_claim('enc', $1, 'w', 60000)",
            &[&(BATCH as i32)],
        )
        .await
        .unwrap();
    assert_eq!(rows.len() as i64, BATCH, "a round claims its whole batch");
    let now = Instant::now();
    rows.iter()
        .map(|r| StepRef {
            id: r.get("id"),
            seq: r.get("step_seq"),
            parent_id: None,
            leased_at: Some(now),
        })
        .collect()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let rounds: usize = arg("--rounds", "40")
        .parse()
        .expect("--rounds takes a number");
    let passes: usize = arg("--passes", "8")
        .parse()
        .expect("--passes takes a number");
    let base = arg("--base", "c5a81a2");
    let old = std::process::Command::new("git")
        .args([
            "show",
            &format!("{base}:crates/pgferry-core/src/sql/functions/wf_finish.sql"),
        ])
        .output()
        .expect("git show");
    assert!(
        old.status.success(),
        "git show {base}: run from the repository"
    );
    let old = String::from_utf8(old.stdout).unwrap().replace(
        "FUNCTION pgferry.wf_finish(",
        "FUNCTION pgferry.wf_finish_json(",
    );
    assert!(
        old.contains("wf_finish_json(p_outcomes jsonb)"),
        "{base}'s wf_finish takes JSON"
    );

    let db = pgferry_testkit::test_db().await;
    let mut admin = db.connect().await;
    pgferry_core::migrate::up(&mut admin)
        .await
        .expect("migrate");
    admin.batch_execute(&old).await.unwrap();
    // Both sides through a pool of one connection and a cached statement, as the engine.
    let json_pool = db.pool(1);
    let json_pid = backend_pid(&json_pool.get().await.unwrap()).await;
    let wf = Workflows::new(db.pool(1));
    let arrays_pid = backend_pid(&wf.pool().get().await.unwrap()).await;
    let lease = Duration::from_secs(60);

    let mut sums = [[0.0f64; 2]; 2];
    for pass in 0..passes {
        // json arrays arrays json ...
        let arrays = matches!(pass % 4, 1 | 2);
        let pid = if arrays { arrays_pid } else { json_pid };
        let (mut own, pg0) = (0.0, proc_cpu_s(pid));
        let mut outcomes = 0usize;
        for _ in 0..rounds {
            let mut refs = started(&admin).await;
            for k in 1..=3 {
                let batch: Vec<(StepRef, Outcome)> =
                    refs.iter().map(|r| (*r, outcome(k))).collect();
                let t = thread_cpu_s();
                let next: Vec<Option<StepRef>> = if arrays {
                    wf.finish_continuing(&batch, lease)
                        .await
                        .unwrap()
                        .into_iter()
                        .map(|f| f.continued.map(|c| c.reference()))
                        .collect()
                } else {
                    // The engine's client work before this change: its validation (the
                    // step's name, the state's size through `serde_json::to_vec`), then
                    // the wire object, and a `next` asks to continue (leases taken just
                    // now are not renewed).
                    let items: Vec<Value> = batch
                        .iter()
                        .map(|(r, o)| {
                            if let Outcome::Next { step, state } = o {
                                assert!(!step.is_empty() && !step.chars().any(char::is_control));
                                let size =
                                    state.as_ref().map(|s| serde_json::to_vec(s).unwrap().len());
                                assert!(size.unwrap_or(0) <= 1 << 20);
                            }
                            let mut item = o.to_wire(r.id, r.seq);
                            if matches!(o, Outcome::Next { .. }) {
                                item["continue_lease_ms"] = Value::from(60_000u64);
                            }
                            item
                        })
                        .collect();
                    let client = json_pool.get().await.unwrap();
                    let stmt = client
                        .prepare_cached(
                            "SELECT id, applied, cont_step_seq FROM pgferry.wf_finish_json($1::jsonb)",
                        )
                        .await
                        .unwrap();
                    let rows = client
                        .query(&stmt, &[&tokio_postgres::types::Json(&items)])
                        .await
                        .unwrap();
                    rows.iter()
                        .map(|r| {
                            r.get::<_, Option<i32>>("cont_step_seq").map(|seq| StepRef {
                                id: r.get("id"),
                                seq,
                                parent_id: None,
                                leased_at: Some(Instant::now()),
                            })
                        })
                        .collect()
                };
                own += thread_cpu_s() - t;
                outcomes += batch.len();
                if k < 3 {
                    refs = next
                        .into_iter()
                        .map(|r| r.expect("a plain next continues"))
                        .collect();
                }
            }
        }
        let pg_us = (proc_cpu_s(pid) - pg0) * 1e6 / outcomes as f64;
        let own_us = own * 1e6 / outcomes as f64;
        sums[arrays as usize][0] += pg_us;
        sums[arrays as usize][1] += own_us;
        println!(
            "{}",
            json!({"pass": pass, "encoding": if arrays { "arrays" } else { "json" },
                   "outcomes": outcomes, "postgres_us_per_outcome": pg_us,
                   "client_us_per_outcome": own_us})
        );
    }
    let n = (passes / 2) as f64;
    println!(
        "{}",
        json!({"mean": {
            "json": {"postgres_us_per_outcome": sums[0][0] / n, "client_us_per_outcome": sums[0][1] / n},
            "arrays": {"postgres_us_per_outcome": sums[1][0] / n, "client_us_per_outcome": sums[1][1] / n},
        }})
    );
}
