//! `/ui/api/events`: server-sent events that keep every page current without reloads.
//!
//! Each tick the stream reads the tenant's queues (counters only: one statement for all
//! queues, no table scan) through the `/v1` API as the session's key, and sends them as a
//! `queues` event stamped with the server's time; pages derive rates from consecutive
//! snapshots and re-read what they show when counts move. When the session ends (sign-out,
//! expiry, key revoked) the stream sends `signed-out` and closes.

use std::convert::Infallible;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::Stream;
use serde_json::json;

use crate::proxy::get_json;
use crate::session::SignedIn;
use crate::Shared;

pub async fn stream(
    State(d): State<Shared>,
    signed: SignedIn,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let tick = d.config.tick;
    let s = futures_util::stream::unfold(
        (d, signed, true, false),
        move |(d, signed, first, done)| async move {
            if done {
                return None;
            }
            // The first snapshot goes out at once; later ones every tick.
            if !first {
                tokio::time::sleep(tick).await;
            }
            let alive = d.sessions.get(&signed.session_id).is_some();
            let event = if !alive {
                None
            } else {
                match get_json(&d, &signed.api_key, "queues").await {
                    Ok(v) => {
                        let at_ms = SystemTime::now()
                            .duration_since(UNIX_EPOCH)
                            .map_or(0, |t| t.as_millis() as u64);
                        let data = json!({ "at_unix_ms": at_ms, "queues": v["queues"] });
                        Some(Event::default().event("queues").data(data.to_string()))
                    }
                    Err(e) if e.status.as_u16() == 401 => None,
                    // Database hiccup: say so, keep the stream (the page shows it).
                    Err(e) => Some(
                        Event::default()
                            .event("problem")
                            .data(json!({ "message": e.message }).to_string()),
                    ),
                }
            };
            match event {
                Some(ev) => Some((Ok(ev), (d, signed, false, false))),
                None => Some((
                    Ok(Event::default().event("signed-out").data("{}")),
                    (d, signed, false, true),
                )),
            }
        },
    );
    Sse::new(s).keep_alive(KeepAlive::default())
}
