-- The targets an event of the tenant may go to (filtered by kind in Rust).
SELECT name, url, events, enabled, created_at
FROM pgferry_mon.targets WHERE tenant_id = $1 AND enabled
ORDER BY name
