//! Single flight for cache misses: callers that miss a cache for the same key at the same
//! moment take turns on one lock, so the first does the lookup and the others find its
//! answer in the cache (issue 22: when a busy entry expired, every request in flight — 64
//! in the benchmark — looked it up at once, each holding one of the pool's connections).
//! Used by the API-key cache (auth/mod.rs) and the HTTP jobs' allow lists
//! (http/http_jobs.rs).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

type Lock = Arc<tokio::sync::Mutex<()>>;

/// Lookups under way, by key; an entry lives while a caller holds or waits for its turn.
pub struct Flights<K> {
    inflight: Mutex<HashMap<K, Lock>>,
}

impl<K> Default for Flights<K> {
    fn default() -> Self {
        Flights {
            inflight: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Hash + Eq + Clone> Flights<K> {
    /// Joins `key`'s flight. The caller then waits for its turn (`flight.lock.lock()`), and
    /// checks the cache again before looking up.
    pub fn join(&self, key: K) -> Flight<'_, K> {
        let lock = self
            .inflight
            .lock()
            .expect("flights not poisoned")
            .entry(key.clone())
            .or_default()
            .clone();
        Flight {
            flights: self,
            key,
            lock,
        }
    }
}

/// A caller's part in one key's lookup; the last one out (answered, failed or cancelled,
/// also while still waiting) removes the flight, so the map holds only lookups under way.
pub struct Flight<'a, K: Hash + Eq + Clone> {
    flights: &'a Flights<K>,
    key: K,
    pub lock: Lock,
}

impl<K: Hash + Eq + Clone> Drop for Flight<'_, K> {
    fn drop(&mut self) {
        let mut inflight = self.flights.inflight.lock().expect("flights not poisoned");
        // Two references: the map's and this caller's — nobody else is waiting.
        if inflight
            .get(&self.key)
            .is_some_and(|f| Arc::ptr_eq(f, &self.lock) && Arc::strong_count(f) == 2)
        {
            inflight.remove(&self.key);
        }
    }
}
