//! Signed requests: `pgferry-signature: t=<unix seconds>,v1=<hex>[,v1=<hex>]`, where each
//! `v1` is HMAC-SHA256 over `<t>.<body>` with one of the tenant's active secrets (two may be
//! active while keys rotate: a receiver that knows either accepts). Verification recipe:
//! docs/http-jobs.md.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

pub const HEADER: &str = "pgferry-signature";

/// hex(HMAC-SHA256(secret, "<timestamp>.<body>")).
pub fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The header value for `secrets` (one or two active ones).
pub fn header_value(secrets: &[Vec<u8>], timestamp: i64, body: &[u8]) -> String {
    let mut v = format!("t={timestamp}");
    for s in secrets {
        v.push_str(",v1=");
        v.push_str(&sign(s, timestamp, body));
    }
    v
}

/// Receiver side: whether `header` carries a valid signature of `body` by `secret`,
/// made within `tolerance_secs` of `now`.
pub fn verify(header: &str, secret: &[u8], body: &[u8], now: i64, tolerance_secs: i64) -> bool {
    let mut t = None;
    let mut sigs = Vec::new();
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => sigs.push(v),
            _ => {}
        }
    }
    let Some(t) = t else { return false };
    if (now - t).abs() > tolerance_secs {
        return false;
    }
    let want = sign(secret, t, body);
    // Constant time per candidate.
    sigs.iter().any(|s| {
        s.len() == want.len()
            && s.bytes()
                .zip(want.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    })
}
