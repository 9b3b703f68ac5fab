//! CPU time spent per job during a measured window: the bench process (the server, its
//! clients and the variant's own tasks) and the cluster's Postgres processes, read from
//! `/proc`. Unlike jobs/s, CPU per job does not move when other work on the machine takes
//! cores away, so two variants measured minutes apart on a busy 2-core machine can still
//! be compared (issue 21: the gRPC path against the runtime). Linux only; `None` elsewhere or
//! when the cluster is not a local process.

use serde::Serialize;
use tokio_postgres::Client;

/// CPU microseconds per job finished in the window.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PerJob {
    pub bench_us: f64,
    pub postgres_us: f64,
    pub total_us: f64,
}

/// CPU seconds used so far by this process and by the cluster.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    bench_s: f64,
    postgres_s: f64,
}

impl Sample {
    /// Reads both; `admin` is any connection of the cluster (its backend's parent is the
    /// postmaster).
    pub async fn take(admin: &Client) -> Option<Sample> {
        let backend: i32 = admin
            .query_one("SELECT pg_backend_pid() AS pid", &[])
            .await
            .ok()?
            .get("pid");
        let postmaster = stat(backend.try_into().ok()?)?.ppid;
        Some(Sample {
            bench_s: stat(std::process::id())?.own_s,
            postgres_s: postgres_s(postmaster)?,
        })
    }

    /// CPU per job between `self` and `end` for `jobs` jobs.
    pub fn per_job(&self, end: &Sample, jobs: u64) -> Option<PerJob> {
        if jobs == 0 {
            return None;
        }
        let us = |s: f64| s * 1e6 / jobs as f64;
        let bench_us = us(end.bench_s - self.bench_s);
        let postgres_us = us(end.postgres_s - self.postgres_s);
        Some(PerJob {
            bench_us,
            postgres_us,
            total_us: bench_us + postgres_us,
        })
    }
}

pub(crate) struct Stat {
    ppid: u32,
    /// utime + stime, seconds.
    pub(crate) own_s: f64,
    /// cutime + cstime: children reaped by this process, seconds.
    reaped_s: f64,
}

fn ticks_per_s() -> f64 {
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Fields of `/proc/<pid>/stat` (after the command name, which may hold spaces).
pub(crate) fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields by their number in proc(5): `rest` starts at field 3 (state); ppid is field 4,
    // utime..cstime fields 14..17.
    let field = |i: usize| f.get(i - 3).copied();
    let n = |i: usize| field(i)?.parse::<f64>().ok();
    let tick = ticks_per_s();
    Some(Stat {
        ppid: field(4)?.parse().ok()?,
        own_s: (n(14)? + n(15)?) / tick,
        reaped_s: (n(16)? + n(17)?) / tick,
    })
}

/// The postmaster's own time, what it reaped from exited backends, and its live children's.
fn postgres_s(postmaster: u32) -> Option<f64> {
    let pm = stat(postmaster)?;
    let mut total = pm.own_s + pm.reaped_s;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(s) = stat(pid).filter(|s| s.ppid == postmaster) {
            total += s.own_s;
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_used_some_cpu_and_its_parent_is_known() {
        // Burn a little CPU so the tick counters move.
        let mut x = 0u64;
        for i in 0..50_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let s = stat(std::process::id()).expect("own /proc stat");
        assert!(s.own_s > 0.0);
        assert!(s.ppid > 0);
    }

    #[test]
    fn per_job_divides_the_difference() {
        let a = Sample {
            bench_s: 1.0,
            postgres_s: 2.0,
        };
        let b = Sample {
            bench_s: 1.5,
            postgres_s: 3.0,
        };
        let p = a.per_job(&b, 1000).unwrap();
        assert!((p.bench_us - 500.0).abs() < 1e-9);
        assert!((p.postgres_us - 1000.0).abs() < 1e-9);
        assert!((p.total_us - 1500.0).abs() < 1e-9);
        assert!(a.per_job(&b, 0).is_none());
    }
}
