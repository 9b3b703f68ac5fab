//! The HTTP jobs schema (`pgferry_http`: per-tenant signing secrets, allow lists, rates,
//! destination state and transitions) as the migration component `http_jobs`, applied by
//! the engine's migration mechanism (ADR 0017) with the server's other components
//! (`pgferry_server::migrate::ALL`).

use pgferry_core::migrate::{Component, Migration};

pub const COMPONENT: Component<'static> = Component {
    name: "http_jobs",
    migrations: MIGRATIONS,
    functions: &[],
};

pub const MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "0001_http_jobs.sql",
    sql: include_str!("../migrations/0001_http_jobs.sql"),
}];
