-- A monitor's new state after a ping, a pause/resume or the duty's verdict.
UPDATE pgferry_mon.monitors
SET state = $2, due_at = $3, started_at = $4, consecutive_failures = $5,
    last_ping_at = $6, updated_at = now()
WHERE id = $1
RETURNING id, tenant_id, name, token, period_ms, cron, timezone, grace_ms, failure_threshold, state, due_at, started_at, consecutive_failures, last_ping_at, created_at
