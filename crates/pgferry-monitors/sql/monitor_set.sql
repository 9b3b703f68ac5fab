-- A monitor's new state after a ping, a pause/resume or the duty's verdict.
UPDATE pgferry_mon.monitors
SET state = $2, due_at = $3, started_at = $4, consecutive_failures = $5,
    last_ping_at = $6, updated_at = now(),
    -- Repeats of an outage's alert end with the outage.
    realert_at = CASE WHEN $2 IN ('late', 'down') THEN realert_at END
WHERE id = $1
RETURNING id, tenant_id, name, token, period_ms, cron, timezone, grace_ms, failure_threshold, state, due_at, started_at, consecutive_failures, last_ping_at, created_at, targets, realert_ms
