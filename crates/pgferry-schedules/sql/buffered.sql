SELECT * FROM pgferry_sched.schedules
WHERE buffered_fire_at IS NOT NULL AND NOT paused
ORDER BY id
LIMIT $1
FOR UPDATE SKIP LOCKED
