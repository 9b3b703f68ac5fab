//! `pgferry chaos`: faults injected into real `pgferry serve` processes, real worker
//! processes and real Postgres clusters while jobs flow, and a ledger kept outside the
//! system under test that must balance afterwards (docs/reliability.md).
//!
//! One run of a [`Fault`] ([`run_fault`]): start Postgres (or use a fresh database on
//! `--database-url`), the server(s), worker processes and producer tasks; let jobs flow
//! (warmup, whose completion rate is the baseline); inject the fault for the fault window;
//! keep producing for a recovery window; stop producers; let workers drain; then check the
//! ledger ([`check`]) and report ([`FaultReport`]).

mod check;
mod env;
mod faults;
pub mod ledger;
mod procs;
mod producers;
mod report;
mod scenario;
mod scheduler;
mod stuck;
mod wf_worker;
mod worker_proc;
mod workflows;

use std::path::PathBuf;
use std::time::Duration;

pub use report::{FaultReport, Recovery};
pub use scenario::run_fault;
pub use scheduler::{run_scheduler_fault, SchedulerReport};
pub use worker_proc::{run_worker, WorkerArgs};
pub use workflows::{run_workflow_fault, WorkflowReport};

/// What went wrong running the suite itself (not a violated invariant: those are in the
/// report).
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    #[error("setting up the run: {what}: {detail}")]
    Setup { what: String, detail: String },
    #[error("{what}: {detail}")]
    Process { what: String, detail: String },
    #[error("database ({what}): {detail}")]
    Db {
        what: String,
        detail: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("Postgres cluster: {0}")]
    Cluster(#[from] pgferry_pgcluster::ClusterError),
    #[error("standby: {0}")]
    Standby(#[from] pgferry_pgcluster::StandbyError),
    #[error("fault {fault} needs a cluster the suite starts itself (not --database-url)")]
    NeedsOwnCluster { fault: &'static str },
    #[error("injecting {fault}: {detail}")]
    Inject { fault: &'static str, detail: String },
}

impl ChaosError {
    pub(crate) fn setup(what: impl Into<String>, e: impl std::fmt::Display) -> ChaosError {
        ChaosError::Setup {
            what: what.into(),
            detail: e.to_string(),
        }
    }

    pub(crate) fn db(what: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> ChaosError {
        let what = what.into();
        move |source| ChaosError::Db {
            what,
            // tokio-postgres prints a server error as "db error"; its message is the point.
            detail: match source.as_db_error() {
                Some(db) => format!("{}: {}", db.code().code(), db.message()),
                None => source.to_string(),
            },
            source,
        }
    }
}

/// The faults the suite injects (names as on the command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL of a worker process mid-job, repeatedly (restarted each time).
    WorkerKill,
    /// pg_terminate_backend of every pgferry backend, 2 times a second.
    Terminate2,
    /// pg_terminate_backend of every pgferry backend, 10 times a second (the reproduction of
    /// issue 17: 3 producers sending HTTP batches of 200).
    Terminate10,
    /// Postgres fast shutdown and start.
    PgRestart,
    /// Postgres immediate stop (SIGQUIT: no checkpoint, crash recovery on start) and start.
    PgCrash,
    /// SIGKILL of the pgferry server and restart on the same addresses.
    ServerKill,
    /// Two servers; the leader is SIGKILLed and the other takes over.
    LeaderTakeover,
    /// A transaction holding an xid stays open while jobs flow.
    XidHold,
    /// A streaming standby with synchronous replication is promoted (primary crashed).
    FailoverSync,
    /// The same with asynchronous replication: loss is allowed, counted and reported.
    FailoverAsync,
    /// Every free connection slot of Postgres is taken by someone else.
    PoolExhaustion,
}

impl Fault {
    pub const ALL: [Fault; 11] = [
        Fault::WorkerKill,
        Fault::Terminate2,
        Fault::Terminate10,
        Fault::PgRestart,
        Fault::PgCrash,
        Fault::ServerKill,
        Fault::LeaderTakeover,
        Fault::XidHold,
        Fault::FailoverSync,
        Fault::FailoverAsync,
        Fault::PoolExhaustion,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::WorkerKill => "worker-kill",
            Fault::Terminate2 => "terminate-2",
            Fault::Terminate10 => "terminate-10",
            Fault::PgRestart => "pg-restart",
            Fault::PgCrash => "pg-crash",
            Fault::ServerKill => "server-kill",
            Fault::LeaderTakeover => "leader-takeover",
            Fault::XidHold => "xid-hold",
            Fault::FailoverSync => "failover-sync",
            Fault::FailoverAsync => "failover-async",
            Fault::PoolExhaustion => "pool-exhaustion",
        }
    }

    pub fn parse(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }

    /// What the fault does, for the report.
    pub fn description(self) -> &'static str {
        match self {
            Fault::WorkerKill => "SIGKILL of one worker process mid-job every 1.5 s (restarted)",
            Fault::Terminate2 => "pg_terminate_backend of every pgferry backend, 2/s",
            Fault::Terminate10 => {
                "pg_terminate_backend of every pgferry backend, 10/s; 3 HTTP producers, batches of 200, \
                 no workers until the fault ends (issue 17's reproduction)"
            }
            Fault::PgRestart => "Postgres fast shutdown, then start",
            Fault::PgCrash => "Postgres immediate stop (crash recovery), then start",
            Fault::ServerKill => "SIGKILL of the pgferry server, restart on the same addresses",
            Fault::LeaderTakeover => "two servers; SIGKILL of the leader, the other takes over",
            Fault::XidHold => "a transaction holding an xid open for the fault window",
            Fault::FailoverSync => {
                "primary crashed, synchronous streaming standby promoted; multi-host URL"
            }
            Fault::FailoverAsync => {
                "primary crashed, asynchronous streaming standby promoted; multi-host URL"
            }
            Fault::PoolExhaustion => {
                "every free Postgres connection slot held by another client, then pgferry's \
                 sessions terminated once (they cannot be replaced until the slots free up)"
            }
        }
    }

    /// Faults that stop, crash or replace Postgres need a cluster the suite started.
    pub fn needs_own_cluster(self) -> bool {
        matches!(
            self,
            Fault::PgRestart | Fault::PgCrash | Fault::FailoverSync | Fault::FailoverAsync
        )
    }
}

/// How to run the suite.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    /// The `pgferry` binary whose `serve` and `chaos-worker` the suite starts.
    pub bin: PathBuf,
    /// Use a fresh database on this server instead of a private cluster (faults that stop
    /// Postgres are then skipped).
    pub database_url: Option<String>,
    /// Jobs flow before the fault (the baseline throughput is measured over it).
    pub warmup: Duration,
    /// How long the fault lasts (repeated faults) or how long jobs flow after it (one-shot
    /// faults).
    pub duration: Duration,
    /// Producers keep going this long after the fault window.
    pub recovery: Duration,
    /// After producers stop, workers get this long to finish every acknowledged job.
    pub drain_timeout: Duration,
    /// Jobs per second all producers aim for together (the termination reproduction runs
    /// its producers free, bounded only by `max_backlog`).
    pub rate: u64,
    /// Producers pause while more acknowledged jobs than this wait to complete.
    pub max_backlog: usize,
    /// Jobs per producer batch (default: 200 for the termination faults, 50 otherwise).
    pub batch: Option<usize>,
    /// Producers (default 3: the termination faults all HTTP; otherwise HTTP and gRPC
    /// alternating, every third over gRPC).
    pub producers: Option<usize>,
    /// Worker processes, and execution slots in each.
    pub workers: usize,
    pub worker_slots: usize,
    /// Each execution sleeps a random time up to this.
    pub work_ms: u64,
    /// Show a progress bar on stderr.
    pub progress: bool,
}

impl ChaosConfig {
    pub fn new(bin: PathBuf) -> ChaosConfig {
        ChaosConfig {
            bin,
            database_url: None,
            warmup: Duration::from_secs(3),
            duration: Duration::from_secs(10),
            recovery: Duration::from_secs(3),
            drain_timeout: Duration::from_secs(90),
            rate: 2000,
            max_backlog: 20_000,
            batch: None,
            producers: None,
            workers: 2,
            worker_slots: 64,
            work_ms: 20,
            progress: false,
        }
    }
}
