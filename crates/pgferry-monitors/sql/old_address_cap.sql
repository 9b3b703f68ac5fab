-- A rotation with grace $2 ms ends every earlier old address of the endpoint no later than
-- its own grace ends (grace 0: now, so only the new address is accepted).
UPDATE pgferry_mon.endpoint_old_addresses
SET accepted_until = least(accepted_until, now() + $2::bigint * interval '1 millisecond')
WHERE endpoint_id = $1
