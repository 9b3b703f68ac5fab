//! Starting, addressing and stopping a private PostgreSQL cluster.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::datadir::{self, LOG_FILE};
use crate::privs::RunAs;
use crate::{find_binaries, process, ClusterError, PgBinaries};

/// How long `start` waits for the server to accept connections (crash recovery
/// of a big dev cluster can take a while; a fresh test cluster needs ~1 s).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Attempts when an auto-picked port turns out to be taken by the time postgres binds.
const PORT_ATTEMPTS: usize = 3;
/// Unix socket paths are limited to 108 bytes (sun_path); stay well below.
const MAX_SOCKET_PATH: usize = 100;

/// How to run a cluster. [`ClusterOptions::new`] gives dev-friendly defaults.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// The cluster's data directory; created (and initdb'ed) if needed. The unix
    /// socket lives in it too, unless that path would be too long for a socket
    /// address, in which case a private dir `/tmp/pgferry-sock-*` is used (and
    /// removed again on stop).
    pub data_dir: PathBuf,
    /// `None`: reuse the port recorded in `data_dir/pgferry-port` by the last run
    /// if it is free, else pick a free loopback port.
    pub port: Option<u16>,
    /// Also listen on 127.0.0.1:port (otherwise only the unix socket).
    pub listen_tcp: bool,
    /// `false` trades durability for speed (tests): fsync, synchronous_commit and
    /// full_page_writes off, initdb --no-sync.
    pub fsync: bool,
    /// Extra server settings, passed as `-c name=value`.
    pub settings: Vec<(String, String)>,
}

impl ClusterOptions {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        ClusterOptions {
            data_dir: data_dir.into(),
            port: None,
            listen_tcp: true,
            fsync: true,
            settings: Vec::new(),
        }
    }
}

/// A running postmaster we started, as a direct child in its own process group
/// (so a terminal Ctrl-C reaches only us and we decide the shutdown order).
/// Dropping it stops the server (best effort).
#[derive(Debug)]
pub struct Cluster {
    binaries: PgBinaries,
    data_dir: PathBuf,
    socket_dir: PathBuf,
    /// Set when `socket_dir` is our own dir under /tmp (data dir path too long).
    temp_socket_dir: bool,
    port: u16,
    pid: u32,
    /// `None` once stopped. Behind a mutex so a `&'static Cluster` (test kit) can
    /// still be shut down at exit.
    running: Mutex<Option<Running>>,
}

#[derive(Debug)]
struct Running {
    child: Child,
    /// Held for the cluster's lifetime; see [`datadir::lock`].
    _lock: File,
}

impl Cluster {
    /// Finds binaries with [`find_binaries`] and starts the cluster.
    pub fn start(opts: ClusterOptions) -> Result<Cluster, ClusterError> {
        Self::start_with(find_binaries()?, opts)
    }

    /// Starts the cluster in `opts.data_dir` with the given binaries: initdb if the
    /// dir has no PG_VERSION, clear a stale postmaster.pid (or stop an orphaned
    /// postmaster left by a crashed pgferry), start postgres and wait until it
    /// accepts connections.
    pub fn start_with(binaries: PgBinaries, opts: ClusterOptions) -> Result<Cluster, ClusterError> {
        let data_dir = std::path::absolute(&opts.data_dir)
            .map_err(|e| ClusterError::io("could not resolve", &opts.data_dir, e))?;
        let run_as = RunAs::for_current_process()?;

        std::fs::create_dir_all(&data_dir)
            .map_err(|e| ClusterError::io("could not create", &data_dir, e))?;
        let lock = datadir::lock(&data_dir)?;
        // Postgres insists on 0700 (or 0750) and on owning the data dir.
        std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| ClusterError::io("could not chmod", &data_dir, e))?;
        if let Some(user) = &run_as {
            user.chown_tree_if_needed(&data_dir)?;
            user.check_traversable(&data_dir)?;
        }

        let version_file = data_dir.join("PG_VERSION");
        if version_file.exists() {
            check_version(&binaries, &data_dir, &version_file)?;
        } else {
            initdb(&binaries, &data_dir, opts.fsync, run_as.as_ref())?;
        }
        datadir::take_over(&data_dir)?;

        let (socket_dir, temp_socket_dir) = choose_socket_dir(&data_dir, run_as.as_ref())?;
        let launched = launch(&binaries, &data_dir, &socket_dir, &opts, run_as.as_ref());
        let (child, port) = match launched {
            Ok(ok) => ok,
            Err(e) => {
                if temp_socket_dir {
                    let _ = std::fs::remove_dir_all(&socket_dir);
                }
                return Err(e);
            }
        };
        tracing::info!(
            data_dir = %data_dir.display(),
            port,
            pid = child.id(),
            "postgres started"
        );
        Ok(Cluster {
            binaries,
            data_dir,
            socket_dir,
            temp_socket_dir,
            port,
            pid: child.id(),
            running: Mutex::new(Some(Running { child, _lock: lock })),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn postmaster_pid(&self) -> u32 {
        self.pid
    }

    pub fn binaries(&self) -> &PgBinaries {
        &self.binaries
    }

    /// The server's stdout/stderr (truncated at each start).
    pub fn log_path(&self) -> PathBuf {
        self.data_dir.join(LOG_FILE)
    }

    pub(crate) fn owns_socket_dir(&self) -> bool {
        self.temp_socket_dir
    }

    /// libpq key=value string (works with `tokio_postgres::Config::from_str`),
    /// connecting over the unix socket.
    pub fn conn_string(&self, dbname: &str) -> String {
        format!(
            "host={} port={} user=postgres dbname={}",
            quote_conn_value(&self.socket_dir.to_string_lossy()),
            self.port,
            quote_conn_value(dbname)
        )
    }

    /// `postgres://postgres@127.0.0.1:<port>/<db>`; only reachable if `listen_tcp`.
    pub fn url(&self, dbname: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{}",
            self.port,
            percent_encode(dbname)
        )
    }

    /// Runs one SQL string with `psql` over the unix socket and returns its
    /// unaligned, tuples-only output. Handy for tools and tests without a runtime.
    pub fn psql(&self, dbname: &str, sql: &str) -> Result<String, ClusterError> {
        let mut program = self.binaries.program("psql");
        if !program.exists() {
            program = PathBuf::from("psql");
        }
        let out = Command::new(&program)
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.socket_dir)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                dbname,
                "-c",
                sql,
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(|source| ClusterError::Spawn { program, source })?;
        if !out.status.success() {
            return Err(ClusterError::Psql {
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_owned())
    }

    /// Fast shutdown (SIGINT), waiting up to 30 s before escalating to SIGQUIT and
    /// SIGKILL. Consumes the handle; see [`Cluster::shutdown`] for shared handles.
    pub fn stop(self) -> Result<(), ClusterError> {
        self.shutdown()
    }

    /// Like [`Cluster::stop`] but through a shared reference, for clusters kept in
    /// statics. Idempotent; later calls are no-ops.
    pub fn shutdown(&self) -> Result<(), ClusterError> {
        let running = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mut running) = running {
            if !process::stop_child(&mut running.child) {
                tracing::warn!(pid = self.pid, "postgres needed SIGQUIT/SIGKILL to stop");
            }
            // Dropping `running` releases the data dir lock only now that the
            // server is gone.
        }
        if self.temp_socket_dir {
            if let Err(e) = std::fs::remove_dir_all(&self.socket_dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    return Err(ClusterError::io("could not remove", &self.socket_dir, e));
                }
            }
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::warn!(error = %e, "stopping postgres on drop");
        }
    }
}

fn check_version(
    binaries: &PgBinaries,
    data_dir: &Path,
    version_file: &Path,
) -> Result<(), ClusterError> {
    let data_version = std::fs::read_to_string(version_file)
        .map_err(|e| ClusterError::io("could not read", version_file, e))?
        .trim()
        .to_owned();
    if data_version != binaries.major.to_string() {
        return Err(ClusterError::VersionMismatch {
            data_dir: data_dir.to_path_buf(),
            data_version,
            bindir: binaries.bindir.clone(),
            bin_major: binaries.major,
        });
    }
    Ok(())
}

fn initdb(
    binaries: &PgBinaries,
    data_dir: &Path,
    fsync: bool,
    run_as: Option<&RunAs>,
) -> Result<(), ClusterError> {
    let program = binaries.program("initdb");
    let mut cmd = Command::new(&program);
    cmd.arg("-D")
        .arg(data_dir)
        // Local-only cluster: trust is the point (no passwords in dev or tests).
        .args(["-U", "postgres", "--auth=trust", "--encoding=UTF8"])
        // C locale: exists everywhere, so initdb never fails on a missing locale.
        .arg("--locale=C")
        .current_dir("/")
        .stdin(Stdio::null());
    if !fsync {
        cmd.arg("--no-sync");
    }
    if let Some(user) = run_as {
        user.apply(&mut cmd);
    }
    tracing::info!(data_dir = %data_dir.display(), "running initdb");
    let out = cmd
        .output()
        .map_err(|source| ClusterError::Spawn { program, source })?;
    if !out.status.success() {
        let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
        output.push_str(&String::from_utf8_lossy(&out.stderr));
        return Err(ClusterError::InitdbFailed {
            data_dir: data_dir.to_path_buf(),
            status: out.status.to_string(),
            output: output.trim().to_owned(),
        });
    }
    Ok(())
}

/// The data dir doubles as socket dir unless the socket path would be too long or
/// contain characters that `unix_socket_directories` (a comma-separated list)
/// would misparse; then a fresh private dir under /tmp is used.
fn choose_socket_dir(
    data_dir: &Path,
    run_as: Option<&RunAs>,
) -> Result<(PathBuf, bool), ClusterError> {
    let longest = data_dir.join(".s.PGSQL.65535.lock");
    let text = data_dir.to_string_lossy();
    let awkward = text.contains([',', '"', '\\']) || text.trim() != text;
    if longest.as_os_str().len() < MAX_SOCKET_PATH && !awkward {
        return Ok((data_dir.to_path_buf(), false));
    }
    let dir = tempfile::Builder::new()
        .prefix("pgferry-sock-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in("/tmp")
        .map_err(|e| ClusterError::io("could not create socket dir in", "/tmp", e))?
        .keep();
    if let Some(user) = run_as {
        user.chown(&dir)?;
    }
    tracing::info!(socket_dir = %dir.display(), "data dir path too long for a socket; using a /tmp dir");
    Ok((dir, true))
}

/// Picks the port and starts postgres, retrying with a new port if an auto-picked
/// one was grabbed by someone else in the meantime.
fn launch(
    binaries: &PgBinaries,
    data_dir: &Path,
    socket_dir: &Path,
    opts: &ClusterOptions,
    run_as: Option<&RunAs>,
) -> Result<(Child, u16), ClusterError> {
    let mut port = match opts.port {
        Some(port) => port,
        None => match datadir::recorded_port(data_dir) {
            Some(port) if datadir::port_is_free(port) => port,
            _ => datadir::pick_free_port()?,
        },
    };
    let mut attempt = 1;
    loop {
        let port_file = datadir::record_port(data_dir, port)?;
        if let Some(user) = run_as {
            user.chown(&port_file)?;
        }
        let mut child = spawn_postgres(binaries, data_dir, socket_dir, port, opts, run_as)?;
        match wait_ready(&mut child, data_dir, socket_dir, port) {
            Ok(()) => return Ok((child, port)),
            Err(ClusterError::ServerExited { log_tail, .. })
                if opts.port.is_none()
                    && attempt < PORT_ATTEMPTS
                    && log_tail.contains("Address already in use") =>
            {
                tracing::info!(port, "port taken while starting; retrying with another");
                port = datadir::pick_free_port()?;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

fn spawn_postgres(
    binaries: &PgBinaries,
    data_dir: &Path,
    socket_dir: &Path,
    port: u16,
    opts: &ClusterOptions,
    run_as: Option<&RunAs>,
) -> Result<Child, ClusterError> {
    let log_path = data_dir.join(LOG_FILE);
    let log = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&log_path)
        .map_err(|e| ClusterError::io("could not open", &log_path, e))?;
    if let Some(user) = run_as {
        user.chown(&log_path)?;
    }
    let log_err = log
        .try_clone()
        .map_err(|e| ClusterError::io("could not open", &log_path, e))?;

    let program = binaries.program("postgres");
    let mut cmd = Command::new(&program);
    cmd.arg("-D")
        .arg(data_dir)
        .arg("-k")
        .arg(socket_dir)
        .args(["-p", &port.to_string()])
        .arg("-c")
        .arg(if opts.listen_tcp {
            "listen_addresses=127.0.0.1"
        } else {
            "listen_addresses="
        });
    if !opts.fsync {
        for setting in [
            "fsync=off",
            "synchronous_commit=off",
            "full_page_writes=off",
        ] {
            cmd.arg("-c").arg(setting);
        }
    }
    for (name, value) in &opts.settings {
        cmd.arg("-c").arg(format!("{name}={value}"));
    }
    cmd.current_dir("/")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        // Own process group: terminal signals (Ctrl-C) go to our group only.
        .process_group(0);
    if let Some(user) = run_as {
        user.apply(&mut cmd);
    }
    cmd.spawn()
        .map_err(|source| ClusterError::Spawn { program, source })
}

/// Waits until postmaster.pid reports "ready" and the socket accepts a connection.
fn wait_ready(
    child: &mut Child,
    data_dir: &Path,
    socket_dir: &Path,
    port: u16,
) -> Result<(), ClusterError> {
    let log_path = data_dir.join(LOG_FILE);
    let socket = socket_dir.join(format!(".s.PGSQL.{port}"));
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                return Err(ClusterError::ServerExited {
                    status: status.to_string(),
                    log_tail: datadir::log_tail(&log_path),
                    log_path,
                })
            }
            Ok(None) => {}
            Err(e) => return Err(ClusterError::io("could not wait for", "postgres", e)),
        }
        if datadir::pidfile_says_ready(data_dir, child.id()) && UnixStream::connect(&socket).is_ok()
        {
            return Ok(());
        }
        if started.elapsed() >= START_TIMEOUT {
            process::stop_child(child);
            return Err(ClusterError::StartTimeout {
                waited: START_TIMEOUT,
                log_tail: datadir::log_tail(&log_path),
                log_path,
            });
        }
        std::thread::sleep(process::POLL);
    }
}

/// Quotes a libpq key=value value when needed (spaces, quotes, backslashes, empty).
fn quote_conn_value(value: &str) -> String {
    if !value.is_empty() && !value.contains([' ', '\'', '\\', '\t', '\n']) {
        return value.to_owned();
    }
    let escaped = value.replace('\\', "\\\\").replace('\'', "\\'");
    format!("'{escaped}'")
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn percent_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conn_values_are_quoted_only_when_needed() {
        assert_eq!(quote_conn_value("/tmp/x"), "/tmp/x");
        assert_eq!(quote_conn_value("/tmp/a b"), "'/tmp/a b'");
        assert_eq!(quote_conn_value("it's"), r"'it\'s'");
        assert_eq!(quote_conn_value(""), "''");
    }

    #[test]
    fn url_encoding() {
        assert_eq!(percent_encode("t_1_23"), "t_1_23");
        assert_eq!(percent_encode("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn long_data_dir_gets_a_tmp_socket_dir() {
        let short = Path::new("/tmp/pgferry-x/data");
        assert_eq!(
            choose_socket_dir(short, None).expect("short"),
            (short.to_path_buf(), false)
        );
        let long = PathBuf::from(format!("/tmp/{}/data", "d".repeat(100)));
        let (dir, temp) = choose_socket_dir(&long, None).expect("long");
        assert!(temp);
        assert!(dir.starts_with("/tmp") && dir.is_dir());
        std::fs::remove_dir(&dir).expect("cleanup");
    }
}
