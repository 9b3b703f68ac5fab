SELECT id, tenant_id, name, token, period_ms, cron, timezone, grace_ms, failure_threshold, state, due_at, started_at, consecutive_failures, last_ping_at, created_at, targets, realert_ms FROM pgferry_mon.monitors WHERE tenant_id = $1 AND name > $2
ORDER BY name LIMIT $3
