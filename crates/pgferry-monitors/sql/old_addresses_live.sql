-- The old addresses of these endpoints that are still accepted (a rotation's grace,
-- migration 0004): one statement for a whole page of endpoints. Latest expiry first.
SELECT endpoint_id, address, accepted_until
FROM pgferry_mon.endpoint_old_addresses
WHERE endpoint_id = ANY($1) AND accepted_until > now()
ORDER BY endpoint_id, accepted_until DESC, address
