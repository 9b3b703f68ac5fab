//! Connections: a pool for request work, tagged with its role in `application_name` so that
//! pg_stat_activity (and ASH) can say which part of pgferry a backend belongs to.

use std::str::FromStr;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::{Config, NoTls};

use crate::error::{Error, Result};

/// Connection attempts give up after this unless the URL sets `connect_timeout`.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Parses a libpq URL or key=value string.
pub fn parse_config(url: &str) -> Result<Config> {
    Config::from_str(url).map_err(|e| Error::InvalidArgument {
        field: "database_url",
        reason: e.to_string(),
    })
}

/// The settings of every pgferry session, applied at connection start.
///
/// `jit=off`: pgferry's statements run in well under a millisecond, but the planner's cost
/// estimates over 16 partitions pass `jit_above_cost`, and Postgres then spends ~300 ms
/// compiling each execution (measured: a tick took 319 ms with JIT, 0.3 ms without).
pub fn session_config(config: &Config, role: &str) -> Config {
    session_config_with(config, role, "")
}

/// [`session_config`] plus `extra` settings (`-c name=value ...`).
fn session_config_with(config: &Config, role: &str, extra: &str) -> Config {
    let mut cfg = config.clone();
    cfg.application_name(format!("pgferry-{role}"));
    // An unreachable host (packets dropped, not refused) must fail a request in bounded
    // time instead of hanging it for the OS's TCP timeout; a URL's own setting wins.
    if cfg.get_connect_timeout().is_none() {
        cfg.connect_timeout(CONNECT_TIMEOUT);
    }
    let options = match config.get_options() {
        Some(user) if !user.is_empty() => format!("{user} -c jit=off{extra}"),
        _ => format!("-c jit=off{extra}"),
    };
    cfg.options(options);
    cfg
}

/// A pool of `size` connections named `pgferry-<role>`.
pub fn pool(config: &Config, role: &str, size: usize) -> Pool {
    build_pool(session_config(config, role), size)
}

/// The two pools of an engine: one for everything, and one whose sessions commit with
/// `synchronous_commit = off`, for the hot-path writes of queues that chose
/// [`Durability::Async`](crate::Durability) (architecture.md §1.7). A session setting rather than a
/// `SET LOCAL` per statement: COPY cannot carry one, and a separate SET would cost a round
/// trip per batch. The async pool opens no connection until such a queue writes.
#[derive(Clone)]
pub struct Pools {
    pub sync: Pool,
    pub async_commit: Option<Pool>,
}

impl Pools {
    /// Pools of up to `size` connections each, named `pgferry-<role>` and
    /// `pgferry-<role>-async`.
    pub fn new(config: &Config, role: &str, size: usize) -> Pools {
        let async_cfg = session_config_with(
            config,
            &format!("{role}-async"),
            " -c synchronous_commit=off",
        );
        Pools {
            sync: pool(config, role, size),
            async_commit: Some(build_pool(async_cfg, size)),
        }
    }
}

impl From<Pool> for Pools {
    /// Only the synchronous pool: queues that chose async durability commit synchronously
    /// (more durable than asked, never less).
    fn from(sync: Pool) -> Pools {
        Pools {
            sync,
            async_commit: None,
        }
    }
}

fn build_pool(cfg: Config, size: usize) -> Pool {
    // Fast recycling: a broken connection surfaces on use and is dropped then; checking each
    // checkout would add a round trip to every operation.
    let manager = Manager::from_connect(
        cfg,
        LoggedConnect,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        // Active session history attributes each backend to what it serves (serving.rs).
        .post_create(deadpool_postgres::Hook::async_fn(|c, _| {
            crate::serving::learn_pid(c)
        }))
        .build()
        .expect("pool without runtime-specific options always builds")
}

/// Opens a pooled connection the way deadpool does, but a connection that ends with an
/// error logs the server's whole reason (e.g. FATAL 57P01 "terminating connection due to
/// administrator command") and the pool's role: deadpool's own task logs only "db error"
/// (issue 27).
struct LoggedConnect;

type Connected = std::result::Result<
    (tokio_postgres::Client, tokio::task::JoinHandle<()>),
    tokio_postgres::Error,
>;

impl deadpool_postgres::Connect for LoggedConnect {
    fn connect(
        &self,
        pg_config: &Config,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Connected> + Send + '_>> {
        let pg_config = pg_config.clone();
        Box::pin(async move {
            let (client, conn) = pg_config.connect(NoTls).await?;
            // The application name is `pgferry-<role>` (session_config).
            let role = pg_config
                .get_application_name()
                .map(|a| a.trim_start_matches("pgferry-").to_string())
                .unwrap_or_default();
            let task = tokio::spawn(async move {
                if let Err(e) = conn.await {
                    let e = Error::Db(e);
                    tracing::warn!(role, sqlstate = e.sqlstate(), error = %e, "database connection ended");
                }
            });
            Ok((client, task))
        })
    }
}

/// One dedicated connection named `pgferry-<role>` (migrations, leader duties, bench), its
/// connection task spawned on the current runtime.
pub async fn connect(config: &Config, role: &str) -> Result<tokio_postgres::Client> {
    let (client, conn) = session_config(config, role).connect(NoTls).await?;
    let role = role.to_string();
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            // The server's reason (e.g. FATAL 57P01 "terminating connection due to
            // administrator command") reaches only this task: the next statement on the
            // client just sees "connection closed". Log it whole, with the role.
            let e = Error::Db(e);
            tracing::warn!(role, sqlstate = e.sqlstate(), error = %e, "database connection ended");
        }
    });
    Ok(client)
}

/// A pooled connection inside a transaction this process opened (BEGIN sent). Dropped before
/// [`OpenTxn::close`] — a caller's future cancelled mid-write — the connection is taken out of
/// the pool and closed, so the server rolls the transaction back: it is never handed to the
/// next user idle in transaction (holding its locks, blocking rotation).
pub(crate) struct OpenTxn(Option<deadpool_postgres::Object>);

impl OpenTxn {
    pub(crate) fn new(client: deadpool_postgres::Object) -> OpenTxn {
        OpenTxn(Some(client))
    }

    /// The transaction ended (COMMIT or ROLLBACK answered, or the connection is gone): the
    /// connection goes back to the pool (a closed one is discarded there).
    pub(crate) fn close(mut self) {
        self.0.take();
    }
}

impl std::ops::Deref for OpenTxn {
    type Target = deadpool_postgres::Object;

    fn deref(&self) -> &Self::Target {
        self.0.as_ref().expect("open until closed")
    }
}

impl Drop for OpenTxn {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            tracing::debug!("a write was cancelled inside its transaction; closing its connection");
            drop(deadpool_postgres::Object::take(client));
        }
    }
}
