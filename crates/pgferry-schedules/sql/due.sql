SELECT * FROM pgferry_sched.schedules
WHERE NOT paused AND next_fire_at IS NOT NULL AND next_fire_at <= $1
ORDER BY next_fire_at
LIMIT $2
FOR UPDATE SKIP LOCKED
