//! What remote workers need beyond claim and finish: extending the lease of a long step
//! (heartbeat), and telling a stale outcome of a cancelled instance from one whose lease
//! lapsed. Each is one statement.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use super::client::{StepRef, Workflows};
use super::machine::Caps;
use crate::error::Result;

const EXTEND: &str = include_str!("../sql/workflow/extend.sql");
const STATUSES: &str = include_str!("../sql/workflow/statuses.sql");
const ADD_CAPS: &str = include_str!("../sql/workflow/add_kind_caps.sql");

/// A heartbeat's answer for one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepBeat {
    pub id: i64,
    pub seq: i32,
    /// The new end of the lease; `None`: the claim is not current any more (the step was
    /// claimed again after its lease lapsed, answered, or the instance was cancelled).
    pub lease_until: Option<SystemTime>,
    /// The instance's status now (`None`: no such instance).
    pub status: Option<String>,
}

impl StepBeat {
    pub fn held(&self) -> bool {
        self.lease_until.is_some()
    }

    pub fn cancelled(&self) -> bool {
        self.status.as_deref() == Some("cancelled")
    }
}

impl Workflows {
    /// Extends the leases of claimed steps by `lease` from now, in one statement; one answer
    /// per step, in order.
    pub async fn extend(&self, steps: &[StepRef], lease: Duration) -> Result<Vec<StepBeat>> {
        if steps.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = steps.iter().map(|s| s.id).collect();
        let seqs: Vec<i32> = steps.iter().map(|s| s.seq).collect();
        let lease_ms = i32::try_from(lease.as_millis()).unwrap_or(i32::MAX);
        let client = self.pool().get().await?;
        let rows = client.query(EXTEND, &[&ids, &seqs, &lease_ms]).await?;
        let mut by_ref = HashMap::with_capacity(rows.len());
        for r in &rows {
            let id: i64 = r.try_get("id")?;
            let seq: i32 = r.try_get("seq")?;
            by_ref.insert((id, seq), (r.try_get("lease_until")?, r.try_get("status")?));
        }
        Ok(steps
            .iter()
            .map(|s| {
                let (lease_until, status) = by_ref.get(&(s.id, s.seq)).cloned().unwrap_or_default();
                StepBeat {
                    id: s.id,
                    seq: s.seq,
                    lease_until,
                    status,
                }
            })
            .collect())
    }

    /// Adds capability flags to kinds (never clears one; see add_kind_caps.sql): what
    /// remote workers declare, for kinds are shared names across tenants.
    pub async fn add_caps(&self, kinds: &[(&str, Caps)]) -> Result<()> {
        if kinds.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = kinds.iter().map(|(k, _)| *k).collect();
        let caps: Vec<i16> = kinds.iter().map(|(_, c)| c.bits()).collect();
        let client = self.pool().get().await?;
        client.execute(ADD_CAPS, &[&names, &caps]).await?;
        Ok(())
    }

    /// The status of each instance that exists, in one statement.
    pub async fn statuses(&self, ids: &[i64]) -> Result<HashMap<i64, String>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let client = self.pool().get().await?;
        let rows = client.query(STATUSES, &[&ids]).await?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, r.try_get("status")?)))
            .collect()
    }
}

impl super::machine::Outcome {
    /// Checks an outcome as [`Workflows::finish`] would, naming the bad field: for remote
    /// workers, whose outcomes are checked one by one before a batch is recorded.
    pub fn check(&self) -> Result<()> {
        super::validate::outcome(self)
    }
}
