//! A small client of the HTTP API for the admin commands, with the exit codes scripts rely
//! on (see `ExitCode` and the README's CLI section).
//!
//! Two transports, one API: `--server URL --api-key KEY` sends the requests over HTTP;
//! `--database-url URL [--tenant NAME]` (no server needed) answers them with the server's
//! own `/v1` router run in this process over an engine on that database, as an operator of
//! the tenant — so validation, tenancy, JSON shapes and error codes are the API's, not a
//! copy of them.

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

/// Where the commands go: the server's HTTP address and an API key, or a database.
#[derive(clap::Args, Debug, Clone)]
pub struct Target {
    /// Work on the database directly instead of through a server (operators; the server's
    /// API runs in this process). Used when no --server is given.
    #[arg(
        long,
        env = "PGFERRY_DATABASE_URL",
        global = true,
        hide_env_values = true
    )]
    pub database_url: Option<String>,
    /// --database-url: the tenant to act for (default: the only tenant, if there is one).
    #[arg(long, env = "PGFERRY_TENANT", global = true)]
    pub tenant: Option<String>,
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
    transport: Transport,
}

enum Transport {
    Http {
        key: String,
        http: reqwest::Client,
    },
    InProcess {
        router: axum::Router,
        caller: pgferry_server::auth::InProcessCaller,
    },
}

impl Api {
    pub async fn new(t: &Target) -> anyhow::Result<Api> {
        match (&t.server, &t.database_url) {
            (Some(base), _) => Api::http(t, base),
            (None, Some(url)) => Api::in_process(url, t.tenant.as_deref()).await,
            (None, None) => Err(exit(
                Exit::Invalid,
                "no server: pass --server URL (or set PGFERRY_HTTP_URL), or --database-url URL \
                 (or set PGFERRY_DATABASE_URL)",
            )),
        }
    }

    fn http(t: &Target, base: &str) -> anyhow::Result<Api> {
        let key = t.api_key.clone().ok_or_else(|| {
            exit(
                Exit::Auth,
                "no API key: pass --api-key KEY or set PGFERRY_API_KEY",
            )
        })?;
        Ok(Api {
            base: base.trim_end_matches('/').to_string(),
            transport: Transport::Http {
                key,
                http: reqwest::Client::builder()
                    .timeout(std::time::Duration::from_secs(60))
                    .build()?,
            },
        })
    }

    /// The server's router over an engine on `url`, acting for `tenant` with every scope.
    async fn in_process(url: &str, tenant: Option<&str>) -> anyhow::Result<Api> {
        use pgferry_server::auth::{admin, InProcessCaller, Principal, Scopes};
        let config =
            pgferry_core::db::parse_config(url).map_err(|e| exit(Exit::Invalid, e.to_string()))?;
        let unreachable = |e: &dyn std::fmt::Display| {
            exit(Exit::Unavailable, format!("cannot reach the database: {e}"))
        };
        let mut client = pgferry_core::db::connect(&config, "cli")
            .await
            .map_err(|e| unreachable(&e))?;
        let (tenant_id, tenant) = match tenant {
            Some(name) => match admin::tenant_id(&client, name).await {
                Ok(Some(id)) => (id, name.to_string()),
                Ok(None) => return Err(exit(Exit::NotFound, format!("no tenant {name:?}"))),
                Err(e) => return Err(unreachable(&e)),
            },
            None => {
                let all = admin::list_tenants(&client)
                    .await
                    .map_err(|e| unreachable(&e))?;
                match all.as_slice() {
                    [one] => (one.tenant_id, one.name.clone()),
                    [] => return Err(exit(Exit::NotFound, "the database has no tenant")),
                    _ => {
                        return Err(exit(
                            Exit::Invalid,
                            "the database has several tenants: pass --tenant NAME \
                             (or set PGFERRY_TENANT)",
                        ))
                    }
                }
            }
        };
        let key_id = operator_key(&mut client, tenant_id, &tenant)
            .await
            .map_err(|e| unreachable(&e))?;
        drop(client);
        let engine = pgferry_core::Engine::new(
            pgferry_core::db::Pools::new(&config, "cli", 4),
            pgferry_core::EngineConfig::default(),
        );
        let state = pgferry_server::AppState::new(engine, pgferry_server::ServerConfig::default())
            .await
            .map_err(|e| unreachable(&e))?;
        Ok(Api {
            base: format!("the database (tenant {tenant})"),
            transport: Transport::InProcess {
                router: pgferry_server::router(state),
                caller: InProcessCaller(Principal {
                    tenant_id,
                    tenant,
                    key_id,
                    scopes: Scopes::all(),
                }),
            },
        })
    }

    pub async fn get(&self, path: &str, query: &[(&str, String)]) -> anyhow::Result<Value> {
        self.send(reqwest::Method::GET, path, query, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.send(reqwest::Method::POST, path, &[], Some(body))
            .await
    }

    pub async fn patch(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.send(reqwest::Method::PATCH, path, &[], Some(body))
            .await
    }

    pub async fn delete(&self, path: &str) -> anyhow::Result<Value> {
        self.send(reqwest::Method::DELETE, path, &[], None).await
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let (status, body) = match &self.transport {
            Transport::Http { key, http } => {
                let mut req = http
                    .request(method, format!("{}{path}", self.base))
                    .query(query)
                    .bearer_auth(key);
                if let Some(b) = &body {
                    req = req.json(b);
                }
                let resp = req.send().await.map_err(|e| {
                    exit(
                        Exit::Unavailable,
                        format!("cannot reach {}: {e}", self.base),
                    )
                })?;
                let status = resp.status().as_u16();
                (status, resp.json().await.unwrap_or(Value::Null))
            }
            Transport::InProcess { router, caller } => {
                in_process(router, caller, method, path, query, body).await?
            }
        };
        if (200..300).contains(&status) {
            return Ok(body);
        }
        let err = &body["error"];
        let mut message = format!(
            "{}: {}",
            err["code"].as_str().unwrap_or("error"),
            err["message"].as_str().unwrap_or(&status.to_string())
        );
        if let Some(field) = err["field"].as_str() {
            message.push_str(&format!(" (field {field})"));
        }
        let code = match status {
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

/// The label of the key that database-mode actions are recorded under in the audit log.
const OPERATOR_KEY_LABEL: &str = "pgferry-cli --database-url";

/// The tenant's operator key for the audit log: the unrevoked one with
/// [`OPERATOR_KEY_LABEL`], created (every scope) on first use. Its secret is thrown away at
/// once: it authenticates nothing, it only names who acted.
async fn operator_key(
    client: &mut tokio_postgres::Client,
    tenant_id: i64,
    tenant: &str,
) -> Result<i64, pgferry_server::auth::admin::AdminError> {
    use pgferry_server::auth::{admin, Scopes};
    let keys = admin::list_keys(client, tenant_id).await?;
    if let Some(k) = keys
        .iter()
        .find(|k| !k.revoked && k.label.as_deref() == Some(OPERATOR_KEY_LABEL))
    {
        return Ok(k.key_id);
    }
    let (key_id, _secret) =
        admin::create_key(client, tenant, Scopes::all(), Some(OPERATOR_KEY_LABEL)).await?;
    Ok(key_id)
}

/// One request through the router in this process: (status, JSON body).
async fn in_process(
    router: &axum::Router,
    caller: &pgferry_server::auth::InProcessCaller,
    method: reqwest::Method,
    path: &str,
    query: &[(&str, String)],
    body: Option<Value>,
) -> anyhow::Result<(u16, Value)> {
    use tower::ServiceExt;
    // The query string encoded the way reqwest encodes it for HTTP.
    let mut url = reqwest::Url::parse("http://in-process")?.join(path)?;
    if !query.is_empty() {
        url.query_pairs_mut()
            .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
    }
    let uri = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    };
    let mut req = axum::http::Request::builder()
        .method(method.as_str())
        .uri(uri)
        .header("content-type", "application/json")
        .body(match body {
            Some(b) => axum::body::Body::from(serde_json::to_vec(&b)?),
            None => axum::body::Body::empty(),
        })?;
    req.extensions_mut().insert(caller.clone());
    let resp = router.clone().oneshot(req).await?;
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), 256 << 20).await?;
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
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
