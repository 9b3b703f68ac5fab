//! Runs one attempt of an HTTP job on a pooled client (keep-alive; connections reused
//! across jobs) whose resolver is the SSRF guard, and decides its outcome: the expected
//! status set and body text, the response kept with a bounded body, `Retry-After` read on
//! 429 and 503.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use crate::sign;
use crate::ssrf::{self, Allow, Refused};

/// What an HTTP job sends and expects (the job's args).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpRequest {
    #[serde(default = "get")]
    pub method: String,
    pub url: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// Statuses that count as success; empty: any 2xx.
    #[serde(default)]
    pub expect_status: Vec<u16>,
    /// Text the response body must contain.
    #[serde(default)]
    pub expect_body: Option<String>,
    /// Where to POST the outcome once the job succeeds or fails for good (sent as an HTTP
    /// job of its own: retried, checked by the guard, signed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
    /// The flow-control key shared by jobs to several hosts (default: host:port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

fn get() -> String {
    "GET".into()
}

fn default_timeout() -> u64 {
    30_000
}

pub const MAX_TIMEOUT_MS: u64 = 300_000;
/// Longest `group`.
pub const MAX_GROUP: usize = 300;

/// A bad request definition; `field` as the API spells it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {reason}")]
pub struct Invalid {
    pub field: &'static str,
    pub reason: String,
}

impl HttpRequest {
    /// Everything checkable without the network; the URL's host against `allow` when it
    /// is an address (names are checked by [`ssrf::check_resolved`] and at connect).
    pub fn validate(&self, allow: &Allow) -> Result<(), Invalid> {
        let bad = |field, reason: String| Err(Invalid { field, reason });
        if reqwest::Method::from_bytes(self.method.as_bytes()).is_err() || self.method.is_empty() {
            return bad("method", format!("{:?} is not an HTTP method", self.method));
        }
        if let Err(e) = ssrf::parse(&self.url, allow) {
            return bad("url", e.to_string());
        }
        for (k, v) in &self.headers {
            if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err()
                || reqwest::header::HeaderValue::from_str(v).is_err()
            {
                return bad("headers", format!("{k:?} is not a valid header"));
            }
        }
        if !(1..=MAX_TIMEOUT_MS).contains(&self.timeout_ms) {
            return bad("timeout_ms", format!("must be 1 to {MAX_TIMEOUT_MS}"));
        }
        if self.expect_status.iter().any(|s| !(100..=599).contains(s)) {
            return bad("expect_status", "statuses are 100 to 599".into());
        }
        if let Some(cb) = &self.callback_url {
            if let Err(e) = ssrf::parse(cb, allow) {
                return bad("callback_url", e.to_string());
            }
        }
        if let Some(g) = &self.group {
            if g.is_empty() || g.len() > MAX_GROUP {
                return bad("group", format!("1 to {MAX_GROUP} bytes"));
            }
        }
        Ok(())
    }
}

/// The response as kept with the attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// At most the executor's body limit (UTF-8, lossy).
    pub body: String,
    pub truncated: bool,
    pub duration_ms: u64,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    Succeeded(Response),
    Failed {
        response: Option<Response>,
        error: String,
        /// From `Retry-After` on 429 / 503: retry no sooner (and pause the destination).
        retry_after: Option<Duration>,
        /// Refused by the SSRF guard: retrying cannot help.
        refused: bool,
    },
}

#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    pub allow: Allow,
    /// Bytes of response body kept.
    pub max_body: usize,
    /// Idle keep-alive connections per host.
    pub pool_per_host: usize,
    /// Secrets signing every request (none: unsigned).
    pub secrets: Vec<Vec<u8>>,
    /// Extra trusted CA certificates (PEM) besides the public web roots.
    pub root_certs_pem: Vec<Vec<u8>>,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            allow: Allow::none(),
            max_body: 64 * 1024,
            pool_per_host: 32,
            secrets: Vec::new(),
            root_certs_pem: Vec::new(),
        }
    }
}

/// One pooled client per allow-list (the guard is its resolver).
pub struct Executor {
    client: reqwest::Client,
    config: ExecutorConfig,
}

const MAX_REDIRECTS: usize = 5;

impl Executor {
    pub fn new(config: ExecutorConfig) -> reqwest::Result<Executor> {
        let allow = config.allow.clone();
        let redirect_allow = config.allow.clone();
        let mut builder = reqwest::Client::builder();
        for pem in &config.root_certs_pem {
            builder = builder.add_root_certificate(reqwest::Certificate::from_pem(pem)?);
        }
        let client = builder
            .no_proxy()
            .pool_max_idle_per_host(config.pool_per_host)
            .tcp_nodelay(true)
            .dns_resolver(std::sync::Arc::new(ssrf::GuardedResolver { allow }))
            // Names are checked by the resolver at connect; addresses here.
            .redirect(reqwest::redirect::Policy::custom(move |attempt| {
                if attempt.previous().len() >= MAX_REDIRECTS {
                    return attempt.error("too many redirects");
                }
                match ssrf::parse(attempt.url().as_str(), &redirect_allow) {
                    Ok(_) => attempt.follow(),
                    Err(e) => attempt.error(e),
                }
            }))
            .build()?;
        Ok(Executor { client, config })
    }

    /// The same settings with another allow list (a tenant's): a client of its own, since
    /// the guard is the client's resolver.
    pub fn with_allow(&self, allow: Allow) -> reqwest::Result<Executor> {
        Executor::new(ExecutorConfig {
            allow,
            ..self.config.clone()
        })
    }

    pub fn allow(&self) -> &Allow {
        &self.config.allow
    }

    /// Runs one attempt signed with the configured secrets (if any).
    pub async fn run(&self, req: &HttpRequest) -> Attempt {
        self.run_signed(req, &self.config.secrets).await
    }

    /// Runs one attempt signed with `secrets` (none: unsigned). Checks the destination
    /// first (before each attempt, not only at creation).
    pub async fn run_signed(&self, req: &HttpRequest, secrets: &[Vec<u8>]) -> Attempt {
        if let Err(e) = req.validate(&self.config.allow) {
            return refused(e.to_string(), true);
        }
        let method = reqwest::Method::from_bytes(req.method.as_bytes()).expect("validated");
        let mut r = self
            .client
            .request(method, &req.url)
            .timeout(Duration::from_millis(req.timeout_ms));
        for (k, v) in &req.headers {
            r = r.header(k, v);
        }
        let body = req.body.clone().unwrap_or_default();
        if !secrets.is_empty() {
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs() as i64;
            r = r.header(
                sign::HEADER,
                sign::header_value(secrets, now, body.as_bytes()),
            );
        }
        if req.body.is_some() {
            r = r.body(body);
        }
        let started = Instant::now();
        let resp = match r.send().await {
            Ok(resp) => resp,
            Err(e) => {
                let guard = guard_refusal(&e);
                return refused(describe(&e), guard);
            }
        };
        let status = resp.status().as_u16();
        let headers: Vec<(String, String)> = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into()))
            .collect();
        let retry_after = matches!(status, 429 | 503)
            .then(|| resp.headers().get(reqwest::header::RETRY_AFTER))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let (body, truncated) = self.read_body(resp).await;
        let response = Response {
            status,
            headers,
            body,
            truncated,
            duration_ms: started.elapsed().as_millis() as u64,
        };
        let status_ok = if req.expect_status.is_empty() {
            (200..300).contains(&status)
        } else {
            req.expect_status.contains(&status)
        };
        let body_ok = req
            .expect_body
            .as_ref()
            .is_none_or(|t| response.body.contains(t.as_str()));
        match (status_ok, body_ok) {
            (true, true) => Attempt::Succeeded(response),
            (false, _) => Attempt::Failed {
                error: format!("unexpected status {status}"),
                response: Some(response),
                retry_after,
                refused: false,
            },
            (true, false) => Attempt::Failed {
                error: "the response body lacks the expected text".into(),
                response: Some(response),
                retry_after,
                refused: false,
            },
        }
    }

    /// Reads at most `max_body` bytes, then drops the rest (the connection is not reused).
    async fn read_body(&self, mut resp: reqwest::Response) -> (String, bool) {
        let mut buf = Vec::new();
        let mut truncated = false;
        while let Ok(Some(chunk)) = resp.chunk().await {
            let room = self.config.max_body - buf.len();
            if chunk.len() > room {
                buf.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            buf.extend_from_slice(&chunk);
        }
        (String::from_utf8_lossy(&buf).into_owned(), truncated)
    }
}

fn refused(error: String, refused: bool) -> Attempt {
    Attempt::Failed {
        response: None,
        error,
        retry_after: None,
        refused,
    }
}

/// Whether a send error is the guard's refusal (from the resolver or a redirect).
fn guard_refusal(e: &reqwest::Error) -> bool {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if s.downcast_ref::<Refused>().is_some() {
            return true;
        }
        src = s.source();
    }
    false
}

/// The error with its causes (reqwest's own message alone says little).
fn describe(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

/// `Retry-After`: delta seconds or an HTTP date (capped at a day).
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    let d = match v.trim().parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => httpdate::parse_http_date(v.trim())
            .ok()?
            .duration_since(SystemTime::now())
            .unwrap_or_default(),
    };
    Some(d.min(Duration::from_secs(86_400)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_forms() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("999999"),
            Some(Duration::from_secs(86_400))
        );
        let later = SystemTime::now() + Duration::from_secs(120);
        let d = parse_retry_after(&httpdate::fmt_http_date(later)).unwrap();
        assert!(
            d > Duration::from_secs(100) && d <= Duration::from_secs(120),
            "{d:?}"
        );
        assert_eq!(parse_retry_after("soon"), None);
    }
}
