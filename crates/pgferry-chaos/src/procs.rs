//! Child processes the suite starts and kills: `pgferry serve` and `pgferry chaos-worker`.
//! Every child is owned by a guard that SIGKILLs it on drop, so nothing outlives a run.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::worker_proc::WorkerArgs;
use crate::ChaosError;

/// How long a server may take to print its listening lines (migrations on a busy machine).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A free loopback port (racy by nature; the suite picks ports it then passes explicitly so
/// that a restarted server comes back on the same addresses).
pub fn free_port() -> Result<u16, ChaosError> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| ChaosError::setup("picking a free port", e))?;
    Ok(l.local_addr()
        .map_err(|e| ChaosError::setup("picking a free port", e))?
        .port())
}

/// Sends `sig` to one positive pid.
pub fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        if pid > 0 {
            // SAFETY: kill has no memory-safety preconditions; pid is one positive pid.
            unsafe { libc::kill(pid, sig) };
        }
    }
}

/// A child process with its stdout lines kept (servers announce their addresses there) and
/// its stderr appended to a log file.
pub struct Proc {
    child: Child,
    what: String,
    stdout: Arc<Mutex<String>>,
    log: PathBuf,
}

impl Proc {
    fn spawn(mut cmd: Command, what: String, log: &Path) -> Result<Proc, ChaosError> {
        let err_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| ChaosError::setup(format!("opening {}", log.display()), e))?;
        // If the suite itself dies (even by SIGKILL), its servers and workers go with it.
        // SAFETY: prctl is async-signal-safe; the closure touches no memory of ours.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err_file))
            .env_remove("PGFERRY_DATABASE_URL");
        let mut child = cmd
            .spawn()
            .map_err(|e| ChaosError::setup(format!("spawning {what}"), e))?;
        let stdout = Arc::new(Mutex::new(String::new()));
        let out = child.stdout.take().expect("piped stdout");
        let buf = stdout.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let mut b = buf.lock().unwrap_or_else(|e| e.into_inner());
                b.push_str(&line);
                b.push('\n');
            }
        });
        Ok(Proc {
            child,
            what,
            stdout,
            log: log.to_path_buf(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Waits for a stdout line starting with `prefix`.
    async fn wait_line(&mut self, prefix: &str) -> Result<String, ChaosError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let found = {
                let out = self.stdout.lock().unwrap_or_else(|e| e.into_inner());
                out.lines()
                    .find_map(|l| l.strip_prefix(prefix))
                    .map(str::to_owned)
            };
            if let Some(rest) = found {
                return Ok(rest);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(ChaosError::Process {
                    what: self.what.clone(),
                    detail: format!("exited ({status}) before {prefix:?}:\n{}", self.log_tail()),
                });
            }
            if Instant::now() >= deadline {
                return Err(ChaosError::Process {
                    what: self.what.clone(),
                    detail: format!(
                        "no {prefix:?} within {START_TIMEOUT:?}:\n{}",
                        self.log_tail()
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL.
    pub async fn stop(&mut self, grace: Duration) {
        if matches!(self.child.try_wait(), Ok(None)) {
            signal(self.pid(), libc::SIGTERM);
            let deadline = Instant::now() + grace;
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        self.kill();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How to start one `pgferry serve`.
#[derive(Clone)]
pub struct ServerSpec {
    pub bin: PathBuf,
    pub database_url: String,
    pub http_port: u16,
    pub grpc_port: u16,
    pub log: PathBuf,
    pub pool_size: usize,
    /// More `serve` flags (the scheduler suite's public rate limits).
    pub extra_args: Vec<String>,
}

impl ServerSpec {
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    pub fn grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }

    /// Starts the server and waits until both listeners are up.
    pub async fn start(&self) -> Result<Proc, ChaosError> {
        let build = || {
            let mut cmd = Command::new(&self.bin);
            cmd.args(["serve", "--database-url", &self.database_url])
                .args(["--http-addr", &format!("127.0.0.1:{}", self.http_port)])
                .args(["--grpc-addr", &format!("127.0.0.1:{}", self.grpc_port)])
                // The suite's producers and lookups are not what the rate limiter is for.
                .args(["--rate-limit", "1000000000", "--rate-burst", "1000000000"])
                .args(["--pool-size", &self.pool_size.to_string()])
                .args(&self.extra_args)
                .env("PGFERRY_LOG", "warn");
            cmd
        };
        let what = format!("pgferry serve (http {})", self.http_port);
        // A restarted server may find its port still held for a moment by the one killed.
        let mut attempt = 0;
        loop {
            let mut p = Proc::spawn(build(), what.clone(), &self.log)?;
            match p.wait_line("pgferry: listening grpc=").await {
                Ok(_) => return Ok(p),
                Err(e) if attempt < 5 => {
                    tracing::debug!(error = %e, "server start failed; retrying");
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Starts `pgferry chaos-worker`.
pub fn start_worker(bin: &Path, args: &WorkerArgs, log: &Path) -> Result<Proc, ChaosError> {
    let mut cmd = Command::new(bin);
    cmd.args(args.to_args()).env("PGFERRY_LOG", "warn");
    Proc::spawn(cmd, format!("chaos-worker {}", args.worker_id), log)
}
