SELECT r.schedule_id, r.fire_at, r.job_id, s.tenant_id, s.name
FROM pgferry_mon.schedule_runs r
JOIN pgferry_sched.schedules s ON s.id = r.schedule_id
ORDER BY r.fire_at
LIMIT $1
FOR UPDATE OF r SKIP LOCKED
