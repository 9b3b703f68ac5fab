-- One webhook endpoint's stored events, newest first, keyset by id: a backward scan of
-- index events_page (endpoint_id, id) that stops at the limit. The body is cut to a
-- preview (the event page reads it whole with webhook_event.sql).
-- $1 endpoint id (the caller's tenant's: resolved by slug and tenant before), $2 below
-- this event id (i64::MAX: from the newest), $3 limit
SELECT id, received_at, provider_event_id, headers,
       left(body, 240) AS body_preview, length(body) AS body_chars
  FROM pgferry_mon.events
 WHERE endpoint_id = $1
   AND id < $2
 ORDER BY id DESC
 LIMIT $3
