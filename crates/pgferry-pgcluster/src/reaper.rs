//! A watchdog process that stops the cluster when its owner dies, however it dies.
//!
//! Destructors do not run on abort, SIGKILL or `panic = "abort"`, and statics are
//! never dropped, so a test binary cannot rely on `Drop` to stop its postmaster.
//! Instead a tiny `sh` child blocks reading a pipe whose only write end lives in
//! our process. The kernel closes that end when we exit for any reason; the read
//! returns EOF and the watchdog stops the postmaster and removes the directory.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::{Cluster, ClusterError};

/// `$1` postmaster pid, `$2` directory to remove (may be empty), `$3` socket dir
/// to remove if empty (may be empty).
///
/// - HUP/INT are ignored so a closing terminal or Ctrl-C cannot kill the watchdog
///   before it has cleaned up (it is also in its own process group).
/// - `read` returns on the line "disarm" (explicit opt-out) or on EOF (owner gone).
/// - The pid is only signalled while it still names a postgres process, to avoid
///   hitting an unrelated process that reused the pid.
/// - A zombie counts as exited: the postmaster is reparented when we die, and some
///   container inits never reap.
const SCRIPT: &str = r#"
trap '' HUP INT
IFS= read -r cmd
[ "$cmd" = disarm ] && exit 0
is_postgres() {
  kill -0 "$1" 2>/dev/null || return 1
  [ -r "/proc/$1/stat" ] || return 0
  read -r _ comm state _ < "/proc/$1/stat" || return 1
  [ "$state" != Z ] && { [ "$comm" = "(postgres)" ] || [ "$comm" = "(postmaster)" ]; }
}
if is_postgres "$1"; then
  kill -INT "$1" 2>/dev/null
  i=0
  while is_postgres "$1"; do
    i=$((i + 1))
    if [ "$i" -ge 300 ]; then
      kill -QUIT "$1" 2>/dev/null; sleep 1; kill -KILL "$1" 2>/dev/null; break
    fi
    sleep 0.1 2>/dev/null || sleep 1
  done
fi
[ -n "$2" ] && [ "$2" != / ] && rm -rf -- "$2"
[ -n "$3" ] && rmdir -- "$3" 2>/dev/null
exit 0
"#;

/// Handle to a watchdog started by [`Cluster::spawn_reaper`].
///
/// Keep it alive as long as the cluster should run: dropping it triggers the
/// cleanup immediately (and waits for it). Use [`Reaper::disarm`] to dismiss it
/// without touching the cluster.
#[derive(Debug)]
pub struct Reaper {
    child: Child,
    pipe: Option<ChildStdin>,
}

impl Cluster {
    /// Starts a watchdog that, once this process exits (normally, by panic, abort
    /// or SIGKILL) or the returned [`Reaper`] is dropped, stops the postmaster
    /// (SIGINT, up to 30 s, then SIGQUIT/SIGKILL) and removes `remove_dir`.
    pub fn spawn_reaper(&self, remove_dir: Option<PathBuf>) -> Result<Reaper, ClusterError> {
        // The watchdog runs in "/", so a relative path would be resolved against
        // the root directory by `rm -rf`: make it absolute against our cwd now.
        let remove_dir = remove_dir
            .map(|dir| {
                std::path::absolute(&dir).map_err(|e| ClusterError::io("could not resolve", dir, e))
            })
            .transpose()?;
        let program = PathBuf::from("/bin/sh");
        let socket_dir = if self.owns_socket_dir() {
            self.socket_dir().as_os_str().to_owned()
        } else {
            Default::default()
        };
        let mut child = Command::new(&program)
            .arg("-c")
            .arg(SCRIPT)
            .arg("pgferry-reaper") // $0
            .arg(self.postmaster_pid().to_string())
            .arg(remove_dir.map(PathBuf::into_os_string).unwrap_or_default())
            .arg(socket_dir)
            .current_dir("/")
            // std creates the pipe O_CLOEXEC: the write end stays in this process
            // only and cannot leak into later children (which would keep it open).
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|source| ClusterError::Spawn { program, source })?;
        let pipe = child.stdin.take();
        Ok(Reaper { child, pipe })
    }
}

impl Reaper {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Dismisses the watchdog without stopping anything (e.g. after a clean stop).
    pub fn disarm(mut self) {
        if let Some(mut pipe) = self.pipe.take() {
            // If the write fails the watchdog sees EOF instead and cleans up, which
            // is the safe direction.
            let _ = pipe.write_all(b"disarm\n");
        }
        let _ = self.child.wait();
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        // Closing the pipe is the trigger; waiting reaps the watchdog and makes
        // the cleanup finished by the time drop returns.
        drop(self.pipe.take());
        let _ = self.child.wait();
    }
}
