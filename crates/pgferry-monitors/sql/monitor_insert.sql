INSERT INTO pgferry_mon.monitors
    (tenant_id, name, token, period_ms, cron, timezone, grace_ms, failure_threshold, state,
     targets, realert_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (tenant_id, name) DO NOTHING
RETURNING id, tenant_id, name, token, period_ms, cron, timezone, grace_ms, failure_threshold, state, due_at, started_at, consecutive_failures, last_ping_at, created_at, targets, realert_ms
