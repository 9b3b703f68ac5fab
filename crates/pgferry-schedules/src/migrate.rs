//! The schedules schema (`pgferry_sched`) as the migration component `schedules`, applied
//! through the engine's migration mechanism (`pgferry_core::migrate`, ADR 0017): migrations
//! once each, checksummed, never edited. `pgferry migrate up` and `pgferry serve` apply it
//! with the other components (`pgferry_server::migrate::ALL`).

use pgferry_core::migrate::{self, Component, Migration};
use tokio_postgres::Client;

use crate::error::Result;

/// The schedules schema as a migration component.
pub const COMPONENT: Component<'static> = Component {
    name: "schedules",
    migrations: MIGRATIONS,
    functions: &[],
};

pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "0001_schedules.sql",
    sql: include_str!("../migrations/0001_schedules.sql"),
}];

/// Applies the schedules component alone (after the engine's). Returns the versions
/// applied by this call.
pub async fn up(client: &mut Client) -> Result<Vec<i32>> {
    Ok(migrate::up_components(client, &[COMPONENT]).await?.versions)
}
