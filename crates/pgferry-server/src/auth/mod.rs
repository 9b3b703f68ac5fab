//! API keys → principals, with a short-lived cache.
//!
//! A key is `pgf_<prefix>_<secret>`: the 12-hex-digit prefix finds the row, the SHA-256 of
//! the secret is compared in constant time. Hot requests are answered from memory; an entry
//! lives `cache_ttl` (default 2 s), which bounds how long a revoked key keeps working.
//! Failures are cached too, so a client hammering with a bad key costs no database work.

pub mod admin;
pub mod keys;
pub mod namespace;
pub mod token;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use sha2::{Digest, Sha256};

use crate::single_flight::Flights;

pub use keys::{ApiKey, Scope, Scopes};
pub use namespace::{engine_queue, user_queue};

const KEY_LOOKUP: &str = include_str!("sql/key_lookup.sql");
const KEY_TOUCH: &str = include_str!("sql/key_touch.sql");

/// `last_used_at` is written at most this often per key.
const TOUCH_INTERVAL_SECS: f64 = 300.0;
/// Entries beyond this are dropped wholesale (expired ones first): a flood of random keys
/// must not grow memory without bound.
const CACHE_CAP: usize = 10_000;

/// Who is calling: one API key of one tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant_id: i64,
    /// Tenant name.
    pub tenant: String,
    pub key_id: i64,
    pub scopes: Scopes,
}

/// A caller in this process that is already trusted (the CLI's `--database-url` mode runs
/// the `/v1` router in process as an operator of one tenant): put in a request's
/// extensions, it stands for the API key. Requests from the network never carry
/// extensions, so it cannot be sent from outside.
#[derive(Debug, Clone)]
pub struct InProcessCaller(pub Principal);

impl Principal {
    /// `Ok` when the key holds `scope` (admin holds every scope).
    pub fn require(&self, scope: Scope) -> Result<(), AuthError> {
        if self.scopes.allows(scope) {
            Ok(())
        } else {
            Err(AuthError::Forbidden { scope })
        }
    }

    /// This tenant's engine name for a user-visible queue name.
    pub fn queue(&self, name: &str) -> pgferry_core::Result<String> {
        engine_queue(self.tenant_id, name)
    }
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("missing API key: send `Authorization: Bearer <key>`")]
    Missing,
    #[error("malformed API key")]
    Malformed,
    #[error("unknown or revoked API key")]
    Invalid,
    #[error("this API key lacks the `{scope}` scope")]
    Forbidden { scope: Scope },
    #[error("authentication unavailable: {0}")]
    Unavailable(String),
}

impl AuthError {
    pub fn code(&self) -> &'static str {
        match self {
            AuthError::Missing | AuthError::Malformed | AuthError::Invalid => "unauthenticated",
            AuthError::Forbidden { .. } => "forbidden",
            AuthError::Unavailable(_) => "unavailable",
        }
    }
}

#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// How long a looked-up key (or a rejection) is trusted without asking Postgres.
    pub cache_ttl: Duration,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            cache_ttl: Duration::from_secs(2),
        }
    }
}

struct Entry {
    at: Instant,
    /// Rejections are cached as `Invalid` or `Malformed` only, never `Unavailable`.
    result: Result<Principal, AuthError>,
}

pub struct Auth {
    pool: Pool,
    config: AuthConfig,
    /// SHA-256 of the whole presented key → answer. Hashing keeps raw secrets out of memory
    /// longer than a request.
    cache: Mutex<HashMap<[u8; 32], Entry>>,
    /// Lookups under way, by digest: the requests that miss the cache together wait for
    /// one lookup (issue 22: when a busy key's entry expired, every request in flight — 64
    /// in the benchmark — looked it up at once, each holding one of the pool's connections,
    /// and stalled the API every `cache_ttl`).
    inflight: Flights<[u8; 32]>,
    /// Key lookups sent to Postgres (tests count them).
    lookups: AtomicU64,
}

impl Auth {
    pub fn new(pool: Pool, config: AuthConfig) -> Auth {
        Auth {
            pool,
            config,
            cache: Mutex::new(HashMap::new()),
            inflight: Flights::default(),
            lookups: AtomicU64::new(0),
        }
    }

    /// Key lookups sent to Postgres since this `Auth` was made.
    pub fn lookups(&self) -> u64 {
        self.lookups.load(Ordering::Relaxed)
    }

    /// Resolves a presented key. Costs one hash and a map lookup while cached.
    pub async fn authenticate(&self, api_key: &str) -> Result<Principal, AuthError> {
        let digest: [u8; 32] = Sha256::digest(api_key.as_bytes()).into();
        if let Some(hit) = self.cached(&digest) {
            return hit;
        }
        // One lookup per key at a time: who finds one under way waits for it, then reads
        // its answer from the cache (an `Unavailable` one is not cached: then it tries).
        let flight = self.inflight.join(digest);
        let _turn = flight.lock.lock().await;
        if let Some(hit) = self.cached(&digest) {
            return hit;
        }
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let result = self.lookup(api_key).await;
        if !matches!(result, Err(AuthError::Unavailable(_))) {
            self.store(digest, result.clone());
        }
        result
    }

    /// Drops every cached answer (tests and admin actions in this process).
    pub fn clear_cache(&self) {
        self.cache.lock().expect("auth cache").clear();
    }

    fn cached(&self, digest: &[u8; 32]) -> Option<Result<Principal, AuthError>> {
        let cache = self.cache.lock().expect("auth cache");
        let e = cache.get(digest)?;
        (e.at.elapsed() < self.config.cache_ttl).then(|| e.result.clone())
    }

    fn store(&self, digest: [u8; 32], result: Result<Principal, AuthError>) {
        let mut cache = self.cache.lock().expect("auth cache");
        if cache.len() >= CACHE_CAP {
            let ttl = self.config.cache_ttl;
            cache.retain(|_, e| e.at.elapsed() < ttl);
            if cache.len() >= CACHE_CAP {
                cache.clear();
            }
        }
        cache.insert(
            digest,
            Entry {
                at: Instant::now(),
                result,
            },
        );
    }

    async fn lookup(&self, api_key: &str) -> Result<Principal, AuthError> {
        let key = ApiKey::parse(api_key).ok_or(AuthError::Malformed)?;
        let client = self
            .pool
            .get()
            .await
            .map_err(|e| AuthError::Unavailable(e.to_string()))?;
        let row = client
            .query_opt(KEY_LOOKUP, &[&key.prefix, &TOUCH_INTERVAL_SECS])
            .await
            .map_err(|e| AuthError::Unavailable(e.to_string()))?
            .ok_or(AuthError::Invalid)?;
        let stored: String = row.get("secret_sha256");
        let revoked: bool = row.get("revoked");
        if revoked || !keys::hash_matches(&key.secret, &stored) {
            return Err(AuthError::Invalid);
        }
        let principal = Principal {
            key_id: row.get("key_id"),
            tenant_id: row.get("tenant_id"),
            tenant: row.get("tenant"),
            scopes: Scopes::from_names(
                row.get::<_, Vec<String>>("scopes")
                    .iter()
                    .map(String::as_str),
            )
            .unwrap_or_default(),
        };
        let touch_due: bool = row.get("touch_due");
        if touch_due {
            // Bookkeeping, at most once per interval per key and only on a cache miss: done
            // inline (one short UPDATE) so it is never lost, but it never fails the request.
            let key_id = principal.key_id;
            if let Err(e) = client
                .execute(KEY_TOUCH, &[&key_id, &TOUCH_INTERVAL_SECS])
                .await
            {
                tracing::debug!(key_id, error = %e, "last_used_at not updated");
            }
        }
        Ok(principal)
    }
}
