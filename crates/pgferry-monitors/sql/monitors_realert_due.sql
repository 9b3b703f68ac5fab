-- Monitors in an outage whose repeated alert is due (index monitors_realert), locked like
-- monitors_due.sql so that two duties never repeat one alert twice.
SELECT id, tenant_id, name, token, period_ms, cron, timezone, grace_ms, failure_threshold, state, due_at, started_at, consecutive_failures, last_ping_at, created_at, targets, realert_ms FROM pgferry_mon.monitors
WHERE realert_at <= $1 AND state IN ('late', 'down')
ORDER BY realert_at
LIMIT $2
FOR UPDATE SKIP LOCKED
