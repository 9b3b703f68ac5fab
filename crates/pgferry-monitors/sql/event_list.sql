-- Keyset page: events with ids after $2, oldest first.
SELECT id, received_at, provider_event_id, headers, body FROM pgferry_mon.events WHERE endpoint_id = $1 AND id > $2
ORDER BY id LIMIT $3
