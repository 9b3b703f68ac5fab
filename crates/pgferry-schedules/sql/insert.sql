INSERT INTO pgferry_sched.schedules
    (tenant_id, name, cron, interval_ms, timezone, jitter_ms, start_at, end_at, paused, target,
     missed, catchup_window_ms, catchup_max, overlap, grace_ms, next_fire_at, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
ON CONFLICT (tenant_id, name) DO NOTHING
RETURNING *
