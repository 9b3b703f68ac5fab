//! Attempt tokens for HTTP workers.
//!
//! A claimed job's completion needs its segment and receipt (so it lands in the right
//! partition without a lookup) and must be refused for another tenant's job. HTTP is
//! stateless, so the claim hands out a token carrying the tenant and the attempt reference
//! (job, attempt, segments, receipt, lane) signed with HMAC-SHA256 under a secret every server shares
//! (`pgferry.server_secrets`). Completing with a token costs no lookup, a worker may
//! complete on a different server than it claimed on, and a forged or foreign token is
//! answered 404 like any id of another tenant.

use std::time::Duration;

use pgferry_core::{AttemptRef, Backoff, ClaimedJob, Outcome, OutcomeKind};
use rand::RngCore;
use serde_json::Value;
use sha2::{Digest, Sha256};

const SECRET_ENSURE: &str = include_str!("sql/secret_ensure.sql");
const SECRET_GET: &str = include_str!("sql/secret_get.sql");
const SECRET_NAME: &str = "attempt_token";
/// Truncated tag: 128 bits is plenty against forgery and keeps tokens short.
const TAG_BYTES: usize = 16;

/// What a token proves: everything the engine needs to record the attempt's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub tenant_id: i64,
    pub job_id: i64,
    pub attempt: i32,
    pub max_attempts: i32,
    pub segment: i16,
    pub receipt_id: i64,
    pub lane: i32,
    pub receipt_segment: i16,
    /// The queue's retry policy at claim time (milliseconds; default retry delay).
    pub backoff_base_ms: u32,
    pub backoff_cap_ms: u32,
    /// The user's queue name (metrics labels), at most 255 bytes.
    pub queue: String,
}

impl Attempt {
    pub fn from_claimed(tenant_id: i64, queue: &str, job: &ClaimedJob) -> Attempt {
        Attempt {
            tenant_id,
            queue: queue.to_string(),
            job_id: job.job_id,
            attempt: job.attempt,
            max_attempts: job.max_attempts,
            segment: job.segment,
            receipt_id: job.receipt_id,
            lane: job.lane,
            receipt_segment: job.receipt_segment,
            backoff_base_ms: u32::try_from(job.backoff.base.as_millis()).unwrap_or(u32::MAX),
            backoff_cap_ms: u32::try_from(job.backoff.cap.as_millis()).unwrap_or(u32::MAX),
        }
    }

    /// The queue's backoff when the job was claimed.
    pub fn backoff(&self) -> Backoff {
        Backoff {
            base: Duration::from_millis(self.backoff_base_ms.into()),
            cap: Duration::from_millis(self.backoff_cap_ms.into()),
        }
    }

    /// The engine's reference to this attempt (heartbeats).
    pub fn attempt_ref(&self) -> AttemptRef {
        AttemptRef {
            job_id: self.job_id,
            attempt: self.attempt,
            segment: self.segment,
            receipt_id: self.receipt_id,
            lane: self.lane,
            receipt_segment: self.receipt_segment,
        }
    }

    /// The outcome of this attempt.
    pub fn outcome(
        &self,
        kind: OutcomeKind,
        error: Option<String>,
        result: Option<Value>,
    ) -> Outcome {
        Outcome {
            job_id: self.job_id,
            attempt: self.attempt,
            segment: self.segment,
            receipt_id: self.receipt_id,
            lane: self.lane,
            receipt_segment: self.receipt_segment,
            kind,
            error,
            result,
            duration_ms: None,
        }
    }

    fn encode(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(&self.tenant_id.to_be_bytes());
        buf.extend_from_slice(&self.job_id.to_be_bytes());
        buf.extend_from_slice(&self.attempt.to_be_bytes());
        buf.extend_from_slice(&self.max_attempts.to_be_bytes());
        buf.extend_from_slice(&self.segment.to_be_bytes());
        buf.extend_from_slice(&self.receipt_id.to_be_bytes());
        buf.extend_from_slice(&self.lane.to_be_bytes());
        buf.extend_from_slice(&self.receipt_segment.to_be_bytes());
        buf.extend_from_slice(&self.backoff_base_ms.to_be_bytes());
        buf.extend_from_slice(&self.backoff_cap_ms.to_be_bytes());
        let q = &self.queue.as_bytes()[..self.queue.len().min(255)];
        buf.push(q.len() as u8);
        buf.extend_from_slice(q);
    }

    fn decode(body: &[u8]) -> Option<Attempt> {
        let mut r = Reader(body);
        let a = Attempt {
            tenant_id: i64::from_be_bytes(r.take()?),
            job_id: i64::from_be_bytes(r.take()?),
            attempt: i32::from_be_bytes(r.take()?),
            max_attempts: i32::from_be_bytes(r.take()?),
            segment: i16::from_be_bytes(r.take()?),
            receipt_id: i64::from_be_bytes(r.take()?),
            lane: i32::from_be_bytes(r.take()?),
            receipt_segment: i16::from_be_bytes(r.take()?),
            backoff_base_ms: u32::from_be_bytes(r.take()?),
            backoff_cap_ms: u32::from_be_bytes(r.take()?),
            queue: {
                let [n] = r.take::<1>()?;
                let q = r.0.get(..n as usize)?;
                r.0 = &r.0[n as usize..];
                String::from_utf8(q.to_vec()).ok()?
            },
        };
        r.0.is_empty().then_some(a)
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        if self.0.len() < N {
            return None;
        }
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        head.try_into().ok()
    }
}

/// The shared secret as HMAC-SHA256 states that already absorbed the padded key: every
/// token costs two SHA-256 blocks fewer than hashing the pads again (one token per job
/// delivered, one check per result).
pub struct TokenKey {
    inner: Sha256,
    outer: Sha256,
}

impl TokenKey {
    pub fn new(secret: Vec<u8>) -> TokenKey {
        let [inner, outer] = hmac_states(&secret);
        TokenKey { inner, outer }
    }

    /// HMAC-SHA256 of `msg` under the secret.
    fn tag(&self, msg: &[u8]) -> [u8; 32] {
        let inner = self.inner.clone().chain_update(msg).finalize();
        self.outer.clone().chain_update(inner).finalize().into()
    }

    /// Loads the shared secret, creating it if this is the first server of the database.
    pub async fn load_or_create(
        client: &tokio_postgres::Client,
    ) -> Result<TokenKey, tokio_postgres::Error> {
        let mut candidate = vec![0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut candidate);
        client
            .execute(SECRET_ENSURE, &[&SECRET_NAME, &candidate])
            .await?;
        let row = client.query_one(SECRET_GET, &[&SECRET_NAME]).await?;
        Ok(TokenKey::new(row.get("secret")))
    }

    pub fn sign(&self, a: &Attempt) -> String {
        let mut buf = Vec::with_capacity(64);
        a.encode(&mut buf);
        let tag = self.tag(&buf);
        buf.extend_from_slice(&tag[..TAG_BYTES]);
        // encode_to_slice writes whole bytes at once; hex::encode goes char by char.
        let mut out = vec![0u8; buf.len() * 2];
        hex::encode_to_slice(&buf, &mut out).expect("twice the length");
        String::from_utf8(out).expect("hex digits are ASCII")
    }

    /// A token over any body (hex of the body and a truncated HMAC tag): workflow steps use
    /// it (wfsteps::token). Bodies of different lengths never pass for each other's type.
    pub fn sign_bytes(&self, body: &[u8]) -> String {
        let mut buf = body.to_vec();
        let tag = self.tag(&buf);
        buf.extend_from_slice(&tag[..TAG_BYTES]);
        hex::encode(buf)
    }

    /// The body a [`TokenKey::sign_bytes`] token was signed for, if genuine.
    pub fn verify_bytes(&self, token: &str) -> Option<Vec<u8>> {
        if token.len() > 1024 {
            return None;
        }
        let raw = hex::decode(token).ok()?;
        if raw.len() <= TAG_BYTES {
            return None;
        }
        let (body, tag) = raw.split_at(raw.len() - TAG_BYTES);
        let want = self.tag(body);
        let diff = want[..TAG_BYTES]
            .iter()
            .zip(tag)
            .fold(0u8, |acc, (x, y)| acc | (x ^ y));
        (diff == 0).then(|| body.to_vec())
    }

    /// The attempt a token was signed for, or `None` when it is malformed or forged.
    pub fn verify(&self, token: &str) -> Option<Attempt> {
        // Bound the work spent on garbage before decoding it.
        if token.len() > 1024 {
            return None;
        }
        let mut raw = [0u8; 512];
        let raw = raw.get_mut(..token.len() / 2)?;
        hex::decode_to_slice(token, raw).ok()?;
        if raw.len() <= TAG_BYTES {
            return None;
        }
        let (body, tag) = raw.split_at(raw.len() - TAG_BYTES);
        let want = self.tag(body);
        let diff = want[..TAG_BYTES]
            .iter()
            .zip(tag)
            .fold(0u8, |acc, (x, y)| acc | (x ^ y));
        if diff != 0 {
            return None;
        }
        Attempt::decode(body)
    }
}

/// The inner and outer hash states of HMAC-SHA256 (RFC 2104, over sha2, the hash the
/// workspace already uses) after the padded key.
fn hmac_states(key: &[u8]) -> [Sha256; 2] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    [0x36, 0x5c].map(|b: u8| Sha256::new().chain_update(k.map(|x| x ^ b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc4231_case_2() {
        let tag = TokenKey::new(b"Jefe".to_vec()).tag(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(tag),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn tokens_verify_and_resist_tampering() {
        let key = TokenKey::new(vec![7; 32]);
        let a = Attempt {
            tenant_id: 3,
            job_id: 123_456,
            attempt: 2,
            max_attempts: 25,
            segment: 5,
            receipt_id: 99,
            lane: 17,
            receipt_segment: 4,
            backoff_base_ms: 1000,
            backoff_cap_ms: 3_600_000,
            queue: "emails".into(),
        };
        let t = key.sign(&a);
        assert_eq!(key.verify(&t), Some(a.clone()));
        // Flip one hex digit anywhere: refused.
        for i in 0..t.len() {
            let mut b = t.clone().into_bytes();
            b[i] = if b[i] == b'0' { b'1' } else { b'0' };
            assert_eq!(key.verify(std::str::from_utf8(&b).unwrap()), None, "at {i}");
        }
        assert_eq!(TokenKey::new(vec![8; 32]).verify(&t), None);
        assert_eq!(key.verify("zz"), None);
        assert_eq!(key.verify(""), None);
    }
}
