-- A second event with the same provider id is not stored (RETURNING nothing).
INSERT INTO pgferry_mon.events (endpoint_id, provider_event_id, headers, body)
VALUES ($1, $2, $3, $4)
ON CONFLICT (endpoint_id, provider_event_id) WHERE provider_event_id IS NOT NULL DO NOTHING
RETURNING id, received_at, provider_event_id, headers, body
