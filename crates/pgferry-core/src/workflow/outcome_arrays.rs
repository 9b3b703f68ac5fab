//! A batch of step outcomes as `pgferry.wf_finish_arrays`'s aligned arrays
//! (`sql/workflow/finish.sql`): ids, seqs, kinds, steps, states and results go as binary
//! arrays, and only the kinds the set-based part does not read from columns (retry, sleep,
//! await, spawn, fail) carry their JSON object too ([`Outcome::to_wire`]). One JSON array of
//! objects made Postgres parse every key and number of the batch at Bind, about a tenth of
//! the statement for a batch of continued steps (docs/performance.md "Outcomes in arrays").

use serde_json::Value;
use tokio_postgres::types::Json;
use tokio_postgres::{GenericClient, Row, Statement};

use super::machine::Outcome;

/// One outcome of a batch, ready to send.
pub(super) struct OutcomeItem<'a> {
    id: i64,
    seq: i32,
    outcome: &'a Outcome,
    /// A `next` that continues: its lease (ms) and whether to write it.
    lease: Option<(f64, bool)>,
    /// The JSON object of the kinds that are not next or done.
    rest: Option<Value>,
}

impl<'a> OutcomeItem<'a> {
    pub(super) fn new(id: i64, seq: i32, outcome: &'a Outcome) -> OutcomeItem<'a> {
        let rest = match outcome {
            Outcome::Next { .. } | Outcome::Done { .. } => None,
            other => Some(other.to_wire(id, seq)),
        };
        OutcomeItem {
            id,
            seq,
            outcome,
            lease: None,
            rest,
        }
    }

    /// Asks a `next` to continue with this lease, written (renewed) or not.
    pub(super) fn continuing(mut self, lease_ms: f64, renew: bool) -> OutcomeItem<'a> {
        self.lease = Some((lease_ms, renew));
        self
    }
}

/// The step and state the set-based part reads from columns (next and sleep).
fn step_and_state(o: &Outcome) -> (Option<&str>, Option<Json<&Value>>) {
    match o {
        Outcome::Next { step, state } => (Some(step), state.as_ref().map(Json)),
        Outcome::Sleep { next, state, .. } => (Some(next), state.as_ref().map(Json)),
        _ => (None, None),
    }
}

/// Runs `stmt` (finish.sql) on `items`, in their order; one answer row per item.
pub(super) async fn send<C: GenericClient>(
    client: &C,
    stmt: &Statement,
    items: &[OutcomeItem<'_>],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    let ids: Vec<i64> = items.iter().map(|i| i.id).collect();
    let seqs: Vec<i32> = items.iter().map(|i| i.seq).collect();
    let kinds: Vec<&str> = items.iter().map(|i| i.outcome.name()).collect();
    let (steps, states): (Vec<Option<&str>>, Vec<Option<Json<&Value>>>) =
        items.iter().map(|i| step_and_state(i.outcome)).unzip();
    let results: Vec<Option<Json<&Value>>> = items
        .iter()
        .map(|i| match i.outcome {
            Outcome::Done { result } => Some(Json(result)),
            _ => None,
        })
        .collect();
    let leases: Vec<Option<f64>> = items.iter().map(|i| i.lease.map(|l| l.0)).collect();
    let renew: Vec<bool> = items.iter().map(|i| i.lease.is_some_and(|l| l.1)).collect();
    let rest: Vec<Option<Json<&Value>>> = items.iter().map(|i| i.rest.as_ref().map(Json)).collect();
    client
        .query(
            stmt,
            &[
                &ids, &seqs, &kinds, &steps, &states, &results, &leases, &renew, &rest,
            ],
        )
        .await
}
