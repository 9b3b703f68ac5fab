-- A ping's monitor, locked: pings of one monitor apply one after the other.
SELECT id, tenant_id, name, token, period_ms, cron, timezone, grace_ms, failure_threshold, state, due_at, started_at, consecutive_failures, last_ping_at, created_at, targets, realert_ms FROM pgferry_mon.monitors WHERE token = $1 FOR UPDATE
