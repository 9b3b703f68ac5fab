SELECT id FROM pgferry_mon.events WHERE endpoint_id = $1 AND provider_event_id = $2
