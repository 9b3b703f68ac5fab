//! Signature verification of inbound webhooks: HMAC-SHA256 with the endpoint's secret.
//!
//! - `hmac_sha256` (GitHub, and many others): the header holds hex(HMAC(secret, body)),
//!   optionally prefixed `sha256=` (GitHub's `X-Hub-Signature-256`).
//! - `stripe`: the header is `t=<unix seconds>,v1=<hex>[,v1=…]`, each `v1` an
//!   HMAC(secret, "<t>.<body>"); the timestamp must be within [`TOLERANCE_SECS`] of now.
//!
//! Comparison is constant-time (`Mac::verify_slice`).

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::error::{MonitorError, Result};

pub const SCHEMES: [&str; 2] = ["hmac_sha256", "stripe"];
/// Largest accepted clock difference of a `stripe` signature.
pub const TOLERANCE_SECS: i64 = 300;

fn mac(secret: &[u8]) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length")
}

fn matches(mac: Hmac<Sha256>, hex_sig: &str) -> bool {
    match hex::decode(hex_sig.trim()) {
        Ok(sig) => mac.verify_slice(&sig).is_ok(),
        Err(_) => false,
    }
}

/// Ok when `header` (None: absent) signs `body` under `scheme` with `secret` at `now`.
pub fn verify(
    scheme: &str,
    header_name: &str,
    header: Option<&str>,
    secret: &[u8],
    body: &[u8],
    now: i64,
) -> Result<()> {
    let Some(value) = header else {
        return Err(MonitorError::Signature(format!(
            "missing header {header_name}"
        )));
    };
    let bad = || MonitorError::Signature(format!("header {header_name} does not match the body"));
    match scheme {
        "stripe" => {
            let mut t = None;
            let mut sigs = Vec::new();
            for part in value.split(',') {
                match part.trim().split_once('=') {
                    Some(("t", v)) => t = v.parse::<i64>().ok(),
                    Some(("v1", v)) => sigs.push(v),
                    _ => {}
                }
            }
            let t = t.ok_or_else(bad)?;
            if (now - t).abs() > TOLERANCE_SECS {
                return Err(MonitorError::Signature(format!(
                    "header {header_name}: timestamp outside {TOLERANCE_SECS} s of now"
                )));
            }
            let ok = sigs.iter().any(|s| {
                let mut m = mac(secret);
                m.update(t.to_string().as_bytes());
                m.update(b".");
                m.update(body);
                matches(m, s)
            });
            ok.then_some(()).ok_or_else(bad)
        }
        _ => {
            let hex_sig = value.strip_prefix("sha256=").unwrap_or(value);
            let mut m = mac(secret);
            m.update(body);
            matches(m, hex_sig).then_some(()).ok_or_else(bad)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign(secret: &[u8], data: &[u8]) -> String {
        let mut m = mac(secret);
        m.update(data);
        hex::encode(m.finalize().into_bytes())
    }

    #[test]
    fn hmac_sha256_accepts_plain_and_prefixed_and_refuses_others() {
        let body = br#"{"a":1}"#;
        let sig = sign(b"s3cret", body);
        let v = |h: Option<&str>| verify("hmac_sha256", "x-sig", h, b"s3cret", body, 0);
        assert!(v(Some(&sig)).is_ok());
        assert!(v(Some(&format!("sha256={sig}"))).is_ok());
        assert!(v(Some(&sign(b"other", body))).is_err());
        assert!(v(Some("zz")).is_err());
        assert!(v(None).is_err());
    }

    #[test]
    fn stripe_checks_the_timestamp_and_any_v1() {
        let body = b"payload";
        let now = 1_700_000_000;
        let good = sign(b"k", format!("{now}.payload").as_bytes());
        let h = format!("t={now},v1=00,v1={good}");
        assert!(verify("stripe", "s", Some(&h), b"k", body, now + 10).is_ok());
        assert!(verify("stripe", "s", Some(&h), b"k", body, now + 301).is_err());
        assert!(verify("stripe", "s", Some(&h), b"k", b"other", now).is_err());
    }
}
