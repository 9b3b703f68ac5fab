//! End-to-end tests of `pgferry dev`: the real binary on a private cluster in a temp dir.

mod common;

use common::{
    assert_healthy_and_ready, dev, http, pgferry, run, DataDir, Proc, COMMAND_TIMEOUT,
    START_TIMEOUT, STOP_TIMEOUT,
};
use std::time::{Duration, Instant};

/// After a clean stop: exit 0, the final line printed, no process left on the dir and
/// no postmaster.pid (postgres removes it itself on a clean shutdown).
fn assert_stopped_cleanly(proc: &mut Proc, dir: &DataDir) {
    let status = proc.wait(STOP_TIMEOUT);
    assert!(status.success(), "exit status {status}\n{}", proc.diag());
    assert!(
        proc.stdout().lines().any(|l| l == "pgferry: stopped"),
        "no 'pgferry: stopped' line\n{}",
        proc.diag()
    );
    dir.assert_nothing_running(Duration::from_secs(10));
    assert!(
        !dir.pg().join("postmaster.pid").exists(),
        "postmaster.pid left behind\n{}\n--- server.log ---\n{}",
        proc.diag(),
        dir.server_log_tail()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_serves_and_stops_cleanly_on_sigint() {
    let dir = DataDir::new();
    let mut proc = Proc::spawn(dev(&dir));
    let base = proc.wait_listening();
    let client = http();
    assert_healthy_and_ready(&client, &base).await;
    // The leftover scan used after the stop must see the running postmaster (else
    // "nothing left running" would prove nothing).
    let postmaster = dir.postmaster_pid().expect("postmaster.pid while running");
    let running = dir.processes();
    assert!(
        running.iter().any(|(pid, _)| *pid == postmaster),
        "postmaster {postmaster} not among processes on the dir: {running:#?}"
    );
    // `client` keeps its idle keep-alive connection open across the shutdown: an idle
    // browser connection must not keep the server from stopping.
    proc.signal(libc::SIGINT);
    assert_stopped_cleanly(&mut proc, &dir);
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_restart_reuses_the_data_dir() {
    let dir = DataDir::new();

    let mut first = Proc::spawn(dev(&dir));
    let base = first.wait_listening();
    let client = http();
    assert_healthy_and_ready(&client, &base).await;
    let ledger_before = {
        let db = dir.connect("pgferry").await;
        db.batch_execute(
            "CREATE TABLE cli_e2e_marker (note text);
             INSERT INTO cli_e2e_marker VALUES ('survives restarts')",
        )
        .await
        .expect("creating the marker table");
        migration_ledger(&db).await
    };
    first.signal(libc::SIGINT);
    assert_stopped_cleanly(&mut first, &dir);

    let mut second = Proc::spawn(dev(&dir));
    let base = second.wait_listening();
    assert_healthy_and_ready(&client, &base).await;
    {
        let db = dir.connect("pgferry").await;
        let note: String = db
            .query_one("SELECT note FROM cli_e2e_marker", &[])
            .await
            .expect("the marker table must survive a restart")
            .get(0);
        assert_eq!(note, "survives restarts");
        // The restart applied nothing again: the ledger is unchanged.
        assert_eq!(migration_ledger(&db).await, ledger_before);
    }
    second.signal(libc::SIGTERM);
    assert_stopped_cleanly(&mut second, &dir);
}

/// Applied migrations with their timestamps, as text.
async fn migration_ledger(db: &tokio_postgres::Client) -> Vec<String> {
    db.query(
        "SELECT format('%s %s %s', version, name, applied_at)
         FROM pgferry.schema_migrations ORDER BY version",
        &[],
    )
    .await
    .expect("reading the migration ledger")
    .iter()
    .map(|row| row.get(0))
    .collect()
}

#[test]
fn dev_without_postgres_binaries_explains_what_to_install() {
    let dir = DataDir::new();
    let mut cmd = dev(&dir);
    cmd.env("PGFERRY_PG_BINDIR", "/nonexistent");
    let proc = run(cmd);
    let status = proc.status();
    assert!(!status.success(), "must fail\n{}", proc.diag());
    let stderr = proc.stderr();
    assert!(
        stderr.contains("apt-get install postgresql"),
        "no install hint\n{}",
        proc.diag()
    );
    assert!(
        stderr.contains("PGFERRY_PG_BINDIR") && stderr.contains("/nonexistent"),
        "the message should name the override and where it looked\n{}",
        proc.diag()
    );
    assert_eq!(
        stderr.matches("apt-get install postgresql").count(),
        1,
        "one message, not several\n{}",
        proc.diag()
    );
    assert!(
        !proc.stdout().contains("listening"),
        "must not serve\n{}",
        proc.diag()
    );
    dir.assert_nothing_running(Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_recovers_from_an_orphaned_postmaster_after_a_crash() {
    let dir = DataDir::new();

    let mut crashed = Proc::spawn(dev(&dir));
    let base = crashed.wait_listening();
    let client = http();
    assert_healthy_and_ready(&client, &base).await;
    let orphan = dir.postmaster_pid().expect("postmaster.pid while running");
    crashed.signal(libc::SIGKILL);
    let status = crashed.wait(COMMAND_TIMEOUT);
    assert!(!status.success(), "SIGKILL must kill it: {status}");
    // The postmaster runs in its own process group, so it survives its parent.
    assert!(
        common::process_alive(orphan),
        "expected the postmaster {orphan} to be orphaned, not gone"
    );

    let mut restarted = Proc::spawn(dev(&dir));
    let base = restarted.wait_listening();
    assert_healthy_and_ready(&client, &base).await;
    assert!(
        !common::process_alive(orphan),
        "the orphaned postmaster {orphan} must have been stopped\n{}",
        restarted.diag()
    );
    let current = dir.postmaster_pid().expect("postmaster.pid while running");
    assert_ne!(current, orphan, "a new postmaster serves the dir");
    restarted.signal(libc::SIGINT);
    assert_stopped_cleanly(&mut restarted, &dir);
}

/// Ctrl-C while `dev` is still starting (cluster up, not yet serving) must still stop
/// postgres: the signal may not kill pgferry before it has stopped its cluster.
#[test]
fn dev_interrupted_during_startup_stops_postgres() {
    let dir = DataDir::new();
    let mut proc = Proc::spawn(dev(&dir));
    // Interrupt as soon as postgres has written its pid file, i.e. during startup.
    let deadline = Instant::now() + START_TIMEOUT;
    while dir.postmaster_pid().is_none() {
        assert!(
            proc.try_status().is_none(),
            "exited during startup\n{}",
            proc.diag()
        );
        assert!(
            Instant::now() < deadline,
            "postgres never started\n{}",
            proc.diag()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    proc.signal(libc::SIGINT);
    if proc.stdout().contains("pgferry: listening") {
        // Not a failure, but this run did not cover what the test is about.
        eprintln!("note: startup had already finished when SIGINT was sent");
    }
    assert_stopped_cleanly(&mut proc, &dir);
}

#[test]
fn help_lists_the_commands() {
    let proc = run({
        let mut cmd = pgferry();
        cmd.arg("--help");
        cmd
    });
    assert!(proc.status().success(), "{}", proc.diag());
    for word in ["dev", "serve", "migrate"] {
        assert!(proc.stdout().contains(word), "{word}\n{}", proc.diag());
    }
}
