//! Versioned SQL migrations.
//!
//! Each migration is a `.sql` file compiled into the binary. It is applied once, inside its
//! own transaction, and recorded in `pgferry.schema_migrations` with a SHA-256 of its text.
//! An already-applied file whose text changed is an error: silently running a different
//! schema than the one recorded is how production databases drift.
//!
//! `up` holds a session advisory lock for its whole run, so two servers starting at once
//! apply each migration exactly once; the second waits and then finds nothing to do.

use sha2::{Digest, Sha256};
use tokio_postgres::Client;

/// One migration file.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

impl Migration {
    pub fn checksum(&self) -> String {
        hex::encode(Sha256::digest(self.sql.as_bytes()))
    }
}

/// The migrations of this build, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_engine.sql",
        sql: include_str!("../migrations/0001_engine.sql"),
    },
    Migration {
        version: 2,
        name: "0002_tenancy.sql",
        sql: include_str!("../migrations/0002_tenancy.sql"),
    },
    Migration {
        version: 3,
        name: "0003_job_semantics.sql",
        sql: include_str!("../migrations/0003_job_semantics.sql"),
    },
    Migration {
        version: 4,
        name: "0004_fast_path.sql",
        sql: include_str!("../migrations/0004_fast_path.sql"),
    },
    Migration {
        version: 5,
        name: "0005_listing_counters.sql",
        sql: include_str!("../migrations/0005_listing_counters.sql"),
    },
    Migration {
        version: 6,
        name: "0006_whole_receipts.sql",
        sql: include_str!("../migrations/0006_whole_receipts.sql"),
    },
    Migration {
        version: 7,
        name: "0007_long_lease_hand_over.sql",
        sql: include_str!("../migrations/0007_long_lease_hand_over.sql"),
    },
    Migration {
        version: 8,
        name: "0008_free_segments_detached.sql",
        sql: include_str!("../migrations/0008_free_segments_detached.sql"),
    },
    Migration {
        version: 9,
        name: "0009_compressed_batch_rows.sql",
        sql: include_str!("../migrations/0009_compressed_batch_rows.sql"),
    },
    Migration {
        version: 10,
        name: "0010_unique_keys_by_job.sql",
        sql: include_str!("../migrations/0010_unique_keys_by_job.sql"),
    },
    Migration {
        version: 11,
        name: "0011_queue_durability.sql",
        sql: include_str!("../migrations/0011_queue_durability.sql"),
    },
    Migration {
        version: 12,
        name: "0012_complete_whole.sql",
        sql: include_str!("../migrations/0012_complete_whole.sql"),
    },
    Migration {
        version: 13,
        name: "0013_no_insert_vacuum.sql",
        sql: include_str!("../migrations/0013_no_insert_vacuum.sql"),
    },
    Migration {
        version: 14,
        name: "0014_idempotency_keys.sql",
        sql: include_str!("../migrations/0014_idempotency_keys.sql"),
    },
];

/// Advisory lock key for migrations ("pgferry" in ASCII, truncated): not shared with any
/// other pgferry lock.
const MIGRATION_LOCK: i64 = 0x7067_6665_7272_7901;

const CREATE_LEDGER: &str = "
CREATE SCHEMA IF NOT EXISTS pgferry;
CREATE TABLE IF NOT EXISTS pgferry.schema_migrations (
    version    int PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)";
const LEDGER_EXISTS: &str = "SELECT to_regclass('pgferry.schema_migrations') IS NOT NULL";
const SELECT_APPLIED: &str =
    "SELECT version, name, checksum FROM pgferry.schema_migrations ORDER BY version";
const RECORD_APPLIED: &str =
    "INSERT INTO pgferry.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)";

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("migration {version} ({name}) was applied with checksum {applied} but the file now has {current}; applied migrations must never change — add a new migration instead")]
    Modified {
        version: i32,
        name: String,
        applied: String,
        current: String,
    },
    #[error("database has migration {version} ({name}) which this pgferry build does not know; run a newer pgferry")]
    Unknown { version: i32, name: String },
    #[error("migration {version} ({name}) failed: {source}")]
    Failed {
        version: i32,
        name: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("migration ledger: {0}")]
    Db(#[from] tokio_postgres::Error),
}

/// State of one migration as seen by `status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MigrationState {
    Applied,
    Pending,
    Modified,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct MigrationStatus {
    pub version: i32,
    pub name: String,
    pub state: MigrationState,
}

/// Applies every pending migration of `MIGRATIONS`. Returns the versions applied by this call.
pub async fn up(client: &mut Client) -> Result<Vec<i32>, MigrateError> {
    up_with(client, MIGRATIONS).await
}

/// Like [`up`] with an explicit list (tests use this to simulate edited files).
pub async fn up_with(
    client: &mut Client,
    migrations: &[Migration],
) -> Result<Vec<i32>, MigrateError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let result = apply_pending(client, migrations).await;
    // Unlock even when a migration failed: the session may be pooled and reused.
    let unlock = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    let applied = result?;
    unlock?;
    Ok(applied)
}

async fn apply_pending(
    client: &mut Client,
    migrations: &[Migration],
) -> Result<Vec<i32>, MigrateError> {
    client.batch_execute(CREATE_LEDGER).await?;
    let applied = check_applied(client, migrations).await?;
    let mut done = Vec::new();
    for m in migrations.iter().filter(|m| !applied.contains(&m.version)) {
        let tx = client.transaction().await?;
        tx.batch_execute(m.sql)
            .await
            .map_err(|source| MigrateError::Failed {
                version: m.version,
                name: m.name,
                source,
            })?;
        tx.execute(RECORD_APPLIED, &[&m.version, &m.name, &m.checksum()])
            .await?;
        tx.commit().await?;
        tracing::info!(version = m.version, name = m.name, "applied migration");
        done.push(m.version);
    }
    Ok(done)
}

/// Verifies applied migrations against the files; returns the applied versions.
async fn check_applied(
    client: &Client,
    migrations: &[Migration],
) -> Result<Vec<i32>, MigrateError> {
    let mut versions = Vec::new();
    for row in client.query(SELECT_APPLIED, &[]).await? {
        let (version, name, checksum): (i32, String, String) = (row.get(0), row.get(1), row.get(2));
        let Some(m) = migrations.iter().find(|m| m.version == version) else {
            return Err(MigrateError::Unknown { version, name });
        };
        if m.checksum() != checksum {
            return Err(MigrateError::Modified {
                version,
                name,
                applied: checksum,
                current: m.checksum(),
            });
        }
        versions.push(version);
    }
    Ok(versions)
}

/// Reports each known migration as applied, pending or modified (never fails on a modified one).
pub async fn status(client: &Client) -> Result<Vec<MigrationStatus>, MigrateError> {
    status_with(client, MIGRATIONS).await
}

pub async fn status_with(
    client: &Client,
    migrations: &[Migration],
) -> Result<Vec<MigrationStatus>, MigrateError> {
    let ledger: bool = client.query_one(LEDGER_EXISTS, &[]).await?.get(0);
    let applied: Vec<(i32, String)> = if ledger {
        client
            .query(SELECT_APPLIED, &[])
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(2)))
            .collect()
    } else {
        Vec::new()
    };
    Ok(migrations
        .iter()
        .map(|m| {
            let state = match applied.iter().find(|(v, _)| *v == m.version) {
                None => MigrationState::Pending,
                Some((_, sum)) if *sum == m.checksum() => MigrationState::Applied,
                Some(_) => MigrationState::Modified,
            };
            MigrationStatus {
                version: m.version,
                name: m.name.to_string(),
                state,
            }
        })
        .collect())
}

/// True when every migration of this build is applied unmodified (`/readyz`).
pub async fn is_current(client: &Client) -> Result<bool, MigrateError> {
    Ok(status(client)
        .await?
        .iter()
        .all(|s| s.state == MigrationState::Applied))
}
