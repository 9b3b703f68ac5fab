//! The webhooks page's reads that the `/v1` API does not offer (docs/dashboard.md): an
//! endpoint's events newest first (the API pages them oldest first, the order replays
//! need), and one event with the HTTP jobs it was fanned out to, its deliveries.
//!
//! The fan-out (`pgferry_monitors::webhooks`) records no job ids: each delivery job carries
//! `meta.webhook = {"endpoint", "event"}` on the tenant's `http` queue. Deliveries are found
//! with the jobs page's bounded search over that queue: jobs that entered the log at or after
//! the event was received (the fan-out runs in the receiving transaction, so its jobs carry
//! that very instant; replays come later) whose meta holds the event's marker, each then
//! checked exactly. A page costs what one listing call costs, never a scan of the history;
//! an old event on a busy queue comes back short with `has_more` and the page offers to
//! look further back, as the jobs page's text search does.

use std::time::{SystemTime, UNIX_EPOCH};

use pgferry_core::{JobFilter, TextFilter};
use pgferry_dashboard::BackendError;
use pgferry_monitors::{MonitorError, Webhooks};
use serde_json::{json, Value};

use crate::auth::Principal;
use crate::http::jobs::job_json;
use crate::AppState;

const EVENTS: &str = include_str!("sql/webhook_events.sql");
const EVENT: &str = include_str!("sql/webhook_event.sql");

/// Deliveries shown per page of an event (the listing's largest page).
const DELIVERIES_PAGE: u32 = pgferry_core::listing::MAX_LIST_PAGE;

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn unavailable(e: impl std::fmt::Display) -> BackendError {
    BackendError::unavailable(e.to_string())
}

/// The id of the caller's tenant's endpoint `slug`: another tenant's slug is "not found",
/// like a missing one (slugs are unique per tenant only, ADR 0021).
async fn endpoint_id(state: &AppState, tenant_id: i64, slug: &str) -> Result<i64, BackendError> {
    pgferry_monitors::error::validate_name("slug", slug).map_err(|e| match e {
        MonitorError::Invalid { field, reason } => BackendError::bad_request(field, reason),
        e => unavailable(e),
    })?;
    match Webhooks::new(state.engine.clone())
        .get(tenant_id, slug)
        .await
    {
        Ok(ep) => Ok(ep.id),
        Err(MonitorError::NotFound { .. }) => Err(BackendError::not_found("webhook endpoint")),
        Err(e) => Err(unavailable(e)),
    }
}

/// `{"events": [{id, received_at_unix_ms, provider_event_id, headers, body_preview,
/// body_chars}], "next_before"?}`, newest first, below event id `before`.
pub(super) async fn events(
    state: &AppState,
    p: &Principal,
    slug: &str,
    before: Option<i64>,
    limit: u32,
) -> Result<Value, BackendError> {
    let ep = endpoint_id(state, p.tenant_id, slug).await?;
    let client = state.engine.pool().get().await.map_err(unavailable)?;
    let rows = client
        .query(
            EVENTS,
            &[&ep, &before.unwrap_or(i64::MAX), &i64::from(limit)],
        )
        .await
        .map_err(unavailable)?;
    let events: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "id": r.get::<_, i64>("id"),
                "received_at_unix_ms": unix_ms(r.get("received_at")),
                "provider_event_id": r.get::<_, Option<String>>("provider_event_id"),
                "headers": r.get::<_, Value>("headers"),
                "body_preview": r.get::<_, String>("body_preview"),
                "body_chars": r.get::<_, i32>("body_chars"),
            })
        })
        .collect();
    let next = (events.len() == limit as usize)
        .then(|| events.last().and_then(|e| e["id"].as_i64()))
        .flatten();
    Ok(json!({ "events": events, "next_before": next }))
}

/// The marker of event `id` of endpoint `slug` in its delivery jobs' meta, as jsonb prints
/// it (keys by length, then bytes: "event" before "endpoint"). Slugs are `a-z 0-9 _ . -`,
/// so the slug needs no escaping; the match is checked exactly afterwards anyway.
fn marker(slug: &str, id: i64) -> String {
    format!(r#""webhook": {{"event": {id}, "endpoint": "{slug}"}}"#)
}

/// Whether a job's meta names event `id` of endpoint `slug`.
fn delivers(meta: Option<&Value>, slug: &str, id: i64) -> bool {
    let w = meta.and_then(|m| m.get("webhook"));
    w.and_then(|w| w.get("event")).and_then(Value::as_i64) == Some(id)
        && w.and_then(|w| w.get("endpoint")).and_then(Value::as_str) == Some(slug)
}

/// `{"event": {id, received_at_unix_ms, provider_event_id, headers, body}, "deliveries":
/// [job as GET /v1/jobs/{id}], "has_more", "next_cursor"?}`: deliveries newest first, one
/// bounded listing call per request (`cursor` goes further back).
pub(super) async fn event(
    state: &AppState,
    p: &Principal,
    slug: &str,
    id: i64,
    cursor: Option<String>,
) -> Result<Value, BackendError> {
    let ep = endpoint_id(state, p.tenant_id, slug).await?;
    if cursor.as_ref().is_some_and(|c| c.len() > 512) {
        return Err(BackendError::bad_request(
            "cursor",
            "at most 512 characters",
        ));
    }
    let row = {
        let client = state.engine.pool().get().await.map_err(unavailable)?;
        client
            .query_opt(EVENT, &[&ep, &id])
            .await
            .map_err(unavailable)?
            .ok_or_else(|| BackendError::not_found("event"))?
    };
    let received: SystemTime = row.get("received_at");
    let filter = JobFilter {
        since: Some(received),
        ..JobFilter::default()
    };
    let text = TextFilter {
        contains: Some(marker(slug, id)),
        error_contains: None,
    };
    let page = state
        .engine
        .list_jobs_matching(
            &pgferry_monitors::http_queue(p.tenant_id),
            &filter,
            &text,
            cursor.as_deref().filter(|c| !c.is_empty()),
            DELIVERIES_PAGE,
        )
        .await
        .map_err(|e| match e {
            pgferry_core::Error::InvalidArgument { field, reason } => {
                BackendError::bad_request(field, reason)
            }
            e => unavailable(e),
        })?;
    let deliveries: Vec<Value> = page
        .jobs
        .iter()
        .filter(|j| delivers(j.meta.as_ref().map(|m| m.to_value()).as_ref(), slug, id))
        .map(|j| job_json(p, j))
        .collect();
    let mut out = json!({
        "event": {
            "id": row.get::<_, i64>("id"),
            "received_at_unix_ms": unix_ms(received),
            "provider_event_id": row.get::<_, Option<String>>("provider_event_id"),
            "headers": row.get::<_, Value>("headers"),
            "body": row.get::<_, String>("body"),
        },
        "deliveries": deliveries,
        "has_more": page.has_more,
    });
    if let Some(next) = page.next {
        out["next_cursor"] = json!(next);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_is_what_jsonb_prints_and_only_the_exact_event_delivers() {
        assert_eq!(
            marker("acme-github", 12),
            r#""webhook": {"event": 12, "endpoint": "acme-github"}"#
        );
        let meta = json!({"webhook": {"endpoint": "acme-github", "event": 12}});
        assert!(delivers(Some(&meta), "acme-github", 12));
        assert!(!delivers(Some(&meta), "acme-github", 1));
        assert!(!delivers(Some(&meta), "acme", 12));
        assert!(!delivers(None, "acme-github", 12));
    }
}
