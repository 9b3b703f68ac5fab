INSERT INTO pgferry_mon.endpoint_old_addresses (address, endpoint_id, accepted_until)
VALUES ($1, $2, now() + $3::bigint * interval '1 millisecond')
RETURNING accepted_until
