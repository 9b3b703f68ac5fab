UPDATE pgferry_sched.schedules
SET paused = $3, next_fire_at = $4, buffered_fire_at = NULL, updated_at = now()
WHERE tenant_id = $1 AND name = $2
RETURNING *
