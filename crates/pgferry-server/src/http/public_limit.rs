//! Rate limits of the unauthenticated addresses (`/ping/{token}` with `/start` and `/fail`,
//! and `/in/{address}`): one token bucket per monitor token and per endpoint address, so a
//! looping job or a misbehaving provider is answered 429 before it reaches the database,
//! and one noisy address does not slow another. Configured by `HttpConfig::public_rate_*`
//! (`pgferry serve --public-rate-limit --public-rate-burst`).
//!
//! Buckets are keyed by a keyed hash of the address (never stored in clear), and the table is
//! bounded: past [`MAX_BUCKETS`] it drops the buckets that are full again (an idle address
//! has nothing to remember), so a flood of made-up addresses costs memory only while their
//! buckets are being drained.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::Instant;

use axum::http::StatusCode;

use super::error::ApiError;

/// Buckets kept before full ones are dropped.
pub const MAX_BUCKETS: usize = 100_000;

pub struct PublicLimiter {
    rate: f64,
    burst: f64,
    hasher: RandomState,
    buckets: Mutex<HashMap<u64, (f64, Instant)>>,
}

impl PublicLimiter {
    /// `rate` requests per second sustained per address, `burst` at once.
    pub fn new(rate: f64, burst: f64) -> PublicLimiter {
        PublicLimiter {
            rate: rate.max(f64::MIN_POSITIVE),
            burst: burst.max(1.0),
            hasher: RandomState::new(),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token of `address` (`what` names it in the error: "monitor token",
    /// "webhook address"), or answers 429 with the whole seconds until one is available.
    pub fn check(&self, what: &str, address: &str) -> Result<(), ApiError> {
        let key = self.hasher.hash_one(address);
        let now = Instant::now();
        let mut buckets = self.buckets.lock().expect("public rate buckets");
        if buckets.len() >= MAX_BUCKETS && !buckets.contains_key(&key) {
            let (rate, burst) = (self.rate, self.burst);
            buckets.retain(|_, (tokens, at)| {
                *tokens + now.duration_since(*at).as_secs_f64() * rate < burst
            });
        }
        let (tokens, at) = buckets.entry(key).or_insert((self.burst, now));
        let refilled =
            (*tokens + now.duration_since(*at).as_secs_f64() * self.rate).min(self.burst);
        *at = now;
        if refilled >= 1.0 {
            *tokens = refilled - 1.0;
            return Ok(());
        }
        *tokens = refilled;
        let wait = ((1.0 - refilled) / self.rate).ceil().clamp(1.0, 86_400.0) as u64;
        let mut e = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!("rate limit of this {what} exceeded; retry after {wait} s"),
        );
        e.retry_after = Some(wait);
        Err(e)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.buckets.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_has_its_own_bucket() {
        let l = PublicLimiter::new(0.001, 2.0);
        assert!(l.check("monitor token", "a").is_ok());
        assert!(l.check("monitor token", "a").is_ok());
        let e = l.check("monitor token", "a").unwrap_err();
        assert_eq!((e.status.as_u16(), e.code), (429, "rate_limited"));
        assert!(e.retry_after.is_some_and(|s| s >= 1));
        assert!(l.check("monitor token", "b").is_ok());
    }

    #[test]
    fn full_buckets_are_dropped_past_the_bound() {
        let l = PublicLimiter::new(1e9, 1.0);
        for i in 0..MAX_BUCKETS + 10 {
            l.check("webhook address", &i.to_string()).unwrap();
        }
        // Every bucket refills at once at this rate: the table never passes the bound.
        assert!(l.len() <= MAX_BUCKETS, "{}", l.len());
    }
}
