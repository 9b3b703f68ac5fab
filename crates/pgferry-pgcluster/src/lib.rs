//! Finds PostgreSQL server binaries and runs a private cluster.
//!
//! Used by `pgferry dev` (persistent data dir) and by `pgferry-testkit` (a
//! throw-away cluster per test binary). Synchronous on purpose: it only spawns and
//! signals processes, so it works before any async runtime exists.
//!
//! ```no_run
//! use pgferry_pgcluster::{Cluster, ClusterOptions};
//! let cluster = Cluster::start(ClusterOptions::new(".pgferry/pg"))?;
//! println!("{}", cluster.url("postgres"));
//! cluster.stop()?;
//! # Ok::<(), pgferry_pgcluster::ClusterError>(())
//! ```
//!
//! # Running as root
//!
//! `initdb` and `postgres` refuse to run as root. When the effective uid is 0 they
//! run as user `postgres` (or `nobody` if that does not exist); the data dir is
//! chowned to that user, and every ancestor directory must be searchable by it
//! (we report [`ClusterError::DirNotTraversable`] rather than widening permissions
//! of e.g. `/root` behind the caller's back).
//!
//! Linux only in practice: orphan detection and zombie checks read `/proc`.

mod binaries;
mod cluster;
mod datadir;
mod error;
mod privs;
mod process;
mod reaper;
mod standby;

pub use binaries::{find_binaries, find_binaries_in, PgBinaries, SearchPaths, BINDIR_ENV};
pub use cluster::{Cluster, ClusterOptions};
pub use error::ClusterError;
pub use reaper::Reaper;
pub use standby::{Standby, StandbyError};
