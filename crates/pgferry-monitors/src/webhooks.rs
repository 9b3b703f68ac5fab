//! Inbound webhooks: `POST /in/{slug}` stores the event (headers and body, bounded) and
//! fans it out as one HTTP job per target of the endpoint, in one transaction; the caller
//! answers only after COMMIT. A provider event id header (when configured) deduplicates:
//! the same id again stores nothing and is reported as a duplicate. Stored events are
//! listed (keyset pages) and replayed (one, or all since a time).

use std::sync::Arc;
use std::time::SystemTime;

use pgferry_core::{Engine, NewJob};
use serde_json::{json, Map, Value};
use tokio_postgres::types::Json;
use tokio_postgres::GenericClient;

use crate::error::{validate_name, MonitorError, Result};
use crate::signature;
use crate::targets::validate_url;

const INSERT: &str = include_str!("../sql/endpoint_insert.sql");
const GET: &str = include_str!("../sql/endpoint_get.sql");
const BY_SLUG: &str = include_str!("../sql/endpoint_by_slug.sql");
const LIST: &str = include_str!("../sql/endpoint_list.sql");
const DELETE: &str = include_str!("../sql/endpoint_delete.sql");
const EVENT_INSERT: &str = include_str!("../sql/event_insert.sql");
const EVENT_BY_PROVIDER_ID: &str = include_str!("../sql/event_by_provider_id.sql");
const EVENT_LIST: &str = include_str!("../sql/event_list.sql");
const EVENT_GET: &str = include_str!("../sql/event_get.sql");
const EVENTS_SINCE: &str = include_str!("../sql/events_since.sql");

/// Largest inbound body (bytes); the server answers 413 above.
pub const MAX_EVENT_BYTES: usize = 256 * 1024;
/// Headers kept per event (the rest are dropped).
pub const MAX_HEADERS: usize = 64;
/// Longest header value kept.
pub const MAX_HEADER_VALUE: usize = 1024;
pub const MAX_TARGETS: usize = 10;
/// Most events one replay-since sends again.
pub const MAX_REPLAY: i64 = 1000;
/// Attempts of a fan-out HTTP job.
pub const FANOUT_ATTEMPTS: i32 = 10;

#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    /// hmac_sha256 | stripe ([`signature`]).
    pub scheme: String,
    /// The header carrying it (lower case).
    pub header: String,
    pub secret: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewEndpoint {
    pub slug: String,
    pub signature: Option<Signature>,
    /// The header carrying the provider's event id (lower case); None: no dedup.
    pub event_id_header: Option<String>,
    pub targets: Vec<String>,
}

fn validate_header_name(field: &'static str, h: &str) -> Result<()> {
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_';
    if h.is_empty() || h.len() > 64 || !h.chars().all(ok) {
        return Err(MonitorError::invalid(
            field,
            "a header name: 1 to 64 of a-z, 0-9, '-', '_' (lower case)",
        ));
    }
    Ok(())
}

impl NewEndpoint {
    pub fn validate(&self) -> Result<()> {
        validate_name("slug", &self.slug)?;
        if let Some(s) = &self.signature {
            if !signature::SCHEMES.contains(&s.scheme.as_str()) {
                return Err(MonitorError::invalid(
                    "signature.scheme",
                    "must be hmac_sha256 or stripe",
                ));
            }
            validate_header_name("signature.header", &s.header)?;
            if s.secret.is_empty() || s.secret.len() > 256 {
                return Err(MonitorError::invalid(
                    "signature.secret",
                    "must be 1 to 256 characters",
                ));
            }
        }
        if let Some(h) = &self.event_id_header {
            validate_header_name("event_id_header", h)?;
        }
        if self.targets.is_empty() || self.targets.len() > MAX_TARGETS {
            return Err(MonitorError::invalid(
                "targets",
                format!("1 to {MAX_TARGETS} URLs"),
            ));
        }
        for t in &self.targets {
            validate_url(t).map_err(|e| match e {
                MonitorError::Invalid { reason, .. } => MonitorError::invalid("targets", reason),
                e => e,
            })?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    pub id: i64,
    pub tenant_id: i64,
    pub spec: NewEndpoint,
    pub created_at: SystemTime,
}

impl Endpoint {
    fn from_row(r: &tokio_postgres::Row) -> Result<Endpoint> {
        let scheme: Option<String> = r.try_get("sig_scheme")?;
        let signature = match scheme {
            Some(scheme) => Some(Signature {
                scheme,
                header: r.try_get("sig_header")?,
                secret: r.try_get("sig_secret")?,
            }),
            None => None,
        };
        Ok(Endpoint {
            id: r.try_get("id")?,
            tenant_id: r.try_get("tenant_id")?,
            spec: NewEndpoint {
                slug: r.try_get("slug")?,
                signature,
                event_id_header: r.try_get("event_id_header")?,
                targets: r.try_get("targets")?,
            },
            created_at: r.try_get("created_at")?,
        })
    }
}

/// One stored inbound event.
#[derive(Debug, Clone, PartialEq)]
pub struct InboundEvent {
    pub id: i64,
    pub received_at: SystemTime,
    pub provider_event_id: Option<String>,
    /// Header name (lower case) → value.
    pub headers: Value,
    pub body: String,
}

impl InboundEvent {
    fn from_row(r: &tokio_postgres::Row) -> Result<InboundEvent> {
        let Json(headers): Json<Value> = r.try_get("headers")?;
        Ok(InboundEvent {
            id: r.try_get("id")?,
            received_at: r.try_get("received_at")?,
            provider_event_id: r.try_get("provider_event_id")?,
            headers,
            body: r.try_get("body")?,
        })
    }
}

/// What `POST /in/{slug}` answers (after COMMIT).
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub event_id: i64,
    pub duplicate: bool,
    /// HTTP jobs enqueued (0 for a duplicate).
    pub deliveries: usize,
}

#[derive(Clone)]
pub struct Webhooks {
    engine: Arc<Engine>,
}

impl Webhooks {
    pub fn new(engine: Arc<Engine>) -> Webhooks {
        Webhooks { engine }
    }

    pub async fn create(&self, tenant_id: i64, e: &NewEndpoint) -> Result<Endpoint> {
        e.validate()?;
        let c = self.engine.pool().get().await?;
        let sig = e.signature.as_ref();
        let row = c
            .query_opt(
                INSERT,
                &[
                    &tenant_id,
                    &e.slug,
                    &sig.map(|s| &s.scheme),
                    &sig.map(|s| &s.header),
                    &sig.map(|s| &s.secret),
                    &e.event_id_header,
                    &e.targets,
                ],
            )
            .await?;
        match row {
            Some(r) => Endpoint::from_row(&r),
            None => Err(MonitorError::Exists {
                what: "webhook endpoint",
                name: e.slug.clone(),
            }),
        }
    }

    pub async fn get(&self, tenant_id: i64, slug: &str) -> Result<Endpoint> {
        let c = self.engine.pool().get().await?;
        match c.query_opt(GET, &[&tenant_id, &slug]).await? {
            Some(r) => Endpoint::from_row(&r),
            None => Err(MonitorError::not_found("webhook endpoint")),
        }
    }

    pub async fn list(&self, tenant_id: i64, after: &str, limit: i64) -> Result<Vec<Endpoint>> {
        let c = self.engine.pool().get().await?;
        let rows = c.query(LIST, &[&tenant_id, &after, &limit]).await?;
        rows.iter().map(Endpoint::from_row).collect()
    }

    pub async fn delete(&self, tenant_id: i64, slug: &str) -> Result<()> {
        let c = self.engine.pool().get().await?;
        match c.execute(DELETE, &[&tenant_id, &slug]).await? {
            0 => Err(MonitorError::not_found("webhook endpoint")),
            _ => Ok(()),
        }
    }

    /// Receives an inbound request: verifies, stores (or recognises a duplicate), fans
    /// out, commits. `headers` as received (any case).
    pub async fn receive(
        &self,
        slug: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Received> {
        let header = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        if validate_name("slug", slug).is_err() {
            return Err(MonitorError::not_found("webhook endpoint"));
        }
        let mut c = self.engine.pool().get().await?;
        let ep = match c.query_opt(BY_SLUG, &[&slug]).await? {
            Some(r) => Endpoint::from_row(&r)?,
            None => return Err(MonitorError::not_found("webhook endpoint")),
        };
        if body.len() > MAX_EVENT_BYTES {
            return Err(MonitorError::invalid(
                "body",
                format!("at most {MAX_EVENT_BYTES} bytes"),
            ));
        }
        if let Some(s) = &ep.spec.signature {
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            signature::verify(
                &s.scheme,
                &s.header,
                header(&s.header),
                s.secret.as_bytes(),
                body,
                now,
            )?;
        }
        let text = std::str::from_utf8(body)
            .map_err(|_| MonitorError::invalid("body", "must be UTF-8 text"))?;
        if text.contains('\0') {
            return Err(MonitorError::invalid("body", "must not contain NUL"));
        }
        let provider_id = match &ep.spec.event_id_header {
            Some(h) => header(h).map(|v| v.chars().take(256).collect::<String>()),
            None => None,
        };
        let mut kept = Map::new();
        for (k, v) in headers.iter().take(MAX_HEADERS) {
            let v: String = v
                .chars()
                .take(MAX_HEADER_VALUE)
                .filter(|c| *c != '\0')
                .collect();
            kept.insert(k.to_ascii_lowercase(), Value::String(v));
        }
        let tx = c.transaction().await?;
        let row = tx
            .query_opt(
                EVENT_INSERT,
                &[&ep.id, &provider_id, &Json(Value::Object(kept)), &text],
            )
            .await?;
        let Some(row) = row else {
            let existing = tx
                .query_one(EVENT_BY_PROVIDER_ID, &[&ep.id, &provider_id])
                .await?;
            tx.commit().await?;
            return Ok(Received {
                event_id: existing.try_get("id")?,
                duplicate: true,
                deliveries: 0,
            });
        };
        let event = InboundEvent::from_row(&row)?;
        let jobs = fan_out(&self.engine, &*tx, &ep, &event).await?;
        tx.commit().await?;
        Ok(Received {
            event_id: event.id,
            duplicate: false,
            deliveries: jobs.len(),
        })
    }

    /// Events after id `after`, oldest first.
    pub async fn events(
        &self,
        tenant_id: i64,
        slug: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<InboundEvent>> {
        let ep = self.get(tenant_id, slug).await?;
        let c = self.engine.pool().get().await?;
        let rows = c.query(EVENT_LIST, &[&ep.id, &after, &limit]).await?;
        rows.iter().map(InboundEvent::from_row).collect()
    }

    /// Sends one stored event to the endpoint's current targets again. Returns the jobs.
    pub async fn replay_one(&self, tenant_id: i64, slug: &str, id: i64) -> Result<Vec<i64>> {
        let ep = self.get(tenant_id, slug).await?;
        let mut c = self.engine.pool().get().await?;
        let tx = c.transaction().await?;
        let event = match tx.query_opt(EVENT_GET, &[&ep.id, &id]).await? {
            Some(r) => InboundEvent::from_row(&r)?,
            None => return Err(MonitorError::not_found("event")),
        };
        let jobs = fan_out(&self.engine, &*tx, &ep, &event).await?;
        tx.commit().await?;
        Ok(jobs)
    }

    /// Sends every event received at or after `since` again (at most [`MAX_REPLAY`],
    /// oldest first). Returns (events, jobs).
    pub async fn replay_since(
        &self,
        tenant_id: i64,
        slug: &str,
        since: SystemTime,
    ) -> Result<(usize, usize)> {
        let ep = self.get(tenant_id, slug).await?;
        let mut c = self.engine.pool().get().await?;
        let tx = c.transaction().await?;
        let rows = tx
            .query(EVENTS_SINCE, &[&ep.id, &since, &(MAX_REPLAY + 1)])
            .await?;
        if rows.len() as i64 > MAX_REPLAY {
            return Err(MonitorError::invalid(
                "since",
                format!("more than {MAX_REPLAY} events since then; replay a later time"),
            ));
        }
        let mut jobs = 0;
        for r in &rows {
            jobs += fan_out(&self.engine, &*tx, &ep, &InboundEvent::from_row(r)?)
                .await?
                .len();
        }
        tx.commit().await?;
        Ok((rows.len(), jobs))
    }
}

/// One HTTP job per target: the event's body, its content type, and headers naming the
/// event (and the provider's id, for the receiver's own dedup).
async fn fan_out<C: GenericClient>(
    engine: &Engine,
    client: &C,
    ep: &Endpoint,
    event: &InboundEvent,
) -> Result<Vec<i64>> {
    let content_type = event.headers["content-type"]
        .as_str()
        .unwrap_or("application/octet-stream");
    let mut headers = json!({
        "content-type": content_type,
        "pgferry-webhook-endpoint": ep.spec.slug,
        "pgferry-webhook-event": event.id.to_string(),
    });
    if let (Some(h), Some(id)) = (&ep.spec.event_id_header, &event.provider_event_id) {
        headers[h.as_str()] = Value::String(id.clone());
    }
    let jobs: Vec<NewJob> = ep
        .spec
        .targets
        .iter()
        .map(|url| {
            let args = json!({
                "method": "POST",
                "url": url,
                "headers": headers,
                "body": event.body,
                "timeout_ms": 30_000,
            });
            NewJob::new(crate::http_queue(ep.tenant_id), "http", args)
                .max_attempts(FANOUT_ATTEMPTS)
                .meta(json!({"webhook": {"endpoint": ep.spec.slug, "event": event.id}}))
        })
        .collect();
    let ids = engine.enqueue_tx(client, &jobs).await?;
    crate::metrics::fanout(ids.len());
    Ok(ids)
}
