//! Process-wide counters of fires, rendered by the server's `/metrics` (Prometheus text).
//! Only the process that leads (or ran a backfill) counts; sum over servers.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::firer::FireReport;

static FIRED: AtomicU64 = AtomicU64::new(0);
static BACKFILLED: AtomicU64 = AtomicU64::new(0);
static MISSED: AtomicU64 = AtomicU64::new(0);
static SKIPPED: AtomicU64 = AtomicU64::new(0);
static BUFFERED: AtomicU64 = AtomicU64::new(0);
/// Upper bounds (seconds) of the fire-lag histogram.
const BOUNDS: [f64; 9] = [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0, 600.0];
static LAG_BUCKETS: [AtomicU64; 9] = [const { AtomicU64::new(0) }; 9];
static LAG_COUNT: AtomicU64 = AtomicU64::new(0);
static LAG_SUM_US: AtomicU64 = AtomicU64::new(0);
/// Fires written ahead of their time (ADR 0025), and how long the last preparation wrote
/// before it waited for its time (the headroom against `prepare_ahead`).
static PREPARED: AtomicU64 = AtomicU64::new(0);
static PREPARE_LAST_US: AtomicU64 = AtomicU64::new(0);
static PREPARE_MAX_US: AtomicU64 = AtomicU64::new(0);

/// Counts a committed pass.
pub fn record(report: &FireReport) {
    FIRED.fetch_add(report.fired as u64, Relaxed);
    MISSED.fetch_add(report.missed as u64, Relaxed);
    SKIPPED.fetch_add(report.skipped as u64, Relaxed);
    BUFFERED.fetch_add(report.buffered as u64, Relaxed);
    for lag in &report.lag {
        observe(*lag);
    }
}

/// Fires this process's firer committed so far (a bench embedding the firer follows its
/// progress without querying the fires table).
pub fn fired_total() -> u64 {
    FIRED.load(Relaxed)
}

/// Counts a committed preparation of `fires` fires that took `writing` before its wait.
pub fn record_prepared(fires: usize, writing: Duration) {
    let us = writing.as_micros() as u64;
    PREPARED.fetch_add(fires as u64, Relaxed);
    PREPARE_LAST_US.store(us, Relaxed);
    PREPARE_MAX_US.fetch_max(us, Relaxed);
}

/// Fires prepared ahead so far, and the last preparation's writing time.
pub fn prepared() -> (u64, Duration) {
    (
        PREPARED.load(Relaxed),
        Duration::from_micros(PREPARE_LAST_US.load(Relaxed)),
    )
}

pub fn record_backfill(n: usize) {
    BACKFILLED.fetch_add(n as u64, Relaxed);
}

fn observe(lag: Duration) {
    let s = lag.as_secs_f64();
    for (i, b) in BOUNDS.iter().enumerate() {
        if s <= *b {
            LAG_BUCKETS[i].fetch_add(1, Relaxed);
        }
    }
    LAG_COUNT.fetch_add(1, Relaxed);
    LAG_SUM_US.fetch_add(lag.as_micros() as u64, Relaxed);
}

/// Appends the schedule metrics to a Prometheus text exposition.
pub fn render(out: &mut String) {
    let name = "pgferry_schedule_fires_total";
    let _ = writeln!(
        out,
        "# HELP {name} Schedule fire times handled by this process, by outcome.\n# TYPE {name} counter"
    );
    for (outcome, c) in [
        ("fired", &FIRED),
        ("backfilled", &BACKFILLED),
        ("missed", &MISSED),
        ("skipped", &SKIPPED),
        ("buffered", &BUFFERED),
    ] {
        let _ = writeln!(out, "{name}{{outcome=\"{outcome}\"}} {}", c.load(Relaxed));
    }
    let name = "pgferry_schedule_prepared_fires_total";
    let _ = writeln!(
        out,
        "# HELP {name} Fires written ahead of their time and committed at it (ADR 0025).\n# TYPE {name} counter\n{name} {}",
        PREPARED.load(Relaxed)
    );
    for (name, what, v) in [
        (
            "pgferry_schedule_prepare_last_seconds",
            "the last",
            &PREPARE_LAST_US,
        ),
        (
            "pgferry_schedule_prepare_max_seconds",
            "the longest",
            &PREPARE_MAX_US,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} Writing time of {what} preparation of fires ahead, before its wait (compare with prepare_ahead).\n# TYPE {name} gauge\n{name} {}",
            v.load(Relaxed) as f64 / 1e6
        );
    }
    let name = "pgferry_schedule_fire_lag_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} From a fire's nominal time to its job's enqueue (committed).\n# TYPE {name} histogram"
    );
    for (i, b) in BOUNDS.iter().enumerate() {
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"{b}\"}} {}",
            LAG_BUCKETS[i].load(Relaxed)
        );
    }
    let count = LAG_COUNT.load(Relaxed);
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
    let _ = writeln!(
        out,
        "{name}_sum {}\n{name}_count {count}",
        LAG_SUM_US.load(Relaxed) as f64 / 1e6
    );
}
