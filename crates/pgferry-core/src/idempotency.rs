//! Idempotency keys of enqueue requests (issue 17, ADR 0012).
//!
//! A producer that sees an error after sending a batch (a dropped connection, a 503, a
//! timeout) cannot know whether the batch committed. With a key, it retries safely: the key
//! is written in the same transaction as the request's jobs, so it exists exactly when they
//! do, and a retry with the same key answers the ids stored with it and writes nothing.
//! A key reused for a different request (other jobs, other arguments) is refused.

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::job::NewJob;

/// Longest key, in bytes (the common HTTP convention for `Idempotency-Key`).
pub const MAX_KEY_BYTES: usize = 255;

/// A validated idempotency key, possibly scoped (the server scopes keys by tenant, so two
/// tenants may use the same key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    full: String,
    /// Where the user's key starts in `full` (after the scope, if any).
    user: usize,
}

impl IdempotencyKey {
    /// 1 to 255 bytes of visible ASCII (no spaces or control characters).
    pub fn new(key: impl Into<String>) -> Result<IdempotencyKey> {
        let key = key.into();
        let reason = if key.is_empty() || key.len() > MAX_KEY_BYTES {
            Some("must be 1 to 255 characters")
        } else if !key.bytes().all(|b| b.is_ascii_graphic()) {
            Some("must be visible ASCII characters (no spaces or control characters)")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(Error::InvalidName {
                field: "idempotency_key",
                value: key.chars().take(80).collect(),
                reason,
            }),
            None => Ok(IdempotencyKey { full: key, user: 0 }),
        }
    }

    /// The same key inside `scope` (e.g. a tenant): `scope` + `/` + key.
    pub fn scoped(self, scope: &str) -> IdempotencyKey {
        IdempotencyKey {
            full: format!("{scope}/{}", self.full),
            user: self.user + scope.len() + 1,
        }
    }

    /// The stored key (scope included).
    pub fn as_str(&self) -> &str {
        &self.full
    }

    /// The key as its user gave it.
    pub fn user_key(&self) -> &str {
        &self.full[self.user..]
    }
}

/// One producer request: its jobs (written all or nothing) and an optional key.
#[derive(Debug, Clone)]
pub struct EnqueueRequest {
    pub jobs: Vec<NewJob>,
    pub idempotency_key: Option<IdempotencyKey>,
}

impl EnqueueRequest {
    pub fn new(jobs: Vec<NewJob>) -> EnqueueRequest {
        EnqueueRequest {
            jobs,
            idempotency_key: None,
        }
    }

    pub fn idempotency_key(mut self, key: IdempotencyKey) -> EnqueueRequest {
        self.idempotency_key = Some(key);
        self
    }
}

/// The answer to an [`EnqueueRequest`], given after COMMIT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acked {
    /// Job ids in request order.
    pub ids: Vec<i64>,
    /// Per job: not written by this request (a unique key's holder answered, or the whole
    /// request replayed from its idempotency key).
    pub duplicates: Vec<bool>,
    /// Answered from the idempotency key: an earlier request with this key wrote these
    /// jobs, and this one wrote nothing.
    pub replayed: bool,
}

impl Acked {
    /// Every job written by this request.
    pub(crate) fn written(ids: Vec<i64>) -> Acked {
        let duplicates = vec![false; ids.len()];
        Acked {
            ids,
            duplicates,
            replayed: false,
        }
    }

    /// Answered from an earlier request with the same key: nothing written now.
    pub(crate) fn replayed(ids: Vec<i64>) -> Acked {
        let duplicates = vec![true; ids.len()];
        Acked {
            ids,
            duplicates,
            replayed: true,
        }
    }

    /// The answers of a batch with unique keys.
    pub(crate) fn unique(done: Vec<crate::Enqueued>) -> Acked {
        Acked {
            ids: done.iter().map(|e| e.id).collect(),
            duplicates: done.iter().map(|e| e.duplicate).collect(),
            replayed: false,
        }
    }
}

/// SHA-256 of what a request asks for, in order: for each job its queue, kind, priority,
/// attempts, run time, unique key and period, args and meta. Two requests with one key must
/// agree on it.
pub(crate) fn fingerprint(jobs: &[NewJob]) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update((jobs.len() as u64).to_le_bytes());
    for j in jobs {
        for s in [j.queue.as_str(), j.kind.as_str()] {
            h.update((s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
        h.update([j.priority]);
        h.update(j.max_attempts.unwrap_or(-1).to_le_bytes());
        let run_at = j
            .run_at
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(-1, |d| d.as_micros() as i128);
        h.update(run_at.to_le_bytes());
        match &j.unique_key {
            Some(k) => {
                h.update((k.len() as u64).to_le_bytes());
                h.update(k.as_bytes());
            }
            None => h.update(u64::MAX.to_le_bytes()),
        }
        let period = j.unique_period.map_or(-1, |p| p.as_millis() as i128);
        h.update(period.to_le_bytes());
        // serde_json writes maps in key order (no preserve_order feature): canonical.
        let _ = serde_json::to_writer(HashWriter(&mut h), &j.args);
        h.update([0xff]);
        // Trace context is left out: a retry may run under another span (a new stream, a
        // new request) and is still the same request.
        match &j.meta {
            Some(serde_json::Value::Object(m)) => {
                for (k, v) in m {
                    if k != "traceparent" && k != "tracestate" {
                        h.update((k.len() as u64).to_le_bytes());
                        h.update(k.as_bytes());
                        let _ = serde_json::to_writer(HashWriter(&mut h), v);
                    }
                }
            }
            Some(other) => {
                let _ = serde_json::to_writer(HashWriter(&mut h), other);
            }
            None => {}
        }
        h.update([0xfe]);
    }
    h.finalize().to_vec()
}

struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The refusal of a key reused for a different request.
pub(crate) fn reused(key: &IdempotencyKey) -> Error {
    Error::InvalidArgument {
        field: "idempotency_key",
        reason: format!(
            "{:?} was already used for a different request (other jobs or arguments)",
            key.user_key()
        ),
    }
}

/// Whether a failed statement is the insert of a key that exists already.
pub(crate) fn is_key_taken(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|d| {
        d.code() == &tokio_postgres::error::SqlState::UNIQUE_VIOLATION
            && d.constraint() == Some("idempotency_keys_pkey")
    })
}
