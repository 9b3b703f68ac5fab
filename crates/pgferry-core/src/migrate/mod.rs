//! Schema migrations: versioned migrations, then repeatable functions (ADR 0017).
//!
//! A [`Component`] (the engine here; the server and the ASH crate have their own) owns two
//! kinds of schema text, both compiled into the binary:
//!
//! - **Versioned migrations** (`migrations/NNNN_*.sql`): tables, indexes, data moves and the
//!   explicit `DROP FUNCTION` of retired functions. Each is applied once, inside its own
//!   transaction, and recorded in `pgferry.schema_migrations` with a SHA-256 of its text. An
//!   already-applied file whose text changed is an error: silently running a different
//!   schema than the one recorded is how production databases drift.
//! - **Repeatable functions** (`src/sql/functions/<name>.sql`): every live plpgsql/SQL
//!   function, defined exactly once, as `CREATE OR REPLACE`. After the versioned migrations,
//!   every function whose text differs from the checksum recorded in
//!   `pgferry.schema_functions` is (re)applied, all of them in one transaction, in the
//!   component's order (SQL-language functions are checked against the functions they call
//!   at creation, so callees come first). Changing `complete()` is a diff of one file, the
//!   way Flyway's repeatable scripts work. A function that changes its signature or is
//!   retired gets an explicit `DROP FUNCTION` in a versioned migration.
//!
//! [`up`] holds one session advisory lock (shared by all components) for its whole run, so
//! two servers starting at once apply each step exactly once.

use sha2::{Digest, Sha256};
use tokio_postgres::Client;

/// One versioned migration file.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

impl Migration {
    pub fn checksum(&self) -> String {
        checksum(self.sql)
    }
}

/// One repeatable function file (`CREATE OR REPLACE FUNCTION …`).
#[derive(Debug, Clone, Copy)]
pub struct Function {
    pub name: &'static str,
    pub sql: &'static str,
}

impl Function {
    pub fn checksum(&self) -> String {
        checksum(self.sql)
    }
}

fn checksum(sql: &str) -> String {
    hex::encode(Sha256::digest(sql.as_bytes()))
}

/// The schema one crate owns: its name in the ledger, its versioned migrations in order, and
/// its functions in dependency order.
#[derive(Debug, Clone, Copy)]
pub struct Component<'a> {
    pub name: &'static str,
    pub migrations: &'a [Migration],
    pub functions: &'a [Function],
}

macro_rules! function {
    ($name:literal) => {
        Function {
            name: $name,
            sql: include_str!(concat!("../sql/functions/", $name, ".sql")),
        }
    };
}

/// The engine's schema.
pub const ENGINE: Component<'static> = Component {
    name: "engine",
    migrations: MIGRATIONS,
    functions: FUNCTIONS,
};

/// The engine's versioned migrations, in order. 0001 is the squash of the first thirteen
/// (ADR 0017); the numbers 2–13 are not reused.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_baseline.sql",
        sql: include_str!("../../migrations/0001_baseline.sql"),
    },
    Migration {
        version: 14,
        name: "0014_idempotency_keys.sql",
        sql: include_str!("../../migrations/0014_idempotency_keys.sql"),
    },
    Migration {
        version: 15,
        name: "0015_workflows.sql",
        sql: include_str!("../../migrations/0015_workflows.sql"),
    },
    Migration {
        version: 16,
        name: "0016_side_rows_keep_times.sql",
        sql: include_str!("../../migrations/0016_side_rows_keep_times.sql"),
    },
    Migration {
        version: 17,
        name: "0017_workflow_list_indexes.sql",
        sql: include_str!("../../migrations/0017_workflow_list_indexes.sql"),
    },
    Migration {
        version: 18,
        name: "0018_workflow_strategies_retention.sql",
        sql: include_str!("../../migrations/0018_workflow_strategies_retention.sql"),
    },
    Migration {
        version: 19,
        name: "0019_workflow_round_robin.sql",
        sql: include_str!("../../migrations/0019_workflow_round_robin.sql"),
    },
    Migration {
        version: 20,
        name: "0020_workflow_active_index.sql",
        sql: include_str!("../../migrations/0020_workflow_active_index.sql"),
    },
    Migration {
        version: 23,
        name: "0023_workflow_continued_steps.sql",
        sql: include_str!("../../migrations/0023_workflow_continued_steps.sql"),
    },
    Migration {
        version: 24,
        name: "0024_workflow_hot_step_updates.sql",
        sql: include_str!("../../migrations/0024_workflow_hot_step_updates.sql"),
    },
    Migration {
        version: 25,
        name: "0025_scheduled_first_run.sql",
        sql: include_str!("../../migrations/0025_scheduled_first_run.sql"),
    },
    Migration {
        version: 26,
        name: "0026_workflow_continued_columns.sql",
        sql: include_str!("../../migrations/0026_workflow_continued_columns.sql"),
    },
    Migration {
        version: 27,
        name: "0027_workflow_previous_step.sql",
        sql: include_str!("../../migrations/0027_workflow_previous_step.sql"),
    },
    Migration {
        version: 28,
        name: "0028_workflow_finish_answers.sql",
        sql: include_str!("../../migrations/0028_workflow_finish_answers.sql"),
    },
    Migration {
        version: 29,
        name: "0029_workflow_step_time_is_apply_time.sql",
        sql: include_str!("../../migrations/0029_workflow_step_time_is_apply_time.sql"),
    },
];

/// The engine's live functions, callees before SQL-language callers.
pub const FUNCTIONS: &[Function] = &[
    // The job log (docs/architecture.md, "The log").
    function!("ready_rows"),
    function!("claim_lanes"),
    function!("claim"),
    function!("claim_limited"),
    function!("lane_head_age"),
    function!("heartbeat"),
    function!("hand_over"),
    function!("complete_handed"),
    function!("complete"),
    function!("complete_whole"),
    // One job from SQL, in the caller's transaction (transactional enqueue from any driver).
    function!("enqueue"),
    // Workflows (docs/adr/0013-workflow-instances.md).
    function!("wf_take_token"),
    function!("wf_take_slot"),
    function!("wf_emit"),
    function!("wf_rr_promote"),
    function!("wf_free_slot"),
    function!("wf_sweep_key"),
    function!("wf_lock_chain"),
    function!("wf_end"),
    function!("wf_join"),
    function!("wf_start"),
    function!("wf_claim"),
    function!("wf_apply"),
    function!("wf_finish_arrays"),
    function!("wf_finish"),
    function!("wf_signal"),
    function!("wf_cancel"),
    function!("wf_retry"),
];

const LEDGER: &str = include_str!("sql/ledger.sql");
const LEDGER_EXISTS: &str = include_str!("sql/ledger_exists.sql");
const MIGRATIONS_APPLIED: &str = include_str!("sql/migrations_applied.sql");
const MIGRATION_RECORD: &str = include_str!("sql/migration_record.sql");
const FUNCTIONS_APPLIED: &str = include_str!("sql/functions_applied.sql");
const FUNCTION_RECORD: &str = include_str!("sql/function_record.sql");
const LOCK: &str = include_str!("sql/lock.sql");
const UNLOCK: &str = include_str!("sql/unlock.sql");

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("{component} migration {version} ({name}) was applied with checksum {applied} but the file now has {current}; applied migrations must never change — add a new migration instead")]
    Modified {
        component: &'static str,
        version: i32,
        name: String,
        applied: String,
        current: String,
    },
    #[error("database has {component} migration {version} ({name}) which this pgferry build does not know; run a newer pgferry")]
    Unknown {
        component: &'static str,
        version: i32,
        name: String,
    },
    #[error("{component} migration {version} ({name}) failed: {source}")]
    Failed {
        component: &'static str,
        version: i32,
        name: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("{component} function {name} failed to apply: {source}")]
    Function {
        component: &'static str,
        name: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("migration ledger: {0}")]
    Db(#[from] tokio_postgres::Error),
}

/// State of one migration or function as seen by `status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MigrationState {
    Applied,
    Pending,
    /// A versioned migration whose file changed after it was applied (an error), or a
    /// function whose file changed since it was applied (applied by the next `up`).
    Modified,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct MigrationStatus {
    pub component: &'static str,
    /// `None` for a repeatable function.
    pub version: Option<i32>,
    pub name: String,
    pub state: MigrationState,
}

/// What one `up` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Versions of the migrations applied by this call.
    pub versions: Vec<i32>,
    /// Names of the functions (re)created by this call.
    pub functions: Vec<&'static str>,
}

/// Applies the engine's pending migrations and changed functions. Returns the versions of
/// the migrations it applied.
pub async fn up(client: &mut Client) -> Result<Vec<i32>, MigrateError> {
    Ok(up_components(client, &[ENGINE]).await?.versions)
}

/// Like [`up`] with an explicit list of versioned migrations and no functions (tests use
/// this to simulate edited files).
pub async fn up_with(
    client: &mut Client,
    migrations: &[Migration],
) -> Result<Vec<i32>, MigrateError> {
    let c = Component {
        name: "test",
        migrations,
        functions: &[],
    };
    Ok(up_components(client, &[c]).await?.versions)
}

/// Applies each component in order under one lock: its pending migrations, then its changed
/// functions. Components are independent schemas, or later ones build on earlier ones.
pub async fn up_components(
    client: &mut Client,
    components: &[Component<'_>],
) -> Result<Applied, MigrateError> {
    client.execute(LOCK, &[]).await?;
    let result = apply_all(client, components).await;
    // Unlock even when a step failed: the session may be pooled and reused.
    let unlock = client.execute(UNLOCK, &[]).await;
    let applied = result?;
    unlock?;
    Ok(applied)
}

async fn apply_all(
    client: &mut Client,
    components: &[Component<'_>],
) -> Result<Applied, MigrateError> {
    client.batch_execute(LEDGER).await?;
    let mut out = Applied::default();
    for c in components {
        out.versions.extend(apply_migrations(client, c).await?);
        out.functions.extend(apply_functions(client, c).await?);
    }
    Ok(out)
}

async fn apply_migrations(
    client: &mut Client,
    c: &Component<'_>,
) -> Result<Vec<i32>, MigrateError> {
    let applied = check_applied(client, c).await?;
    let mut done = Vec::new();
    for m in c
        .migrations
        .iter()
        .filter(|m| !applied.contains(&m.version))
    {
        let tx = client.transaction().await?;
        tx.batch_execute(m.sql)
            .await
            .map_err(|source| MigrateError::Failed {
                component: c.name,
                version: m.version,
                name: m.name,
                source,
            })?;
        tx.execute(
            MIGRATION_RECORD,
            &[&c.name, &m.version, &m.name, &m.checksum()],
        )
        .await?;
        tx.commit().await?;
        tracing::info!(
            component = c.name,
            version = m.version,
            name = m.name,
            "applied migration"
        );
        done.push(m.version);
    }
    Ok(done)
}

/// (Re)creates every function whose text is not the one recorded, in one transaction: a
/// build's functions replace the previous build's together or not at all.
async fn apply_functions(
    client: &mut Client,
    c: &Component<'_>,
) -> Result<Vec<&'static str>, MigrateError> {
    let recorded = recorded_functions(client, c.name).await?;
    let changed: Vec<&Function> = c
        .functions
        .iter()
        .filter(|f| {
            recorded
                .iter()
                .all(|(n, sum)| n != f.name || *sum != f.checksum())
        })
        .collect();
    if changed.is_empty() {
        return Ok(Vec::new());
    }
    let tx = client.transaction().await?;
    for f in &changed {
        tx.batch_execute(f.sql)
            .await
            .map_err(|source| MigrateError::Function {
                component: c.name,
                name: f.name,
                source,
            })?;
        tx.execute(FUNCTION_RECORD, &[&c.name, &f.name, &f.checksum()])
            .await?;
    }
    tx.commit().await?;
    let names: Vec<&'static str> = changed.iter().map(|f| f.name).collect();
    tracing::info!(component = c.name, functions = ?names, "applied functions");
    Ok(names)
}

async fn recorded_functions(
    client: &Client,
    component: &str,
) -> Result<Vec<(String, String)>, MigrateError> {
    Ok(client
        .query(FUNCTIONS_APPLIED, &[&component])
        .await?
        .iter()
        .map(|r| (r.get("name"), r.get("checksum")))
        .collect())
}

/// Verifies applied migrations against the files; returns the applied versions.
async fn check_applied(client: &Client, c: &Component<'_>) -> Result<Vec<i32>, MigrateError> {
    let mut versions = Vec::new();
    for row in client.query(MIGRATIONS_APPLIED, &[&c.name]).await? {
        let version: i32 = row.get("version");
        let name: String = row.get("name");
        let checksum: String = row.get("checksum");
        let Some(m) = c.migrations.iter().find(|m| m.version == version) else {
            return Err(MigrateError::Unknown {
                component: c.name,
                version,
                name,
            });
        };
        if m.checksum() != checksum {
            return Err(MigrateError::Modified {
                component: c.name,
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

/// Reports each of the engine's migrations and functions as applied, pending or modified
/// (never fails on a modified one).
pub async fn status(client: &Client) -> Result<Vec<MigrationStatus>, MigrateError> {
    status_of(client, &[ENGINE]).await
}

pub async fn status_with(
    client: &Client,
    migrations: &[Migration],
) -> Result<Vec<MigrationStatus>, MigrateError> {
    let c = Component {
        name: "test",
        migrations,
        functions: &[],
    };
    status_of(client, &[c]).await
}

/// The state of every migration and function of these components.
pub async fn status_of(
    client: &Client,
    components: &[Component<'_>],
) -> Result<Vec<MigrationStatus>, MigrateError> {
    let exists = client.query_one(LEDGER_EXISTS, &[]).await?;
    let (ledger, functions): (bool, bool) = (exists.get("migrations"), exists.get("functions"));
    let mut out = Vec::new();
    for c in components {
        let applied: Vec<(i32, String)> = if ledger {
            client
                .query(MIGRATIONS_APPLIED, &[&c.name])
                .await?
                .iter()
                .map(|r| (r.get("version"), r.get("checksum")))
                .collect()
        } else {
            Vec::new()
        };
        for m in c.migrations {
            let state = match applied.iter().find(|(v, _)| *v == m.version) {
                None => MigrationState::Pending,
                Some((_, sum)) if *sum == m.checksum() => MigrationState::Applied,
                Some(_) => MigrationState::Modified,
            };
            out.push(MigrationStatus {
                component: c.name,
                version: Some(m.version),
                name: m.name.to_string(),
                state,
            });
        }
        let recorded = if functions {
            recorded_functions(client, c.name).await?
        } else {
            Vec::new()
        };
        for f in c.functions {
            let state = match recorded.iter().find(|(n, _)| n == f.name) {
                None => MigrationState::Pending,
                Some((_, sum)) if *sum == f.checksum() => MigrationState::Applied,
                Some(_) => MigrationState::Modified,
            };
            out.push(MigrationStatus {
                component: c.name,
                version: None,
                name: f.name.to_string(),
                state,
            });
        }
    }
    Ok(out)
}

/// True when every migration and function of the engine is applied unmodified (`/readyz`).
pub async fn is_current(client: &Client) -> Result<bool, MigrateError> {
    are_current(client, &[ENGINE]).await
}

/// True when every migration and function of these components is applied unmodified.
pub async fn are_current(
    client: &Client,
    components: &[Component<'_>],
) -> Result<bool, MigrateError> {
    Ok(status_of(client, components)
        .await?
        .iter()
        .all(|s| s.state == MigrationState::Applied))
}
