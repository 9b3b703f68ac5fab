//! Worker-side controls beyond claim and complete: heartbeats that extend leases.

use std::time::{Duration, SystemTime};

use crate::bound_params::bind_params;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::job::ClaimedJob;

const HEARTBEAT: &str = include_str!("sql/heartbeat.sql");

/// The parameters of heartbeat.sql: one element per held attempt, then the lease and worker.
struct HeartbeatParams<'a> {
    ids: Vec<i64>,
    attempts: Vec<i32>,
    segments: Vec<i16>,
    receipts: Vec<i64>,
    lanes: Vec<i32>,
    rsegs: Vec<i16>,
    lease_ms: i32,
    worker: &'a str,
}

bind_params!(HeartbeatParams<'_> {
    fn params, const PARAMS = [ids, attempts, segments, receipts, lanes, rsegs, lease_ms, worker];
});

#[cfg(test)]
mod params_tests {
    #[test]
    fn heartbeat_declares_the_parameters_its_struct_binds() {
        crate::bound_params::assert_declared(super::HEARTBEAT, super::HeartbeatParams::PARAMS);
    }
}

/// The identity of a held attempt, as carried in a worker's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptRef {
    pub job_id: i64,
    pub attempt: i32,
    pub segment: i16,
    pub receipt_id: i64,
    pub lane: i32,
    pub receipt_segment: i16,
}

impl From<&ClaimedJob> for AttemptRef {
    fn from(j: &ClaimedJob) -> Self {
        AttemptRef {
            job_id: j.job_id,
            attempt: j.attempt,
            segment: j.segment,
            receipt_id: j.receipt_id,
            lane: j.lane,
            receipt_segment: j.receipt_segment,
        }
    }
}

/// The answer to one heartbeat entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Beat {
    pub job_id: i64,
    pub attempt: i32,
    /// False: the attempt is no longer this worker's (finished, or rescued after its lease
    /// lapsed): stop working on it; its result would be stale.
    pub held: bool,
    /// A cancellation was requested: stop cooperatively and report `cancelled`.
    pub cancelled: bool,
    pub lease_until: SystemTime,
}

impl Engine {
    /// Extends the lease of every held attempt to now + `lease`, in one statement.
    pub async fn heartbeat(
        &self,
        refs: &[AttemptRef],
        lease: Duration,
        worker: &str,
    ) -> Result<Vec<Beat>> {
        if refs.is_empty() {
            return Ok(Vec::new());
        }
        if refs.len() > self.config().max_batch {
            return Err(Error::BatchTooLarge {
                size: refs.len(),
                limit: self.config().max_batch,
            });
        }
        let lease_ms = i32::try_from(lease.as_millis())
            .ok()
            .filter(|ms| (100..=86_400_000).contains(ms))
            .ok_or_else(|| Error::InvalidArgument {
                field: "lease",
                reason: format!("{} ms is not in 100..=86400000", lease.as_millis()),
            })?;
        let params = HeartbeatParams {
            ids: refs.iter().map(|r| r.job_id).collect(),
            attempts: refs.iter().map(|r| r.attempt).collect(),
            segments: refs.iter().map(|r| r.segment).collect(),
            receipts: refs.iter().map(|r| r.receipt_id).collect(),
            lanes: refs.iter().map(|r| r.lane).collect(),
            rsegs: refs.iter().map(|r| r.receipt_segment).collect(),
            lease_ms,
            worker,
        };
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached(HEARTBEAT).await?;
        let rows = client.query(&stmt, &params.params()).await?;
        Ok(refs
            .iter()
            .zip(rows.iter())
            .map(|(r, row)| Beat {
                job_id: r.job_id,
                attempt: r.attempt,
                held: row.get("held"),
                cancelled: row.get("cancelled"),
                lease_until: row.get("lease_until"),
            })
            .collect())
    }
}
