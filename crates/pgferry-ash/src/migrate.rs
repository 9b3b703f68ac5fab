//! The ash schema (`pgferry_ash`): its versioned migrations and its functions and views, one
//! per file, applied through the engine's migration mechanism as the component `ash`
//! (`pgferry_core::migrate`, ADR 0017): migrations once each, checksummed, never edited;
//! functions and views `CREATE OR REPLACE`, re-applied whenever their text changes.
//!
//! `pgferry migrate up` and `pgferry serve` apply it after the engine's and the server's
//! components; the ash schema never depends on the engine's, so either can be first.

use pgferry_core::migrate::{self, Component, Function, Migration};
use tokio_postgres::Client;

use crate::error::Result;

/// The ash schema as a migration component.
pub const COMPONENT: Component<'static> = Component {
    name: "ash",
    migrations: MIGRATIONS,
    functions: FUNCTIONS,
};

pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_ash.sql",
        sql: include_str!("../migrations/0001_ash.sql"),
    },
    Migration {
        version: 2,
        name: "0002_serving.sql",
        sql: include_str!("../migrations/0002_serving.sql"),
    },
    Migration {
        version: 3,
        name: "0003_published.sql",
        sql: include_str!("../migrations/0003_published.sql"),
    },
];

macro_rules! function {
    ($name:literal, $file:literal) => {
        Function {
            name: $name,
            sql: include_str!(concat!("../sql/functions/", $file)),
        }
    };
}

/// Functions and views, in dependency order.
pub const FUNCTIONS: &[Function] = &[
    function!("decode", "01_decode.sql"),
    function!("split", "02_split.sql"),
    function!("load_at", "03_load_at.sql"),
    function!("combo_named", "04_combo_named.sql"),
    function!("aas_by", "05_aas_by.sql"),
    function!("top_waits", "06_top_waits.sql"),
    function!("top_queries", "07_top_queries.sql"),
    function!("cpu_vs_waiting", "08_cpu_vs_waiting.sql"),
    function!("timeline", "09_timeline.sql"),
    function!("activity_at", "10_activity_at.sql"),
    function!("decode_locks", "11_decode_locks.sql"),
    function!("blocking_at", "12_blocking_at.sql"),
    function!("roll_up", "13_roll_up.sql"),
    function!("activity_ids", "14_activity_ids.sql"),
    function!("published_serving", "17_published_serving.sql"),
    function!("take_sample", "15_take_sample.sql"),
    function!("sample_minute", "16_sample_minute.sql"),
];

/// Applies the ash component alone. Returns the versions applied by this call.
pub async fn up(client: &mut Client) -> Result<Vec<i32>> {
    Ok(migrate::up_components(client, &[COMPONENT]).await?.versions)
}
