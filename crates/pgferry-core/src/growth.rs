//! How "the log grew" reaches the ticker (issue 27).
//!
//! The ticker sleeps `idle_tick_interval` (50 ms) once a check finds nothing new, and is
//! woken early only by an enqueue. An enqueue in the leader's own process wakes it through
//! [`LogGrowth::here`]; an enqueue in any other process used to wait for the idle interval
//! (or for the leader's next own enqueue), which is where a non-leader's enqueue → start
//! time went at light rates. Now the listener of a process that is not ticking sends one
//! `pgferry_grew` NOTIFY after such an enqueue — unless a tick heard meanwhile shows the
//! ticker busy — and the leader's listener wakes its ticker through
//! [`LogGrowth::elsewhere`] (listen.rs).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// The ticker's wake-up signals of one process.
#[derive(Debug, Default)]
pub struct LogGrowth {
    /// This process appended to the log: its own ticker (if it leads) wakes now.
    pub(crate) here: Arc<Notify>,
    /// The same event for the listener, which tells the leader when this process does not
    /// tick itself (a separate Notify: `notify_one` wakes one waiter only).
    pub(crate) nudge: Notify,
    /// Another process appended to the log (its `pgferry_grew` NOTIFY was heard).
    pub(crate) elsewhere: Notify,
    /// This process's ticker is running (it leads): no nudges are needed.
    ticking: AtomicBool,
}

impl LogGrowth {
    /// Called after a statement that appended to the log committed.
    pub fn grew(&self) {
        self.here.notify_one();
        self.nudge.notify_one();
    }

    /// Whether this process's ticker runs.
    pub fn ticking(&self) -> bool {
        self.ticking.load(Ordering::Relaxed)
    }

    pub(crate) fn set_ticking(&self, on: bool) {
        self.ticking.store(on, Ordering::Relaxed);
    }

    /// A nudge from another process was heard: wakes this process's ticker if it runs
    /// (otherwise nothing is kept, so a later leadership starts without a stale wake-up).
    pub(crate) fn heard_elsewhere(&self) {
        if self.ticking() {
            self.elsewhere.notify_one();
        }
    }
}
