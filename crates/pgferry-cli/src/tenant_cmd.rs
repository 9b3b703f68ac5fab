//! `pgferry tenant create|list` and `pgferry key create|revoke|list`: operator commands that
//! talk to the database directly (whoever can reach the database is the operator). Every
//! change lands in `pgferry.audit_log` with actor `cli`.

use std::path::Path;

use anyhow::Context;
use pgferry_core::db;
use pgferry_server::auth::admin;
use pgferry_server::auth::{ApiKey, Scopes};
use tokio_postgres::Client;

#[derive(clap::Subcommand)]
pub enum TenantAction {
    /// Create a tenant (name: a-z, 0-9, '_', '-'; up to 63 characters).
    Create { name: String },
    /// List tenants with their number of active keys (JSON).
    List,
}

#[derive(clap::Subcommand)]
pub enum KeyAction {
    /// Create an API key; the key is printed once and cannot be shown again.
    Create {
        #[arg(long)]
        tenant: String,
        /// Comma-separated: produce, consume, read, admin (admin implies the others).
        #[arg(long, default_value = "produce,consume,read")]
        scopes: String,
        /// A note to recognise the key by (e.g. the service using it).
        #[arg(long)]
        label: Option<String>,
    },
    /// Revoke a key by its prefix (the 12 hex digits after `pgf_`) or the whole key.
    Revoke { prefix: String },
    /// List a tenant's keys (never their secrets; JSON).
    List {
        #[arg(long)]
        tenant: String,
    },
}

async fn connect(url: &str) -> anyhow::Result<Client> {
    let config = db::parse_config(url)?;
    db::connect(&config, "admin")
        .await
        .context("connecting to the database")
}

pub async fn tenant(url: &str, action: TenantAction) -> anyhow::Result<()> {
    let mut client = connect(url).await?;
    match action {
        TenantAction::Create { name } => {
            let id = admin::create_tenant(&mut client, &name).await?;
            println!("{}", serde_json::json!({ "tenant_id": id, "name": name }));
        }
        TenantAction::List => {
            let tenants = admin::list_tenants(&client).await?;
            println!("{}", serde_json::to_string_pretty(&tenants)?);
        }
    }
    Ok(())
}

pub async fn key(url: &str, action: KeyAction) -> anyhow::Result<()> {
    let mut client = connect(url).await?;
    match action {
        KeyAction::Create {
            tenant,
            scopes,
            label,
        } => {
            let scopes = Scopes::from_names(scopes.split(',').filter(|s| !s.trim().is_empty()))
                .map_err(|bad| {
                    anyhow::anyhow!(
                        "unknown scope {bad:?}; scopes are produce, consume, read, admin"
                    )
                })?;
            let (key_id, key) =
                admin::create_key(&mut client, &tenant, scopes, label.as_deref()).await?;
            eprintln!("pgferry: store this key now; it cannot be shown again");
            println!(
                "{}",
                serde_json::json!({
                    "key": key.expose(),
                    "prefix": key.prefix,
                    "key_id": key_id,
                    "tenant": tenant,
                    "scopes": scopes.names(),
                })
            );
        }
        KeyAction::Revoke { prefix } => {
            let key_id = admin::revoke_key(&mut client, &prefix).await?;
            println!(
                "{}",
                serde_json::json!({ "revoked": true, "key_id": key_id })
            );
        }
        KeyAction::List { tenant } => {
            let id = admin::tenant_id(&client, &tenant)
                .await?
                .ok_or_else(|| admin::AdminError::NoSuchTenant(tenant.clone()))?;
            let keys = admin::list_keys(&client, id).await?;
            println!("{}", serde_json::to_string_pretty(&keys)?);
        }
    }
    Ok(())
}

/// Name of the tenant `pgferry dev` creates.
pub const DEV_TENANT: &str = "dev";
/// File in the dev data dir holding the dev key, so restarts print the same one.
const DEV_KEY_FILE: &str = "dev-api-key";

/// Returns the dev key: the one stored in `data_dir` while it still authenticates (exists,
/// unrevoked), else a new admin key of tenant `dev` (created if missing), stored for next time.
pub async fn ensure_dev_key(client: &mut Client, data_dir: &Path) -> anyhow::Result<String> {
    let file = data_dir.join(DEV_KEY_FILE);
    if let Ok(text) = std::fs::read_to_string(&file) {
        let text = text.trim();
        if let Some(key) = ApiKey::parse(text) {
            if dev_key_active(client, &key).await? {
                return Ok(key.expose());
            }
        }
    }
    let tenant_id = match admin::tenant_id(client, DEV_TENANT).await? {
        Some(id) => id,
        None => admin::create_tenant(client, DEV_TENANT).await?,
    };
    let (_, key) =
        admin::create_key(client, DEV_TENANT, Scopes::all(), Some("pgferry dev")).await?;
    tracing::info!(tenant_id, prefix = %key.prefix, "created dev API key");
    write_private(&file, &key.expose())
        .with_context(|| format!("storing the dev key in {}", file.display()))?;
    Ok(key.expose())
}

async fn dev_key_active(client: &Client, key: &ApiKey) -> anyhow::Result<bool> {
    let Some(key_tenant) = admin::verify_key(client, key).await? else {
        return Ok(false);
    };
    Ok(admin::tenant_id(client, DEV_TENANT).await? == Some(key_tenant))
}

/// Writes a file readable by its owner only (it holds a secret).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    writeln!(f, "{text}")
}
