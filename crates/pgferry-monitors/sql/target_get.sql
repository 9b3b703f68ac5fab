SELECT name, url, events, enabled, created_at
FROM pgferry_mon.targets WHERE tenant_id = $1 AND name = $2
