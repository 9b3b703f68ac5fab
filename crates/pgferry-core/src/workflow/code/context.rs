//! The context a code-first workflow function receives. Each call takes the next position
//! of the journal: a recorded position returns its recorded result without running
//! anything; a new one runs (a step) or suspends the function (sleep, signal, children),
//! and the engine's outcome writes the journal. A call that does not match the recorded
//! one at its position is a [`Divergence`]: the function is stopped there, and the user's
//! code cannot swallow it.

use std::fmt::Display;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::journal::{ChildRecord, Entry, SignalRecord};
use crate::job::Backoff;
use crate::workflow::{Child, ChildResult, Signal, Wake};

/// The code calls something other than what the journal recorded at this position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("non-determinism at journal position {position}: recorded {recorded}, the code now calls {found}")]
pub struct Divergence {
    pub position: usize,
    pub recorded: String,
    pub found: String,
}

/// A step that ended with an error after its retries (recorded: a replay returns the same).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("step {step:?} failed: {message}")]
pub struct StepError {
    pub step: String,
    pub message: String,
}

/// How often a step runs again after an error, and after which delays.
#[derive(Debug, Clone, Copy)]
pub struct Retries {
    /// Runs after the first (0: the first error is the step's result).
    pub max: i32,
    pub backoff: Backoff,
}

impl Default for Retries {
    fn default() -> Retries {
        Retries {
            max: 3,
            backoff: Backoff {
                base: Duration::from_secs(1),
                cap: Duration::from_secs(300),
            },
        }
    }
}

impl Retries {
    pub fn new(max: i32) -> Retries {
        Retries {
            max,
            ..Retries::default()
        }
    }

    pub fn backoff(mut self, base: Duration, cap: Duration) -> Retries {
        self.backoff = Backoff { base, cap };
        self
    }
}

/// Why the function stopped before returning.
#[derive(Debug)]
pub(crate) enum Suspend {
    /// Write the journal and run on (a step ended, and another is about to run).
    Next,
    Retry {
        delay: Duration,
        reason: String,
    },
    Sleep {
        until: SystemTime,
    },
    Await {
        names: Vec<String>,
        timeout: Option<Duration>,
    },
    Spawn {
        children: Vec<Child>,
        any: bool,
    },
    Diverged(Divergence),
    /// Replay only: the function went past what the journal recorded.
    EndOfRecord,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// On a worker; `attempt` of the claim (the attempt of its first new step).
    Live { attempt: i32 },
    /// Re-running a record: nothing runs, nothing is written.
    Replay,
}

struct Inner {
    journal: Vec<Entry>,
    pos: usize,
    mode: Mode,
    /// The journal holds what no outcome wrote yet: a step ended in this claim, or a
    /// resume filled in a signal or the children. The next step writes it first.
    dirty: bool,
    suspend: Option<Suspend>,
}

pub(super) enum Slot {
    Recorded(Entry),
    New,
    Halt,
}

/// The context of one run of a workflow function (cheap to clone).
#[derive(Clone)]
pub struct Ctx {
    id: i64,
    inner: Arc<Mutex<Inner>>,
}

impl Ctx {
    /// A claim's run: a resume's signal or children fill in the pending last entry.
    pub(crate) fn live(
        id: i64,
        mut journal: Vec<Entry>,
        attempt: i32,
        wake: Option<Wake>,
        inbox: Option<Vec<Signal>>,
        children: Option<Vec<ChildResult>>,
    ) -> Ctx {
        let mut dirty = false;
        match (journal.last_mut(), wake) {
            (
                Some(Entry::Signal {
                    names,
                    done: done @ false,
                    got,
                }),
                Some(Wake::Signal | Wake::Timeout),
            ) => {
                *done = true;
                *got = inbox.unwrap_or_default().into_iter().find_map(|s| {
                    names.contains(&s.name).then_some(SignalRecord {
                        signal_id: s.signal_id,
                        name: s.name,
                        payload: s.payload,
                    })
                });
                dirty = true;
            }
            (
                Some(Entry::Children {
                    results: r @ None, ..
                }),
                Some(Wake::Children),
            ) => {
                *r = Some(
                    children
                        .unwrap_or_default()
                        .into_iter()
                        .map(|c| ChildRecord {
                            id: c.id,
                            kind: c.kind,
                            status: c.status,
                            result: c.result,
                            error: c.error,
                        })
                        .collect(),
                );
                dirty = true;
            }
            _ => {}
        }
        Ctx::with(id, journal, Mode::Live { attempt }, dirty)
    }

    pub(crate) fn replay(id: i64, journal: Vec<Entry>) -> Ctx {
        Ctx::with(id, journal, Mode::Replay, false)
    }

    fn with(id: i64, journal: Vec<Entry>, mode: Mode, dirty: bool) -> Ctx {
        Ctx {
            id,
            inner: Arc::new(Mutex::new(Inner {
                journal,
                pos: 0,
                mode,
                dirty,
                suspend: None,
            })),
        }
    }

    /// The instance's id.
    pub fn id(&self) -> i64 {
        self.id
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while the lock is held cannot leave Inner half-written (no await inside).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn take_suspend(&self) -> Option<Suspend> {
        self.lock().suspend.take()
    }

    pub(super) fn is_replay(&self) -> bool {
        self.lock().mode == Mode::Replay
    }

    /// The journal holds entries no outcome wrote yet.
    pub(crate) fn dirty(&self) -> bool {
        self.lock().dirty
    }

    pub(crate) fn journal(&self) -> Vec<Entry> {
        self.lock().journal.clone()
    }

    /// (positions consumed, positions recorded).
    pub(crate) fn progress(&self) -> (usize, usize) {
        let g = self.lock();
        (g.pos, g.journal.len())
    }

    /// The first recorded position the function did not reach, as a divergence (the
    /// function returned earlier than it did before).
    pub(crate) fn unconsumed(&self) -> Option<Divergence> {
        let g = self.lock();
        g.journal.get(g.pos).map(|e| Divergence {
            position: g.pos,
            recorded: e.label(),
            found: "the workflow's end".into(),
        })
    }

    pub(super) fn suspend(&self, s: Suspend) {
        let mut g = self.lock();
        if g.suspend.is_none() {
            g.suspend = Some(s);
        }
    }

    pub(super) fn diverge(&self, position: usize, recorded: String, found: String) {
        self.suspend(Suspend::Diverged(Divergence {
            position,
            recorded,
            found,
        }));
    }

    /// The next position: its recorded entry if it matches `same`, or new, or halt.
    pub(super) fn slot(
        &self,
        found: impl FnOnce() -> String,
        same: impl FnOnce(&Entry) -> bool,
    ) -> Slot {
        let mut g = self.lock();
        if g.suspend.is_some() {
            return Slot::Halt;
        }
        if let Some(e) = g.journal.get(g.pos).cloned() {
            if same(&e) {
                g.pos += 1;
                return Slot::Recorded(e);
            }
            let position = g.pos;
            g.suspend = Some(Suspend::Diverged(Divergence {
                position,
                recorded: e.label(),
                found: found(),
            }));
            return Slot::Halt;
        }
        if g.mode == Mode::Replay {
            g.suspend = Some(Suspend::EndOfRecord);
            return Slot::Halt;
        }
        Slot::New
    }

    pub(super) fn push(&self, e: Entry) {
        let mut g = self.lock();
        g.journal.push(e);
        g.pos += 1;
    }

    /// Never resolves: the driver sees the suspension and drops the function.
    pub(super) async fn halt<T>() -> T {
        futures_util::future::pending().await
    }

    /// Runs `f` once (retried on error, [`Retries::default`]) and records its result.
    pub async fn step<T, E, F, Fut>(&self, name: &str, f: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        E: Display,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.step_with(name, Retries::default(), f).await
    }

    /// [`Ctx::step`] with its own retries. An error with retries left ends the claim with
    /// the engine's `retry` (the function runs again from its journal after the backoff);
    /// the last error is recorded and returned.
    pub async fn step_with<T, E, F, Fut>(
        &self,
        name: &str,
        retries: Retries,
        f: F,
    ) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        E: Display,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let same = |e: &Entry| matches!(e, Entry::Step { name: n, .. } if n == name);
        match self.slot(|| format!("step {name:?}"), same) {
            Slot::Recorded(Entry::Step { ok, err, .. }) => {
                if let Some(message) = err {
                    return Err(StepError {
                        step: name.into(),
                        message,
                    });
                }
                match serde_json::from_value(ok.unwrap_or(Value::Null)) {
                    Ok(v) => return Ok(v),
                    Err(e) => {
                        let pos = self.progress().0 - 1;
                        self.diverge(
                            pos,
                            format!("step {name:?}"),
                            format!("step {name:?} whose recorded result does not decode: {e}"),
                        );
                        return Ctx::halt().await;
                    }
                }
            }
            Slot::New => {}
            Slot::Recorded(_) | Slot::Halt => return Ctx::halt().await,
        }
        let attempt = {
            let mut g = self.lock();
            if g.dirty {
                // One new step per claim: what ran before is written before this runs.
                g.suspend = Some(Suspend::Next);
                None
            } else {
                g.dirty = true;
                Some(match g.mode {
                    Mode::Live { attempt } => attempt,
                    Mode::Replay => 1,
                })
            }
        };
        let Some(attempt) = attempt else {
            return Ctx::halt().await;
        };
        match f().await {
            Ok(v) => match serde_json::to_value(&v) {
                Ok(ok) => {
                    self.push(Entry::Step {
                        name: name.into(),
                        ok: Some(ok),
                        err: None,
                    });
                    Ok(v)
                }
                Err(e) => self.step_failed(name, format!("result does not serialize: {e}")),
            },
            Err(e) if attempt <= retries.max => {
                self.suspend(Suspend::Retry {
                    delay: retries.backoff.delay(attempt),
                    reason: format!("step {name:?}: {e}"),
                });
                Ctx::halt().await
            }
            Err(e) => self.step_failed(name, e.to_string()),
        }
    }

    fn step_failed<T>(&self, name: &str, message: String) -> Result<T, StepError> {
        self.push(Entry::Step {
            name: name.into(),
            ok: None,
            err: Some(message.clone()),
        });
        Err(StepError {
            step: name.into(),
            message,
        })
    }

    /// Sleeps durably: the instance parks (no worker slot, no connection) until `d` passed.
    pub async fn sleep(&self, d: Duration) {
        match self.slot(|| "sleep".into(), |e| matches!(e, Entry::Sleep { .. })) {
            Slot::Recorded(_) => {}
            Slot::Halt => Ctx::halt().await,
            Slot::New => {
                let until = SystemTime::now() + d;
                self.push(Entry::Sleep {
                    until_ms: epoch_ms(until),
                });
                self.suspend(Suspend::Sleep { until });
                Ctx::halt().await
            }
        }
    }

    /// Waits durably for a signal with one of `names` (one already in the inbox counts);
    /// None when `timeout` passed first.
    pub async fn wait_for_signal(
        &self,
        names: &[&str],
        timeout: Option<Duration>,
    ) -> Option<SignalRecord> {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let same = |e: &Entry| matches!(e, Entry::Signal { names: n, .. } if *n == names);
        match self.slot(|| format!("wait_for_signal {names:?}"), same) {
            Slot::Recorded(Entry::Signal {
                done: true, got, ..
            }) => got,
            Slot::Recorded(_) => {
                // Recorded but not resumed yet: park again (replay: the record ends here).
                let replay = self.lock().mode == Mode::Replay;
                self.suspend(if replay {
                    Suspend::EndOfRecord
                } else {
                    Suspend::Await { names, timeout }
                });
                Ctx::halt().await
            }
            Slot::Halt => Ctx::halt().await,
            Slot::New => {
                self.push(Entry::Signal {
                    names: names.clone(),
                    done: false,
                    got: None,
                });
                self.suspend(Suspend::Await { names, timeout });
                Ctx::halt().await
            }
        }
    }
}

impl Ctx {
    /// The current time, recorded: a replay returns the same instant.
    pub async fn now(&self) -> SystemTime {
        match self.slot(|| "now".into(), |e| matches!(e, Entry::Now { .. })) {
            Slot::Recorded(Entry::Now { ms }) => {
                SystemTime::UNIX_EPOCH + Duration::from_secs_f64(ms.max(0.0) / 1000.0)
            }
            Slot::New => {
                let t = SystemTime::now();
                self.push(Entry::Now { ms: epoch_ms(t) });
                t
            }
            Slot::Recorded(_) | Slot::Halt => Ctx::halt().await,
        }
    }

    /// A random number, recorded: a replay returns the same number.
    pub async fn random(&self) -> u64 {
        match self.slot(|| "random".into(), |e| matches!(e, Entry::Random { .. })) {
            Slot::Recorded(Entry::Random { v }) => v,
            Slot::New => {
                let v = rand::random::<u64>();
                self.push(Entry::Random { v });
                v
            }
            Slot::Recorded(_) | Slot::Halt => Ctx::halt().await,
        }
    }
}

impl Ctx {
    /// A version marker for changing a running workflow (Temporal's `patched`): true on a
    /// run that reaches this point for the first time (the marker is recorded) or whose
    /// record has the marker here; false on a run recorded before the change (the record
    /// has something else here), which then follows the old code path.
    pub async fn patched(&self, name: &str) -> bool {
        let (recorded_other, replay) = {
            let mut g = self.lock();
            if g.suspend.is_some() {
                (None, false)
            } else {
                match g.journal.get(g.pos) {
                    Some(Entry::Patch { name: n }) if n == name => {
                        g.pos += 1;
                        return true;
                    }
                    Some(_) => (Some(false), false),
                    None => (None, g.mode == Mode::Replay),
                }
            }
        };
        if let Some(v) = recorded_other {
            return v;
        }
        if replay {
            self.suspend(Suspend::EndOfRecord);
        }
        if self.lock().suspend.is_some() {
            return Ctx::halt().await;
        }
        self.push(Entry::Patch { name: name.into() });
        true
    }
}

fn epoch_ms(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}
