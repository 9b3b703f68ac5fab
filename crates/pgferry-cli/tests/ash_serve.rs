//! `pgferry serve` samples active session history through its leader (at the cadence it
//! was given), and `pgferry ash top|timeline|at` read it back.

mod common;

use std::time::Duration;

use common::{pgferry, run, Proc, STOP_TIMEOUT};
use serde_json::Value;

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
