//! A small client of the HTTP API for the admin commands, with the exit codes scripts rely
//! on (see `ExitCode` and the README's CLI section).

use std::fmt;

use serde_json::Value;

/// Exit codes of the admin commands (clap's usage errors exit 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Anything else (a bug, a 500, an unexpected answer).
    Failure = 1,
    /// The input was refused (400, 413): nothing was changed.
    Invalid = 3,
    /// No such job, queue or route (404).
    NotFound = 4,
    /// The object's state forbids the action (409).
    Conflict = 5,
    /// The key is missing, wrong, or lacks the scope (401, 403).
    Auth = 6,
    /// The server or its database is unreachable (503, connection refused, 429): retry.
    Unavailable = 7,
}

/// An error that ends the command with a specific exit code.
#[derive(Debug)]
pub struct ExitError {
    pub exit: Exit,
    pub message: String,
}

impl fmt::Display for ExitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ExitError {}

fn exit(exit: Exit, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(ExitError {
        exit,
        message: message.into(),
    })
}

/// Where the commands go: the server's HTTP address and an API key.
#[derive(clap::Args, Debug, Clone)]
pub struct Target {
    /// The server's HTTP address (e.g. http://127.0.0.1:8787, printed by `pgferry dev`).
    #[arg(long, env = "PGFERRY_HTTP_URL", global = true)]
    pub server: Option<String>,
    /// An API key (`pgferry key create`; `pgferry dev` prints one).
    #[arg(long, env = "PGFERRY_API_KEY", global = true, hide_env_values = true)]
    pub api_key: Option<String>,
    /// Print JSON (the API's own answer) instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
}

pub struct Api {
    base: String,
    key: String,
    http: reqwest::Client,
}

impl Api {
    pub fn new(t: &Target) -> anyhow::Result<Api> {
        let base = t.server.clone().ok_or_else(|| {
            exit(
                Exit::Invalid,
                "no server: pass --server URL or set PGFERRY_HTTP_URL",
            )
        })?;
        let key = t.api_key.clone().ok_or_else(|| {
            exit(
                Exit::Auth,
                "no API key: pass --api-key KEY or set PGFERRY_API_KEY",
            )
        })?;
        Ok(Api {
            base: base.trim_end_matches('/').to_string(),
            key,
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(60))
                .build()?,
        })
    }

    pub async fn get(&self, path: &str, query: &[(&str, String)]) -> anyhow::Result<Value> {
        let req = self.http.get(format!("{}{path}", self.base)).query(query);
        self.send(req).await
    }

    pub async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let req = self.http.post(format!("{}{path}", self.base)).json(&body);
        self.send(req).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let req = self.http.patch(format!("{}{path}", self.base)).json(&body);
        self.send(req).await
    }

    pub async fn delete(&self, path: &str) -> anyhow::Result<Value> {
        let req = self.http.delete(format!("{}{path}", self.base));
        self.send(req).await
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        let resp = req.bearer_auth(&self.key).send().await.map_err(|e| {
            exit(
                Exit::Unavailable,
                format!("cannot reach {}: {e}", self.base),
            )
        })?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(body);
        }
        let err = &body["error"];
        let mut message = format!(
            "{}: {}",
            err["code"].as_str().unwrap_or("error"),
            err["message"].as_str().unwrap_or(status.as_str())
        );
        if let Some(field) = err["field"].as_str() {
            message.push_str(&format!(" (field {field})"));
        }
        let code = match status.as_u16() {
            400 | 413 | 422 => Exit::Invalid,
            401 | 403 => Exit::Auth,
            404 => Exit::NotFound,
            409 => Exit::Conflict,
            429 | 502..=504 => Exit::Unavailable,
            _ => Exit::Failure,
        };
        Err(exit(code, message))
    }
}

/// Percent-encodes a path segment (queue names are restricted, but never trust input).
pub fn segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
