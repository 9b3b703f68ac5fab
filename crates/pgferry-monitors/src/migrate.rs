//! The monitors schema (`pgferry_mon`) as the migration component `monitors` (ADR 0017),
//! applied after the schedules component (it references and indexes `pgferry_sched`).

use pgferry_core::migrate::{self, Component, Migration};
use tokio_postgres::Client;

use crate::error::Result;

pub const COMPONENT: Component<'static> = Component {
    name: "monitors",
    migrations: MIGRATIONS,
    functions: &[],
};

pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_monitors.sql",
        sql: include_str!("../migrations/0001_monitors.sql"),
    },
    Migration {
        version: 2,
        name: "0002_endpoint_address.sql",
        sql: include_str!("../migrations/0002_endpoint_address.sql"),
    },
    Migration {
        version: 3,
        name: "0003_monitor_alerts.sql",
        sql: include_str!("../migrations/0003_monitor_alerts.sql"),
    },
    Migration {
        version: 4,
        name: "0004_endpoint_old_addresses.sql",
        sql: include_str!("../migrations/0004_endpoint_old_addresses.sql"),
    },
];

/// Applies the monitors component alone (after the engine's and the schedules'). Returns
/// the versions applied by this call.
pub async fn up(client: &mut Client) -> Result<Vec<i32>> {
    Ok(migrate::up_components(client, &[COMPONENT]).await?.versions)
}
