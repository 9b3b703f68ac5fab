//! The webhooks page's own reads (through [`crate::Backend`]): an endpoint's events newest
//! first, and one event with its deliveries. Listing endpoints, replays and everything
//! else of webhooks is the `/v1` API via the proxy (its scope checks: replays are `admin`).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use crate::backend::BackendError;
use crate::session::SignedIn;
use crate::Shared;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    #[serde(default)]
    before: Option<i64>,
    #[serde(default)]
    limit: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventQuery {
    #[serde(default)]
    cursor: Option<String>,
}

fn answer(r: Result<serde_json::Value, BackendError>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

fn read_scope(signed: &SignedIn) -> Result<(), BackendError> {
    if signed.identity.allows("read") {
        Ok(())
    } else {
        Err(BackendError::forbidden(
            "this API key lacks the `read` scope",
        ))
    }
}

/// `GET /ui/api/webhooks/{slug}/events?before=&limit=` (read).
pub async fn events(
    State(d): State<Shared>,
    signed: SignedIn,
    Path(slug): Path<String>,
    q: Result<Query<EventsQuery>, QueryRejection>,
) -> Response {
    let Ok(Query(q)) = q else {
        return BackendError::bad_request(
            "query",
            "before and limit are integers; no other parameters",
        )
        .into_response();
    };
    if q.before.is_some_and(|b| b < 1) {
        return BackendError::bad_request("before", "an event id (1 or more)").into_response();
    }
    let limit = q.limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return BackendError::bad_request("limit", "must be 1 to 200").into_response();
    }
    if let Err(e) = read_scope(&signed) {
        return e.into_response();
    }
    answer(
        d.backend
            .webhook_events(&signed.identity, &slug, q.before, limit)
            .await,
    )
}

/// `GET /ui/api/webhooks/{slug}/events/{id}?cursor=` (read).
pub async fn event(
    State(d): State<Shared>,
    signed: SignedIn,
    Path((slug, id)): Path<(String, String)>,
    q: Result<Query<EventQuery>, QueryRejection>,
) -> Response {
    let Some(id) = id.parse::<i64>().ok().filter(|i| *i > 0) else {
        return BackendError::bad_request("id", "an event id is a positive integer")
            .into_response();
    };
    let Ok(Query(q)) = q else {
        return BackendError::bad_request("query", "only cursor is taken").into_response();
    };
    if let Err(e) = read_scope(&signed) {
        return e.into_response();
    }
    answer(
        d.backend
            .webhook_event(&signed.identity, &slug, id, q.cursor)
            .await,
    )
}
