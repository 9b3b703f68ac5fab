//! Synthetic history for benchmarks and tests: a few combos, raw samples at a fixed
//! cadence, and rollups written directly for periods older than the raw ring keeps.

use std::time::SystemTime;

use tokio_postgres::Client;

use crate::error::Result;

const SEED_WAITS: &str = include_str!("../sql/seed/waits.sql");
const SEED_COMBOS: &str = include_str!("../sql/seed/combos.sql");
const SEED_SAMPLES: &str = include_str!("../sql/seed/samples.sql");
const SEED_ROLLUP_1M: &str = include_str!("../sql/seed/rollup_1m.sql");
const SEED_ROLLUP_1H: &str = include_str!("../sql/seed/rollup_1h.sql");
const SEED_STATE: &str = include_str!("../sql/seed/state.sql");

/// The seeded waits: (type, event).
pub const WAITS: [(&str, &str); 5] = [
    ("CPU", "CPU"),
    ("Lock", "relation"),
    ("IO", "DataFileRead"),
    ("Client", "ClientRead"),
    ("LWLock", "WALWrite"),
];

/// Creates `per_wait` combos for each seeded wait (distinct by a fake query id); returns
/// their ids.
pub async fn combos(client: &Client, per_wait: i32) -> Result<Vec<i32>> {
    let (t, e): (Vec<&str>, Vec<&str>) = WAITS.iter().copied().unzip();
    client.execute(SEED_WAITS, &[&t, &e]).await?;
    let rows = client.query(SEED_COMBOS, &[&per_wait]).await?;
    Ok(rows.iter().map(|r| r.get("id")).collect())
}

/// Raw samples every `interval_ms` over [from, to); most carry `data`, every seventh
/// `other` (so windows see two mixes).
pub async fn samples(
    client: &Client,
    from: SystemTime,
    to: SystemTime,
    interval_ms: i32,
    data: &[i32],
    other: &[i32],
) -> Result<u64> {
    Ok(client
        .execute(SEED_SAMPLES, &[&from, &to, &interval_ms, &data, &other])
        .await?)
}

/// Rollups as if the sampler had seen `data` every second: 1-minute over
/// [minute_from, minute_to), 1-hour over [hour_from, hour_to) (hour-aligned), and the
/// watermarks set to the two ends.
pub async fn rollups(
    client: &Client,
    minutes: (SystemTime, SystemTime),
    hours: (SystemTime, SystemTime),
    data: &[i32],
) -> Result<()> {
    client
        .execute(SEED_ROLLUP_1M, &[&minutes.0, &minutes.1, &data])
        .await?;
    client
        .execute(SEED_ROLLUP_1H, &[&hours.0, &hours.1, &data])
        .await?;
    client.execute(SEED_STATE, &[&minutes.1, &hours.1]).await?;
    Ok(())
}
