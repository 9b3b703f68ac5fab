//! A streaming standby of a [`Cluster`]: `pg_basebackup -R` from the primary, started as a
//! hot standby on its own loopback port, promoted on demand (the chaos suite's failover).
//!
//! Separate from [`Cluster`] because a standby's postmaster.pid never says "ready" until it
//! is promoted (it says "standby"), and because it is never initdb'ed.

use std::fs::OpenOptions;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::datadir::{self, LOG_FILE};
use crate::privs::RunAs;
use crate::{process, Cluster, ClusterError, PgBinaries};

/// Base backup of a small test cluster plus recovery start; generous for a busy machine.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum StandbyError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("pg_basebackup into {data_dir} failed ({status}): {output}")]
    BaseBackup {
        data_dir: PathBuf,
        status: String,
        output: String,
    },
    #[error("pg_ctl promote of {data_dir} failed ({status}): {output}")]
    Promote {
        data_dir: PathBuf,
        status: String,
        output: String,
    },
    #[error("standby in {data_dir} not {state} within {waited:?}; log tail:\n{log_tail}")]
    NotReady {
        data_dir: PathBuf,
        state: &'static str,
        waited: Duration,
        log_tail: String,
    },
}

/// A running hot standby we started. Dropping it stops it (fast shutdown, then escalation).
#[derive(Debug)]
pub struct Standby {
    binaries: PgBinaries,
    data_dir: PathBuf,
    port: u16,
    run_as: Option<RunAs>,
    child: Option<Child>,
}

impl Standby {
    /// Base-backs-up `primary` into `data_dir` (which must not exist or be empty) with a
    /// replication configuration (`-R`: standby.signal + primary_conninfo over the
    /// primary's unix socket) and starts it on a free loopback port, with `settings` as
    /// extra `-c name=value`. Returns once it accepts (read-only) connections.
    pub fn create(
        primary: &Cluster,
        data_dir: &Path,
        settings: &[(String, String)],
    ) -> Result<Standby, StandbyError> {
        let binaries = primary.binaries().clone();
        let data_dir = std::path::absolute(data_dir)
            .map_err(|e| ClusterError::io("could not resolve", data_dir, e))?;
        let run_as = RunAs::for_current_process()?;
        std::fs::create_dir_all(&data_dir)
            .map_err(|e| ClusterError::io("could not create", &data_dir, e))?;
        std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| ClusterError::io("could not chmod", &data_dir, e))?;
        if let Some(user) = &run_as {
            user.chown_tree(&data_dir)?;
            user.check_traversable(&data_dir)?;
        }
        let program = binaries.program("pg_basebackup");
        let mut cmd = Command::new(&program);
        cmd.arg("-h")
            .arg(primary.socket_dir())
            .args(["-p", &primary.port().to_string(), "-U", "postgres", "-D"])
            .arg(&data_dir)
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"])
            .current_dir("/")
            .stdin(Stdio::null());
        if let Some(user) = &run_as {
            user.apply(&mut cmd);
        }
        let out = cmd
            .output()
            .map_err(|source| ClusterError::Spawn { program, source })?;
        if !out.status.success() {
            let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
            output.push_str(&String::from_utf8_lossy(&out.stderr));
            return Err(StandbyError::BaseBackup {
                data_dir,
                status: out.status.to_string(),
                output: output.trim().to_owned(),
            });
        }
        // The primary's postmaster.pid and port file are not copied (excluded by
        // pg_basebackup); nothing of its runtime state carries over.
        let port = datadir::pick_free_port()?;
        let mut standby = Standby {
            binaries,
            data_dir,
            port,
            run_as,
            child: None,
        };
        standby.spawn(settings)?;
        standby.wait_state(&["standby", "ready"], "accepting connections")?;
        Ok(standby)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The postmaster's pid, while it runs.
    pub fn postmaster_pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `postgres://postgres@127.0.0.1:<port>/<db>`.
    pub fn url(&self, dbname: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{dbname}", self.port)
    }

    /// Ends recovery (`pg_ctl promote -w`): the standby becomes a read-write primary.
    pub fn promote(&self) -> Result<(), StandbyError> {
        let program = self.binaries.program("pg_ctl");
        let mut cmd = Command::new(&program);
        cmd.args(["promote", "-w", "-t", "60", "-D"])
            .arg(&self.data_dir)
            .current_dir("/")
            .stdin(Stdio::null());
        if let Some(user) = &self.run_as {
            user.apply(&mut cmd);
        }
        let out = cmd
            .output()
            .map_err(|source| ClusterError::Spawn { program, source })?;
        if !out.status.success() {
            let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
            output.push_str(&String::from_utf8_lossy(&out.stderr));
            return Err(StandbyError::Promote {
                data_dir: self.data_dir.clone(),
                status: out.status.to_string(),
                output: output.trim().to_owned(),
            });
        }
        self.wait_state(&["ready"], "promoted")
    }

    /// Fast shutdown, escalating to SIGQUIT and SIGKILL. Idempotent.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            process::stop_child(&mut child);
        }
    }

    fn spawn(&mut self, settings: &[(String, String)]) -> Result<(), StandbyError> {
        let log_path = self.data_dir.join(LOG_FILE);
        let log = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&log_path)
            .map_err(|e| ClusterError::io("could not open", &log_path, e))?;
        if let Some(user) = &self.run_as {
            user.chown(&log_path)?;
        }
        let log_err = log
            .try_clone()
            .map_err(|e| ClusterError::io("could not open", &log_path, e))?;
        let program = self.binaries.program("postgres");
        let mut cmd = Command::new(&program);
        cmd.arg("-D")
            .arg(&self.data_dir)
            .arg("-k")
            .arg(&self.data_dir)
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "hot_standby=on"]);
        for (name, value) in settings {
            cmd.arg("-c").arg(format!("{name}={value}"));
        }
        cmd.current_dir("/")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .process_group(0);
        if let Some(user) = &self.run_as {
            user.apply(&mut cmd);
        }
        let child = cmd
            .spawn()
            .map_err(|source| ClusterError::Spawn { program, source })?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits until postmaster.pid's status line is one of `states` and the socket accepts.
    fn wait_state(&self, states: &[&str], what: &'static str) -> Result<(), StandbyError> {
        let pidfile = self.data_dir.join("postmaster.pid");
        let socket = self.data_dir.join(format!(".s.PGSQL.{}", self.port));
        let log_path = self.data_dir.join(LOG_FILE);
        let started = Instant::now();
        loop {
            let status = std::fs::read_to_string(&pidfile)
                .ok()
                .and_then(|text| text.lines().nth(7).map(|l| l.trim().to_owned()));
            if status.is_some_and(|s| states.contains(&s.as_str()))
                && UnixStream::connect(&socket).is_ok()
            {
                return Ok(());
            }
            if started.elapsed() >= READY_TIMEOUT {
                return Err(StandbyError::NotReady {
                    data_dir: self.data_dir.clone(),
                    state: what,
                    waited: READY_TIMEOUT,
                    log_tail: datadir::log_tail(&log_path),
                });
            }
            std::thread::sleep(process::POLL);
        }
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        self.stop();
    }
}
