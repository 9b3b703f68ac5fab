use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pgferry_testkit::{cluster, test_db};

const HELPER_OUT_ENV: &str = "PGFERRY_TESTKIT_HELPER_OUT";
const HELPER_ABORT_ENV: &str = "PGFERRY_TESTKIT_HELPER_ABORT";

#[tokio::test]
async fn two_databases_are_distinct_and_usable() {
    let a = test_db().await;
    let b = test_db().await;
    assert_ne!(a.name, b.name);

    let ca = a.connect().await;
    let cb = b.connect().await;
    for (client, db) in [(&ca, &a), (&cb, &b)] {
        let row = client
            .query_one("SELECT current_database()", &[])
            .await
            .expect("query");
        assert_eq!(row.get::<_, String>(0), db.name);
    }
    ca.batch_execute("CREATE TABLE only_in_a (id int); INSERT INTO only_in_a VALUES (1)")
        .await
        .expect("create in a");
    let err = cb
        .query("SELECT * FROM only_in_a", &[])
        .await
        .expect_err("table must not exist in b");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_databases() {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..20 {
        set.spawn(async {
            let db = test_db().await;
            let client = db.connect().await;
            let n: i32 = client
                .query_one("SELECT 41 + 1", &[])
                .await
                .expect("query")
                .get(0);
            assert_eq!(n, 42);
            db.name
        });
    }
    let mut names = Vec::new();
    while let Some(res) = set.join_next().await {
        names.push(res.expect("task"));
    }
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 20);
}

#[tokio::test]
async fn pool_and_tcp_url_work() {
    let db = test_db().await;
    let pool = db.pool(4);
    let conn = pool.get().await.expect("pool connection");
    let row = conn
        .query_one("SELECT current_database()", &[])
        .await
        .expect("query");
    assert_eq!(row.get::<_, String>(0), db.name);

    let url = db.url();
    assert!(url.starts_with("postgres://postgres@127.0.0.1:"), "{url}");
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("tcp connect");
    tokio::spawn(connection);
    let row = client
        .query_one("SELECT current_database()", &[])
        .await
        .expect("query");
    assert_eq!(row.get::<_, String>(0), db.name);
}

/// Not a real test: body of the child process used by `cluster_is_removed_*`.
#[tokio::test]
async fn helper_use_cluster_then_exit() {
    let Some(out) = std::env::var_os(HELPER_OUT_ENV).map(PathBuf::from) else {
        return;
    };
    let db = test_db().await;
    db.connect()
        .await
        .batch_execute("SELECT 1")
        .await
        .expect("query");
    let c = cluster();
    let tmp = out.with_extension("tmp");
    std::fs::write(
        &tmp,
        format!("{}\n{}\n", c.postmaster_pid(), c.data_dir().display()),
    )
    .expect("write");
    std::fs::rename(&tmp, &out).expect("rename");
    if std::env::var_os(HELPER_ABORT_ENV).is_some() {
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: valid pointer to a local struct.
        unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
        std::process::abort();
    }
}

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
    // A zombie has exited; it lingers only if nobody reaps it.
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

fn run_helper(out: &Path, abort: bool) -> std::process::Output {
    let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
    cmd.args([
        "helper_use_cluster_then_exit",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(HELPER_OUT_ENV, out);
    if abort {
        cmd.env(HELPER_ABORT_ENV, "1");
    }
    cmd.output().expect("run helper")
}

fn assert_cleaned_up(out: &Path) {
    let info = std::fs::read_to_string(out).expect("helper output");
    let mut lines = info.lines();
    let pid: u32 = lines.next().expect("pid").parse().expect("pid number");
    let data_dir = PathBuf::from(lines.next().expect("data dir"));
    let tmp_dir = data_dir.parent().expect("temp dir").to_path_buf();
    assert!(
        wait_until(Duration::from_secs(40), || pid_gone(pid)),
        "postmaster {pid} still running"
    );
    assert!(
        wait_until(Duration::from_secs(10), || !tmp_dir.exists()),
        "{} not removed",
        tmp_dir.display()
    );
}

#[test]
fn cluster_is_removed_after_normal_exit() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let out = scratch.path().join("info");
    let output = run_helper(&out, false);
    assert!(
        output.status.success(),
        "helper failed: {:?}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert_cleaned_up(&out);
}

#[test]
fn cluster_is_removed_after_abort() {
    // Reparent the helper's orphaned postmaster to us so it can be reaped (some
    // container inits never reap, which would leave a zombie).
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let scratch = tempfile::tempdir().expect("tempdir");
    let out = scratch.path().join("info");
    let output = run_helper(&out, true);
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGABRT),
        "helper should abort: {:?}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert_cleaned_up(&out);
}
