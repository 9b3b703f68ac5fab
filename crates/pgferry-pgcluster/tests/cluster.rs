//! End-to-end tests against the real PostgreSQL server binaries on this machine.
//!
//! Crash scenarios re-run this test binary as a child (`helper_crash_with_cluster`)
//! which starts a cluster and then aborts, so that no destructor runs.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pgferry_pgcluster::{find_binaries, Cluster, ClusterError, ClusterOptions};

const HELPER_DIR_ENV: &str = "PGFERRY_TEST_HELPER_DIR";
const HELPER_REAPER_ENV: &str = "PGFERRY_TEST_HELPER_REAPER";

/// A temp dir the postgres-running user can traverse. `TempDir` is 0700; as root
/// the cluster runs as another user, so we open it to search-only (0711) rather
/// than chowning it, which keeps it listable by us alone.
fn parent_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("pgferry-t-")
        .tempdir()
        .expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    dir
}

fn test_opts(data_dir: impl Into<PathBuf>) -> ClusterOptions {
    ClusterOptions {
        data_dir: data_dir.into(),
        port: None,
        listen_tcp: true,
        fsync: false,
        settings: Vec::new(),
    }
}

fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Orphans of our crashed helper children are reparented to us instead of PID 1,
/// so we can reap them (some container inits never reap, leaving zombies).
fn become_subreaper() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// True once `pid` no longer runs (reaping it if it was reparented to us).
fn pid_gone(pid: u32) -> bool {
    let raw = pid as libc::pid_t;
    let mut status = 0;
    // SAFETY: plain syscalls on a positive pid; status points to a local.
    unsafe {
        libc::waitpid(raw, &mut status, libc::WNOHANG);
        if libc::kill(raw, 0) != 0 {
            return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        }
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `helper_crash_with_cluster` in a child process; returns the pids it wrote.
fn crash_child(outer: &Path, with_reaper: bool) -> (u32, Option<u32>) {
    let out = Command::new(std::env::current_exe().expect("current_exe"))
        .args([
            "helper_crash_with_cluster",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_DIR_ENV, outer)
        .env(HELPER_REAPER_ENV, if with_reaper { "1" } else { "0" })
        .output()
        .expect("run helper");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "helper should abort; status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let pids = std::fs::read_to_string(outer.join("pids")).expect("pids file");
    let mut it = pids
        .split_whitespace()
        .map(|p| p.parse::<u32>().expect("pid"));
    let postmaster = it.next().expect("postmaster pid");
    (postmaster, it.next())
}

/// Not a real test: the body of the crashing child process (no-op otherwise).
#[test]
fn helper_crash_with_cluster() {
    let Some(outer) = std::env::var_os(HELPER_DIR_ENV).map(PathBuf::from) else {
        return;
    };
    let with_reaper = std::env::var(HELPER_REAPER_ENV).as_deref() == Ok("1");
    let cluster = Cluster::start(test_opts(outer.join("c/data"))).expect("start in helper");
    let mut pids = cluster.postmaster_pid().to_string();
    let reaper = with_reaper.then(|| {
        cluster
            .spawn_reaper(Some(outer.join("c")))
            .expect("spawn reaper")
    });
    if let Some(reaper) = &reaper {
        pids.push_str(&format!(" {}", reaper.pid()));
    }
    std::fs::write(outer.join("pids.tmp"), pids).expect("write pids");
    std::fs::rename(outer.join("pids.tmp"), outer.join("pids")).expect("rename pids");
    // No core file for this intentional crash.
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit with a valid pointer to a local struct.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
    std::process::abort();
}

#[test]
fn finds_the_installed_server() {
    let bins = find_binaries().expect("binaries");
    assert!(bins.major >= 10, "{bins:?}");
    assert!(bins.program("initdb").is_file());
    assert!(bins.program("postgres").is_file());
}

#[test]
fn restart_keeps_data_and_port() {
    let parent = parent_dir();
    let data = parent.path().join("pg");
    let cluster = Cluster::start(test_opts(&data)).expect("first start");
    let port = cluster.port();
    assert!(data.join("PG_VERSION").is_file());
    let meta = std::fs::metadata(&data).expect("stat data dir");
    assert_eq!(meta.mode() & 0o777, 0o700);
    if is_root() {
        assert_ne!(
            meta.uid(),
            0,
            "data dir must belong to the unprivileged user"
        );
    }
    cluster
        .psql(
            "postgres",
            "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('hello')",
        )
        .expect("create table");
    cluster.stop().expect("stop");
    assert!(!data.join("postmaster.pid").exists());

    let cluster = Cluster::start(test_opts(&data)).expect("second start");
    assert_eq!(cluster.port(), port, "recorded port should be reused");
    assert_eq!(
        cluster
            .psql("postgres", "SELECT v FROM kept")
            .expect("select"),
        "hello"
    );
    let expected = format!(
        "host={} port={port} user=postgres dbname=postgres",
        data.display()
    );
    assert_eq!(cluster.conn_string("postgres"), expected);
    assert_eq!(
        cluster.url("db1"),
        format!("postgres://postgres@127.0.0.1:{port}/db1")
    );
    // TCP works too.
    std::net::TcpStream::connect(("127.0.0.1", port)).expect("tcp connect");
    let pid = cluster.postmaster_pid();
    drop(cluster);
    assert!(pid_gone(pid), "drop must stop the server");
}

#[test]
fn stale_pidfile_is_ignored() {
    let parent = parent_dir();
    let data = parent.path().join("pg");
    Cluster::start(test_opts(&data))
        .expect("initial start")
        .stop()
        .expect("stop");

    let mut dead = Command::new("true").spawn().expect("spawn true");
    let dead_pid = dead.id();
    dead.wait().expect("wait");
    // A live, unrelated process: what a reused pid looks like (Postgres alone
    // would refuse to start, taking it for another postmaster).
    let mut sleeper = Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("spawn sleep");
    for pid in [dead_pid, sleeper.id()] {
        let fake = format!("{pid}\n{}\n0\n5432\n\n\n\nready   \n", data.display());
        std::fs::write(data.join("postmaster.pid"), fake).expect("write pidfile");
        let cluster = Cluster::start(test_opts(&data)).expect("start over stale pidfile");
        assert_eq!(cluster.psql("postgres", "SELECT 1").expect("query"), "1");
        cluster.stop().expect("stop");
    }
    assert!(
        sleeper.try_wait().expect("try_wait").is_none(),
        "unrelated process untouched"
    );
    sleeper.kill().expect("kill sleeper");
    sleeper.wait().expect("reap sleeper");
}

#[test]
fn orphan_of_crashed_owner_is_replaced() {
    become_subreaper();
    let parent = parent_dir();
    let (orphan, _) = crash_child(parent.path(), false);
    assert!(!pid_gone(orphan), "orphaned postmaster should still run");

    let cluster = Cluster::start(test_opts(parent.path().join("c/data"))).expect("start");
    assert!(pid_gone(orphan), "orphan must have been stopped");
    assert_ne!(cluster.postmaster_pid(), orphan);
    assert_eq!(cluster.psql("postgres", "SELECT 1").expect("query"), "1");
    cluster.stop().expect("stop");
}

#[test]
fn second_owner_of_a_data_dir_is_refused() {
    let parent = parent_dir();
    let data = parent.path().join("pg");
    let first = Cluster::start(test_opts(&data)).expect("first");
    match Cluster::start(test_opts(&data)) {
        Err(ClusterError::DataDirLocked { .. }) => {}
        other => panic!("expected DataDirLocked, got {other:?}"),
    }
    assert_eq!(first.psql("postgres", "SELECT 1").expect("still up"), "1");
    first.stop().expect("stop");
}

#[test]
fn reaper_cleans_up_after_abort() {
    become_subreaper();
    let parent = parent_dir();
    let (postmaster, reaper) = crash_child(parent.path(), true);
    let reaper = reaper.expect("reaper pid");
    assert!(
        wait_until(Duration::from_secs(40), || pid_gone(postmaster)),
        "postmaster {postmaster} still running"
    );
    assert!(
        wait_until(Duration::from_secs(10), || !parent
            .path()
            .join("c")
            .exists()),
        "cluster dir not removed"
    );
    assert!(
        wait_until(Duration::from_secs(10), || pid_gone(reaper)),
        "reaper {reaper} did not exit"
    );
}

#[test]
fn reaper_drop_stops_and_disarm_does_not() {
    let parent = parent_dir();
    let data = parent.path().join("pg");
    let cluster = Cluster::start(test_opts(&data)).expect("start");
    cluster.spawn_reaper(None).expect("reaper").disarm();
    assert_eq!(cluster.psql("postgres", "SELECT 1").expect("still up"), "1");

    let scratch = parent.path().join("scratch");
    std::fs::create_dir(&scratch).expect("mkdir");
    let pid = cluster.postmaster_pid();
    drop(cluster.spawn_reaper(Some(scratch.clone())).expect("reaper"));
    assert!(pid_gone(pid), "dropping the reaper stops the postmaster");
    assert!(!scratch.exists());
    // The handle notices the server is gone and stops cleanly.
    cluster.stop().expect("stop after reaper");
}

#[test]
fn long_data_dir_uses_tmp_socket_dir() {
    let parent = parent_dir();
    let data = parent.path().join("d".repeat(90)).join("pg");
    let cluster = Cluster::start(test_opts(&data)).expect("start");
    let socket_dir = cluster.socket_dir().to_path_buf();
    assert!(
        socket_dir
            .to_string_lossy()
            .starts_with("/tmp/pgferry-sock-"),
        "{socket_dir:?}"
    );
    assert_eq!(cluster.psql("postgres", "SELECT 1").expect("query"), "1");
    cluster.stop().expect("stop");
    assert!(!socket_dir.exists(), "temporary socket dir removed on stop");
}

#[test]
fn startup_failure_reports_log_tail() {
    let parent = parent_dir();
    let mut opts = test_opts(parent.path().join("pg"));
    opts.settings
        .push(("shared_buffers".into(), "plenty".into()));
    match Cluster::start(opts) {
        Err(err @ ClusterError::ServerExited { .. }) => {
            let msg = err.to_string();
            assert!(msg.contains("shared_buffers"), "{msg}");
            assert!(msg.contains("server.log"), "{msg}");
        }
        other => panic!("expected ServerExited, got {other:?}"),
    }
}
