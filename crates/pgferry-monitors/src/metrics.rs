//! Process-wide counters of monitors, rendered by the server's `/metrics` (Prometheus
//! text). Alerts are counted by the process that raised them (the leader for late monitors
//! and schedules, any server for pings); sum over servers. The state gauges are the
//! leader's latest count.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use crate::monitors::PingKind;

const ALERT_KINDS: [&str; 3] = ["late", "failed", "recovered"];
const SUBJECTS: [&str; 2] = ["monitor", "schedule"];
static ALERTS: [[AtomicU64; 3]; 2] = [const { [const { AtomicU64::new(0) }; 3] }; 2];
static PINGS: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];
static NOTIFIED: AtomicU64 = AtomicU64::new(0);
/// Inbound webhook requests by outcome.
pub const INBOUND: [&str; 6] = [
    "accepted",
    "duplicate",
    "bad_signature",
    "too_large",
    "unknown_endpoint",
    "rate_limited",
];
static INBOUND_COUNTS: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];
static FANOUT: AtomicU64 = AtomicU64::new(0);
type States = Vec<(String, i64)>;
static STATES: Mutex<(States, States)> = Mutex::new((Vec::new(), Vec::new()));

pub(crate) fn alert(subject_type: &str, kind: &str) {
    let s = SUBJECTS.iter().position(|x| *x == subject_type);
    let k = ALERT_KINDS.iter().position(|x| *x == kind);
    if let (Some(s), Some(k)) = (s, k) {
        ALERTS[s][k].fetch_add(1, Relaxed);
    }
}

pub(crate) fn ping(kind: PingKind) {
    let i = match kind {
        PingKind::Success => 0,
        PingKind::Start => 1,
        PingKind::Fail => 2,
    };
    PINGS[i].fetch_add(1, Relaxed);
}

pub(crate) fn notified(n: usize) {
    NOTIFIED.fetch_add(n as u64, Relaxed);
}

/// Counts an inbound webhook request (`outcome` one of [`INBOUND`]).
pub fn inbound(outcome: &str) {
    if let Some(i) = INBOUND.iter().position(|x| *x == outcome) {
        INBOUND_COUNTS[i].fetch_add(1, Relaxed);
    }
}

pub(crate) fn fanout(n: usize) {
    FANOUT.fetch_add(n as u64, Relaxed);
}

pub(crate) fn set_states(monitors: States, schedules: States) {
    *STATES.lock().expect("not poisoned") = (monitors, schedules);
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Appends the monitor metrics to a Prometheus text exposition.
pub fn render(out: &mut String) {
    let name = "pgferry_monitor_alerts_total";
    header(
        out,
        name,
        "Alerts raised by this process, by subject and kind.",
        "counter",
    );
    for (s, subject) in SUBJECTS.iter().enumerate() {
        for (k, kind) in ALERT_KINDS.iter().enumerate() {
            let n = ALERTS[s][k].load(Relaxed);
            let _ = writeln!(out, "{name}{{subject=\"{subject}\",kind=\"{kind}\"}} {n}");
        }
    }
    let name = "pgferry_monitor_pings_total";
    header(
        out,
        name,
        "Heartbeat pings received by this process, by kind.",
        "counter",
    );
    for (i, kind) in ["success", "start", "fail"].iter().enumerate() {
        let _ = writeln!(out, "{name}{{kind=\"{kind}\"}} {}", PINGS[i].load(Relaxed));
    }
    let name = "pgferry_notifications_total";
    header(
        out,
        name,
        "Notification HTTP jobs enqueued by this process.",
        "counter",
    );
    let _ = writeln!(out, "{name} {}", NOTIFIED.load(Relaxed));
    let name = "pgferry_webhook_inbound_total";
    header(
        out,
        name,
        "Inbound webhook requests answered by this process, by outcome.",
        "counter",
    );
    for (i, outcome) in INBOUND.iter().enumerate() {
        let n = INBOUND_COUNTS[i].load(Relaxed);
        let _ = writeln!(out, "{name}{{outcome=\"{outcome}\"}} {n}");
    }
    let name = "pgferry_webhook_fanout_jobs_total";
    header(
        out,
        name,
        "HTTP jobs enqueued to webhook targets (events and replays).",
        "counter",
    );
    let _ = writeln!(out, "{name} {}", FANOUT.load(Relaxed));
    let states = STATES.lock().expect("not poisoned").clone();
    let name = "pgferry_monitor_state";
    header(
        out,
        name,
        "Monitors by state (the leader's latest count).",
        "gauge",
    );
    for (state, n) in &states.0 {
        let _ = writeln!(out, "{name}{{state=\"{state}\"}} {n}");
    }
    let name = "pgferry_schedule_health";
    header(
        out,
        name,
        "Watched schedules by health (the leader's latest count).",
        "gauge",
    );
    for (state, n) in &states.1 {
        let _ = writeln!(out, "{name}{{state=\"{state}\"}} {n}");
    }
}
