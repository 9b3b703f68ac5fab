//! Tenant and key management (CLI and tests). Every change is written to the audit log in
//! the same transaction as the change itself.

use std::time::SystemTime;

use serde_json::json;
use tokio_postgres::{Client, GenericClient};

use super::keys::{ApiKey, Scopes};

const TENANT_INSERT: &str = include_str!("sql/tenant_insert.sql");
const TENANT_BY_NAME: &str = include_str!("sql/tenant_by_name.sql");
const TENANT_LIST: &str = include_str!("sql/tenant_list.sql");
const KEY_INSERT: &str = include_str!("sql/key_insert.sql");
const KEY_REVOKE: &str = include_str!("sql/key_revoke.sql");
const KEY_LIST: &str = include_str!("sql/key_list.sql");
const AUDIT_INSERT: &str = include_str!("sql/audit_insert.sql");
const KEY_LOOKUP: &str = include_str!("sql/key_lookup.sql");

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("tenant {0:?} already exists")]
    TenantExists(String),
    #[error("no tenant named {0:?}")]
    NoSuchTenant(String),
    #[error("invalid tenant name {0:?}: 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit")]
    BadTenantName(String),
    #[error("no active key with prefix {0:?}")]
    NoSuchKey(String),
    #[error("a key needs at least one scope (produce, consume, read, admin)")]
    NoScopes,
    #[error("database: {0}")]
    Db(#[from] tokio_postgres::Error),
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Tenant {
    pub tenant_id: i64,
    pub name: String,
    #[serde(skip)]
    pub created_at: SystemTime,
    pub active_keys: i64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct KeyInfo {
    pub key_id: i64,
    pub prefix: String,
    pub scopes: Vec<String>,
    pub label: Option<String>,
    pub revoked: bool,
}

/// Who performed an admin action (audit log `actor`).
pub const CLI_ACTOR: &str = "cli";
/// Admin actions taken through the API (the key is recorded too).
pub const API_ACTOR: &str = "api";

fn valid_tenant_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

async fn audit<C: GenericClient>(
    c: &C,
    tenant_id: Option<i64>,
    action: &str,
    target: &str,
    detail: serde_json::Value,
) -> Result<(), tokio_postgres::Error> {
    c.execute(
        AUDIT_INSERT,
        &[
            &tenant_id,
            &None::<i64>,
            &CLI_ACTOR,
            &action,
            &target,
            &detail,
        ],
    )
    .await
    .map(|_| ())
}

pub async fn create_tenant(client: &mut Client, name: &str) -> Result<i64, AdminError> {
    if !valid_tenant_name(name) {
        return Err(AdminError::BadTenantName(name.to_string()));
    }
    let tx = client.transaction().await?;
    let Some(row) = tx.query_opt(TENANT_INSERT, &[&name]).await? else {
        return Err(AdminError::TenantExists(name.to_string()));
    };
    let id: i64 = row.get("tenant_id");
    audit(&tx, Some(id), "tenant.create", name, json!({})).await?;
    tx.commit().await?;
    Ok(id)
}

/// The id of tenant `name`, if it exists.
pub async fn tenant_id(client: &Client, name: &str) -> Result<Option<i64>, AdminError> {
    Ok(client
        .query_opt(TENANT_BY_NAME, &[&name])
        .await?
        .map(|r| r.get("tenant_id")))
}

pub async fn list_tenants(client: &Client) -> Result<Vec<Tenant>, AdminError> {
    Ok(client
        .query(TENANT_LIST, &[])
        .await?
        .iter()
        .map(|r| Tenant {
            tenant_id: r.get("tenant_id"),
            name: r.get("name"),
            created_at: r.get("created_at"),
            active_keys: r.get("active_keys"),
        })
        .collect())
}

/// Creates a key and returns it; the secret exists nowhere else afterwards.
pub async fn create_key(
    client: &mut Client,
    tenant: &str,
    scopes: Scopes,
    label: Option<&str>,
) -> Result<(i64, ApiKey), AdminError> {
    if scopes.is_empty() {
        return Err(AdminError::NoScopes);
    }
    let tx = client.transaction().await?;
    let Some(t) = tx.query_opt(TENANT_BY_NAME, &[&tenant]).await? else {
        return Err(AdminError::NoSuchTenant(tenant.to_string()));
    };
    let tenant_id: i64 = t.get("tenant_id");
    let key = ApiKey::generate();
    let names: Vec<&str> = scopes.names();
    let key_id: i64 = tx
        .query_one(
            KEY_INSERT,
            &[&tenant_id, &key.prefix, &key.secret_hash(), &names, &label],
        )
        .await?
        .get("key_id");
    audit(
        &tx,
        Some(tenant_id),
        "key.create",
        &key.prefix,
        json!({ "key_id": key_id, "scopes": names, "label": label }),
    )
    .await?;
    tx.commit().await?;
    Ok((key_id, key))
}

/// Revokes the active key with `prefix` (a full key is accepted too). Servers stop accepting
/// it within their auth cache TTL.
pub async fn revoke_key(client: &mut Client, prefix: &str) -> Result<i64, AdminError> {
    let prefix = ApiKey::parse(prefix).map_or(prefix.to_string(), |k| k.prefix);
    let tx = client.transaction().await?;
    let Some(row) = tx.query_opt(KEY_REVOKE, &[&prefix]).await? else {
        return Err(AdminError::NoSuchKey(prefix));
    };
    let (key_id, tenant_id): (i64, i64) = (row.get("key_id"), row.get("tenant_id"));
    audit(
        &tx,
        Some(tenant_id),
        "key.revoke",
        &prefix,
        json!({ "key_id": key_id }),
    )
    .await?;
    tx.commit().await?;
    Ok(key_id)
}

pub async fn list_keys(client: &Client, tenant_id: i64) -> Result<Vec<KeyInfo>, AdminError> {
    Ok(client
        .query(KEY_LIST, &[&tenant_id])
        .await?
        .iter()
        .map(|r| KeyInfo {
            key_id: r.get("key_id"),
            prefix: r.get("prefix"),
            scopes: r.get("scopes"),
            label: r.get("label"),
            revoked: r.get::<_, Option<SystemTime>>("revoked_at").is_some(),
        })
        .collect())
}

/// The tenant id of `key` when it exists, is unrevoked and its secret matches.
pub async fn verify_key(client: &Client, key: &ApiKey) -> Result<Option<i64>, AdminError> {
    // The touch interval is irrelevant here; the lookup statement wants one.
    let row = client
        .query_opt(KEY_LOOKUP, &[&key.prefix, &300.0f64])
        .await?;
    Ok(row.and_then(|r| {
        let ok = !r.get::<_, bool>("revoked")
            && super::keys::hash_matches(&key.secret, r.get("secret_sha256"));
        ok.then(|| r.get("tenant_id"))
    }))
}

/// Records an admin action taken with an API key.
pub async fn audit_api<C: GenericClient>(
    c: &C,
    p: &super::Principal,
    action: &str,
    target: &str,
    detail: serde_json::Value,
) -> Result<(), tokio_postgres::Error> {
    c.execute(
        AUDIT_INSERT,
        &[
            &Some(p.tenant_id),
            &Some(p.key_id),
            &API_ACTOR,
            &action,
            &target,
            &detail,
        ],
    )
    .await
    .map(|_| ())
}
