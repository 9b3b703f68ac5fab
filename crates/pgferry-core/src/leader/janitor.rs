//! Janitor: releases the unique keys of finished jobs (ADR 0005 "known gap"), in bounded
//! batches in key order, one statement per batch (unique_prune.sql). Enqueue still takes a
//! key over lazily when it meets a finished holder; the janitor keeps the table from
//! growing with keys nobody uses again.

use tokio_postgres::{Client, Config};

use super::{duty_loop, LeaderConfig};
use crate::error::Result;

const UNIQUE_PRUNE: &str = include_str!("../sql/unique_prune.sql");

/// Where a pass over `unique_keys` is, and what one batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PruneStep {
    /// The last key of the batch: the next batch starts after it (None: start over).
    pub after: Option<(String, String)>,
    pub scanned: i64,
    pub released: i64,
}

/// Examines up to `batch` keys after `after` and deletes those whose holder finished.
pub async fn prune_unique(
    client: &Client,
    after: Option<&(String, String)>,
    batch: i64,
) -> Result<PruneStep> {
    let stmt = client.prepare(UNIQUE_PRUNE).await?;
    let (q, k) = match after {
        Some((q, k)) => (Some(q.as_str()), Some(k.as_str())),
        None => (None, None),
    };
    let row = client.query_one(&stmt, &[&q, &k, &batch]).await?;
    let scanned: i64 = row.get(2);
    Ok(PruneStep {
        // A short batch reached the end: the next pass starts from the first key.
        after: match (row.get::<_, Option<String>>(0), row.get(1)) {
            (Some(q), Some(k)) if scanned >= batch => Some((q, k)),
            _ => None,
        },
        scanned,
        released: row.get(3),
    })
}

pub async fn run(pg: Config, config: LeaderConfig) {
    let batch = config.prune_batch;
    let after = std::sync::Arc::new(std::sync::Mutex::new(None::<(String, String)>));
    duty_loop(pg, "janitor", config.prune_interval, move |client| {
        let after = after.clone();
        async move {
            let from = after.lock().expect("janitor mark").clone();
            let r = prune_unique(&client, from.as_ref(), batch)
                .await
                .map(|step| {
                    if step.released > 0 {
                        tracing::info!(released = step.released, "released unique keys");
                    }
                    let more = step.after.is_some();
                    *after.lock().expect("janitor mark") = step.after;
                    more
                });
            (client, r)
        }
    })
    .await
}
