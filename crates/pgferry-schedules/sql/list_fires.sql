SELECT f.fire_at, f.recorded_at, f.outcome, f.job_id, f.reason
FROM pgferry_sched.fires f
JOIN pgferry_sched.schedules s ON s.id = f.schedule_id
WHERE s.tenant_id = $1 AND s.name = $2 AND f.fire_at < $3
ORDER BY f.fire_at DESC
LIMIT $4
