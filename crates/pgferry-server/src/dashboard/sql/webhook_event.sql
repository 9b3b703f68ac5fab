-- One stored event of a webhook endpoint, whole (index events_page).
-- $1 endpoint id (the caller's tenant's, resolved before), $2 event id
SELECT id, received_at, provider_event_id, headers, body
  FROM pgferry_mon.events
 WHERE endpoint_id = $1
   AND id = $2
