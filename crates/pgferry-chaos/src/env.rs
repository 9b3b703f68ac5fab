//! The system under test for one fault: Postgres (a private cluster, optionally with a
//! streaming standby, or a fresh database on `--database-url`), the pgferry servers and the
//! worker processes, all started by the suite and stopped when the run ends.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use pgferry_pgcluster::{Cluster, ClusterOptions, PgBinaries, Standby};
use tokio_postgres::{Client, Config, NoTls};

use crate::procs::{self, Proc, ServerSpec};
use crate::worker_proc::WorkerArgs;
use crate::{ChaosConfig, ChaosError};

/// Database the suite's jobs live in on a private cluster.
const DB: &str = "chaos";
/// The queue the suite's producers and workers use.
pub const QUEUE: &str = "chaos";
/// Tenant the suite creates.
const TENANT: &str = "chaos";

/// Where Postgres comes from.
pub enum Postgres {
    Owned(Box<OwnedPg>),
    /// A database the suite created on the user's server (dropped at the end).
    External {
        /// URL of the server's maintenance database (to create and drop ours).
        maintenance: String,
        db: String,
    },
}

/// A private cluster in a temporary directory, and its standby when the fault needs one.
pub struct OwnedPg {
    pub binaries: PgBinaries,
    pub data_dir: PathBuf,
    pub port: u16,
    pub settings: Vec<(String, String)>,
    pub primary: Option<Cluster>,
    pub standby: Option<Standby>,
}

impl OwnedPg {
    async fn start(dir: &Path, settings: Vec<(String, String)>) -> Result<OwnedPg, ChaosError> {
        let mut opts = ClusterOptions::new(dir.join("pg"));
        opts.settings = settings.clone();
        let cluster = tokio::task::spawn_blocking(move || Cluster::start(opts))
            .await
            .map_err(|e| ChaosError::setup("starting Postgres", e))??;
        Ok(OwnedPg {
            binaries: cluster.binaries().clone(),
            data_dir: cluster.data_dir().to_path_buf(),
            port: cluster.port(),
            settings,
            primary: Some(cluster),
            standby: None,
        })
    }

    /// Starts the primary again on the same port and data dir (after a stop or a crash).
    pub async fn start_primary(&mut self) -> Result<(), ChaosError> {
        let mut opts = ClusterOptions::new(&self.data_dir);
        opts.port = Some(self.port);
        opts.settings = self.settings.clone();
        let binaries = self.binaries.clone();
        let cluster = tokio::task::spawn_blocking(move || Cluster::start_with(binaries, opts))
            .await
            .map_err(|e| ChaosError::setup("starting Postgres", e))??;
        self.primary = Some(cluster);
        Ok(())
    }

    /// Fast shutdown (SIGINT: transactions aborted, checkpoint) of the primary.
    pub async fn stop_primary(&mut self) -> Result<(), ChaosError> {
        if let Some(c) = self.primary.take() {
            tokio::task::spawn_blocking(move || c.stop())
                .await
                .map_err(|e| ChaosError::setup("stopping Postgres", e))??;
        }
        Ok(())
    }

    /// Immediate stop (SIGQUIT: no checkpoint; the next start runs crash recovery).
    pub async fn crash_primary(&mut self) -> Result<(), ChaosError> {
        if let Some(c) = self.primary.take() {
            procs::signal(c.postmaster_pid(), libc::SIGQUIT);
            // Reaps the exited postmaster (escalates only if SIGQUIT did not stop it).
            tokio::task::spawn_blocking(move || c.stop())
                .await
                .map_err(|e| ChaosError::setup("reaping Postgres", e))??;
        }
        Ok(())
    }
}

/// Everything one fault's run needs.
pub struct Env {
    pub cfg: ChaosConfig,
    pub dir: tempfile::TempDir,
    pub pg: Postgres,
    /// What servers connect with (a multi-host URL when a standby exists).
    pub server_url: String,
    /// What the suite's own sessions connect with (application_name chaos-*).
    pub admin: Config,
    pub api_key: String,
    pub servers: Vec<(ServerSpec, Option<Proc>)>,
    pub workers: Vec<(WorkerArgs, Option<Proc>)>,
    /// Workers started from now on run the workflow machines (workflows.rs).
    pub workflow_workers: bool,
    /// More `serve` flags for servers added from now on.
    pub server_args: Vec<String>,
    restarts: usize,
}

/// Options of the Postgres part of an environment.
pub struct PgPlan {
    pub standby: Option<Replication>,
    pub max_connections: u32,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    Sync,
    Async,
}

impl Env {
    /// Starts Postgres, migrates, creates the tenant and its key.
    pub async fn setup(cfg: &ChaosConfig, plan: PgPlan) -> Result<Env, ChaosError> {
        let dir = tempfile::Builder::new()
            .prefix("pgferry-chaos-")
            .tempdir_in("/tmp")
            .map_err(|e| ChaosError::setup("creating a temp dir", e))?;
        // As root, postgres runs as another user that must traverse the directory.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o711),
        )
        .map_err(|e| ChaosError::setup("chmod temp dir", e))?;
        let (pg, server_url) = match &cfg.database_url {
            None => {
                let settings = vec![
                    (
                        "max_connections".to_owned(),
                        plan.max_connections.to_string(),
                    ),
                    ("shared_buffers".to_owned(), "128MB".to_owned()),
                    // A fresh session per termination: log lines would be most of the I/O.
                    ("log_min_messages".to_owned(), "fatal".to_owned()),
                ];
                let mut owned = OwnedPg::start(dir.path(), settings).await?;
                let primary = owned.primary.as_ref().expect("started");
                primary.psql("postgres", &format!("CREATE DATABASE {DB}"))?;
                let mut url = primary.url(DB);
                if let Some(rep) = plan.standby {
                    let standby_dir = dir.path().join("standby");
                    let p = owned.primary.take().expect("started");
                    let (p, standby) = tokio::task::spawn_blocking(move || {
                        let s = Standby::create(&p, &standby_dir, &[]);
                        (p, s)
                    })
                    .await
                    .map_err(|e| ChaosError::setup("creating the standby", e))?;
                    let standby = standby?;
                    if rep == Replication::Sync {
                        p.psql(
                            "postgres",
                            "ALTER SYSTEM SET synchronous_standby_names = '*'",
                        )?;
                        p.psql("postgres", "SELECT pg_reload_conf()")?;
                    }
                    url = format!(
                        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{DB}?target_session_attrs=read-write",
                        p.port(),
                        standby.port()
                    );
                    owned.primary = Some(p);
                    owned.standby = Some(standby);
                }
                (Postgres::Owned(Box::new(owned)), url)
            }
            Some(base) => {
                let db = format!(
                    "pgferry_chaos_{}_{}",
                    std::process::id(),
                    rand::random::<u32>()
                );
                let (client, conn) = Config::from_str(base)
                    .map_err(|e| ChaosError::setup("--database-url", e))?
                    .application_name("chaos-admin")
                    .connect(NoTls)
                    .await
                    .map_err(ChaosError::db("connecting to --database-url"))?;
                tokio::spawn(conn);
                // The name is generated here (digits and underscores), never user input.
                client
                    .batch_execute(&format!("CREATE DATABASE {db}"))
                    .await
                    .map_err(ChaosError::db("creating the run's database"))?;
                let url = with_dbname(base, &db)?;
                (
                    Postgres::External {
                        maintenance: base.clone(),
                        db,
                    },
                    url,
                )
            }
        };
        let mut admin =
            Config::from_str(&server_url).map_err(|e| ChaosError::setup("database URL", e))?;
        admin.application_name("chaos-admin");
        admin.connect_timeout(Duration::from_secs(5));
        let mut env = Env {
            cfg: cfg.clone(),
            dir,
            pg,
            server_url,
            admin,
            api_key: String::new(),
            servers: Vec::new(),
            workers: Vec::new(),
            workflow_workers: false,
            server_args: Vec::new(),
            restarts: 0,
        };
        let mut client = env.connect("chaos-admin").await?;
        pgferry_server::migrate::up(&mut client)
            .await
            .map_err(|e| ChaosError::setup("migrating", e))?;
        pgferry_server::auth::admin::create_tenant(&mut client, TENANT)
            .await
            .map_err(|e| ChaosError::setup("creating the tenant", e))?;
        let (_, key) = pgferry_server::auth::admin::create_key(
            &mut client,
            TENANT,
            pgferry_server::auth::Scopes::all(),
            Some("pgferry chaos"),
        )
        .await
        .map_err(|e| ChaosError::setup("creating the API key", e))?;
        env.api_key = key.expose();
        Ok(env)
    }

    /// A session of the suite's own (never matched by the terminator: not `pgferry-*`).
    pub async fn connect(&self, name: &str) -> Result<Client, ChaosError> {
        let mut cfg = self.admin.clone();
        cfg.application_name(name);
        let (client, conn) = cfg
            .connect(NoTls)
            .await
            .map_err(ChaosError::db(format!("connecting ({name})")))?;
        tokio::spawn(conn);
        Ok(client)
    }

    pub fn owned(&mut self, fault: &'static str) -> Result<&mut OwnedPg, ChaosError> {
        match &mut self.pg {
            Postgres::Owned(o) => Ok(o),
            Postgres::External { .. } => Err(ChaosError::NeedsOwnCluster { fault }),
        }
    }

    /// Adds and starts a server on fresh ports.
    pub async fn add_server(&mut self) -> Result<usize, ChaosError> {
        let i = self.servers.len();
        let spec = ServerSpec {
            bin: self.cfg.bin.clone(),
            database_url: self.server_url.clone(),
            http_port: procs::free_port()?,
            grpc_port: procs::free_port()?,
            log: self.dir.path().join(format!("server-{i}.log")),
            pool_size: 16,
            extra_args: self.server_args.clone(),
        };
        let proc = spec.start().await?;
        self.servers.push((spec, Some(proc)));
        Ok(i)
    }

    pub fn kill_server(&mut self, i: usize) {
        if let Some(mut p) = self.servers[i].1.take() {
            p.kill();
        }
    }

    pub async fn start_server(&mut self, i: usize) -> Result<(), ChaosError> {
        let proc = self.servers[i].0.start().await?;
        self.servers[i].1 = Some(proc);
        Ok(())
    }

    pub fn http_urls(&self) -> Vec<String> {
        self.servers.iter().map(|(s, _)| s.http_url()).collect()
    }

    pub fn grpc_urls(&self) -> Vec<String> {
        self.servers.iter().map(|(s, _)| s.grpc_url()).collect()
    }

    /// Starts `n` worker processes on server `server`'s gRPC address.
    pub fn start_workers(&mut self, n: usize, server: usize) -> Result<(), ChaosError> {
        for _ in 0..n {
            let i = self.workers.len();
            let args = WorkerArgs {
                grpc_url: self.servers[server].0.grpc_url(),
                api_key: self.api_key.clone(),
                queue: QUEUE.to_owned(),
                ledger: self.dir.path().join(format!("worker-{i}.ledger")),
                worker_id: format!("w{i}"),
                slots: self.cfg.worker_slots,
                work_ms: self.cfg.work_ms,
                workflows: self.workflow_workers,
                http_url: self.servers[server].0.http_url(),
            };
            let log = self.dir.path().join(format!("worker-{i}.log"));
            let proc = procs::start_worker(&self.cfg.bin, &args, &log)?;
            self.workers.push((args, Some(proc)));
        }
        Ok(())
    }

    /// SIGKILLs worker `i` and starts a new process in its place (a new worker id, its own
    /// ledger file: the killed one's file keeps what it wrote).
    pub fn kill_and_replace_worker(&mut self, i: usize) -> Result<(), ChaosError> {
        if let Some(mut p) = self.workers[i].1.take() {
            p.kill();
        }
        self.restarts += 1;
        let mut args = self.workers[i].0.clone();
        args.worker_id = format!("w{i}r{}", self.restarts);
        args.ledger = self
            .dir
            .path()
            .join(format!("worker-{i}-r{}.ledger", self.restarts));
        let log = self.dir.path().join(format!("worker-{i}.log"));
        let proc = procs::start_worker(&self.cfg.bin, &args, &log)?;
        self.workers[i] = (args, Some(proc));
        Ok(())
    }

    /// Stops workers (drain), servers, then Postgres; drops an external run's database.
    pub async fn teardown(mut self) -> Result<(), ChaosError> {
        for (_, p) in &mut self.workers {
            if let Some(p) = p.as_mut() {
                p.stop(Duration::from_secs(10)).await;
            }
        }
        for (_, p) in &mut self.servers {
            if let Some(p) = p.as_mut() {
                p.stop(Duration::from_secs(20)).await;
            }
        }
        match std::mem::replace(
            &mut self.pg,
            Postgres::External {
                maintenance: String::new(),
                db: String::new(),
            },
        ) {
            Postgres::Owned(mut o) => {
                if let Some(mut s) = o.standby.take() {
                    tokio::task::spawn_blocking(move || s.stop())
                        .await
                        .map_err(|e| ChaosError::setup("stopping the standby", e))?;
                }
                o.stop_primary().await?;
            }
            Postgres::External {
                maintenance, db, ..
            } if !db.is_empty() => {
                let (client, conn) = Config::from_str(&maintenance)
                    .map_err(|e| ChaosError::setup("--database-url", e))?
                    .application_name("chaos-admin")
                    .connect(NoTls)
                    .await
                    .map_err(ChaosError::db("connecting to --database-url"))?;
                tokio::spawn(conn);
                client
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
                    .await
                    .map_err(ChaosError::db("dropping the run's database"))?;
            }
            Postgres::External { .. } => {}
        }
        Ok(())
    }
}

/// `base` with its database replaced by `db` (URL or key=value form).
fn with_dbname(base: &str, db: &str) -> Result<String, ChaosError> {
    if base.starts_with("postgres://") || base.starts_with("postgresql://") {
        let mut url =
            reqwest::Url::parse(base).map_err(|e| ChaosError::setup("--database-url", e))?;
        url.set_path(&format!("/{db}"));
        Ok(url.to_string())
    } else {
        // key=value: a later key wins.
        Ok(format!("{base} dbname={db}"))
    }
}

#[cfg(test)]
mod tests {
    use super::with_dbname;

    #[test]
    fn dbname_is_replaced() {
        assert_eq!(
            with_dbname("postgres://u@h:5/x?sslmode=disable", "d").unwrap(),
            "postgres://u@h:5/d?sslmode=disable"
        );
        assert_eq!(
            with_dbname("host=/tmp dbname=x", "d").unwrap(),
            "host=/tmp dbname=x dbname=d"
        );
    }
}
