-- Monitors past their deadline (index monitors_due), locked so that two duties (a leader
-- change) never judge one monitor twice.
SELECT id, tenant_id, name, token, period_ms, cron, timezone, grace_ms, failure_threshold, state, due_at, started_at, consecutive_failures, last_ping_at, created_at, targets, realert_ms FROM pgferry_mon.monitors
WHERE due_at <= $1 AND state <> 'paused'
ORDER BY due_at
LIMIT $2
FOR UPDATE SKIP LOCKED
