//! `pgferry serve` samples active session history through its leader (at the cadence it
//! was given), and `pgferry ash top|timeline|at` read it back.

mod common;

use std::time::Duration;

use common::{http, pgferry, run, Proc, STOP_TIMEOUT};
use serde_json::{json, Value};

fn ash(url: &str, args: &[&str]) -> Proc {
    let mut cmd = pgferry();
    cmd.arg("ash").args(args).args(["--database-url", url]);
    run(cmd)
}

fn ash_json(url: &str, args: &[&str]) -> Value {
    let p = ash(url, args);
    assert!(p.status().success(), "{}", p.diag());
    serde_json::from_str(&p.stdout()).unwrap_or_else(|e| panic!("{e}\n{}", p.diag()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_samples_and_the_cli_reads() {
    let db = pgferry_testkit::test_db().await;
    let url = db.url();
    let mut server = Proc::spawn({
        let mut cmd = pgferry();
        cmd.args(["serve", "--database-url", &url])
            .args(["--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"])
            .args(["--ash-interval-ms", "200", "--ash-databases", &db.name]);
        cmd
    });
    server.wait_listening();

    // A lock wait to be seen: one session holds the table, another queues on it.
    let control = db.connect().await;
    control
        .batch_execute("CREATE TABLE t (id int)")
        .await
        .unwrap();
    let holder = db.connect().await;
    holder
        .batch_execute("BEGIN; LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let waiter = db.connect().await;
    let waiting = tokio::spawn(async move { waiter.query("SELECT count(*) FROM t", &[]).await });

    // The schema was migrated by serve and the leader samples every 200 ms.
    let mut seen = 0i64;
    for _ in 0..400 {
        seen = control
            .query_one(
                "SELECT count(*) FROM pgferry_ash.sample
                 WHERE interval_ms = 200 AND locks IS NOT NULL",
                &[],
            )
            .await
            .map(|r| r.get(0))
            .unwrap_or(0);
        if seen >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        seen >= 3,
        "samples with the lock wait: {seen}\n{}",
        server.diag()
    );

    let top = ash_json(
        &url,
        &["top", "--since", "5m", "--by", "pgferry_role", "--json"],
    );
    let waits = top["waits"].as_array().unwrap();
    assert!(
        waits
            .iter()
            .any(|w| w["wait_type"] == "Lock" && w["wait_event"] == "relation"),
        "{top}"
    );
    assert!(top["cpu_vs_waiting"]["covered_seconds"].as_f64().unwrap() > 0.0);

    let at = ash_json(&url, &["at", "now", "--json"]);
    let chain = at["blocking"].as_array().unwrap();
    assert_eq!(chain.len(), 2, "holder and waiter: {at}");
    assert!(chain.iter().any(|b| b["depth"] == 0), "{at}");

    let chart = ash(
        &url,
        &[
            "timeline", "--since", "2m", "--bucket", "10s", "--vcpus", "2",
        ],
    );
    assert!(chart.status().success(), "{}", chart.diag());
    assert!(chart.stdout().contains("2 vCPUs"), "{}", chart.diag());
    assert!(chart.stdout().contains('█'), "{}", chart.diag());
    assert!(!chart.stdout().contains('\x1b'), "no colour into a pipe");

    // Bad input: a clear error naming the input, exit 1.
    for (args, needle) in [
        (&["top", "--since", "banana"][..], "--since"),
        (&["top", "--by", "colour"][..], "by"),
        (&["timeline", "--bucket", "0s"][..], "bucket"),
    ] {
        let p = ash(&url, args);
        assert_eq!(p.status().code(), Some(1), "{args:?}: {}", p.diag());
        assert!(p.stderr().contains(needle), "{args:?}: {}", p.diag());
    }

    holder.batch_execute("ROLLBACK").await.unwrap();
    waiting.await.unwrap().unwrap();
    server.signal(libc::SIGTERM);
    let status = server.wait(STOP_TIMEOUT);
    assert!(status.success(), "{}", server.diag());
}

fn serve(url: &str, db: &str) -> Proc {
    let mut cmd = pgferry();
    cmd.args(["serve", "--database-url", url])
        .args(["--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"])
        .args(["--ash-interval-ms", "200", "--ash-databases", db]);
    Proc::spawn(cmd)
}

fn cli_json(url: &str, args: &[&str]) -> Value {
    let mut cmd = pgferry();
    cmd.args(args).env("PGFERRY_DATABASE_URL", url);
    let p = run(cmd);
    assert!(p.status().success(), "{}", p.diag());
    serde_json::from_str(p.stdout().trim()).unwrap_or_else(|e| panic!("{e}\n{}", p.diag()))
}

/// Polls `sql` (one bigint) until it reaches `want`; panics after 30 s with the servers' logs.
async fn wait_count(c: &tokio_postgres::Client, sql: &str, want: i64, servers: &[&Proc]) {
    let mut n = 0;
    for _ in 0..600 {
        n = c.query_one(sql, &[]).await.map(|r| r.get(0)).unwrap_or(-1);
        if n >= want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let logs: Vec<String> = servers.iter().map(|p| p.diag()).collect();
    panic!("{sql}: {n}, wanted {want}\n{}", logs.join("\n"));
}

/// Two real servers on one database: the non-leader publishes what its backends serve, so
/// the leader's samples attribute the non-leader's enqueue — blocked on a real lock — to its
/// queue and job kind; a killed server's snapshot is pruned, a stopped one's removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_leaders_backends_carry_their_queue() {
    let db = pgferry_testkit::test_db().await;
    let url = db.url();
    cli_json(&url, &["migrate", "up"]);
    let tenant = cli_json(&url, &["tenant", "create", "acme"]);
    let tenant_id = tenant["tenant_id"]
        .as_i64()
        .unwrap_or_else(|| panic!("{tenant}"));
    let key = cli_json(
        &url,
        &[
            "key",
            "create",
            "--tenant",
            "acme",
            "--scopes",
            "produce,read",
        ],
    )["key"]
        .as_str()
        .unwrap()
        .to_string();
    let control = db.connect().await;

    // A leads (it samples); B, started after, does not.
    let mut a = serve(&url, &db.name);
    a.wait_listening();
    wait_count(
        &control,
        "SELECT count(*) FROM pgferry_ash.sample",
        2,
        &[&a],
    )
    .await;
    let mut b = serve(&url, &db.name);
    let b_url = b.wait_listening();
    let client = http();
    let enqueue = |client: reqwest::Client, url: String, key: String| async move {
        client
            .post(format!("{url}/v1/jobs"))
            .bearer_auth(&key)
            .json(&json!({"queue": "mail", "kind": "send_welcome", "args": {}}))
            .send()
            .await
            .map(|r| r.status().as_u16())
    };
    // Creates the queue's lanes and warms B's caches.
    assert_eq!(
        enqueue(client.clone(), b_url.clone(), key.clone())
            .await
            .unwrap(),
        201
    );

    // An outside session holds the ready log; B's next enqueue waits behind it.
    let holder = db.connect().await;
    holder
        .batch_execute("BEGIN; LOCK TABLE pgferry.ready IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let blocked = tokio::spawn(enqueue(client.clone(), b_url.clone(), key.clone()));
    let queue = format!("t{tenant_id}.mail");
    wait_count(
        &control,
        &format!(
            "SELECT count(*) FROM pgferry_ash.sample s, pgferry_ash.decode(s.data) d
             JOIN pgferry_ash.combo_named n ON n.combo = d.combo
             WHERE n.queue = '{queue}' AND n.job_kind = 'send_welcome'
               AND n.pgferry_role = 'enqueuer' AND n.wait_type = 'Lock'"
        ),
        3,
        &[&a, &b],
    )
    .await;
    // It is B's backend, known to the leader only through what B published.
    let b_server = format!("pid{}-%", b.pid());
    let published: i64 = control
        .query_one(
            "SELECT count(*) FROM pgferry_ash.published p, pg_stat_activity a
             WHERE p.server LIKE $1 AND a.pid = ANY (p.pids) AND a.wait_event_type = 'Lock'",
            &[&b_server],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(published, 1, "{}", b.diag());
    // The CLI reads it back by queue.
    let top = ash_json(&url, &["top", "--since", "5m", "--by", "queue", "--json"]);
    assert!(top.to_string().contains(&queue), "{top}");

    holder.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(blocked.await.unwrap().unwrap(), 201);

    // Killed: its snapshot outlives it until the leader's sampler prunes it (TTL 10 s).
    b.signal(libc::SIGKILL);
    b.wait(STOP_TIMEOUT);
    wait_count(
        &control,
        &format!(
            "SELECT (count(*) = 0)::int::int8 FROM pgferry_ash.published WHERE server LIKE '{b_server}'"
        ),
        1,
        &[&a],
    )
    .await;
    // Stopped cleanly: its row is removed at once.
    let a_server = format!("pid{}-%", a.pid());
    wait_count(
        &control,
        &format!("SELECT count(*) FROM pgferry_ash.published WHERE server LIKE '{a_server}'"),
        1,
        &[&a],
    )
    .await;
    a.signal(libc::SIGTERM);
    assert!(a.wait(STOP_TIMEOUT).success(), "{}", a.diag());
    let left: i64 = control
        .query_one(
            "SELECT count(*) FROM pgferry_ash.published WHERE server LIKE $1",
            &[&a_server],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}
