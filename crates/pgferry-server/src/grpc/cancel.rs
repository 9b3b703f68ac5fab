//! Admin.CancelJobs: the request's filter, checked like POST /v1/queues/{name}/cancel.

// tonic's Status is the error type of every RPC; boxing it here would only unbox it again.
#![allow(clippy::result_large_err)]

use pgferry_core::cancelling::MAX_CANCEL;
use pgferry_core::{CancelFilter, JobState};
use tonic::Status;

use super::admin_pb::invalid;
use crate::proto::v1 as pb;

/// The engine filter and limit of a request (the queue is resolved by the caller).
pub(super) fn filter(r: &pb::CancelJobsRequest) -> Result<(CancelFilter, u32), Status> {
    if r.states.len() > 3 {
        return Err(invalid("states", "at most 3 states"));
    }
    let mut states = Vec::new();
    for (i, s) in r.states.iter().enumerate() {
        states.push(
            [JobState::Pending, JobState::Scheduled, JobState::Running]
                .into_iter()
                .find(|st| st.as_str() == s)
                .ok_or_else(|| {
                    invalid(
                        &format!("states[{i}]"),
                        "one of pending, scheduled, running",
                    )
                })?,
        );
    }
    let limit = match r.limit {
        0 => 10_000,
        l if l <= MAX_CANCEL => l,
        _ => return Err(invalid("limit", "must be 1 to 100000")),
    };
    let kind = (!r.kind.is_empty()).then(|| r.kind.clone());
    Ok((CancelFilter { kind, states }, limit))
}
