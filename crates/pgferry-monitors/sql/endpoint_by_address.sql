-- The endpoint this is the address of, or an old address of within its grace (a
-- rotation's, migration 0004). Should both ever match, the current address wins.
SELECT id, tenant_id, slug, address, sig_scheme, sig_header, sig_secret, event_id_header, targets, created_at
FROM (
    SELECT e.*, 0 AS rank FROM pgferry_mon.endpoints e WHERE e.address = $1
    UNION ALL
    SELECT e.*, 1 AS rank
    FROM pgferry_mon.endpoint_old_addresses o
    JOIN pgferry_mon.endpoints e ON e.id = o.endpoint_id
    WHERE o.address = $1 AND o.accepted_until > now()
) m
ORDER BY rank
LIMIT 1
