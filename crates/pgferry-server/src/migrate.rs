//! The server's own schema — tenants, API keys, the audit log, shared secrets — as the
//! migration component `server` (ADR 0017), and the full schema a server needs: the engine's,
//! then the server's, then active session history's.

use pgferry_core::migrate::{
    self, Applied, Component, Function, MigrateError, Migration, MigrationStatus,
};
use tokio_postgres::Client;

/// The server's tables (`pgferry.tenants`, `api_keys`, `audit_log`, `server_secrets`).
pub const SERVER: Component<'static> = Component {
    name: "server",
    migrations: &[Migration {
        version: 1,
        name: "0001_tenancy.sql",
        sql: include_str!("../migrations/0001_tenancy.sql"),
    }],
    // A tenant's queue by name, for SQL in the application's transaction.
    functions: &[
        Function {
            name: "tenant_queue",
            sql: include_str!("sql/functions/tenant_queue.sql"),
        },
        // Calls tenant_queue and the engine's wf_start (the engine is applied first).
        Function {
            name: "tenant_wf_start",
            sql: include_str!("sql/functions/tenant_wf_start.sql"),
        },
    ],
};

/// Every component `pgferry serve` uses, in the order they are applied.
pub const ALL: &[Component<'static>] = &[
    migrate::ENGINE,
    SERVER,
    pgferry_ash::migrate::COMPONENT,
    pgferry_schedules::migrate::COMPONENT,
    // After schedules: it references and indexes their tables.
    pgferry_monitors::migrate::COMPONENT,
    pgferry_http_jobs::migrate::COMPONENT,
    crate::dashboard::bulk::COMPONENT,
];

/// Applies every component's pending migrations and changed functions.
pub async fn up(client: &mut Client) -> Result<Applied, MigrateError> {
    migrate::up_components(client, ALL).await
}

/// The state of every migration and function of every component.
pub async fn status(client: &Client) -> Result<Vec<MigrationStatus>, MigrateError> {
    migrate::status_of(client, ALL).await
}

/// True when the whole schema is this build's (`/readyz`).
pub async fn is_current(client: &Client) -> Result<bool, MigrateError> {
    migrate::are_current(client, ALL).await
}
