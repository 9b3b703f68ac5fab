//! Helpers for end-to-end tests that run the real `pgferry` binary.
//!
//! Everything here is bounded by generous deadlines and polls; nothing asserts how long
//! an operation took. Every spawned process is owned by a guard that kills it on drop,
//! and [`DataDir`] additionally stops any process still serving its directory (e.g. a
//! postmaster orphaned by a SIGKILLed pgferry), so a failing test leaves nothing running.

#![allow(dead_code)] // each test binary uses a different subset

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bound for a `pgferry dev` start (initdb + boot + migrations on a slow machine).
pub const START_TIMEOUT: Duration = Duration::from_secs(120);
/// Bound for a clean shutdown (the cluster crate alone allows 30 s + escalation).
pub const STOP_TIMEOUT: Duration = Duration::from_secs(90);
/// Bound for commands that should finish promptly (`migrate`, a failing `dev`).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Each HTTP request.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(30);
pub const POLL: Duration = Duration::from_millis(50);

/// The binary under test.
pub fn pgferry() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pgferry"));
    cmd.stdin(Stdio::null())
        .env("PGFERRY_LOG", "info")
        // Tests pass URLs explicitly; an outer setting must not leak in.
        .env_remove("PGFERRY_DATABASE_URL");
    cmd
}

/// A temporary directory to hold a `pgferry dev` data dir.
///
/// As root, postgres runs as user `postgres`, which must be able to traverse it: mode
/// 0711 (search only) is set explicitly because tempfile's default mode varies between
/// versions. On drop, any process whose command line still mentions the directory is
/// stopped before the directory is removed.
pub struct DataDir {
    dir: tempfile::TempDir,
}

impl DataDir {
    pub fn new() -> DataDir {
        let dir = tempfile::Builder::new()
            .prefix("pgferry-cli-e2e-")
            .tempdir_in("/tmp")
            .expect("creating temp dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
            .expect("chmod temp dir");
        DataDir { dir }
    }

    /// What to pass as `--data-dir`.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The cluster's data directory (`<data-dir>/pg`).
    pub fn pg(&self) -> PathBuf {
        self.path().join("pg")
    }

    /// Port of the last cluster run, from `<data-dir>/pg/pgferry-port`.
    pub fn pg_port(&self) -> u16 {
        let file = self.pg().join("pgferry-port");
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        text.trim()
            .parse()
            .unwrap_or_else(|e| panic!("bad port {text:?} in {}: {e}", file.display()))
    }

    /// A client for database `dbname` of the running dev cluster, over its unix socket.
    pub async fn connect(&self, dbname: &str) -> tokio_postgres::Client {
        let mut config = tokio_postgres::Config::new();
        config
            .host_path(self.pg())
            .port(self.pg_port())
            .user("postgres")
            .dbname(dbname);
        let (client, connection) = config
            .connect(tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("connecting to the dev cluster in {:?}: {e}", self.pg()));
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client
    }

    /// The pid recorded in `postmaster.pid`, if the file exists.
    pub fn postmaster_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.pg().join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// Live (non-zombie) processes whose command line mentions this directory.
    pub fn processes(&self) -> Vec<(u32, String)> {
        processes_mentioning(self.path())
    }

    /// The last lines of the postgres server log, for failure messages.
    pub fn server_log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.pg().join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Polls until no process mentions the directory; panics with the list if some
    /// remain after `timeout`.
    pub fn assert_nothing_running(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = self.processes();
            if left.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "processes still running on {}: {left:#?}",
                    self.path().display()
                );
            }
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        // Normally a no-op. After a failure (or a SIGKILLed pgferry) this stops the
        // postmaster: SIGQUIT makes it take its children down with it; SIGKILL if not.
        for sig in [libc::SIGQUIT, libc::SIGKILL] {
            let left = self.processes();
            if left.is_empty() {
                return;
            }
            for (pid, cmdline) in &left {
                eprintln!("test cleanup: signal {sig} to leftover {pid} ({cmdline})");
                send_signal(*pid, sig);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && !self.processes().is_empty() {
                std::thread::sleep(POLL);
            }
        }
    }
}

/// Live processes with an argument equal to `dir` or below it (so `/tmp/x` does not
/// match `/tmp/xy`). Zombies have an empty cmdline and are skipped naturally.
pub fn processes_mentioning(dir: &Path) -> Vec<(u32, String)> {
    let dir = dir.to_string_lossy().into_owned();
    let below = format!("{dir}/");
    let me = std::process::id();
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let mentions = args
            .iter()
            .any(|a| a == &dir || a.starts_with(&below) || a.contains(&format!("={below}")));
        if mentions {
            found.push((pid, args.join(" ")));
        }
    }
    found
}

pub fn send_signal(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).expect("pid fits pid_t");
    assert!(pid > 0, "refusing to signal pid {pid}");
    // SAFETY: kill has no memory-safety preconditions; pid is one positive pid.
    unsafe { libc::kill(pid, sig) };
}

/// Whether `pid` exists and is not a zombie.
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "pid (comm) S ..."; comm may contain ')' so split at the last one.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Shared, growing capture of one output stream of a child.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<String>>);

impl Capture {
    fn text(&self) -> String {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn drain_lines(&self, stream: impl Read + Send + 'static) -> JoinHandle<()> {
        let buf = Arc::clone(&self.0);
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                let mut buf = buf.lock().unwrap_or_else(|e| e.into_inner());
                buf.push_str(&line);
                buf.push('\n');
            }
        })
    }
}

/// A running `pgferry` process with stdout/stderr captured. Dropping it while it
/// still runs sends SIGTERM, waits for a clean stop (bounded), then SIGKILLs it.
pub struct Proc {
    child: Option<Child>,
    pid: u32,
    what: String,
    stdout: Capture,
    stderr: Capture,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

impl Proc {
    pub fn spawn(mut cmd: Command) -> Proc {
        let what = format!("{cmd:?}");
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {what}: {e}"));
        let (stdout, stderr) = (Capture::default(), Capture::default());
        let readers = vec![
            stdout.drain_lines(child.stdout.take().expect("piped stdout")),
            stderr.drain_lines(child.stderr.take().expect("piped stderr")),
        ];
        Proc {
            pid: child.id(),
            child: Some(child),
            what,
            stdout,
            stderr,
            readers,
            status: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn stdout(&self) -> String {
        self.stdout.text()
    }

    pub fn stderr(&self) -> String {
        self.stderr.text()
    }

    /// Command, exit status (if any) and captured output, for failure messages.
    pub fn diag(&self) -> String {
        format!(
            "command: {}\nstatus: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.what,
            self.status,
            self.stdout(),
            self.stderr()
        )
    }

    pub fn signal(&self, sig: libc::c_int) {
        assert!(
            self.status.is_none(),
            "process already exited\n{}",
            self.diag()
        );
        send_signal(self.pid, sig);
    }

    /// Exit status if the process has exited (reaping it), else `None`.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Some(child) = self.child.as_mut() {
                self.status = child.try_wait().expect("try_wait");
            }
        }
        self.status
    }

    /// Exit status of a process that has been waited for.
    pub fn status(&self) -> ExitStatus {
        self.status
            .unwrap_or_else(|| panic!("process has not exited\n{}", self.diag()))
    }

    /// Waits (bounded) for the process to exit and for its output to be read to
    /// the end; panics with the diagnostics on timeout.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.try_status() {
                break status;
            }
            if Instant::now() >= deadline {
                panic!("process did not exit within {timeout:?}\n{}", self.diag());
            }
            std::thread::sleep(POLL);
        };
        // The pipes close once the process (and anything that inherited them) is gone.
        while self.readers.iter().any(|r| !r.is_finished()) {
            if Instant::now() >= deadline {
                panic!("output pipes still open after exit\n{}", self.diag());
            }
            std::thread::sleep(POLL);
        }
        status
    }

    /// Waits for a line starting with `prefix` on stdout and returns its remainder.
    /// Panics (with diagnostics) if the process exits first or on timeout.
    pub fn wait_for_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(rest) = self.stdout().lines().find_map(|l| l.strip_prefix(prefix)) {
                return rest.to_owned();
            }
            if self.try_status().is_some() {
                // Let the readers catch up: the line may have been the last output.
                let _ = self.wait(Duration::from_secs(10));
                if let Some(rest) = self.stdout().lines().find_map(|l| l.strip_prefix(prefix)) {
                    return rest.to_owned();
                }
                panic!("process exited before printing {prefix:?}\n{}", self.diag());
            }
            if Instant::now() >= deadline {
                panic!("no {prefix:?} line within {timeout:?}\n{}", self.diag());
            }
            std::thread::sleep(POLL);
        }
    }

    /// Waits for `pgferry: listening http=<url>` and returns the URL.
    pub fn wait_listening(&mut self) -> String {
        let url = self.wait_for_line("pgferry: listening http=", START_TIMEOUT);
        assert!(url.starts_with("http://127.0.0.1:"), "unexpected url {url}");
        url
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if self.status.is_none() && matches!(child.try_wait(), Ok(None)) {
            // A clean stop lets `dev` stop its postgres too.
            send_signal(self.pid, libc::SIGTERM);
            let deadline = Instant::now() + STOP_TIMEOUT;
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(POLL);
            }
            let _ = child.kill();
            let _ = child.wait();
            if std::thread::panicking() {
                eprintln!("test cleanup: stopped {}\n{}", self.what, self.diag());
            }
        }
    }
}

/// `pgferry dev` on `dir` with ephemeral HTTP and gRPC ports (tests run in parallel).
pub fn dev(dir: &DataDir) -> Command {
    let mut cmd = pgferry();
    cmd.arg("dev").arg("--data-dir").arg(dir.path()).args([
        "--http-addr",
        "127.0.0.1:0",
        "--grpc-addr",
        "127.0.0.1:0",
    ]);
    cmd
}

/// Runs a command to completion (bounded), returning the finished [`Proc`].
pub fn run(cmd: Command) -> Proc {
    let mut proc = Proc::spawn(cmd);
    proc.wait(COMMAND_TIMEOUT);
    proc
}

/// An HTTP client without proxies and with a bounded request time.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(HTTP_TIMEOUT)
        .build()
        .expect("building HTTP client")
}

/// GET `base` + `path`: status and JSON body.
pub async fn get_json(
    client: &reqwest::Client,
    base: &str,
    path: &str,
) -> (u16, serde_json::Value) {
    let url = format!("{base}{path}");
    let resp = client
        .get(&url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    let text = resp
        .text()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: reading body: {e}"));
    let body = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("GET {url}: body is not JSON ({e}): {text:?}"));
    (status, body)
}

/// Asserts `/healthz` and `/readyz` both answer 200 with their documented bodies.
pub async fn assert_healthy_and_ready(client: &reqwest::Client, base: &str) {
    let (status, body) = get_json(client, base, "/healthz").await;
    assert_eq!(
        (status, &body),
        (200, &serde_json::json!({ "status": "ok" })),
        "/healthz"
    );
    let (status, body) = get_json(client, base, "/readyz").await;
    assert_eq!(status, 200, "/readyz: {body}");
}

/// One admin command group of the CLI (`pgferry schedule …`, `pgferry monitor …`) run
/// against a server's HTTP API with an API key.
pub struct CliApi {
    pub group: &'static str,
    pub url: String,
    pub key: String,
}

impl CliApi {
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = pgferry();
        c.arg(self.group)
            .args(args)
            .env("PGFERRY_HTTP_URL", &self.url)
            .env("PGFERRY_API_KEY", &self.key);
        c
    }

    /// Exit code, stdout, stderr.
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        let mut p = run(self.cmd(args));
        let code = p.wait(COMMAND_TIMEOUT).code().unwrap_or(-1);
        (code, p.stdout(), p.stderr())
    }

    /// The JSON a successful command printed.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let (code, out, err) = self.run(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
    }
}
