//! HTTP-job destinations that start failing or recover (`pgferry_http_jobs::transitions`)
//! become notifications: the server hands each transition to [`NotifyTransitions`], which
//! sends an `http_job.failed` or `http_job.recovered` event to the tenant's notification
//! targets (issue 22: "failure/recovery notifications to a tenant's notification URLs").
//!
//! The transition row is committed before its sink runs, so a crash in between loses the
//! notification, never the transition (it stays listed by `GET /v1/http-jobs/transitions`).
//! Notifications are HTTP jobs themselves: a failing notification target produces at most one
//! more event per change of its own state, never a loop (transitions fire on changes only).

use std::sync::Arc;

use futures_util::future::BoxFuture;
use pgferry_core::Engine;
use pgferry_http_jobs::transitions::{Kind, Transition, TransitionSink};
use serde_json::json;

use crate::alerts::Event;

/// The transition sink `pgferry serve` gives its HTTP-job worker.
pub struct NotifyTransitions {
    engine: Arc<Engine>,
}

impl NotifyTransitions {
    pub fn new(engine: Arc<Engine>) -> Arc<NotifyTransitions> {
        Arc::new(NotifyTransitions { engine })
    }
}

/// The event a transition is announced as.
pub fn event_of(t: &Transition) -> Event {
    let (kind, reason) = match t.kind {
        Kind::Failure => (
            "http_job.failed",
            match (&t.error, t.status) {
                (Some(e), _) => e.clone(),
                (None, Some(s)) => format!("answered {s}"),
                (None, None) => "the attempt failed".to_string(),
            },
        ),
        Kind::Recovery => (
            "http_job.recovered",
            "an attempt succeeded again".to_string(),
        ),
    };
    Event {
        kind: kind.to_string(),
        subject: t.destination.clone(),
        reason,
        time: t.at,
        details: json!({
            "transition_id": t.id,
            "job_id": t.job_id,
            "status": t.status,
            "error": t.error,
        }),
        routes: None,
    }
}

impl TransitionSink for NotifyTransitions {
    fn transition(&self, t: Transition) -> BoxFuture<'static, ()> {
        let engine = self.engine.clone();
        Box::pin(async move {
            let event = event_of(&t);
            let sent = async {
                let client = engine
                    .pool()
                    .get()
                    .await
                    .map_err(pgferry_core::Error::from)?;
                crate::notify(&engine, &**client, t.tenant_id, &event).await
            }
            .await;
            if let Err(e) = sent {
                tracing::warn!(destination = %t.destination, error = %e,
                    "notifying a destination transition failed");
            }
        })
    }
}
