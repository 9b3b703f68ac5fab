SELECT id, received_at, provider_event_id, headers, body FROM pgferry_mon.events WHERE endpoint_id = $1 AND received_at >= $2
ORDER BY received_at, id LIMIT $3
