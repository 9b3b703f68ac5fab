//! The ash schema's own versioned migrations (ledger `pgferry_ash.schema_migrations`,
//! same rules as the engine's: applied once each, checksummed, never edited) followed by
//! its functions and views, which are `CREATE OR REPLACE` and re-applied on every `up` so
//! that each reader lives in its own file and a new build's readers replace the old ones.
//!
//! `pgferry migrate up` and `pgferry serve` call [`up`] right after the engine's
//! migrations; the ash schema never depends on the engine's, so either can be first.

use pgferry_core::migrate::Migration;
use tokio_postgres::Client;

use crate::error::{AshError, Result};

pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "0001_ash.sql",
    sql: include_str!("../migrations/0001_ash.sql"),
}];

/// Functions and views, in dependency order.
pub const FUNCTIONS: &[(&str, &str)] = &[
    ("decode", include_str!("../sql/functions/01_decode.sql")),
    ("split", include_str!("../sql/functions/02_split.sql")),
    ("load_at", include_str!("../sql/functions/03_load_at.sql")),
    (
        "combo_named",
        include_str!("../sql/functions/04_combo_named.sql"),
    ),
    ("aas_by", include_str!("../sql/functions/05_aas_by.sql")),
    (
        "top_waits",
        include_str!("../sql/functions/06_top_waits.sql"),
    ),
    (
        "top_queries",
        include_str!("../sql/functions/07_top_queries.sql"),
    ),
    (
        "cpu_vs_waiting",
        include_str!("../sql/functions/08_cpu_vs_waiting.sql"),
    ),
    ("timeline", include_str!("../sql/functions/09_timeline.sql")),
    (
        "activity_at",
        include_str!("../sql/functions/10_activity_at.sql"),
    ),
    (
        "decode_locks",
        include_str!("../sql/functions/11_decode_locks.sql"),
    ),
    (
        "blocking_at",
        include_str!("../sql/functions/12_blocking_at.sql"),
    ),
];

/// Advisory lock of ash migrations (distinct from the engine's 0x…7901).
const LOCK: i64 = 0x7067_6665_7272_7941;

const CREATE_LEDGER: &str = include_str!("../sql/create_ledger.sql");
const SELECT_APPLIED: &str = include_str!("../sql/select_applied.sql");
const RECORD_APPLIED: &str = include_str!("../sql/record_applied.sql");

/// Applies pending migrations, then (re)creates the functions. Returns the versions
/// applied by this call.
pub async fn up(client: &mut Client) -> Result<Vec<i32>> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&LOCK])
        .await?;
    let result = apply(client).await;
    let unlock = client
        .execute("SELECT pg_advisory_unlock($1)", &[&LOCK])
        .await;
    let applied = result?;
    unlock?;
    Ok(applied)
}

async fn apply(client: &mut Client) -> Result<Vec<i32>> {
    client.batch_execute(CREATE_LEDGER).await?;
    let mut applied = Vec::new();
    for row in client.query(SELECT_APPLIED, &[]).await? {
        let version: i32 = row.get("version");
        let name: String = row.get("name");
        let checksum: String = row.get("checksum");
        let Some(m) = MIGRATIONS.iter().find(|m| m.version == version) else {
            return Err(AshError::Unknown { version, name });
        };
        if m.checksum() != checksum {
            return Err(AshError::Modified {
                version,
                name,
                applied: checksum,
                current: m.checksum(),
            });
        }
        applied.push(version);
    }
    let mut done = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| !applied.contains(&m.version)) {
        let tx = client.transaction().await?;
        tx.batch_execute(m.sql)
            .await
            .map_err(|source| AshError::Migration {
                version: m.version,
                name: m.name,
                source,
            })?;
        tx.execute(RECORD_APPLIED, &[&m.version, &m.name, &m.checksum()])
            .await?;
        tx.commit().await?;
        tracing::info!(version = m.version, name = m.name, "applied ash migration");
        done.push(m.version);
    }
    let tx = client.transaction().await?;
    for (name, sql) in FUNCTIONS {
        tx.batch_execute(sql)
            .await
            .map_err(|source| AshError::Migration {
                version: 0,
                name,
                source,
            })?;
    }
    tx.commit().await?;
    Ok(done)
}
