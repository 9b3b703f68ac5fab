//! Sessions: a random id in an HttpOnly, SameSite=Strict cookie, mapped in this process to
//! the API key it was opened with and a CSRF token.
//!
//! Why server-side and not a signed cookie: every dashboard request is answered by the
//! `/v1` API with the session's key, so the key must be at hand; keeping it in memory
//! means it never travels back to the browser after sign-in. The price is that a session
//! belongs to the server process that opened it (docs/dashboard.md: sticky sessions behind
//! a load balancer; a restart signs everyone out).
//!
//! The key is re-checked by the server on every request (auth cache, 2 s), so revoking it
//! ends its sessions; an idle or too old session is dropped.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method};
use rand::RngCore;

use crate::backend::{BackendError, Identity};
use crate::{DashboardConfig, Shared};

pub const COOKIE: &str = "pgferry_session";
pub const CSRF_HEADER: &str = "x-csrf-token";

struct Session {
    api_key: String,
    csrf: String,
    opened: Instant,
    seen: Instant,
}

pub struct Sessions {
    map: Mutex<HashMap<String, Session>>,
    idle: Duration,
    max_age: Duration,
    cap: usize,
}

fn random_hex() -> String {
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    hex::encode(b)
}

/// Constant-time equality of two tokens (CSRF, which an attacker may probe).
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Sessions {
    pub fn new(config: &DashboardConfig) -> Sessions {
        Sessions {
            map: Mutex::new(HashMap::new()),
            idle: config.idle_timeout,
            max_age: config.max_age,
            cap: config.max_sessions,
        }
    }

    /// Opens a session for `api_key`; returns (session id, csrf token).
    pub fn open(&self, api_key: String) -> (String, String) {
        let (id, csrf) = (random_hex(), random_hex());
        let now = Instant::now();
        let mut map = self.map.lock().expect("sessions");
        if map.len() >= self.cap {
            let (idle, max_age) = (self.idle, self.max_age);
            map.retain(|_, s| s.seen.elapsed() < idle && s.opened.elapsed() < max_age);
            if map.len() >= self.cap {
                // Still full: drop the least recently used one.
                if let Some(oldest) = map
                    .iter()
                    .min_by_key(|(_, s)| s.seen)
                    .map(|(k, _)| k.clone())
                {
                    map.remove(&oldest);
                }
            }
        }
        map.insert(
            id.clone(),
            Session {
                api_key,
                csrf: csrf.clone(),
                opened: now,
                seen: now,
            },
        );
        (id, csrf)
    }

    pub fn close(&self, id: &str) {
        self.map.lock().expect("sessions").remove(id);
    }

    /// The live session `id`: (api key, csrf token). Touches it; drops it when expired.
    pub fn get(&self, id: &str) -> Option<(String, String)> {
        let mut map = self.map.lock().expect("sessions");
        let s = map.get_mut(id)?;
        if s.seen.elapsed() >= self.idle || s.opened.elapsed() >= self.max_age {
            map.remove(id);
            return None;
        }
        s.seen = Instant::now();
        Some((s.api_key.clone(), s.csrf.clone()))
    }
}

/// The session id from the request's cookies.
pub fn cookie_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_string())
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// True unless the browser reached us on a loopback host over plain HTTP. Browsers keep a
/// `Secure` cookie only from a secure origin, and pgferry serves plain HTTP: behind a TLS
/// proxy (which sends `X-Forwarded-Proto: https`) or on any non-loopback host the cookie is
/// Secure; on `localhost`/`127.0.0.1`/`[::1]` (`pgferry dev`) it is not.
pub fn secure_origin_required(headers: &HeaderMap) -> bool {
    let forwarded_https = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"));
    if forwarded_https {
        return true;
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    !is_loopback_host(host)
}

fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    name.eq_ignore_ascii_case("localhost")
        || name == "::1"
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The `Set-Cookie` value for a session (or, with `None`, one that clears it).
pub fn set_cookie(id: Option<&str>, secure: bool, max_age: Duration) -> HeaderValue {
    let (value, age) = match id {
        Some(id) => (id, max_age.as_secs()),
        None => ("", 0),
    };
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE}={value}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={age}{secure}"
    ))
    .expect("cookie is ASCII")
}

/// A request from another site. `SameSite=Strict` already keeps the cookie off such
/// requests; this refuses them outright (sign-in included, against login CSRF).
pub fn cross_site(headers: &HeaderMap) -> bool {
    if headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == "cross-site")
    {
        return true;
    }
    match (headers.get(header::ORIGIN), headers.get(header::HOST)) {
        (Some(origin), Some(host)) => {
            let origin = origin.to_str().unwrap_or("");
            let host = host.to_str().unwrap_or("");
            let bare = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .unwrap_or("");
            bare != host
        }
        _ => false,
    }
}

/// A signed-in caller. For methods that change state the CSRF header must carry the
/// session's token; the identity is resolved again from the key on every request.
pub struct SignedIn {
    pub session_id: String,
    pub api_key: String,
    pub csrf: String,
    pub identity: Identity,
}

impl FromRequestParts<Shared> for SignedIn {
    type Rejection = BackendError;

    async fn from_request_parts(parts: &mut Parts, d: &Shared) -> Result<Self, BackendError> {
        let session_id = cookie_id(&parts.headers)
            .ok_or_else(|| BackendError::unauthenticated("not signed in"))?;
        let (api_key, csrf) = d
            .sessions
            .get(&session_id)
            .ok_or_else(|| BackendError::unauthenticated("not signed in"))?;
        let safe = matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
        if !safe {
            let presented = parts
                .headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if cross_site(&parts.headers) || !same(presented, &csrf) {
                return Err(BackendError::forbidden(
                    "missing or wrong CSRF token (header X-CSRF-Token)",
                )
                .field("x-csrf-token"));
            }
        }
        let identity = d.backend.identify(&api_key).await?;
        Ok(SignedIn {
            session_id,
            api_key,
            csrf,
            identity,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for h in [
            "localhost:8080",
            "127.0.0.1:1",
            "127.0.0.1",
            "[::1]:80",
            "LOCALHOST",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in [
            "example.com",
            "10.0.0.1:80",
            "localhost.evil.com",
            "[::2]:1",
        ] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    #[test]
    fn cookie_parsing_takes_only_well_formed_ids() {
        let id = "a".repeat(64);
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            format!("x=1; {COOKIE}={id}").parse().unwrap(),
        );
        assert_eq!(cookie_id(&h), Some(id));
        h.insert(header::COOKIE, format!("{COOKIE}=zz").parse().unwrap());
        assert_eq!(cookie_id(&h), None);
    }

    #[test]
    fn csrf_comparison() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "ab"));
    }

    #[test]
    fn sessions_expire_when_idle() {
        let s = Sessions::new(&DashboardConfig {
            idle_timeout: Duration::from_millis(0),
            ..DashboardConfig::default()
        });
        let (id, _) = s.open("k".into());
        assert!(s.get(&id).is_none());
    }
}
