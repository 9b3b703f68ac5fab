//! What each of this process's pooled database backends is serving right now (role, queue,
//! job kind), for active session history: `pgferry-ash`'s sampler reads [`snapshot`] at every
//! sample and stores it with the backend's wait, so load can be broken down by queue, kind and
//! tenant (docs/ash.md). `application_name` already says the role, but it is fixed per pool,
//! and a `SET` per operation would cost a round trip.
//!
//! The pool learns each connection's backend pid once, when it connects (one `SELECT`); an
//! operation marks its connection with [`serve`] for as long as its guard lives. Cost per
//! operation: one uncontended mutex, a hash map insert and remove, and one `Instant::now()`
//! (when the operation began: other servers' samplers check that a statement began inside
//! it, `pgferry_ash::publish`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

use deadpool_postgres::{ClientWrapper, HookError, StatementCache};

/// What a backend is doing for pgferry. `queue` is the engine's name (`t<tenant>.<queue>` for a
/// tenant's queue); empty when the operation has no single queue or kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Serving {
    pub role: &'static str,
    pub queue: String,
    pub kind: String,
}

#[derive(Default)]
struct Registry {
    /// Backend pid of each live pooled connection, keyed by its statement cache (one per
    /// connection, alive exactly as long as the connection).
    pids: HashMap<usize, (Weak<StatementCache>, i32)>,
    /// What each backend serves, and since when (other servers' samplers check that the
    /// statement they saw began inside the operation: pgferry-ash's publish.rs).
    serving: HashMap<i32, (Serving, Instant)>,
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(Default::default)
}

fn key(c: &ClientWrapper) -> usize {
    Arc::as_ptr(&c.statement_cache) as usize
}

/// The pool's post-create hook: remembers the new connection's backend pid.
pub(crate) fn learn_pid(
    c: &mut ClientWrapper,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), HookError>> + Send + '_>> {
    Box::pin(async move {
        let pid: i32 = c
            .query_one("SELECT pg_backend_pid() AS pid", &[])
            .await
            .map_err(HookError::Backend)?
            .get("pid");
        let mut r = registry().lock().expect("serving registry");
        r.pids.retain(|_, (w, _)| w.strong_count() > 0);
        r.pids
            .insert(key(c), (Arc::downgrade(&c.statement_cache), pid));
        Ok(())
    })
}

/// Marks `client` as serving `role` for `queue` / `kind` until the guard drops.
pub fn serve(client: &ClientWrapper, role: &'static str, queue: &str, kind: &str) -> ServingGuard {
    let mut r = registry().lock().expect("serving registry");
    let pid = r.pids.get(&key(client)).map(|(_, pid)| *pid);
    if let Some(pid) = pid {
        r.serving.insert(
            pid,
            (
                Serving {
                    role,
                    queue: queue.to_string(),
                    kind: kind.to_string(),
                },
                Instant::now(),
            ),
        );
    }
    ServingGuard(pid)
}

/// Clears its backend's mark when dropped.
#[must_use]
pub struct ServingGuard(Option<i32>);

impl Drop for ServingGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            registry()
                .lock()
                .expect("serving registry")
                .serving
                .remove(&pid);
        }
    }
}

/// The backends serving something right now, by pid.
pub fn snapshot() -> HashMap<i32, Serving> {
    registry()
        .lock()
        .expect("serving registry")
        .serving
        .iter()
        .map(|(pid, (s, _))| (*pid, s.clone()))
        .collect()
}

/// The backends serving something right now, by pid, with when each operation began.
pub fn snapshot_since() -> HashMap<i32, (Serving, Instant)> {
    registry().lock().expect("serving registry").serving.clone()
}

/// The one queue (or kind) of a batch, or "" when it has several.
pub fn single<'a>(mut names: impl Iterator<Item = &'a str>) -> &'a str {
    let first = names.next().unwrap_or("");
    if names.all(|n| n == first) {
        first
    } else {
        ""
    }
}
