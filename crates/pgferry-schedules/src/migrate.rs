//! The schedules schema's own versioned migrations (ledger
//! `pgferry_sched.schema_migrations`, same rules as the engine's and ASH's: applied once
//! each, checksummed, never edited). `pgferry migrate up` and `pgferry serve` call [`up`]
//! after the engine's migrations.

use pgferry_core::migrate::Migration;
use tokio_postgres::Client;

use crate::error::{Result, ScheduleError};

pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "0001_schedules.sql",
    sql: include_str!("../migrations/0001_schedules.sql"),
}];

/// Advisory lock of schedules migrations (distinct from the engine's and ASH's).
const LOCK: i64 = 0x7067_6665_7272_7953;

const LOCK_SQL: &str = include_str!("../sql/migrate/lock.sql");
const UNLOCK_SQL: &str = include_str!("../sql/migrate/unlock.sql");
const CREATE_LEDGER: &str = include_str!("../sql/migrate/create_ledger.sql");
const SELECT_APPLIED: &str = include_str!("../sql/migrate/select_applied.sql");
const RECORD_APPLIED: &str = include_str!("../sql/migrate/record_applied.sql");

/// Applies pending migrations; returns the versions applied by this call.
pub async fn up(client: &mut Client) -> Result<Vec<i32>> {
    client.execute(LOCK_SQL, &[&LOCK]).await?;
    let result = apply(client).await;
    let unlock = client.execute(UNLOCK_SQL, &[&LOCK]).await;
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
            return Err(ScheduleError::Unknown { version, name });
        };
        if m.checksum() != checksum {
            return Err(ScheduleError::Modified {
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
            .map_err(|source| ScheduleError::Migration {
                version: m.version,
                name: m.name,
                source,
            })?;
        tx.execute(RECORD_APPLIED, &[&m.version, &m.name, &m.checksum()])
            .await?;
        tx.commit().await?;
        tracing::info!(
            version = m.version,
            name = m.name,
            "applied schedules migration"
        );
        done.push(m.version);
    }
    Ok(done)
}
