//! A tenant's HTTP job settings in Postgres (schema `pgferry_http`): signing secrets (at
//! most two active, so keys rotate without downtime), the allow list (named ranges and
//! CIDRs beyond the server's), and request rates per destination key. The server's API
//! edits them; the worker reads them once per claimed batch ([`Settings::load`]).

use std::collections::BTreeMap;
use std::time::SystemTime;

use pgferry_core::{Engine, Error, Result};
use rand::RngCore;

use crate::ssrf::{Allow, Cidr, Range};

const SECRETS_LIST: &str = include_str!("../sql/secrets_list.sql");
const SECRET_LOCK: &str = include_str!("../sql/secret_lock.sql");
const SECRET_INSERT: &str = include_str!("../sql/secret_insert.sql");
const SECRET_DROP_OLDEST: &str = include_str!("../sql/secret_drop_oldest.sql");
const SECRET_DELETE: &str = include_str!("../sql/secret_delete.sql");
const ALLOW_GET: &str = include_str!("../sql/allow_get.sql");
const ALLOW_PUT: &str = include_str!("../sql/allow_put.sql");
const ALLOW_DELETE: &str = include_str!("../sql/allow_delete.sql");
const RATES_LIST: &str = include_str!("../sql/rates_list.sql");
const RATE_PUT: &str = include_str!("../sql/rate_put.sql");
const RATE_DELETE: &str = include_str!("../sql/rate_delete.sql");
const TENANT_SETTINGS: &str = include_str!("../sql/tenant_settings.sql");

/// Active secrets per tenant: the old and the new one while a key rotates.
pub const MAX_SECRETS: i64 = 2;
/// Longest CIDR list and range list of one tenant's allow list, and most rate limits.
pub const MAX_CIDRS: usize = 64;
pub const MAX_RANGES: usize = 7;
pub const MAX_RATES: usize = 1000;
/// Longest destination key.
pub const MAX_DESTINATION: usize = 300;

/// A signing secret as listed (the secret itself is shown once, when created).
#[derive(Debug, Clone, PartialEq)]
pub struct SecretInfo {
    pub id: i64,
    /// The first characters, to tell secrets apart.
    pub prefix: String,
    pub created_at: SystemTime,
}

/// A request rate for a destination key: `per_sec` sustained, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_sec: f64,
    pub burst: u32,
}

impl Rate {
    /// `Err((field, reason))` unless 0 < per_sec ≤ 100000 and 1 ≤ burst ≤ 100000.
    pub fn validate(&self) -> std::result::Result<(), (&'static str, String)> {
        if !(self.per_sec > 0.0 && self.per_sec <= 100_000.0) {
            return Err(("per_sec", "must be above 0 and at most 100000".into()));
        }
        if !(1..=100_000).contains(&self.burst) {
            return Err(("burst", "must be 1 to 100000".into()));
        }
        Ok(())
    }
}

/// What the worker needs of one tenant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantSettings {
    /// Newest first; each signs every request.
    pub secrets: Vec<Vec<u8>>,
    pub allow: Allow,
    pub rates: BTreeMap<String, Rate>,
}

/// The settings store of one database.
#[derive(Clone)]
pub struct Settings {
    engine: std::sync::Arc<Engine>,
}

/// A new secret: `pfs_` and 32 random bytes in hex (the HMAC key is this text's bytes).
fn new_secret() -> String {
    let mut b = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut b);
    format!("pfs_{}", hex::encode(b))
}

fn prefix(secret: &str) -> String {
    secret.chars().take(10).collect()
}

/// Parses an allow list as the API gives it; `Err((field, reason))`.
pub fn parse_allow(
    ranges: &[String],
    cidrs: &[String],
) -> std::result::Result<Allow, (&'static str, String)> {
    if ranges.len() > MAX_RANGES {
        return Err(("ranges", format!("at most {MAX_RANGES} entries")));
    }
    if cidrs.len() > MAX_CIDRS {
        return Err(("cidrs", format!("at most {MAX_CIDRS} entries")));
    }
    let mut allow = Allow::none();
    for r in ranges {
        allow.ranges.insert(Range::parse(r).ok_or_else(|| {
            (
                "ranges",
                format!("unknown range {r:?} (loopback, private, link_local, shared, multicast, unspecified, reserved)"),
            )
        })?);
    }
    for c in cidrs {
        allow
            .cidrs
            .insert(Cidr::parse(c).map_err(|e| ("cidrs", e))?);
    }
    Ok(allow)
}

impl Settings {
    pub fn new(engine: std::sync::Arc<Engine>) -> Settings {
        Settings { engine }
    }

    /// Adds a secret and returns it (the only time it is shown). `rotate`: the oldest is
    /// dropped when the tenant already has two; otherwise a third is a conflict.
    pub async fn add_secret(&self, tenant: i64, rotate: bool) -> Result<(SecretInfo, String)> {
        let mut client = self.engine.pool().get().await?;
        let tx = client.transaction().await?;
        tx.execute(SECRET_LOCK, &[&tenant]).await?;
        if rotate {
            tx.query(SECRET_DROP_OLDEST, &[&tenant, &(MAX_SECRETS - 1)])
                .await?;
        }
        let secret = new_secret();
        let row = tx
            .query_opt(SECRET_INSERT, &[&tenant, &secret, &MAX_SECRETS])
            .await?
            .ok_or_else(|| {
                Error::Conflict(format!(
                    "the tenant has {MAX_SECRETS} active secrets: delete one, or rotate"
                ))
            })?;
        tx.commit().await?;
        Ok((
            SecretInfo {
                id: row.get("id"),
                prefix: prefix(&secret),
                created_at: row.get("created_at"),
            },
            secret,
        ))
    }

    pub async fn list_secrets(&self, tenant: i64) -> Result<Vec<SecretInfo>> {
        let client = self.engine.pool().get().await?;
        let rows = client.query(SECRETS_LIST, &[&tenant]).await?;
        Ok(rows
            .iter()
            .map(|r| SecretInfo {
                id: r.get("id"),
                prefix: prefix(r.get("secret")),
                created_at: r.get("created_at"),
            })
            .collect())
    }

    pub async fn delete_secret(&self, tenant: i64, id: i64) -> Result<()> {
        let client = self.engine.pool().get().await?;
        match client.query_opt(SECRET_DELETE, &[&tenant, &id]).await? {
            Some(_) => Ok(()),
            None => Err(Error::NotFound {
                what: "signing secret",
                id: id.to_string(),
            }),
        }
    }

    /// The tenant's own allow list (without the server's); empty when none was set.
    pub async fn allow(&self, tenant: i64) -> Result<Allow> {
        let client = self.engine.pool().get().await?;
        // Prepared once per pooled connection: read on every creation-check miss.
        let stmt = client.prepare_cached(ALLOW_GET).await?;
        let Some(row) = client.query_opt(&stmt, &[&tenant]).await? else {
            return Ok(Allow::none());
        };
        Ok(stored_allow(row.get("ranges"), row.get("cidrs")))
    }

    pub async fn put_allow(&self, tenant: i64, allow: &Allow) -> Result<()> {
        let ranges: Vec<&str> = allow.ranges.iter().map(|r| r.as_str()).collect();
        let cidrs: Vec<String> = allow.cidrs.iter().map(|c| c.to_string()).collect();
        let client = self.engine.pool().get().await?;
        client
            .query_one(ALLOW_PUT, &[&tenant, &ranges, &cidrs])
            .await?;
        Ok(())
    }

    /// Removes the allow list; returns whether there was one.
    pub async fn delete_allow(&self, tenant: i64) -> Result<bool> {
        let client = self.engine.pool().get().await?;
        Ok(client.query_opt(ALLOW_DELETE, &[&tenant]).await?.is_some())
    }

    pub async fn rates(&self, tenant: i64) -> Result<Vec<(String, Rate)>> {
        let client = self.engine.pool().get().await?;
        let rows = client.query(RATES_LIST, &[&tenant]).await?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get("destination"),
                    Rate {
                        per_sec: r.get("per_sec"),
                        burst: r.get::<_, i32>("burst") as u32,
                    },
                )
            })
            .collect())
    }

    pub async fn put_rate(&self, tenant: i64, destination: &str, rate: Rate) -> Result<()> {
        let client = self.engine.pool().get().await?;
        let burst = rate.burst as i32;
        client
            .query_one(RATE_PUT, &[&tenant, &destination, &rate.per_sec, &burst])
            .await?;
        Ok(())
    }

    pub async fn delete_rate(&self, tenant: i64, destination: &str) -> Result<()> {
        let client = self.engine.pool().get().await?;
        match client
            .query_opt(RATE_DELETE, &[&tenant, &destination])
            .await?
        {
            Some(_) => Ok(()),
            None => Err(Error::NotFound {
                what: "rate limit",
                id: destination.to_string(),
            }),
        }
    }

    /// Secrets, allow list and rates of a tenant in one round trip.
    pub async fn load(&self, tenant: i64) -> Result<TenantSettings> {
        let client = self.engine.pool().get().await?;
        // Prepared once per pooled connection (read per batch): one round trip, no parse
        // and no re-plan per call.
        let stmt = client.prepare_cached(TENANT_SETTINGS).await?;
        let r = client.query_one(&stmt, &[&tenant]).await?;
        let secrets: Vec<String> = r.get("secrets");
        let dests: Vec<String> = r.get("rate_destinations");
        let per_sec: Vec<f64> = r.get("rate_per_sec");
        let burst: Vec<i32> = r.get("rate_burst");
        Ok(TenantSettings {
            secrets: secrets.into_iter().map(String::into_bytes).collect(),
            allow: stored_allow(
                r.get::<_, Option<Vec<String>>>("ranges")
                    .unwrap_or_default(),
                r.get::<_, Option<Vec<String>>>("cidrs").unwrap_or_default(),
            ),
            rates: dests
                .into_iter()
                .zip(per_sec.into_iter().zip(burst))
                .map(|(d, (p, b))| {
                    (
                        d,
                        Rate {
                            per_sec: p,
                            burst: b as u32,
                        },
                    )
                })
                .collect(),
        })
    }
}

/// Rows were validated when written; an entry this build does not know is skipped.
fn stored_allow(ranges: Vec<String>, cidrs: Vec<String>) -> Allow {
    let mut a = Allow::none();
    a.ranges
        .extend(ranges.iter().filter_map(|r| Range::parse(r)));
    a.cidrs
        .extend(cidrs.iter().filter_map(|c| Cidr::parse(c).ok()));
    a
}
