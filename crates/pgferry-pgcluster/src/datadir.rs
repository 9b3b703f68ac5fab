//! Data directory bookkeeping: ownership lock, stale/orphaned postmasters, the
//! remembered port, and the server log.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::process;
use crate::ClusterError;

/// File (inside the data dir) remembering the port of the last run, so that a
/// persistent dev cluster keeps its address across restarts.
pub(crate) const PORT_FILE: &str = "pgferry-port";
/// Server stdout/stderr, truncated on every start.
pub(crate) const LOG_FILE: &str = "server.log";

/// Takes an exclusive `flock` on the data directory itself (a directory fd can be
/// flocked on Linux, and a lock *file* inside would make initdb refuse the dir as
/// non-empty). The kernel drops the lock when the owning process dies, however it
/// dies; that is what lets a later start tell "orphan of a crashed pgferry" (lock
/// free, postmaster alive: stop it) from "another pgferry is using this dir" (lock
/// held: refuse). The fd is opened O_CLOEXEC by std, so children never hold it.
pub(crate) fn lock(data_dir: &Path) -> Result<File, ClusterError> {
    let dir = File::open(data_dir).map_err(|e| ClusterError::io("could not open", data_dir, e))?;
    // SAFETY: flock on a valid fd we own; no memory is involved.
    let rc = unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(ClusterError::DataDirLocked {
                data_dir: data_dir.to_path_buf(),
            });
        }
        return Err(ClusterError::io("could not lock", data_dir, err));
    }
    Ok(dir)
}

/// Who the pid in postmaster.pid belongs to.
#[derive(Debug, PartialEq, Eq)]
enum PidOwner {
    /// No such process, or an unrelated one that reused the pid: the file is stale.
    Nobody,
    /// A live postgres serving this data dir; since we hold the lock, nobody
    /// supervises it (its pgferry crashed).
    Orphan,
    /// Alive and possibly postgres, but we cannot tell which dir it serves.
    Unknown,
}

fn classify(pid: u32, canonical_data_dir: &Path) -> PidOwner {
    if pid == std::process::id() || !process::process_exists(pid) {
        return PidOwner::Nobody;
    }
    match process::comm(pid).as_deref() {
        Some("postgres" | "postmaster") => {}
        Some(_) => return PidOwner::Nobody,
        None => return PidOwner::Unknown,
    }
    match process::cwd(pid) {
        Ok(cwd) if cwd == canonical_data_dir => PidOwner::Orphan,
        Ok(_) => PidOwner::Nobody,
        Err(_) => PidOwner::Unknown,
    }
}

/// Makes sure no postmaster is running on `data_dir` and no stale lock files are
/// left behind. Must be called with the data dir [`lock`] held.
///
/// Postgres itself ignores a postmaster.pid whose pid is dead, but refuses to start
/// if the pid was reused by an unrelated process (common in containers, where pids
/// restart from 1). So we decide ourselves and delete stale files.
pub(crate) fn take_over(data_dir: &Path) -> Result<(), ClusterError> {
    let canonical = data_dir
        .canonicalize()
        .map_err(|e| ClusterError::io("could not resolve", data_dir, e))?;
    let pidfile = data_dir.join("postmaster.pid");
    // Two rounds: an orphan stopped by SIGKILL leaves its (now stale) file behind.
    for _ in 0..2 {
        let content = match std::fs::read_to_string(&pidfile) {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
            Err(e) => return Err(ClusterError::io("could not read", &pidfile, e)),
        };
        // A standalone backend records its pid negated.
        let pid = content
            .lines()
            .next()
            .and_then(|l| l.trim().parse::<i64>().ok())
            .and_then(|p| u32::try_from(p.unsigned_abs()).ok())
            .filter(|p| *p > 0);
        let owner = pid.map_or(PidOwner::Nobody, |p| classify(p, &canonical));
        match (owner, pid) {
            (PidOwner::Orphan, Some(pid)) => {
                tracing::warn!(pid, data_dir = %data_dir.display(), "stopping orphaned postgres");
                if !process::stop_pid(pid) {
                    return Err(ClusterError::OrphanNotStopped {
                        data_dir: data_dir.to_path_buf(),
                        pid,
                    });
                }
            }
            (PidOwner::Unknown, Some(pid)) => {
                return Err(ClusterError::DataDirInUse {
                    data_dir: data_dir.to_path_buf(),
                    pid,
                })
            }
            _ => {
                tracing::info!(pidfile = %pidfile.display(), "removing stale postmaster.pid");
                remove_if_exists(&pidfile)?;
            }
        }
    }
    // The socket lock files have the same pid-reuse problem; with no postmaster
    // left on this dir they are stale by definition.
    let entries =
        std::fs::read_dir(data_dir).map_err(|e| ClusterError::io("could not read", data_dir, e))?;
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(".s.PGSQL.") {
            remove_if_exists(&entry.path())?;
        }
    }
    Ok(())
}

fn remove_if_exists(path: &Path) -> Result<(), ClusterError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(ClusterError::io("could not remove", path, e))
        }
        _ => Ok(()),
    }
}

/// Whether `postmaster.pid` says the server with `pid` is ready for connections
/// (line 8, written by PostgreSQL 10+; this is what pg_ctl waits for too).
pub(crate) fn pidfile_says_ready(data_dir: &Path, pid: u32) -> bool {
    let Ok(content) = std::fs::read_to_string(data_dir.join("postmaster.pid")) else {
        return false;
    };
    let lines: Vec<&str> = content.lines().collect();
    lines.first().and_then(|l| l.trim().parse::<u32>().ok()) == Some(pid)
        && lines.get(7).map(|l| l.trim()) == Some("ready")
}

/// Port remembered from the previous run, if any.
pub(crate) fn recorded_port(data_dir: &Path) -> Option<u16> {
    std::fs::read_to_string(data_dir.join(PORT_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|p| *p != 0)
}

pub(crate) fn record_port(data_dir: &Path, port: u16) -> Result<PathBuf, ClusterError> {
    let path = data_dir.join(PORT_FILE);
    std::fs::write(&path, format!("{port}\n"))
        .map_err(|e| ClusterError::io("could not write", &path, e))?;
    Ok(path)
}

/// Whether nothing listens on 127.0.0.1:`port` right now.
pub(crate) fn port_is_free(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// Lets the kernel pick a free loopback port. Racy by nature (someone may take it
/// before postgres binds it); the caller retries on "Address already in use".
pub(crate) fn pick_free_port() -> Result<u16, ClusterError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(ClusterError::NoFreePort)?;
    let port = listener
        .local_addr()
        .map_err(ClusterError::NoFreePort)?
        .port();
    Ok(port)
}

/// The last lines of the server log, for error messages.
pub(crate) fn log_tail(path: &Path) -> String {
    const MAX_BYTES: u64 = 8 * 1024;
    const MAX_LINES: usize = 30;
    let read = || -> std::io::Result<String> {
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(MAX_BYTES)))?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    match read() {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(MAX_LINES)..].join("\n");
            if tail.trim().is_empty() {
                "(log is empty)".to_owned()
            } else {
                tail
            }
        }
        Err(e) => format!("(could not read log: {e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_is_exclusive_and_released_on_drop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let held = lock(dir.path()).expect("first lock");
        assert!(matches!(
            lock(dir.path()),
            Err(ClusterError::DataDirLocked { .. })
        ));
        drop(held);
        lock(dir.path()).expect("lock after release");
    }

    #[test]
    fn stale_pidfile_with_dead_or_foreign_pid_is_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut dead = std::process::Command::new("true").spawn().expect("spawn");
        let dead_pid = dead.id();
        dead.wait().expect("wait");
        // A live process that is not postgres (our own pid) counts as stale too.
        for pid in [dead_pid, std::process::id()] {
            std::fs::write(dir.path().join("postmaster.pid"), format!("{pid}\n/x\n"))
                .expect("write");
            std::fs::write(dir.path().join(".s.PGSQL.5432.lock"), format!("{pid}\n"))
                .expect("write");
            take_over(dir.path()).expect("take over");
            assert!(!dir.path().join("postmaster.pid").exists());
            assert!(!dir.path().join(".s.PGSQL.5432.lock").exists());
        }
    }

    #[test]
    fn ready_line_parsing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let body = "42\n/d\n1\n5432\n/d\n127.0.0.1\n  1 2\nready   \n";
        std::fs::write(dir.path().join("postmaster.pid"), body).expect("write");
        assert!(pidfile_says_ready(dir.path(), 42));
        assert!(!pidfile_says_ready(dir.path(), 43));
        let starting = body.replace("ready   ", "starting");
        std::fs::write(dir.path().join("postmaster.pid"), starting).expect("write");
        assert!(!pidfile_says_ready(dir.path(), 42));
    }

    #[test]
    fn port_file_roundtrip_and_free_port() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(recorded_port(dir.path()), None);
        let port = pick_free_port().expect("free port");
        record_port(dir.path(), port).expect("record");
        assert_eq!(recorded_port(dir.path()), Some(port));
        let busy = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let busy_port = busy.local_addr().expect("addr").port();
        assert!(!port_is_free(busy_port));
    }
}
