//! Real PostgreSQL for tests, with zero setup.
//!
//! ```no_run
//! # async fn example() {
//! let db = pgferry_testkit::test_db().await;
//! let client = db.connect().await;
//! client.batch_execute("CREATE TABLE t (id int)").await.unwrap();
//! # }
//! ```
//!
//! Each test binary (process) gets one private cluster, started on first use in a
//! temp dir with durability off. Each [`test_db`] call creates a fresh database in
//! it, so tests running in parallel never see each other's tables.
//!
//! Cleanup: at normal process exit (also after failed tests) an `atexit` hook stops
//! the server and removes the temp dir; if the process dies abruptly (abort,
//! SIGKILL, `panic = "abort"`) a watchdog process ([`pgferry_pgcluster::Reaper`])
//! does the same. Databases are *not* dropped when a [`TestDb`] goes out of scope:
//! that would need async work in `Drop`, and the whole cluster is discarded at exit
//! anyway. Under cargo-nextest every test is its own process, so every test pays
//! for one cluster start (about a second).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use pgferry_pgcluster::{Cluster, ClusterOptions, Reaper};
use tokio_postgres::NoTls;

struct Shared {
    cluster: Cluster,
    /// Taken (and disarmed) by the exit hook after a clean stop.
    reaper: Mutex<Option<Reaper>>,
    /// The temp dir holding the data dir; removed at exit.
    dir: PathBuf,
}

/// `Err` holds the startup failure so every test reports it, not just the first.
static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();
static NEXT_DB: AtomicU64 = AtomicU64::new(1);

/// The cluster shared by this test binary, started on first use.
///
/// Synchronous and runtime-independent on purpose: `#[tokio::test]` builds a new
/// runtime per test, and the cluster must outlive all of them. Panics (it is a
/// test helper) with the reason if the cluster cannot be started.
pub fn cluster() -> &'static Cluster {
    match SHARED.get_or_init(start_shared) {
        Ok(shared) => &shared.cluster,
        Err(msg) => panic!("{msg}"),
    }
}

fn start_shared() -> Result<Shared, String> {
    let dir = tempfile::Builder::new()
        .prefix("pgferry-test-")
        .tempdir()
        .map_err(|e| format!("pgferry-testkit: could not create a temp dir: {e}"))?
        // Never deleted by a destructor (statics are not dropped); see exit hook.
        .keep();
    // As root the server runs as an unprivileged user, which must be able to reach
    // the data dir below. Search-only (0711) is enough and keeps the dir unlistable.
    // (Set explicitly: the default mode differs between tempfile versions.)
    if let Err(e) = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)) {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(format!(
            "pgferry-testkit: could not chmod {}: {e}",
            dir.display()
        ));
    }
    let opts = ClusterOptions {
        data_dir: dir.join("data"),
        port: None,
        listen_tcp: true,
        fsync: false,
        settings: vec![
            ("max_connections".into(), "300".into()),
            ("shared_buffers".into(), "128MB".into()),
            // Deterministic tests: no background ANALYZE/VACUUM consuming xids (tick tests
            // count finished transactions) or changing plans mid-test; plan tests ANALYZE
            // explicitly.
            ("autovacuum".into(), "off".into()),
            // Statement-count tests read pg_stat_statements. PGFERRY_TEST_PRELOAD overrides
            // it (empty: none) for a server build without the module (`make test-ash-pg16`).
            (
                "shared_preload_libraries".into(),
                std::env::var("PGFERRY_TEST_PRELOAD")
                    .unwrap_or_else(|_| "pg_stat_statements".into()),
            ),
        ],
    };
    let cluster = match Cluster::start(opts) {
        Ok(cluster) => cluster,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!(
                "pgferry-testkit: could not start the test PostgreSQL cluster: {e}"
            ));
        }
    };
    let reaper = match cluster.spawn_reaper(Some(dir.clone())) {
        Ok(reaper) => reaper,
        Err(e) => {
            drop(cluster);
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!(
                "pgferry-testkit: could not start the cleanup watchdog: {e}"
            ));
        }
    };
    // SAFETY: registers a plain `extern "C"` function without captured state; it
    // only runs once `SHARED` is initialised (it is set right after we return).
    unsafe { libc::atexit(stop_at_exit) };
    Ok(Shared {
        cluster,
        reaper: Mutex::new(Some(reaper)),
        dir,
    })
}

/// Normal exit path: stop the server ourselves so it is reaped by us (the watchdog
/// would work too, but an orphaned postmaster is left as a zombie under container
/// inits that never reap), then dismiss the watchdog and remove the dir.
/// Must not panic (that would abort inside `exit`).
extern "C" fn stop_at_exit() {
    let Some(Ok(shared)) = SHARED.get() else {
        return;
    };
    if shared.cluster.shutdown().is_err() {
        // Leave the watchdog armed; it will retry the stop and removal.
        return;
    }
    // try_lock: never block inside exit(); if the lock is unavailable the armed
    // watchdog still cleans up once our pipe closes.
    if let Ok(mut guard) = shared.reaper.try_lock() {
        if let Some(reaper) = guard.take() {
            reaper.disarm();
        }
    }
    let _ = std::fs::remove_dir_all(&shared.dir);
}

/// A fresh, empty database for one test.
#[derive(Debug, Clone)]
pub struct TestDb {
    pub name: String,
    /// Connects over the cluster's unix socket.
    pub config: tokio_postgres::Config,
    /// Same target as `config`, as a libpq key=value string.
    pub conn_string: String,
}

/// Creates `t_<counter>_<pid>` from `template0` and returns its handle.
///
/// The maintenance connection is opened per call because a tokio-postgres
/// connection is tied to the runtime that runs its task, and every
/// `#[tokio::test]` has its own runtime.
pub async fn test_db() -> TestDb {
    // First use starts the cluster (initdb + boot, ~1 s): keep it off the runtime.
    let cluster = match tokio::task::spawn_blocking(cluster).await {
        Ok(cluster) => cluster,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => panic!("pgferry-testkit: starting the cluster was cancelled: {e}"),
    };
    let name = format!(
        "t_{}_{}",
        NEXT_DB.fetch_add(1, Ordering::Relaxed),
        std::process::id()
    );
    let admin = connect_to(cluster, "postgres").await;
    // template0 is never connected to, so concurrent CREATE DATABASE calls do not
    // trip over "source database is being accessed by other users".
    admin
        .batch_execute(&format!("CREATE DATABASE \"{name}\" TEMPLATE template0"))
        .await
        .unwrap_or_else(|e| panic!("pgferry-testkit: CREATE DATABASE {name} failed: {e}"));
    let conn_string = cluster.conn_string(&name);
    TestDb {
        config: parse_config(&conn_string),
        conn_string,
        name,
    }
}

fn parse_config(conn_string: &str) -> tokio_postgres::Config {
    conn_string
        .parse()
        .unwrap_or_else(|e| panic!("pgferry-testkit: bad connection string {conn_string:?}: {e}"))
}

async fn connect_to(cluster: &Cluster, dbname: &str) -> tokio_postgres::Client {
    connect_config(&parse_config(&cluster.conn_string(dbname)), dbname).await
}

async fn connect_config(config: &tokio_postgres::Config, dbname: &str) -> tokio_postgres::Client {
    let (client, connection) = config
        .connect(NoTls)
        .await
        .unwrap_or_else(|e| panic!("pgferry-testkit: could not connect to database {dbname}: {e}"));
    let dbname = dbname.to_owned();
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("pgferry-testkit: connection to {dbname:?} failed: {e}");
        }
    });
    client
}

impl TestDb {
    /// A new connection; its driver task runs on the current tokio runtime.
    /// Panics with the reason if connecting fails.
    pub async fn connect(&self) -> tokio_postgres::Client {
        connect_config(&self.config, &self.name).await
    }

    /// A connection to another database of this cluster, such as one the code under test
    /// created for itself (the benches' fresh databases). Panics if connecting fails.
    pub async fn connect_other(&self, dbname: &str) -> tokio_postgres::Client {
        let mut config = self.config.clone();
        config.dbname(dbname);
        connect_config(&config, dbname).await
    }

    /// A connection pool of up to `size` connections to this database.
    /// Connections are created lazily on the runtime that calls `get()`.
    pub fn pool(&self, size: usize) -> deadpool_postgres::Pool {
        let manager = deadpool_postgres::Manager::from_config(
            self.config.clone(),
            NoTls,
            deadpool_postgres::ManagerConfig {
                recycling_method: deadpool_postgres::RecyclingMethod::Fast,
            },
        );
        deadpool_postgres::Pool::builder(manager)
            .max_size(size)
            .build()
            // Only fails when timeouts are configured without a runtime; we set none.
            .unwrap_or_else(|e| panic!("pgferry-testkit: could not build pool: {e}"))
    }

    /// TCP URL of this database (`postgres://postgres@127.0.0.1:<port>/<name>`),
    /// for code under test that takes a URL.
    pub fn url(&self) -> String {
        cluster().url(&self.name)
    }
}
