//! CPU contention for a run: busy loops in child processes (issue 21, "stable under CPU
//! contention": a loaded machine is where the gRPC path lost more than the in-process one).
//! Processes of their own, so [`crate::cpu`] (this process and the cluster's) does not
//! count their CPU; each competes with every other runnable thread the way a neighbour's
//! build does.

use std::process::{Child, Command, Stdio};

/// Running busy loops; dropping them kills them.
pub struct Hogs(Vec<Child>);

impl Hogs {
    /// `n` busy loops (0: none). Each also stops by itself once this process is gone, so
    /// a bench killed with SIGKILL leaves no loop spinning on the machine.
    pub fn start(n: usize) -> std::io::Result<Hogs> {
        Self::start_watching(n, std::process::id())
    }

    /// `n` busy loops that stop by themselves when process `pid` is gone.
    fn start_watching(n: usize, pid: u32) -> std::io::Result<Hogs> {
        // `[` is a shell builtin: each turn is one stat() of /proc/<pid>, the rest is the
        // shell's own interpretation loop, all CPU.
        let script = format!("while [ -e /proc/{pid} ]; do :; done");
        let mut hogs = Hogs(Vec::with_capacity(n));
        for _ in 0..n {
            let child = Command::new("sh")
                .arg("-c")
                .arg(&script)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            hogs.0.push(child);
        }
        Ok(hogs)
    }

    /// The loops' process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.0.iter().map(Child::id).collect()
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// CPU seconds (user + system) of process `pid`, None once it is gone.
    fn cpu_s(pid: u32) -> Option<f64> {
        crate::cpu::stat(pid).map(|s| s.own_s)
    }

    #[test]
    fn hogs_burn_cpu_until_dropped() {
        let hogs = Hogs::start(2).unwrap();
        let pids = hogs.pids();
        assert_eq!(pids.len(), 2);
        std::thread::sleep(Duration::from_millis(600));
        for &pid in &pids {
            let used = cpu_s(pid).expect("running");
            assert!(
                used >= 0.1,
                "a busy loop used only {used} s of CPU in 0.6 s"
            );
        }
        drop(hogs);
        for &pid in &pids {
            assert!(cpu_s(pid).is_none(), "{pid} still runs after the drop");
        }
    }

    #[test]
    fn hogs_stop_by_themselves_when_the_watched_process_is_gone() {
        let mut watched = Command::new("sleep").arg("0.3").spawn().unwrap();
        let hogs = Hogs::start_watching(1, watched.id()).unwrap();
        watched.wait().unwrap();
        let pid = hogs.pids()[0];
        let mut hogs = hogs;
        let child = &mut hogs.0[0];
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "the loop ended by itself: {status}");
                break;
            }
            assert!(Instant::now() < deadline, "{pid} kept spinning");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
