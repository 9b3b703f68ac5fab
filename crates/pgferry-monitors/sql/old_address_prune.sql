-- Old addresses whose grace has passed are forgotten (they are refused either way).
DELETE FROM pgferry_mon.endpoint_old_addresses WHERE endpoint_id = $1 AND accepted_until <= now()
