use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong while locating binaries or running a cluster.
///
/// Messages are meant to be shown to a person as-is (e.g. by `pgferry dev`), so
/// each variant carries the path/pid/log excerpt needed to act on it.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "no PostgreSQL server binaries (initdb and postgres) found (looked in: {}). \
         Install them: `apt-get install postgresql` (Debian/Ubuntu), or set PGFERRY_PG_BINDIR \
         to the directory containing initdb and postgres.",
        join_paths(searched)
    )]
    BinariesNotFound { searched: Vec<PathBuf> },

    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("could not run {}: {source}", program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "running as root, but neither a 'postgres' nor a 'nobody' user exists to run \
         PostgreSQL as (PostgreSQL refuses to run as root); create a 'postgres' user or \
         run pgferry as an unprivileged user"
    )]
    NoUnprivilegedUser,

    #[error(
        "PostgreSQL runs as user '{user}' (because pgferry runs as root), but that user \
         cannot enter {}; choose a data directory outside it, `chmod o+x` it, or run \
         pgferry as an unprivileged user",
        dir.display()
    )]
    DirNotTraversable { dir: PathBuf, user: String },

    #[error(
        "data directory {} was created by PostgreSQL {data_version}, but the binaries in {} \
         are PostgreSQL {bin_major}; set PGFERRY_PG_BINDIR to a PostgreSQL {data_version} \
         bin directory, or delete the data directory to start over",
        data_dir.display(),
        bindir.display()
    )]
    VersionMismatch {
        data_dir: PathBuf,
        data_version: String,
        bindir: PathBuf,
        bin_major: u32,
    },

    #[error("initdb failed for {} ({status}):\n{output}", data_dir.display())]
    InitdbFailed {
        data_dir: PathBuf,
        status: String,
        output: String,
    },

    #[error(
        "data directory {} is already in use by a running pgferry (another process, or \
         another Cluster in this one)",
        data_dir.display()
    )]
    DataDirLocked { data_dir: PathBuf },

    #[error(
        "data directory {} is in use by process {pid}, which pgferry cannot identify or stop",
        data_dir.display()
    )]
    DataDirInUse { data_dir: PathBuf, pid: u32 },

    #[error(
        "an orphaned postgres (pid {pid}) serving {} did not exit even after SIGKILL",
        data_dir.display()
    )]
    OrphanNotStopped { data_dir: PathBuf, pid: u32 },

    #[error("could not find a free TCP port on 127.0.0.1: {0}")]
    NoFreePort(#[source] std::io::Error),

    #[error(
        "postgres exited during startup ({status}); last lines of {}:\n{log_tail}",
        log_path.display()
    )]
    ServerExited {
        status: String,
        log_path: PathBuf,
        log_tail: String,
    },

    #[error(
        "postgres did not accept connections within {waited:?}; last lines of {}:\n{log_tail}",
        log_path.display()
    )]
    StartTimeout {
        waited: Duration,
        log_path: PathBuf,
        log_tail: String,
    },

    #[error("psql failed ({status}): {stderr}")]
    Psql { status: String, stderr: String },
}

fn join_paths(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "nowhere".to_owned();
    }
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl ClusterError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        ClusterError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
