//! Small process helpers: liveness, identity via /proc, signalling, bounded waits.

use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

pub(crate) const POLL: Duration = Duration::from_millis(20);
/// How long a fast shutdown (SIGINT) may take before we escalate.
pub(crate) const FAST_SHUTDOWN: Duration = Duration::from_secs(30);
/// How long each escalation step (SIGQUIT, then SIGKILL) may take.
const ESCALATION: Duration = Duration::from_secs(5);

/// Converts to a pid_t we may signal. 0 and values that do not fit would address
/// process groups (kill(0, ..) hits our own group), so they are rejected.
fn as_pid(pid: u32) -> Option<libc::pid_t> {
    libc::pid_t::try_from(pid).ok().filter(|p| *p > 0)
}

/// Sends `sig`; returns false if the process does not exist (or the pid is invalid).
pub(crate) fn signal(pid: u32, sig: libc::c_int) -> bool {
    let Some(pid) = as_pid(pid) else {
        return false;
    };
    // SAFETY: kill has no memory-safety preconditions; pid is a single positive pid.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// True if a process with this pid exists and is not a zombie. A zombie has exited;
/// it only lingers because its parent has not reaped it (some container inits never
/// do), so for our purposes it is gone.
pub(crate) fn process_exists(pid: u32) -> bool {
    let Some(raw) = as_pid(pid) else {
        return false;
    };
    // SAFETY: signal 0 only performs the existence/permission check.
    let rc = unsafe { libc::kill(raw, 0) };
    if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    // rc == 0, or EPERM: the process exists (owned by someone else).
    !is_zombie(pid)
}

fn is_zombie(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // Format: "pid (comm) S ..."; comm may contain spaces or ')' so use the last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state == "Z")
}

/// The kernel's short name of the process (`postgres` for a postmaster started
/// from `bin/postgres`). `None` without /proc or if the process is gone.
pub(crate) fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_owned())
}

/// Working directory of the process. A postmaster chdirs into its data directory
/// before it writes postmaster.pid, so this identifies which cluster it serves.
pub(crate) fn cwd(pid: u32) -> std::io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/cwd"))
}

/// Reaps `pid` if it happens to be our child (e.g. a postmaster whose owning
/// `Cluster` was leaked); otherwise a no-op (ECHILD).
fn reap_if_child(pid: u32) {
    if let Some(pid) = as_pid(pid) {
        let mut status = 0;
        // SAFETY: WNOHANG makes this non-blocking; status points to a live local.
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    }
}

/// Polls until the process is gone or `timeout` elapses; true if gone.
pub(crate) fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        reap_if_child(pid);
        if !process_exists(pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// Stops a postmaster that is not our `Child`: fast shutdown, then escalation.
/// Returns true once it is gone.
pub(crate) fn stop_pid(pid: u32) -> bool {
    for (sig, patience) in [
        (libc::SIGINT, FAST_SHUTDOWN),
        (libc::SIGQUIT, ESCALATION),
        (libc::SIGKILL, ESCALATION),
    ] {
        if !signal(pid, sig) {
            // Gone already, or not ours to signal (EPERM): report what is true now.
            reap_if_child(pid);
            return !process_exists(pid);
        }
        if wait_gone(pid, patience) {
            return true;
        }
        tracing::warn!(pid, sig, "postgres did not exit in time; escalating");
    }
    false
}

/// Stops our own postmaster child: SIGINT (fast shutdown: abort transactions,
/// disconnect clients, checkpoint), then SIGQUIT, then SIGKILL. Always reaps it.
/// Returns false if escalation beyond SIGINT was needed.
pub(crate) fn stop_child(child: &mut Child) -> bool {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return true;
    }
    let pid = child.id();
    for (sig, patience) in [(libc::SIGINT, FAST_SHUTDOWN), (libc::SIGQUIT, ESCALATION)] {
        signal(pid, sig);
        if wait_child(child, patience) {
            return sig == libc::SIGINT;
        }
        tracing::warn!(pid, sig, "postgres did not exit in time; escalating");
    }
    // Child::kill sends SIGKILL; a final blocking wait cannot hang after that.
    let _ = child.kill();
    let _ = child.wait();
    false
}

fn wait_child(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            // An error means it was reaped elsewhere: nothing left to wait for.
            Err(_) => return true,
            Ok(None) => {}
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_and_invalid_pids_do_not_exist() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        child.wait().expect("wait");
        assert!(!process_exists(pid));
        assert!(
            !process_exists(0),
            "pid 0 must never be treated as a process"
        );
        assert!(!signal(0, 0));
        assert!(!process_exists(u32::MAX));
    }

    #[test]
    fn zombie_counts_as_gone() {
        let child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        // Not reaped yet: a zombie until wait_gone reaps it.
        assert!(wait_gone(pid, Duration::from_secs(10)));
        drop(child);
    }

    #[test]
    fn stop_pid_stops_a_sleeper() {
        let child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        // Right after spawn the child may not have exec'd yet (comm is still our thread's).
        for _ in 0..500 {
            if comm(pid).as_deref() == Some("sleep") {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(comm(pid).as_deref(), Some("sleep"));
        assert!(stop_pid(pid));
        drop(child);
    }
}
